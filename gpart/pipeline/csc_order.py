"""The CSC order of a partition result's edges (SPEC.md 4.2): packed sort keys in memory, and the same
order block by block from buckets on disk when the edges do not fit (SPEC.md 4.6)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

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


class OwnerBucketOrder:
    """Edges in CSC order, partition by partition and block by block, from buckets on disk.

    `nodes` (gpart.pipeline.layout's NodeOrder or BookOrder) gives a node's
    position in partition-major order (`position_of`) and the partitions' first
    positions (`offsets`). Each partition's destinations are cut into blocks of
    consecutive positions holding about `block_edges` in-edges (a node with
    more is a block of its own), so a block's edges can be sorted and written
    alone and the blocks of a partition, in order, are its CSC order. Buckets
    hold the packed CSC keys (csc_keys), or the edge ids where the keys would
    not fit 63 bits; a block is sorted the first time it is read and written
    back sorted. Per node only the in-degree count is held, while the blocks
    are cut (4 bytes a node, and bincount's 8 for one chunk); afterwards a
    block is found by its first position (`block_starts`, one entry a block).
    """

    def __init__(self, src: np.ndarray, dst: np.ndarray, nodes: Any, scratch: ScratchDir,
                 block_edges: int = MAX_BLOCK_EDGES):
        self.dst, self.nodes, self.offsets = dst, nodes, nodes.offsets
        self.shift, self.packed = key_shift(nodes.num_nodes, int(dst.shape[0]))
        self.block_starts, self.first_block = self._blocks(block_edges)

        def rows_of(start: int, stop: int):
            at = nodes.position_of(np.asarray(dst[start:stop]))
            value = (at << self.shift) | np.arange(start, stop, dtype=np.int64) if self.packed \
                else np.arange(start, stop, dtype=np.int64)
            sources = np.array(src[start:stop], dtype=np.int64)
            for arr in (src, dst):  # keep RSS and page cache off the input's size: these pages are read once, in order
                evict_rows(arr, start, stop)
            return self.block_of(at), {"key": value, "src": sources}

        num_blocks = int(self.first_block[-1])
        self.buckets = bucket_rows(scratch, int(dst.shape[0]), num_blocks, rows_of,
                                   {"key": np.dtype(np.int64), "src": np.dtype(np.int64)})
        self.is_sorted = np.zeros(num_blocks, dtype=bool)

    def block_of(self, position: np.ndarray) -> np.ndarray:
        """The block of each position: the last block starting at or before it."""
        return np.searchsorted(self.block_starts, position, side="right") - 1

    def _blocks(self, block_edges: int) -> tuple[np.ndarray, np.ndarray]:
        """The first position of every block (ascending), and each partition's first block id (P+1 entries)."""
        n = self.nodes.num_nodes
        degree = np.zeros(n, dtype=np.int64 if self.dst.shape[0] >= 2**31 else np.int32)  # in-degree by position
        for start in range(0, int(self.dst.shape[0]), DEGREE_CHUNK):
            stop = min(start + DEGREE_CHUNK, int(self.dst.shape[0]))
            counts = np.bincount(self.nodes.position_of(np.asarray(self.dst[start:stop])), minlength=n)
            np.add(degree, counts, out=degree, casting="unsafe")  # a chunk's counts fit: the total does
            del counts
            evict_rows(self.dst, start, stop)
        starts = []
        first_block = np.zeros(self.offsets.shape[0], dtype=np.int64)
        for part in range(self.offsets.shape[0] - 1):
            lo, hi = int(self.offsets[part]), int(self.offsets[part + 1])
            before = np.cumsum(degree[lo:hi], dtype=np.int64)  # in-edges of this partition up to each position
            before -= degree[lo:hi]
            local = before // block_edges  # the block of each position, counted from the partition's first
            new = np.flatnonzero(np.diff(local)) + 1  # positions where the next block starts
            starts += [np.asarray([lo], dtype=np.int64), lo + new.astype(np.int64)]
            first_block[part + 1] = first_block[part] + 1 + new.shape[0]
        return np.concatenate(starts), first_block

    def blocks(self, part: int):
        """(edge ids, local destination, source) of each block of partition `part`, in CSC order."""
        for block in range(int(self.first_block[part]), int(self.first_block[part + 1])):
            keys, sources = self.buckets.rows(block, "key"), self.buckets.rows(block, "src")
            if not self.is_sorted[block]:
                if self.packed:
                    order = np.argsort(keys)  # keys are distinct: any sort is the stable one
                else:  # keys are edge ids, ascending in a bucket: a stable sort keeps id order in a column
                    order = np.argsort(self.nodes.position_of(np.asarray(self.dst[keys])), kind="stable")
                keys = keys[order]
                sources = sources[order]
                del order  # not held while the block is consumed (memory_plan.BLOCK_BYTES_PER_EDGE)
                self.buckets.rewrite(block, "key", keys)
                self.buckets.rewrite(block, "src", sources)
                self.is_sorted[block] = True
            if self.packed:
                edge_ids, local_dst = keys & ((1 << self.shift) - 1), (keys >> self.shift) - self.offsets[part]
            else:
                edge_ids, local_dst = keys, self.nodes.position_of(np.asarray(self.dst[keys])) - self.offsets[part]
            yield edge_ids, local_dst, sources
