"""The CSC order of a partition result's edges (SPEC.md 4.2): packed sort keys in memory, and the same
order block by block from buckets on disk when the edges do not fit (SPEC.md 4.6)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

import numpy as np

from gpart.base.spans import ARRAY_THREADS
from gpart.bytes.reader import evict_rows
from gpart.engines.spill import bucket_rows
from gpart.formats.files.scratch import ScratchDir


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


MIN_BLOCK_EDGES, MAX_BLOCK_EDGES = 1 << 16, 1 << 24
DEGREE_CHUNK = 1 << 21


class InputEdges:
    """What OwnerBucketOrder reads from a graph's edge arrays (memory-mapped src and dst): a row's edge id is its
    index, so the ids of any range ascend."""

    ids_ascending = True

    def __init__(self, src: np.ndarray, dst: np.ndarray):
        self.src, self.dst = src, dst
        self.carried: dict[str, np.dtype] = {}  # columns of edge data that travel with the rows (none: gathered by id)
        self.num_rows = self.num_ids = int(dst.shape[0])

    def destinations(self, start: int, stop: int) -> np.ndarray:
        return np.asarray(self.dst[start:stop])

    def rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """(edge ids, int64 sources, carried columns) of rows start..stop-1."""
        return np.arange(start, stop, dtype=np.int64), np.array(self.src[start:stop], dtype=np.int64), {}

    def release(self, start: int, stop: int) -> None:
        """Rows start..stop-1 are read for this pass: keep RSS and page cache off the input's size."""
        for arr in (self.src, self.dst):
            evict_rows(arr, start, stop)


class OwnerBucketOrder:
    """Edges in CSC order, partition by partition and block by block, from buckets on disk.

    `edges` is the input (InputEdges: a graph's src and dst; gpart.distributed's
    received rows carry edge ids and edge data of their own). `nodes`
    (gpart.pipeline.layout's NodeOrder or BookOrder) gives a node's
    position in partition-major order (`position_of`) and the partitions' first
    positions (`offsets`). Each partition's destinations are cut into blocks of
    consecutive positions holding about `block_edges` in-edges (a node with
    more is a block of its own), so a block's edges can be sorted and written
    alone and the blocks of a partition, in order, are its CSC order. Buckets
    hold the packed CSC keys (csc_keys), or the edge ids and positions apart where the keys would
    not fit 63 bits, the sources and the carried columns; a block is sorted right after the bucketing and
    written back sorted. Per node only the in-degree count is held, while the blocks
    are cut (4 bytes a node, and bincount's 8 for one chunk); afterwards a
    block is found by its first position (`block_starts`, one entry a block).

    The in-degrees also give every block's size, so the bucketing reads the
    input once (gpart.engines.spill.bucket_rows with `counts`), and every block
    is sorted right after, two at once on ARRAY_THREADS threads (numpy's sort
    runs without the GIL; a sort holds about 40 bytes an edge, so two fit the
    BLOCK_BYTES_PER_EDGE that one block takes while it is written).
    """

    def __init__(self, edges: Any, nodes: Any, scratch: ScratchDir, block_edges: int = MAX_BLOCK_EDGES):
        self.edges, self.nodes, self.offsets = edges, nodes, nodes.offsets
        self.shift, self.packed = key_shift(nodes.num_nodes, edges.num_ids)
        self.block_starts, self.first_block, block_sizes = self._blocks(block_edges)

        def rows_of(start: int, stop: int):
            at = nodes.position_of(edges.destinations(start, stop))
            ids, sources, carried = edges.rows(start, stop)
            columns = {"key": (at << self.shift) | ids if self.packed else ids, "src": sources, **carried}
            if not self.packed:
                columns["position"] = at
            edges.release(start, stop)
            return self.block_of(at), columns

        dtypes = {"key": np.dtype(np.int64), "src": np.dtype(np.int64), **edges.carried}
        if not self.packed:
            dtypes["position"] = np.dtype(np.int64)
        num_blocks = int(self.first_block[-1])
        self.buckets = bucket_rows(scratch, edges.num_rows, num_blocks, rows_of, dtypes, counts=block_sizes)
        with ThreadPoolExecutor(ARRAY_THREADS, thread_name_prefix="gpart-block-sort") as pool:
            list(pool.map(self._sort_block, range(num_blocks)))  # a block's error is raised here

    def block_of(self, position: np.ndarray) -> np.ndarray:
        """The block of each position: the last block starting at or before it."""
        return np.searchsorted(self.block_starts, position, side="right") - 1

    def _blocks(self, block_edges: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The first position of every block (ascending), each partition's first block id (P+1 entries) and the
        edges of every block."""
        n, rows = self.nodes.num_nodes, self.edges.num_rows
        degree = np.zeros(n, dtype=np.int64 if rows >= 2**31 else np.int32)  # in-degree by position
        for start in range(0, rows, DEGREE_CHUNK):
            stop = min(start + DEGREE_CHUNK, rows)
            counts = np.bincount(self.nodes.position_of(self.edges.destinations(start, stop)), minlength=n)
            np.add(degree, counts, out=degree, casting="unsafe")  # a chunk's counts fit: the total does
            del counts
            self.edges.release(start, stop)
        starts, sizes = [], []
        first_block = np.zeros(self.offsets.shape[0], dtype=np.int64)
        for part in range(self.offsets.shape[0] - 1):
            lo, hi = int(self.offsets[part]), int(self.offsets[part + 1])
            before = np.cumsum(degree[lo:hi], dtype=np.int64)  # in-edges of this partition up to each position
            before -= degree[lo:hi]
            local = before // block_edges  # the block of each position, counted from the partition's first
            new = np.flatnonzero(np.diff(local)) + 1  # positions where the next block starts
            starts += [np.asarray([lo], dtype=np.int64), lo + new.astype(np.int64)]
            sizes.append(np.add.reduceat(degree[lo:hi], np.append(0, new), dtype=np.int64) if hi > lo
                         else np.zeros(1, dtype=np.int64))
            first_block[part + 1] = first_block[part] + 1 + new.shape[0]
        return np.concatenate(starts), first_block, np.concatenate(sizes)

    def _sort_block(self, block: int) -> None:
        """Sort block `block` on disk into CSC order (destination position, then edge id)."""
        keys = self.buckets.rows(block, "key")
        if self.packed:  # keys are unique: their order is the CSC order
            order = _position_order(keys >> self.shift, int(self.block_starts[block])) if self.edges.ids_ascending \
                else np.argsort(keys)
        else:  # keys are edge ids (ascending in a bucket where the input's are: then a stable sort keeps id order)
            position = self.buckets.rows(block, "position")
            order = np.argsort(position, kind="stable") if self.edges.ids_ascending else np.lexsort((keys, position))
        for name in self.buckets.columns:
            values = keys if name == "key" else self.buckets.rows(block, name)
            self.buckets.rewrite(block, name, values[order])

    def blocks(self, part: int):
        """(edge ids, local destination, source) of each block of partition `part`, in CSC order."""
        for block in range(int(self.first_block[part]), int(self.first_block[part + 1])):
            keys, sources = self.buckets.rows(block, "key"), self.buckets.rows(block, "src")
            if self.packed:
                edge_ids, local_dst = keys & ((1 << self.shift) - 1), (keys >> self.shift) - self.offsets[part]
            else:
                edge_ids, local_dst = keys, self.buckets.rows(block, "position") - self.offsets[part]
            yield edge_ids, local_dst, sources

    def carries(self, name: str) -> bool:
        """Whether edge data `name` travels in the buckets (read with `carried`) rather than being gathered by edge id."""
        return name in self.edges.carried

    def carried(self, part: int, name: str):
        """Carried column `name` of each block of partition `part`, in CSC order (the blocks' order)."""
        for block in range(int(self.first_block[part]), int(self.first_block[part + 1])):
            yield self.buckets.rows(block, name)


def _position_order(position: np.ndarray, first: int) -> np.ndarray:
    """The stable sort order of `position` (a block's destination positions, all >= `first`, in edge id order):
    one plain sort of (position - first) << bits | index, whose low bits are the order (a plain sort of int64
    took 0.6x an argsort on 15M keys); an argsort where the two would not fit 63 bits."""
    count = int(position.shape[0])
    bits = max(1, (count - 1).bit_length())
    span = int(position.max()) - first if count else 0
    if span.bit_length() + bits > 63:
        return np.argsort(position, kind="stable")
    packed = position - first
    packed <<= bits
    packed |= np.arange(count, dtype=np.int64)
    packed.sort()
    packed &= (1 << bits) - 1
    return packed
