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

Methods that hold the whole symmetric adjacency (needs_adjacency, gpart.partition_methods)
cannot run in bounded memory; their need is estimated from the bytes per
input edge each method states and a run that would not fit stops before it starts.
"""

from __future__ import annotations

from typing import Optional

from gpart.base.errors import InputError
from gpart.base.memory import FIXED_BYTES, format_size
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


def bucketed_bytes(num_nodes: int, num_edges: int, num_parts: int) -> int:
    """Estimated peak of the bucketed pass: no E-sized array; the average partition's edges at a time."""
    return FIXED_BYTES + NODE_BYTES * num_nodes + LAYOUT_BYTES_PER_EDGE * -(-num_edges // num_parts)


def check_node_memory(method: str, num_nodes: int, max_memory: int, where: Optional[str]) -> None:
    """Stop up front when even the pass's N-sized arrays (NODE_BYTES per node) exceed `max_memory`.

    Bucketing bounds the memory that grows with the edges, not these: a run
    past them would be killed for memory after reading the input.
    """
    need = NODE_BYTES * num_nodes
    if need > max_memory:
        raise InputError(where, f"--max-memory {format_size(max_memory)} is too small for the node arrays of method {method!r}: "
                                f"{num_nodes:,} nodes need about {format_size(need)} ({NODE_BYTES} bytes per node) before any "
                                f"edge; raise --max-memory")


def block_edges_for(max_memory: int) -> int:
    """Edges per bucket block: a block's layout temporaries take about a quarter of `max_memory`."""
    return int(min(max(max_memory // (4 * LAYOUT_BYTES_PER_EDGE), MIN_BLOCK_EDGES), MAX_BLOCK_EDGES))


