"""Bounded memory for the partition pipeline (`--max-memory`, SPEC.md section 4.6).

The in-memory pass orders all E edges with one sort of an E-sized int64
key array (8 bytes per edge, plus the partition being written). When that
does not fit the allowed memory, edges are instead bucketed by the owner of
their destination into a preallocated scratch file (gpart.spill: two
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

import os
import re
from typing import Optional, Sequence, Union

import numpy as np

from gpart.base.errors import InputError
from gpart.bytes.reader import drop_pages
from gpart.formats.scratch import ScratchDir
from gpart.partition_methods.method import PartitionMethod
from gpart.spill import bucket_rows

DEFAULT_FRACTION = 0.75  # of the available memory, when --max-memory is not given

# A method's peak RSS per input edge of the assignment step is its bytes_per_edge,
# measured with benchmarks/bench_balance.py on the 1M/10M power-law graph (4 parts):
# METIS multi-constraint 2.78 GB, pymetis 2.7 GB, KaMinPar 0.90 GB (incl. the symmetric CSR).
# `balanced` states KaMinPar's figure; its METIS fallback is skipped when METIS's
# would not fit (gpart.partition_methods.balanced_method).
NODE_BYTES = 64  # N-sized arrays of the pass: node order, positions, owner, halo marks and lookups
LAYOUT_BYTES_PER_EDGE = 56  # one partition's edge ids, local ids, sort order and source gather
SORT_BYTES_PER_EDGE = 8  # the in-memory pass's packed key per edge
SYMMETRIC_BYTES_PER_EDGE = 18  # gpart.symmetric.symmetric_csr: 2E int64 keys and a 2E-byte mask
SCRATCH_NODE_BYTES = 9  # each layout thread's halo mark and lookup (gpart.layout.Scratch)
# Layout threads of the in-memory pass: the source gathers are cache-missing random reads that
# numpy runs without the GIL, so two overlap (remainder, 1M/10M, 4 parts: topology 0.56 -> 0.41 s).
MAX_LAYOUT_THREADS = 2
# The in-memory pass's copy of the edge sources in RAM, where it fits (resident_sources): a partition's
# sources are gathered in CSC order, random reads that cost 3.4 s per part from the mapped input (its 4 KiB
# file pages, dropped after each part) against 0.6-0.8 s from a numpy array (huge pages) on R-MAT 5.6M/70M,
# 4 parts. At most 8 bytes per edge (int64 ids; narrower inputs copy narrower).
RESIDENT_SOURCE_BYTES_PER_EDGE = 8
FIXED_BYTES = 256 << 20  # interpreter, numpy, chunk buffers

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
          "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}


def parse_memory_size(value: Union[str, int, None], where: Optional[str] = "--max-memory") -> Optional[int]:
    """Bytes for '2GB', '512MiB', '1.5g' or an integer; None stays None."""
    if value is None or (isinstance(value, (int, np.integer)) and not isinstance(value, bool)):
        if value is not None and value <= 0:
            raise InputError(where, f"memory size must be positive, got {value}")
        return None if value is None else int(value)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(value))
    if not match or match.group(2).lower() not in _UNITS:
        raise InputError(where, f"memory size {value!r} is not a number with an optional unit (e.g. 2GB, 512MiB)")
    size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if size <= 0:
        raise InputError(where, f"memory size must be positive, got {value!r}")
    return size


def default_max_memory() -> int:
    """DEFAULT_FRACTION of the memory available now (MemAvailable, or physical memory)."""
    available = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if available is None:
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(available * DEFAULT_FRACTION)


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


def symmetric_bytes(num_edges: int) -> int:
    """Estimated peak of building the symmetric adjacency (gpart.symmetric.symmetric_csr) of `num_edges` edges."""
    return FIXED_BYTES + SYMMETRIC_BYTES_PER_EDGE * num_edges


def assign_bytes(method: PartitionMethod, num_edges: int) -> int:
    """Estimated peak of an assignment method that holds the whole adjacency (0 for the others)."""
    return FIXED_BYTES + method.bytes_per_edge * num_edges if method.needs_adjacency else 0


def check_assign_memory(method: PartitionMethod, num_edges: int, max_memory: int, where: Optional[str],
                        instead: Sequence[str]) -> None:
    """Stop before an assignment that holds the whole adjacency and would not fit `max_memory`;
    the message suggests the methods `instead` (gpart.partition_methods.registry.bounded_method_names)."""
    need = assign_bytes(method, num_edges)
    if need > max_memory:
        names = ", ".join(instead[:-1]) + " or " + instead[-1] if len(instead) > 1 else "".join(instead)
        raise InputError(where, f"method {method.name!r} needs about {need / 2**30:.1f} GiB for {num_edges:,} edges "
                                f"({method.bytes_per_edge} bytes per edge), more than the {max_memory / 2**30:.1f} GiB allowed "
                                f"(--max-memory); use --method {names}")


def check_node_memory(method: str, num_nodes: int, max_memory: int, where: Optional[str]) -> None:
    """Stop up front when even the pass's N-sized arrays (NODE_BYTES per node) exceed `max_memory`.

    Bucketing bounds the memory that grows with the edges, not these: a run
    past them would be killed for memory after reading the input.
    """
    need = NODE_BYTES * num_nodes
    if need > max_memory:
        raise InputError(where, f"--max-memory {_size(max_memory)} is too small for the node arrays of method {method!r}: "
                                f"{num_nodes:,} nodes need about {_size(need)} ({NODE_BYTES} bytes per node) before any "
                                f"edge; raise --max-memory")


def _size(count: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:,.1f} {unit}"
    return f"{count} B"


def csc_keys(dst: np.ndarray, position: np.ndarray, start: int, shift: int, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Sort keys of edges start.. (their dst given): destination position << shift | edge id.

    Sorted, they list edges partition-major, by local destination, then by
    edge id: the CSC order of every partition (shift = bits of the largest edge id).
    """
    keys = np.take(position, np.asarray(dst), out=out)
    keys <<= shift
    keys |= np.arange(start, start + keys.shape[0], dtype=np.int64)
    return keys


def key_shift(num_nodes: int, num_edges: int) -> tuple[int, bool]:
    """Bits for the edge id in a CSC key, and whether position and edge id fit 63 bits together."""
    shift = max(1, int(num_edges - 1).bit_length()) if num_edges else 1
    return shift, int(max(num_nodes - 1, 0)).bit_length() + shift <= 63


def block_edges_for(max_memory: int) -> int:
    """Edges per bucket block: a block's layout temporaries take about a quarter of `max_memory`."""
    return int(min(max(max_memory // (4 * LAYOUT_BYTES_PER_EDGE), MIN_BLOCK_EDGES), MAX_BLOCK_EDGES))


MIN_BLOCK_EDGES, MAX_BLOCK_EDGES = 1 << 16, 1 << 24
DEGREE_CHUNK = 1 << 21


class OwnerBucketOrder:
    """Edges in CSC order, partition by partition and block by block, from buckets on disk.

    `position` maps a node to its position in partition-major order and
    `offsets` are the partitions' first positions. Each partition's
    destinations are cut into blocks of consecutive positions holding about
    `block_edges` in-edges (a node with more is a block of its own), so a
    block's edges can be sorted and written alone and the blocks of a
    partition, in order, are its CSC order. Buckets hold the packed CSC keys
    (csc_keys), or the edge ids where the keys would not fit 63 bits; a
    block is sorted the first time it is read and written back sorted.
    """

    def __init__(self, src: np.ndarray, dst: np.ndarray, position: np.ndarray, offsets: np.ndarray,
                 scratch: ScratchDir, block_edges: int = MAX_BLOCK_EDGES):
        self.dst, self.position, self.offsets = dst, position, offsets
        self.shift, self.packed = key_shift(position.shape[0], int(dst.shape[0]))
        block_of, self.first_block = self._blocks(block_edges)

        def rows_of(start: int, stop: int):
            at = position[np.asarray(dst[start:stop])]
            value = (at << self.shift) | np.arange(start, stop, dtype=np.int64) if self.packed \
                else np.arange(start, stop, dtype=np.int64)
            sources = np.array(src[start:stop], dtype=np.int64)
            for arr in (src, dst):  # keep RSS off the input's size: these pages are read once, in order
                drop_pages(arr, start * arr.itemsize, (stop - start) * arr.itemsize)
            return block_of[at], {"key": value, "src": sources}

        num_blocks = int(self.first_block[-1])
        self.buckets = bucket_rows(scratch, int(dst.shape[0]), num_blocks, rows_of,
                                   {"key": np.dtype(np.int64), "src": np.dtype(np.int64)})
        self.is_sorted = np.zeros(num_blocks, dtype=bool)

    def _blocks(self, block_edges: int) -> tuple[np.ndarray, np.ndarray]:
        """Block id of every position, and each partition's first block id (P+1 entries)."""
        n = self.position.shape[0]
        degree = np.zeros(n, dtype=np.int64)  # in-degree by position
        for start in range(0, int(self.dst.shape[0]), DEGREE_CHUNK):
            chunk = np.asarray(self.dst[start:start + DEGREE_CHUNK])
            degree += np.bincount(self.position[chunk], minlength=n)
            drop_pages(self.dst, start * self.dst.itemsize, chunk.shape[0] * self.dst.itemsize)
        before = np.cumsum(degree) - degree  # in-edges of all earlier positions
        del degree
        block_of = np.empty(n, dtype=np.int64)
        first_block = np.zeros(self.offsets.shape[0], dtype=np.int64)
        for part in range(self.offsets.shape[0] - 1):
            lo, hi = int(self.offsets[part]), int(self.offsets[part + 1])
            local = (before[lo:hi] - (before[lo] if hi > lo else 0)) // block_edges
            block_of[lo:hi] = first_block[part] + local
            first_block[part + 1] = first_block[part] + (int(local[-1]) + 1 if hi > lo else 1)
        return block_of, first_block

    def blocks(self, part: int):
        """(edge ids, local destination, source) of each block of partition `part`, in CSC order."""
        for block in range(int(self.first_block[part]), int(self.first_block[part + 1])):
            keys, sources = self.buckets.rows(block, "key"), self.buckets.rows(block, "src")
            if not self.is_sorted[block]:
                if self.packed:
                    order = np.argsort(keys)  # keys are distinct: any sort is the stable one
                else:  # keys are edge ids, ascending in a bucket: a stable sort keeps id order in a column
                    order = np.argsort(self.position[np.asarray(self.dst[keys])], kind="stable")
                keys, sources = keys[order], sources[order]
                self.buckets.rewrite(block, "key", keys)
                self.buckets.rewrite(block, "src", sources)
                self.is_sorted[block] = True
            if self.packed:
                edge_ids, local_dst = keys & ((1 << self.shift) - 1), (keys >> self.shift) - self.offsets[part]
            else:
                edge_ids, local_dst = keys, self.position[np.asarray(self.dst[keys])] - self.offsets[part]
            yield edge_ids, local_dst, sources
