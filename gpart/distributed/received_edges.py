"""A rank's partitions written from the edges it received, in memory or block by block from disk.

The edge shuffle leaves each partition's in-edges in a scratch file of packed
rows (src, dst, edge id, then the edge arrays' bytes; gpart.distributed.shuffle.PartFiles),
in the order they arrived. A partition whose rows fit this rank's memory is
read whole and laid out with one sort (gpart.distributed.partition_chunks._write_topology);
one that does not is ordered through buckets on disk by
gpart.pipeline.csc_order.OwnerBucketOrder, which reads the mapped file as a
ReceivedEdges, and written by gpart.pipeline.write_arrays.write_topology_blocks,
as the single-machine bounded pass does: memory then grows with the nodes and one
block, not with the partition (R-MAT 8M/120M, 4 ranks, 8 parts: the in-memory write
took a rank from 0.3 to 1.7 GB of anonymous memory, past its share + 1 GB).
The bytes are the same either way.
"""

from __future__ import annotations

import numpy as np

from gpart.base.memory import FIXED_BYTES
from gpart.bytes.reader import evict_rows
from gpart.distributed.partition_job import ID_BYTES
from gpart.distributed.shuffle import column
from gpart.pipeline.csc_order import MAX_BLOCK_EDGES, MIN_BLOCK_EDGES
from gpart.pipeline.memory_plan import BLOCK_BYTES_PER_EDGE

# The in-memory write of one partition, per edge (measured: R-MAT 2M/30M, 4 ranks, 8 parts, no edge arrays: a
# rank's anonymous memory rose by 93-97 bytes per edge of the partition): the rows read whole, their id columns,
# the sort keys and order, the reordered columns and the layout's arrays. Each byte of edge arrays a row carries
# is held about twice more (the rows and their reordered copy).
IN_MEMORY_BYTES_PER_EDGE, IN_MEMORY_BYTES_PER_DATA_BYTE = 100, 3
# Per node while a partition is written in memory: the node order (17 bytes), the layout's halo mark and lookup (9),
# the book's owner and local id (12), and where other partitions go from disk their per-node arrays (16, below)
NODE_BYTES = 54
# Per node of the bounded write, which asks the book for positions (gpart.pipeline.layout.BookOrder): the book's
# owner and local id (12), the halo ranks (4) and, while blocks are cut, the in-degree count with one chunk's bincount (12)
BOUNDED_NODE_BYTES = 28


class ReceivedEdges:
    """One partition's received rows (uint8 [n, row_bytes], a read-only map of its scratch file) as
    OwnerBucketOrder reads them: edge ids from their column, edge arrays carried through the buckets
    (as void items of their row's width; arrays whose rows hold no bytes are not carried)."""

    ids_ascending = False  # rows arrive round by round from every rank, not in edge id order

    def __init__(self, rows: np.ndarray, num_ids: int, edge_layout: dict[str, tuple[np.dtype, tuple[int, ...]]]):
        self.packed_rows = rows
        self.num_rows, self.num_ids = int(rows.shape[0]), int(num_ids)
        self.carried: dict[str, np.dtype] = {}
        self._columns: dict[str, tuple[int, int]] = {}  # name -> (first byte, width)
        at = 3 * ID_BYTES
        for name, (dtype, shape) in edge_layout.items():
            width = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            if width:
                self.carried[name] = np.dtype((np.void, width))
                self._columns[name] = (at, width)
            at += width

    def destinations(self, start: int, stop: int) -> np.ndarray:
        return column(self.packed_rows[start:stop], ID_BYTES, np.int64)

    def rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """(edge ids, sources, carried columns) of rows start..stop-1."""
        block = self.packed_rows[start:stop]
        carried = {name: np.ascontiguousarray(block[:, at:at + width]).view(self.carried[name]).reshape(-1)
                   for name, (at, width) in self._columns.items()}
        return column(block, 2 * ID_BYTES, np.int64), column(block, 0, np.int64), carried

    def release(self, start: int, stop: int) -> None:
        """Rows start..stop-1 are read for this pass: their pages leave RSS and the page cache (read twice, in order)."""
        evict_rows(self.packed_rows, start, stop)


def in_memory_bytes(num_nodes: int, num_edges: int, data_bytes: int) -> int:
    """Estimated peak of writing a partition of `num_edges` received rows in memory, `data_bytes` of edge arrays a row."""
    return FIXED_BYTES + NODE_BYTES * num_nodes + (IN_MEMORY_BYTES_PER_EDGE + IN_MEMORY_BYTES_PER_DATA_BYTE * data_bytes) * num_edges


def block_edges(limit: int, num_nodes: int, data_bytes: int) -> int:
    """Edges per block of the bounded write within `limit` bytes: what the floor and node arrays leave, over a block's
    bytes per edge (gpart.pipeline.memory_plan's, and the carried edge arrays' bytes about three times)."""
    budget = limit - FIXED_BYTES - BOUNDED_NODE_BYTES * num_nodes
    return int(min(max(budget // (BLOCK_BYTES_PER_EDGE + 3 * data_bytes), MIN_BLOCK_EDGES), MAX_BLOCK_EDGES))
