"""The CSC order of a partition result's edges (SPEC.md 4.2): packed sort keys in memory, and the same
order block by block from buckets on disk when the edges do not fit (SPEC.md 4.6)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from gpart.bytes.reader import drop_pages
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
