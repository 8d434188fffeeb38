"""Bounded memory for the partition pipeline (`--max-memory`, SPEC.md section 4.6).

The in-memory pass orders all E edges with one sort of an E-sized int64
key array (8 bytes per edge, plus the partition being written). When that
does not fit the allowed memory, edges are instead bucketed by the owner of
their destination into a preallocated scratch file (gpart.engines.spill: two
passes over the memory-mapped src and dst, 16 bytes per edge on disk: the
sort key and the source, so no partition gathers sources from the whole
input), and each
partition's CSC order is built from its bucket alone: the edge ids of a
bucket ascend, so a stable sort by local destination gives exactly the
(destination position, edge id) order of the in-memory sort, and the
output is byte-identical. Memory then grows with the nodes and the largest
partition, not with the input's edges.

The bounded pass's own per-node arrays are few (BOUNDED_NODE_BYTES: the halo
marks and, while blocks are cut, the in-degree count); it asks the book for
owners and positions (gpart.pipeline.layout.BookOrder), so remainder and range
books (rules) add nothing per node and array books their owner and local arrays
(PartitionMethod.book_bytes_per_node). What is left of the limit after the
floor (BOUNDED_FLOOR_BYTES: interpreter, libraries, the writer's queue) and the
node arrays goes to the edge blocks (BLOCK_BYTES_PER_EDGE each). The pass's
writes and one-time reads leave no page cache behind (gpart.bytes.written_pages),
which a memory cgroup would charge.

Methods that hold the whole symmetric adjacency (needs_adjacency, gpart.partition_methods)
cannot run in bounded memory; their need is estimated from the bytes per
input edge each method states and a run that would not fit stops before it starts.
"""

from __future__ import annotations

from typing import Optional

from gpart.base.errors import InputError
from gpart.base.memory import FIXED_BYTES, format_size
from gpart.formats.partition.book import ARRAY_BOOK_NODE_BYTES, PartitionBook, RuleBook
from gpart.pipeline.csc_order import MAX_BLOCK_EDGES, MIN_BLOCK_EDGES

# A method's peak RSS per input edge of the assignment step is its bytes_per_edge,
# measured with benchmarks/bench_balance.py on the 1M/10M power-law graph (4 parts):
# METIS multi-constraint 2.78 GB, pymetis 2.7 GB, KaMinPar 0.90 GB (incl. the symmetric CSR).
# `balanced` states KaMinPar's figure; its METIS fallback is skipped when METIS's
# would not fit (gpart.partition_methods.balanced_method).
NODE_BYTES = 64  # N-sized arrays of the pass: node order, positions, owner, halo marks and lookups
LAYOUT_BYTES_PER_EDGE = 56  # one partition's edge ids, local ids, sort order and source gather
SORT_BYTES_PER_EDGE = 8  # the in-memory pass's packed key per edge
SCRATCH_NODE_BYTES = 9  # each layout thread's halo mark and lookup (gpart.pipeline.layout.Scratch)
# Layout threads of the in-memory pass: the source gathers are cache-missing random reads that
# numpy runs without the GIL, so two overlap (remainder, 1M/10M, 4 parts: topology 0.56 -> 0.41 s).
MAX_LAYOUT_THREADS = 2
# The in-memory pass's copy of the edge sources in RAM, where it fits (resident_sources): a partition's
# sources are gathered in CSC order, random reads that cost 3.4 s per part from the mapped input (its 4 KiB
# file pages, dropped after each part) against 0.6-0.8 s from a numpy array (huge pages) on R-MAT 5.6M/70M,
# 4 parts. At most 8 bytes per edge (int64 ids; narrower inputs copy narrower).
RESIDENT_SOURCE_BYTES_PER_EDGE = 8
# The bounded pass (R-MAT 4M/50M, remainder, 8 parts, --max-memory 300MB: 85 MiB of anonymous memory and
# about 50 MiB of mapped libraries before any edge): its floor, with the partition writer's queue
# (WRITE_QUEUE_BYTES) inside it.
BOUNDED_FLOOR_BYTES = 160 << 20
WRITE_QUEUE_BYTES = 16 << 20  # chunks handed to the writer thread and not yet written (bounded pass)
# Rows of node or edge data the bounded pass reads, reorders or gathers at once (the in-memory pass: CHUNK_BYTES)
BOUNDED_CHUNK_BYTES = 16 << 20
# Per node: a halo mark that holds the halo's local ids (4 bytes; gpart.pipeline.write_arrays.write_topology_blocks)
# and, while blocks are cut, the in-degree count (4) with one chunk's bincount (8)
# (gpart.pipeline.csc_order.OwnerBucketOrder).
BOUNDED_NODE_BYTES = 16
# Per edge of a block at once: the block read and sorted (key, source, order, sorted copies) and the
# position lookups and halo ranks of its sources (gpart.pipeline.write_arrays.write_topology_blocks).
BLOCK_BYTES_PER_EDGE = 96


def in_memory_bytes(num_nodes: int, num_edges: int, num_parts: int, layouts: int = 1) -> int:
    """Estimated peak of the in-memory pass (after the assignment) with `layouts` partitions' layouts alive."""
    per_layout = LAYOUT_BYTES_PER_EDGE * -(-num_edges // num_parts) + SCRATCH_NODE_BYTES * num_nodes
    return FIXED_BYTES + NODE_BYTES * num_nodes + SORT_BYTES_PER_EDGE * num_edges + layouts * per_layout


def layout_threads(num_nodes: int, num_edges: int, num_parts: int, limit: int) -> int:
    """Partition layouts the in-memory pass may compute at once within `limit`; 0: bucket edges on disk.

    MAX_LAYOUT_THREADS threads keep one more layout alive than they compute
    (the one being written), a single thread only its own.
    """
    if in_memory_bytes(num_nodes, num_edges, num_parts, _alive_layouts(MAX_LAYOUT_THREADS)) <= limit:
        return MAX_LAYOUT_THREADS
    return 1 if in_memory_bytes(num_nodes, num_edges, num_parts) <= limit else 0


def resident_sources(num_nodes: int, num_edges: int, num_parts: int, threads: int, limit: int) -> bool:
    """Whether the in-memory pass with `threads` layout threads (layout_threads) also holds a copy of the
    edge sources in RAM within `limit`."""
    return threads > 0 and (in_memory_bytes(num_nodes, num_edges, num_parts, _alive_layouts(threads))
                            + RESIDENT_SOURCE_BYTES_PER_EDGE * num_edges) <= limit


def _alive_layouts(threads: int) -> int:
    """Layouts alive with `threads` layout threads: one more than they compute (the one being written)."""
    return threads + 1 if threads > 1 else threads


def book_node_bytes(book: PartitionBook) -> int:
    """Bytes a node that `book` holds: none for a rule (remainder, range), an array book's owner and local id."""
    return 0 if isinstance(book, RuleBook) else ARRAY_BOOK_NODE_BYTES


def bucketed_bytes(num_nodes: int, num_edges: int, num_parts: int, book_node_bytes: int = ARRAY_BOOK_NODE_BYTES) -> int:
    """The least the bounded pass can run in: its floor, its node arrays and the book's
    (`book_node_bytes` a node: 0 for a rule book, 16 for an owner array), and blocks of MIN_BLOCK_EDGES
    edges (fewer where the graph has fewer)."""
    return (BOUNDED_FLOOR_BYTES + bounded_node_bytes(num_nodes, book_node_bytes)
            + BLOCK_BYTES_PER_EDGE * min(MIN_BLOCK_EDGES, max(num_edges, 1)))


def bounded_node_bytes(num_nodes: int, book_node_bytes: int = ARRAY_BOOK_NODE_BYTES) -> int:
    """The bounded pass's node arrays, the book's included (`book_node_bytes` a node)."""
    return (BOUNDED_NODE_BYTES + book_node_bytes) * num_nodes


def check_node_memory(method: str, num_nodes: int, max_memory: int, where: Optional[str],
                      book_node_bytes: int = ARRAY_BOOK_NODE_BYTES) -> None:
    """Stop up front when the bounded pass's node arrays (the book's included) exceed `max_memory`.

    Bucketing bounds the memory that grows with the edges, not these: a run
    past them would be killed for memory after reading the input. (The floor,
    BOUNDED_FLOOR_BYTES, is left out here: it is the program's, not the graph's,
    and tests force the bounded pass with limits below it.)
    """
    need = bounded_node_bytes(num_nodes, book_node_bytes)
    if need > max_memory:
        per_node = BOUNDED_NODE_BYTES + book_node_bytes
        raise InputError(where, f"--max-memory {format_size(max_memory)} is too small for the node arrays of method {method!r}: "
                                f"{num_nodes:,} nodes need about {format_size(need)} ({per_node} bytes per node) before any edge, "
                                f"{format_size(need + BOUNDED_FLOOR_BYTES)} with the program's own; raise --max-memory to "
                                f"{format_size(need + BOUNDED_FLOOR_BYTES)} or more")


def block_edges_for(budget: int) -> int:
    """Edges per bucket block when `budget` bytes are left for the blocks (the limit less the bounded pass's
    floor and node arrays: bounded_budget)."""
    return int(min(max(budget // BLOCK_BYTES_PER_EDGE, MIN_BLOCK_EDGES), MAX_BLOCK_EDGES))


def bounded_budget(limit: int, num_nodes: int, book_node_bytes: int) -> int:
    """What the bounded pass leaves of `limit` for its edge blocks."""
    return limit - BOUNDED_FLOOR_BYTES - bounded_node_bytes(num_nodes, book_node_bytes)

