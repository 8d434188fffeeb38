"""A rank's partitions written from the edges it received, in memory or block by block from disk.

The edge shuffle leaves each partition's in-edges in a scratch file of packed
rows (src, dst, edge id, then the edge arrays' bytes; gpart.distributed.shuffle.PartFiles),
in the order they arrived. A partition whose rows fit this rank's memory is
read whole and laid out with one sort (_write_topology);
one that does not is ordered through buckets on disk by
gpart.pipeline.csc_order.OwnerBucketOrder, which reads the mapped file as a
ReceivedEdges, and written by gpart.pipeline.write_arrays.write_topology_blocks,
as the single-machine bounded pass does: memory then grows with the nodes and one
block, not with the partition (the in-memory write holds 93-97 bytes per edge of the
partition: measured on R-MAT 2M/30M, 4 ranks, 8 parts; on R-MAT and geometric 120M
graphs at 4 ranks it took the other ranks past their share + 1 GB, OOM-killed).
The bytes are the same either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gpart.base.memory import FIXED_BYTES
from gpart.base.progress import NullProgress
from gpart.bytes.reader import evict_rows
from gpart.distributed.partition_job import ID_BYTES, PartitionJob
from gpart.distributed.shuffle import PartFiles, column, take_rows
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.partition.book import PartitionBook
from gpart.formats.partition.writer import PartitionWriter, data_key, part_entry
from gpart.pipeline.csc_order import MAX_BLOCK_EDGES, MIN_BLOCK_EDGES, OwnerBucketOrder, key_shift
from gpart.pipeline.layout import AnyNodeOrder, BookOrder, NodeOrder, Scratch, node_order, part_layout
from gpart.pipeline.memory_plan import BLOCK_BYTES_PER_EDGE, BOUNDED_CHUNK_BYTES
from gpart.pipeline.write_arrays import write_topology_blocks

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


def write_topologies(job: PartitionJob, writer: PartitionWriter, book: PartitionBook, edge_files: PartFiles, scratch: Path,
                      limit: int, halos: dict[int, np.ndarray]) -> tuple[list[dict[str, Any]], AnyNodeOrder]:
    """This rank's partitions' topology and edge data, each in memory where its rows fit `limit` bytes, else block by
    block from disk (below); returns their manifest entries and the node order they took
    (arrays where some partition is written in memory, else the book asked node by node: no N-sized arrays of its
    own), and fills `halos`."""
    num_nodes, data_bytes = book.num_nodes, edge_files.row_bytes - 3 * ID_BYTES
    in_memory = {p for p in job.my_parts() if in_memory_bytes(num_nodes, edge_files.rows[p], data_bytes) <= limit}
    nodes: AnyNodeOrder = node_order(book) if in_memory else BookOrder(book)
    parts, mark = [], None
    for p in job.my_parts():
        if p in in_memory:
            assert isinstance(nodes, NodeOrder)
            entry, halos[p] = _write_topology(job, writer, p, nodes, edge_files)
        else:
            if mark is None:  # each halo node's local id in the partition being written, 0 elsewhere
                mark = np.zeros(num_nodes, dtype=np.int32 if num_nodes < 2**31 else np.int64)
            entry, halos[p] = _write_topology_blocks(job, writer, p, nodes, edge_files, scratch,
                                                     block_edges(limit, num_nodes, data_bytes), mark)
        parts.append(entry)
    return parts, nodes


def _write_topology_blocks(job: PartitionJob, writer: PartitionWriter, part: int, nodes: AnyNodeOrder, edge_files: PartFiles,
                           scratch: Path, edges_per_block: int, mark: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
    """_write_topology in bounded memory: the partition's received rows ordered through buckets on disk, written block
    by block (the single-machine bounded pass's pieces; the same bytes)."""
    # arrays whose rows hold no bytes are not carried: an E-row template of no bytes gives their (empty) rows
    templates = {name: np.empty((job.cg.num_edges if np.prod(shape, dtype=np.int64) == 0 else 0, *shape), dtype)
                 for name, (dtype, shape) in job.edge_layout.items()}
    with ScratchDir(scratch, prefix=f"part-{part}-") as buckets:
        received = ReceivedEdges(edge_files.mapped(part), job.cg.num_edges, job.edge_layout)
        edges = OwnerBucketOrder(received, nodes, buckets, edges_per_block)
        entry, halo = write_topology_blocks(writer, part, templates, nodes, edges, mark, NullProgress().stage("write"),
                                            BOUNDED_CHUNK_BYTES)
    del received, edges
    edge_files.remove(part)
    return entry, halo


def _write_topology(job: PartitionJob, writer: PartitionWriter, part: int, nodes: NodeOrder,
                    edge_files: PartFiles) -> tuple[dict[str, Any], np.ndarray]:
    """Partition `part`'s topology and edge data from the edges it received, through gpart.pipeline.partition's
    writer pieces; returns its manifest entry and its halo nodes (ascending)."""
    rows = edge_files.read(part)
    src, dst, eid = (column(rows, k * ID_BYTES, np.int64) for k in range(3))
    shift, packed = key_shift(nodes.position.shape[0], job.cg.num_edges)
    position = nodes.position[dst]
    # CSC order: destination position, then edge id (as gpart.pipeline.partition's one sort of packed keys)
    order = np.argsort((position << shift) | eid) if packed else np.lexsort((eid, position))
    src, eid, local_dst = src[order], eid[order], position[order]
    local_dst -= nodes.offsets[part]
    # the edge arrays' rows alone, in CSC order; without edge arrays no view may keep the received rows alive
    # through the layout (24 bytes per edge of the partition)
    rows = take_rows(rows[:, 3 * ID_BYTES:], order) if job.edge_layout else None
    del position, dst, order
    layout = part_layout(part, src, local_dst, eid, nodes, Scratch(nodes.position.shape[0]))
    num_edges = int(layout.edge_ids.shape[0])
    arrays = {key: writer.write_topology(part, key, getattr(layout, key)) for key in ("node_ids", "indptr", "indices", "edge_ids")}
    at = 0  # rows now hold the edge arrays alone (None: there are none)
    for name, (dtype, shape) in job.edge_layout.items():
        arrays[data_key("edge", name)] = writer.write_data(part, "edge", name, np.empty((0, *shape), dtype), num_edges,
                                                          [column(rows, at, dtype, shape)])
        at += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    entry = part_entry(part, layout.num_owned, layout.num_halo, num_edges, layout.num_cut, arrays)
    return entry, layout.node_ids[layout.num_owned:]
