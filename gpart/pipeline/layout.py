"""The per-partition layout (SPEC.md 4.2): nodes in partition-major order, edges in CSC order
by destination, and one partition's owned nodes, halo and in-edges in local ids.

Memory: edges are ordered with one in-place sort of packed int64 keys (the
destination's position in partition-major order, then the edge id), so the
pass holds one E-sized int64 array plus one partition's topology. The
in-memory pass holds the node order as arrays (NodeOrder, 17 bytes a node);
the bounded pass asks the book (BookOrder: nothing per node for remainder
and range books, whose owners are arithmetic; an array book's positions, 4
bytes a node).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np

from gpart.base.graph import Graph
from gpart.base.ids import narrowest_unsigned
from gpart.bytes.reader import release_rows
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.partition.book import ArrayBook, PartitionBook
from gpart.pipeline.csc_order import MAX_BLOCK_EDGES, InputEdges, OwnerBucketOrder, csc_keys, key_shift

# Edges handled per vectorised step when building sort keys.
EDGE_CHUNK = 1 << 22


@dataclass
class NodeOrder:
    """Nodes in partition-major order: partition p owns nodes[offsets[p]:offsets[p+1]], ascending."""

    offsets: np.ndarray  # int64 [P+1]
    position: np.ndarray  # int64 [N]: position of node g in partition-major order
    nodes: np.ndarray  # int64 [N]: node at each position
    owner: np.ndarray  # [N] owner of each node, in the narrowest unsigned dtype (numpy radix-sorts 8/16-bit keys)

    def owned(self, part: int) -> np.ndarray:
        return self.nodes[self.offsets[part] : self.offsets[part + 1]]

    @property
    def num_nodes(self) -> int:
        return int(self.offsets[-1])

    def position_of(self, ids: np.ndarray) -> np.ndarray:
        """The positions (int64) of nodes `ids` in partition-major order."""
        return self.position[np.asarray(ids)]

    def owner_of(self, start: int, stop: int) -> np.ndarray:
        """The owners of nodes start..stop-1 (narrowest unsigned dtype)."""
        return self.owner[start:stop]


class BookOrder:
    """The node order of NodeOrder computed from the book on demand, for the bounded pass: no N-sized
    array of its own (remainder and range books are rules, so none at all; array books use theirs)."""

    def __init__(self, book: PartitionBook):
        self.book = book
        counts = np.asarray(book.counts(), dtype=np.int64)
        assert counts.shape == (book.num_parts,) and int(counts.sum()) == book.num_nodes, "book counts do not cover the nodes"
        self.offsets = np.zeros(book.num_parts + 1, dtype=np.int64)
        np.cumsum(counts, out=self.offsets[1:])
        self.owner_dtype = narrowest_unsigned(book.num_parts)
        self.position = _array_positions(book, self.offsets)

    @property
    def num_nodes(self) -> int:
        return int(self.offsets[-1])

    def owned(self, part: int) -> np.ndarray:
        """Partition `part`'s nodes, ascending; checked against the book's local ids (NodeOrder's invariant)."""
        owned = np.asarray(self.book.owned(part), dtype=np.int64)
        size = int(self.offsets[part + 1] - self.offsets[part])
        assert owned.shape[0] == size and bool(np.all(owned[1:] > owned[:-1])), "book does not list owned nodes in ascending id"
        assert np.array_equal(self.book.local(owned), np.arange(size)), "book local ids are not the rank in the owned list"
        return owned

    def position_of(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids)
        if self.position is not None:
            return self.position[ids].astype(np.int64)
        position = self.offsets[self.book.owner(ids)]
        position += self.book.local(ids)
        return position

    def owner_of(self, start: int, stop: int) -> np.ndarray:
        return self.book.owner(np.arange(start, stop, dtype=np.int64)).astype(self.owner_dtype)


def _array_positions(book: PartitionBook, offsets: np.ndarray) -> Optional[np.ndarray]:
    """An array book's positions (int32 below 2^31 nodes): every edge's endpoints are looked up four times in
    the bounded pass, and one gather from this costs a quarter of the owner and local gathers at ids with no
    locality (1.01 -> 0.24 s per 16M ids of 12M nodes). None for a rule book (arithmetic, nothing per node)."""
    if not isinstance(book, ArrayBook):
        return None
    dtype = np.int32 if book.num_nodes < 2**31 else np.int64
    position = np.empty(book.num_nodes, dtype=dtype)
    for start in range(0, book.num_nodes, EDGE_CHUNK):  # no N-sized int64 temporary
        stop = min(start + EDGE_CHUNK, book.num_nodes)
        position[start:stop] = offsets[book.owner_array[start:stop]] + book.local_array[start:stop]
    return position


# What the passes take: the in-memory pass's arrays or the bounded pass's book
AnyNodeOrder = Union[NodeOrder, BookOrder]


def node_order(book: PartitionBook) -> NodeOrder:
    n, parts = book.num_nodes, book.num_parts
    counts = np.asarray(book.counts(), dtype=np.int64)
    assert counts.shape == (parts,) and int(counts.sum()) == n, "book counts do not cover the nodes"
    offsets = np.zeros(parts + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    ids = np.arange(n, dtype=np.int64)
    owner = np.asarray(book.owner(ids))
    position = offsets[owner] + np.asarray(book.local(ids), dtype=np.int64)
    owner = owner.astype(narrowest_unsigned(parts))
    nodes = np.full(n, -1, dtype=np.int64)
    nodes[position] = ids
    # The book is consistent iff positions are a permutation and each partition's owned list ascends.
    assert n == 0 or nodes.min() >= 0, "book local ids collide"
    steps = np.diff(nodes)
    starts = offsets[1:-1]
    inner = np.ones(max(n - 1, 0), dtype=bool)
    inner[starts[(starts > 0) & (starts < n)] - 1] = False
    assert bool(np.all(steps[inner] > 0)), "book does not list owned nodes in ascending id"
    return NodeOrder(offsets, position, nodes, owner)


class EdgeOrder:
    """Edges sorted by (destination position, edge id): partition-major, CSC by local destination, stable.

    When position and edge id fit in 63 bits together, one in-place sort of
    packed keys does it; otherwise a stable argsort of the positions.
    """

    def __init__(self, dst: np.ndarray, order: NodeOrder, num_edges: int):
        self.order = order
        self.shift, self.packed = key_shift(order.position.shape[0], num_edges)
        keys = np.empty(num_edges, dtype=np.int64)
        for start in range(0, num_edges, EDGE_CHUNK):
            stop = min(start + EDGE_CHUNK, num_edges)
            if self.packed:
                csc_keys(dst[start:stop], order.position, start, self.shift, out=keys[start:stop])
            else:
                np.take(order.position, np.asarray(dst[start:stop]), out=keys[start:stop])
        if self.packed:
            keys.sort()
            self.keys, self.perm = keys, None
            bounds = order.offsets << self.shift
        else:
            self.perm = np.argsort(keys, kind="stable")
            self.keys = keys[self.perm]
            bounds = order.offsets
        self.edge_offsets = np.searchsorted(self.keys, bounds).astype(np.int64)
        self.edge_offsets[-1] = num_edges
        assert self.edge_offsets[0] == 0

    def part(self, part: int) -> tuple[np.ndarray, np.ndarray]:
        """(edge ids, local destination) of partition `part`'s edges, in CSC order."""
        lo, hi = self.edge_offsets[part], self.edge_offsets[part + 1]
        seg = self.keys[lo:hi]
        if self.packed:
            edge_ids = seg & ((1 << self.shift) - 1)
            local_dst = (seg >> self.shift) - self.order.offsets[part]
        else:
            edge_ids = self.perm[lo:hi]
            local_dst = seg - self.order.offsets[part]
        return edge_ids, local_dst


@dataclass
class Layout:
    """One partition's topology, in local ids."""

    node_ids: np.ndarray  # owned (ascending) then halo (ascending), global ids
    num_owned: int
    indptr: np.ndarray
    indices: np.ndarray
    edge_ids: np.ndarray
    num_cut: int  # edges whose source is owned elsewhere

    @property
    def num_halo(self) -> int:
        return self.node_ids.shape[0] - self.num_owned


def layout_of(part: int, src: np.ndarray, nodes: NodeOrder, edges: EdgeOrder, scratch: "Scratch") -> Layout:
    edge_ids, local_dst = edges.part(part)
    sources = np.asarray(src[edge_ids], dtype=np.int64)
    release_rows(src)
    return part_layout(part, sources, local_dst, edge_ids, nodes, scratch)


def part_layout(part: int, sources: np.ndarray, local_dst: np.ndarray, edge_ids: np.ndarray, nodes: NodeOrder,
                scratch: "Scratch") -> Layout:
    """Partition `part`'s topology from its in-edges in CSC order (global sources, local destinations,
    edge ids); gpart.distributed's ranks, which hold only their partitions' edges, call it directly."""
    owned = nodes.owned(part)
    num_owned = owned.shape[0]
    num_edges = edge_ids.shape[0]
    indptr = np.zeros(num_owned + 1, dtype=np.int64)
    np.cumsum(np.bincount(local_dst, minlength=num_owned), out=indptr[1:])
    del local_dst
    # Sources owned here map to their position minus the partition's start; the rest are halo
    # (below the start they wrap to huge unsigned values: one comparison finds both sides).
    indices = np.take(nodes.position, sources)
    indices -= nodes.offsets[part]
    remote = indices.view(np.uint64) >= num_owned
    remote_sources = sources[remote]
    del sources
    # Halo = distinct remote sources, ascending: mark them in an N-sized mask (no sort),
    # then number them through an N-sized lookup table (no searchsorted).
    scratch.mark[remote_sources] = True
    halo = np.flatnonzero(scratch.mark)
    scratch.mark[halo] = False
    scratch.lookup[halo] = np.arange(num_owned, num_owned + halo.shape[0], dtype=np.int64)
    indices[remote] = scratch.lookup[remote_sources]
    node_ids = np.concatenate([owned, halo])
    layout = Layout(node_ids, num_owned, indptr, indices, edge_ids, int(remote_sources.shape[0]))
    assert_layout(layout, num_edges)
    return layout


class Scratch:
    """N-sized work arrays reused by every partition's layout."""

    def __init__(self, num_nodes: int):
        self.mark = np.zeros(num_nodes, dtype=bool)
        self.lookup = np.empty(num_nodes, dtype=np.int64)


def assert_layout(layout: Layout, num_edges: int) -> None:
    assert layout.indptr[0] == 0 and layout.indptr[-1] == num_edges, "CSC pointers do not cover the edges"
    assert layout.indices.shape[0] == num_edges == layout.edge_ids.shape[0]
    if num_edges:
        assert 0 <= int(layout.indices.min()) and int(layout.indices.max()) < layout.node_ids.shape[0], "local id out of range"


def order_edges(graph: Graph, nodes: AnyNodeOrder, scratch: Optional[ScratchDir] = None, block_edges: int = MAX_BLOCK_EDGES):
    """The edges in CSC order, and the seconds it took (it may run on another thread).

    Without scratch: one in-memory sort (EdgeOrder); with it: buckets on
    disk (gpart.pipeline.csc_order.OwnerBucketOrder), the same order in bounded memory.
    """
    start = time.perf_counter()
    if scratch is None:
        edges: Any = EdgeOrder(graph.dst, nodes, graph.num_edges)
    else:
        edges = OwnerBucketOrder(InputEdges(graph.src, graph.dst), nodes, scratch, block_edges)
    release_rows(graph.dst)
    return edges, time.perf_counter() - start
