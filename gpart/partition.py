"""From a graph to per-partition files, in one readable pass (SPEC.md section 4).

    read (formats.readers) -> assign (gpart.assign) -> order edges by destination
    -> per partition: owned nodes, in-edges as CSC, halo, edge data rows
    -> node data of all partitions in one sequential pass over each input array
    -> stats -> manifest last

Everything happens inside a staging directory (formats.commit.staged_output):
a failed run leaves nothing that looks like a result, and an existing result
is replaced only with `force`, after the new one is complete.

Memory: edges are ordered with one in-place sort of packed int64 keys (the
destination's position in partition-major order, then the edge id), so the
pass holds one E-sized int64 array plus one partition's topology; node and
edge data are streamed from the (memory-mapped) input in chunks whose pages
are released after use. Speed: every step is a vectorised numpy operation;
checksums, writes and fsyncs of binary files run on a background thread
(formats.partition) while the next arrays are computed.
"""

from __future__ import annotations

import functools
import os
import time
from contextlib import nullcontext
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Union

import numpy as np

from gpart import __version__
from gpart.balance import share_balance, train_mask
from gpart.book import ArrayBook, PartitionBook
from gpart.bounded import (MAX_BLOCK_EDGES, OwnerBucketOrder, block_edges_for, check_assign_memory, check_node_memory, csc_keys,
                           default_max_memory, in_memory_bytes, key_shift, parse_memory_size)
from gpart.errors import InputError
from gpart.formats.arrays import CHUNK_BYTES
from gpart.formats.commit import staged_output
from gpart.formats.scratch import ScratchDir
from gpart.formats.dtypes import dtype_name, is_supported
from gpart.formats.manifest import write_manifest
from gpart.formats.partition import FORMAT, STORAGES, VERSION, PartitionWriter, part_dir
from gpart.graph import Graph
from gpart.progress import Progress, StageTimer, or_null

PathLike = Union[str, "os.PathLike[str]"]
DataSpec = Optional[Mapping[str, PathLike]]
VerboseLog = Optional[Callable[[str, float, float], None]]

# Edges handled per vectorised step when building sort keys.
EDGE_CHUNK = 1 << 22


def partition_graph(
    input: Union[PathLike, Graph],
    out_dir: PathLike,
    num_parts: int,
    method: str = "balanced",
    *,
    storage: str = "binary",
    halo: int = 0,
    force: bool = False,
    max_memory: Union[str, int, None] = None,
    node_data: DataSpec = None,
    edge_data: DataSpec = None,
    progress: Optional[Progress] = None,
    verbose_log: VerboseLog = None,
    **method_params: Any,
) -> dict[str, Any]:
    """Partition a graph (a path or a Graph) into `num_parts` partitions under `out_dir`.

    `method` and `method_params` go to gpart.assign.assign (balanced, metis,
    kaminpar, stream, remainder, range, random; `assignment=` a file or array
    computed elsewhere). `max_memory` (bytes or '2GB'; default: a fraction of
    the available RAM, gpart.bounded): past it, edges are bucketed on disk
    instead of sorted in memory, and methods that need the whole adjacency
    stop up front. `node_data`/`edge_data` add NAME -> .npy arrays to an input
    path. Returns the manifest that was written.
    """
    _check_options(storage, halo)
    limit = parse_memory_size(max_memory) or default_max_memory()
    timer = StageTimer(verbose_log)
    source = None if isinstance(input, Graph) else input
    inputs = _input_paths(source, node_data, edge_data, method_params.get("assignment"))
    if num_parts < 1:
        raise InputError(source, f"number of parts must be at least 1, got {num_parts}")
    with staged_output(out_dir, force=force, inputs=inputs) as stage:
        with timer("read graph"):
            graph = _load_graph(input, node_data, edge_data)
        _check_graph(graph, num_parts, source)
        check_node_memory("assignment" if method_params.get("assignment") is not None else method, graph.num_nodes, limit,
                          graph.source)
        if method_params.get("assignment") is None:
            check_assign_memory(method, graph.num_edges, limit, graph.source)
        with timer("assign"):
            from gpart.assign import assign  # imported here to keep `import gpart.partition` light (pymetis)

            if method == "balanced":
                method_params.setdefault("max_memory", limit)  # lets it skip a METIS fallback that cannot fit
            if method == "stream":
                method_params.setdefault("scratch_dir", stage.parent)  # spill next to the output, not to /tmp
            assignment = assign(graph, num_parts, method, progress=progress, **method_params)
        bounded = in_memory_bytes(graph.num_nodes, graph.num_edges, num_parts) > limit
        scratch = ScratchDir(stage.parent, prefix=f"{stage.name}-scratch-") if bounded else nullcontext()
        with scratch:
            manifest = _write_result(graph, assignment.book, stage, assignment.method, assignment.params, storage,
                                     halo, progress, timer, node_data, edge_data, scratch=scratch if bounded else None,
                                     block_edges=block_edges_for(limit))
    return manifest


def partition_with_book(
    graph: Graph,
    book: PartitionBook,
    out_dir: PathLike,
    *,
    method: str,
    params: Optional[dict[str, Any]] = None,
    storage: str = "binary",
    halo: int = 0,
    force: bool = False,
    progress: Optional[Progress] = None,
    verbose_log: VerboseLog = None,
) -> dict[str, Any]:
    """Write the partition result of `graph` under an assignment already made (`book`)."""
    _check_options(storage, halo)
    _check_graph(graph, book.num_parts, graph.source)
    if book.num_nodes != graph.num_nodes:
        raise ValueError(f"book covers {book.num_nodes} nodes, graph has {graph.num_nodes}")
    timer = StageTimer(verbose_log)
    inputs = [graph.source] if graph.source and Path(graph.source).exists() else []
    with staged_output(out_dir, force=force, inputs=inputs) as stage:
        return _write_result(graph, book, stage, method, params or {}, storage, halo, progress, timer, None, None)


# --------------------------------------------------------------------------- checks and input


def _check_options(storage: str, halo: int) -> None:
    if storage not in STORAGES:
        raise ValueError(f"unknown storage {storage!r} (expected one of {', '.join(STORAGES)})")
    if halo not in (0, 1):
        raise ValueError(f"halo must be 0 or 1, got {halo!r}")


def _input_paths(source, node_data: DataSpec, edge_data: DataSpec, assignment: Any) -> list[PathLike]:
    paths = [] if source is None else [source]
    for spec in (node_data or {}, edge_data or {}):
        paths += [str(p).split(".npz:")[0] for p in spec.values()]
    if isinstance(assignment, (str, os.PathLike)):
        paths.append(assignment)
    return paths


def _load_graph(input: Union[PathLike, Graph], node_data: DataSpec, edge_data: DataSpec) -> Graph:
    if isinstance(input, Graph):
        if node_data or edge_data:
            raise ValueError("node_data/edge_data name files to add to an input path; put arrays into the Graph instead")
        return input
    from gpart.formats.readers import read_graph

    return read_graph(input, node_data=node_data, edge_data=edge_data)


def _check_graph(graph: Graph, num_parts: int, source: Optional[PathLike]) -> None:
    where = source if source is not None else graph.source
    if num_parts < 1:
        raise InputError(where, f"number of parts must be at least 1, got {num_parts}")
    if num_parts > graph.num_nodes:
        raise InputError(where, f"cannot split {graph.num_nodes} nodes into {num_parts} parts (parts must not exceed nodes)")
    for kind, arrays in (("node", graph.node_data), ("edge", graph.edge_data)):
        for name, arr in arrays.items():
            if not is_supported(arr.dtype) or arr.ndim < 1:
                raise InputError(where, f"{kind} array {name!r}: dtype {arr.dtype} with {arr.ndim} dimensions cannot be stored")


# --------------------------------------------------------------------------- the pass


@dataclass
class _NodeOrder:
    """Nodes in partition-major order: partition p owns nodes[offsets[p]:offsets[p+1]], ascending."""

    offsets: np.ndarray  # int64 [P+1]
    position: np.ndarray  # int64 [N]: position of node g in partition-major order
    nodes: np.ndarray  # int64 [N]: node at each position
    owner: np.ndarray  # [N] owner of each node, in the narrowest unsigned dtype (numpy radix-sorts 8/16-bit keys)

    def owned(self, part: int) -> np.ndarray:
        return self.nodes[self.offsets[part] : self.offsets[part + 1]]


def _node_order(book: PartitionBook) -> _NodeOrder:
    n, parts = book.num_nodes, book.num_parts
    counts = np.asarray(book.counts(), dtype=np.int64)
    assert counts.shape == (parts,) and int(counts.sum()) == n, "book counts do not cover the nodes"
    offsets = np.zeros(parts + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    ids = np.arange(n, dtype=np.int64)
    owner = np.asarray(book.owner(ids))
    position = offsets[owner] + np.asarray(book.local(ids), dtype=np.int64)
    owner = owner.astype(np.uint8 if parts <= 256 else np.uint16 if parts <= 65536 else np.uint32)
    nodes = np.full(n, -1, dtype=np.int64)
    nodes[position] = ids
    # The book is consistent iff positions are a permutation and each partition's owned list ascends.
    assert n == 0 or nodes.min() >= 0, "book local ids collide"
    steps = np.diff(nodes)
    starts = offsets[1:-1]
    inner = np.ones(max(n - 1, 0), dtype=bool)
    inner[starts[(starts > 0) & (starts < n)] - 1] = False
    assert bool(np.all(steps[inner] > 0)), "book does not list owned nodes in ascending id"
    return _NodeOrder(offsets, position, nodes, owner)


class _EdgeOrder:
    """Edges sorted by (destination position, edge id): partition-major, CSC by local destination, stable.

    When position and edge id fit in 63 bits together, one in-place sort of
    packed keys does it; otherwise a stable argsort of the positions.
    """

    def __init__(self, dst: np.ndarray, order: _NodeOrder, num_edges: int):
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
class _Layout:
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


def _layout(part: int, src: np.ndarray, nodes: _NodeOrder, edges: _EdgeOrder, scratch: "_Scratch") -> _Layout:
    owned = nodes.owned(part)
    num_owned = owned.shape[0]
    edge_ids, local_dst = edges.part(part)
    num_edges = edge_ids.shape[0]
    indptr = np.zeros(num_owned + 1, dtype=np.int64)
    np.cumsum(np.bincount(local_dst, minlength=num_owned), out=indptr[1:])
    del local_dst
    sources = np.asarray(src[edge_ids], dtype=np.int64)
    _release(src)
    # Sources owned here map to their position minus the partition's start; the rest are halo.
    indices = nodes.position[sources] - nodes.offsets[part]
    remote = (indices < 0) | (indices >= num_owned)
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
    layout = _Layout(node_ids, num_owned, indptr, indices, edge_ids, int(remote_sources.shape[0]))
    _assert_layout(layout, num_edges)
    return layout


class _Scratch:
    """N-sized work arrays reused by every partition's layout."""

    def __init__(self, num_nodes: int):
        self.mark = np.zeros(num_nodes, dtype=bool)
        self.lookup = np.empty(num_nodes, dtype=np.int64)


def _assert_layout(layout: _Layout, num_edges: int) -> None:
    assert layout.indptr[0] == 0 and layout.indptr[-1] == num_edges, "CSC pointers do not cover the edges"
    assert layout.indices.shape[0] == num_edges == layout.edge_ids.shape[0]
    if num_edges:
        assert 0 <= int(layout.indices.min()) and int(layout.indices.max()) < layout.node_ids.shape[0], "local id out of range"


def _write_result(
    graph: Graph,
    book: PartitionBook,
    stage: Path,
    method: str,
    params: dict[str, Any],
    storage: str,
    halo: int,
    progress: Optional[Progress],
    timer: StageTimer,
    node_data: DataSpec,
    edge_data: DataSpec,
    scratch: Optional[ScratchDir] = None,
    block_edges: int = MAX_BLOCK_EDGES,
) -> dict[str, Any]:
    """Write every partition and the manifest; with `scratch`, edges are ordered through buckets on disk."""
    progress = or_null(progress)
    num_parts, num_edges = book.num_parts, graph.num_edges
    with timer("order nodes"):
        nodes = _node_order(book)
    writer = PartitionWriter(stage, storage)
    try:
        arrays_per_part = 4 + len(graph.node_data) + len(graph.edge_data)
        with progress.stage("write partitions", total=num_parts * arrays_per_part, unit="arrays") as bar:
            book_json = _write_book(writer, book)
            if halo:
                # Halo rows follow owned rows in each node data file: the halos come from the topology.
                edges, seconds = _order_edges(graph, nodes, scratch, block_edges)
                timer.record("order edges", seconds)
                parts, halos = _write_all_topology(writer, graph, nodes, edges, halo, bar, timer)
                with timer("write node data"):
                    node_entries = _write_node_data(writer, graph, nodes, halos, bar)
            else:
                # Without halo rows, node data needs only the book: write it while another
                # thread orders the edges (numpy's sort releases the GIL), so the sort
                # overlaps the node data's I/O.
                with ThreadPoolExecutor(1, thread_name_prefix="gpart-order") as pool:
                    ordering = pool.submit(_order_edges, graph, nodes, scratch, block_edges)
                    try:
                        with timer("write node data"):
                            node_entries = _write_node_data(writer, graph, nodes, [np.empty(0, np.int64)] * num_parts, bar)
                    finally:
                        edges, seconds = ordering.result()
                timer.record("order edges (overlapped)", seconds)
                parts, halos = _write_all_topology(writer, graph, nodes, edges, halo, bar, timer)
            for part, entries in zip(parts, node_entries):
                part["arrays"].update(entries)
        _count_train(graph, nodes, parts)
        del edges, nodes, halos
        manifest = _manifest(graph, book_json, method, params, storage, halo, parts, node_data, edge_data)
        assert sum(p["num_owned"] for p in parts) == graph.num_nodes and sum(p["num_edges"] for p in parts) == num_edges
        with timer("manifest"):
            writer.close(manifest)
            write_manifest(stage, manifest)
    except BaseException:
        writer.abort()
        raise
    return manifest


def _order_edges(graph: Graph, nodes: _NodeOrder, scratch: Optional[ScratchDir] = None, block_edges: int = MAX_BLOCK_EDGES):
    """The edges in CSC order, and the seconds it took (it may run on another thread).

    Without scratch: one in-memory sort (_EdgeOrder); with it: buckets on
    disk (gpart.bounded.OwnerBucketOrder), the same order in bounded memory.
    """
    start = time.perf_counter()
    if scratch is None:
        edges: Any = _EdgeOrder(graph.dst, nodes, graph.num_edges)
    else:
        edges = OwnerBucketOrder(graph.src, graph.dst, nodes.position, nodes.offsets, scratch, block_edges)
    _release(graph.dst)
    return edges, time.perf_counter() - start


def _write_all_topology(writer, graph, nodes, edges, halo, bar, timer) -> tuple[list[dict[str, Any]], list[np.ndarray]]:
    """Every partition's topology and edge data, one partition at a time; returns parts and halos."""
    with timer("write topology"):
        parts, halos = [], []
        scratch = _Scratch(graph.num_nodes)
        for p in range(nodes.offsets.shape[0] - 1):
            if isinstance(edges, OwnerBucketOrder):
                part, halo_ids = _write_topology_blocks(writer, p, graph, nodes, edges, scratch, bar)
            else:
                layout = _layout(p, graph.src, nodes, edges, scratch)
                part, halo_ids = _write_topology(writer, p, layout, graph, bar), layout.node_ids[layout.num_owned:]
                del layout
            parts.append(part)
            halos.append(halo_ids if halo else halo_ids[:0])
        _release(graph.src)
    return parts, halos


def _write_book(writer: PartitionWriter, book: PartitionBook) -> dict[str, Any]:
    out = book.to_json()
    if isinstance(book, ArrayBook):
        out["owner"] = writer.write_array("book/owner", book.owner_array, "int32").to_json()
        out["local"] = writer.write_array("book/local", book.local_array, "int64").to_json()
    return out


def _write_topology(writer: PartitionWriter, part: int, layout: _Layout, graph: Graph, bar) -> dict[str, Any]:
    """A partition's node ids, CSC arrays and edge data rows; node data follows in one pass for all."""
    base = part_dir(part)
    arrays: dict[str, Any] = {}
    for key in ("node_ids", "indptr", "indices", "edge_ids"):
        arrays[key] = writer.write_array(f"{base}/{key}", getattr(layout, key), "int64").to_json()
        bar.advance(1)
    for name, arr in graph.edge_data.items():
        chunks = _gather_chunks(arr, layout.edge_ids, writer.after_writes)
        arrays[f"edge_data/{name}"] = writer.write_chunks(
            f"{base}/edge_data/{name}", dtype_name(arr.dtype), arr.shape[1:], layout.edge_ids.shape[0], chunks
        ).to_json()
        bar.advance(1)
    return {
        "part": part,
        "num_owned": layout.num_owned,
        "num_halo": layout.num_halo,
        "num_edges": int(layout.edge_ids.shape[0]),
        "num_cut": layout.num_cut,
        "arrays": arrays,
    }


def _write_topology_blocks(writer: PartitionWriter, part: int, graph: Graph, nodes: _NodeOrder,
                           edges: OwnerBucketOrder, scratch: _Scratch, bar) -> tuple[dict[str, Any], np.ndarray]:
    """_layout + _write_topology in bounded memory: the partition's edges come block by block from disk.

    A first pass over the blocks counts each column and marks the halo; the
    arrays are then written in the order and with the values _layout gives
    (indices, edge ids and edge data streamed block by block), so the
    bytes are the same. Returns the partition's manifest entry and its halo.
    """
    owned = nodes.owned(part)
    num_owned, first = owned.shape[0], nodes.offsets[part]
    counts = np.zeros(num_owned, dtype=np.int64)
    num_cut = 0
    for _, local_dst, sources in edges.blocks(part):
        counts += np.bincount(local_dst, minlength=num_owned)
        local = nodes.position[sources] - first
        remote = sources[(local < 0) | (local >= num_owned)]
        scratch.mark[remote] = True
        num_cut += int(remote.shape[0])
    halo = np.flatnonzero(scratch.mark)
    scratch.mark[halo] = False
    scratch.lookup[halo] = np.arange(num_owned, num_owned + halo.shape[0], dtype=np.int64)
    indptr = np.zeros(num_owned + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    num_edges = int(indptr[-1])

    def indices():
        for _, _, sources in edges.blocks(part):
            local = nodes.position[sources] - first
            remote = (local < 0) | (local >= num_owned)
            local[remote] = scratch.lookup[sources[remote]]
            yield local

    base = part_dir(part)
    arrays = {"node_ids": writer.write_array(f"{base}/node_ids", np.concatenate([owned, halo]), "int64").to_json(),
              "indptr": writer.write_array(f"{base}/indptr", indptr, "int64").to_json()}
    arrays["indices"] = writer.write_chunks(f"{base}/indices", "int64", (), num_edges, indices()).to_json()
    arrays["edge_ids"] = writer.write_chunks(f"{base}/edge_ids", "int64", (), num_edges,
                                             (ids for ids, _, _ in edges.blocks(part))).to_json()
    bar.advance(4)
    for name, arr in graph.edge_data.items():
        chunks = (chunk for ids, _, _ in edges.blocks(part) for chunk in _gather_chunks(arr, ids, writer.after_writes))
        arrays[f"edge_data/{name}"] = writer.write_chunks(
            f"{base}/edge_data/{name}", dtype_name(arr.dtype), arr.shape[1:], num_edges, chunks).to_json()
        bar.advance(1)
    entry = {"part": part, "num_owned": num_owned, "num_halo": int(halo.shape[0]), "num_edges": num_edges,
             "num_cut": num_cut, "arrays": arrays}
    return entry, halo


def _write_node_data(writer: PartitionWriter, graph: Graph, nodes: _NodeOrder, halos: list[np.ndarray], bar) -> list[dict[str, Any]]:
    """Node data rows of every partition from one sequential pass over each input array.

    A chunk of input rows is split by owner (a stable radix sort of the
    narrow owner ids keeps each partition's rows ascending) and each piece is
    appended to its partition's file; owned lists ascend, so the pieces land
    in local order. Halo rows (halo 1) are gathered afterwards. Returns, per
    partition, the array entries (key -> entry JSON).
    """
    num_parts = len(halos)
    owned = np.diff(nodes.offsets)
    entries: list[dict[str, Any]] = [{} for _ in range(num_parts)]
    for name, arr in graph.node_data.items():
        key = f"node_data/{name}"
        writers = [
            writer.array(f"{part_dir(p)}/{key}", dtype_name(arr.dtype), arr.shape[1:], int(owned[p]) + halos[p].shape[0])
            for p in range(num_parts)
        ]
        row_bytes = max(1, int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize)
        step = max(1, CHUNK_BYTES // row_bytes)
        for start in range(0, arr.shape[0], step):
            stop = min(start + step, arr.shape[0])
            owner = nodes.owner[start:stop]
            block = arr[start:stop]
            if num_parts > 1 and not bool(np.all(owner[1:] >= owner[:-1])):
                block = np.take(block, np.argsort(owner, kind="stable"), axis=0)
            bounds = np.zeros(num_parts + 1, dtype=np.int64)
            np.cumsum(np.bincount(owner, minlength=num_parts), out=bounds[1:])
            for p in np.flatnonzero(bounds[1:] > bounds[:-1]):
                writers[p].write(block[bounds[p] : bounds[p + 1]])
            del block
            # pieces may be views of the input, written later: release their pages after that
            writer.after_writes(functools.partial(_release, arr, start, stop))
        for p in range(num_parts):
            for chunk in _gather_chunks(arr, halos[p], writer.after_writes):
                writers[p].write(chunk)
            entries[p][key] = writers[p].finish().to_json()
            bar.advance(1)
    return entries


def _gather_chunks(arr: np.ndarray, ids: np.ndarray, after_writes: Callable[[Callable[[], None]], None], chunk_bytes: int = CHUNK_BYTES):
    """Rows arr[ids] in chunks of about chunk_bytes.

    Evenly spaced ids (range books: step 1; remainder books: step P) are read
    as a strided slice of the (memory-mapped) array instead of a gather. For
    ascending ids (halo lists) the input pages of each chunk are released
    (through `after_writes`) once the chunk is written; for others (edge ids
    in CSC order) after the last chunk.
    """
    row_bytes = max(1, int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize)
    rows = max(1, chunk_bytes // row_bytes)
    ascending = True
    for start in range(0, ids.shape[0], rows):
        chunk = ids[start : start + rows]
        first, last, count = int(chunk[0]), int(chunk[-1]), chunk.shape[0]
        steps = np.diff(chunk)
        stride = (last - first) // (count - 1) if count > 1 else 1
        if stride > 0 and first + stride * (count - 1) == last and bool(np.all(steps == stride)):
            yield arr[first : last + 1 : stride]
        else:
            yield arr[chunk]
        ascending = ascending and bool(np.all(steps > 0))
        if ascending:
            after_writes(functools.partial(_release, arr, first, last + 1))
    if ids.shape[0] and not ascending:
        after_writes(functools.partial(_release, arr))


def _release(arr: np.ndarray, start_row: int = 0, stop_row: Optional[int] = None) -> None:
    """Drop the resident pages of rows [start_row, stop_row) of a read-only input memmap.

    Pages of a mapped input count in this process's RSS once touched; the
    kernel keeps them in the page cache, so dropping them after use keeps
    peak RSS near the working set instead of the input's size.
    """
    if not isinstance(arr, np.memmap) or arr.ndim == 0:
        return
    from gpart.formats.readers import drop_pages  # a no-op for arrays that are not memmaps

    row_bytes = int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize
    stop_row = arr.shape[0] if stop_row is None else stop_row
    drop_pages(arr, start_row * row_bytes, (stop_row - start_row) * row_bytes)


def _manifest(
    graph: Graph,
    book_json: dict[str, Any],
    method: str,
    params: dict[str, Any],
    storage: str,
    halo: int,
    parts: list[dict[str, Any]],
    node_data: DataSpec,
    edge_data: DataSpec,
) -> dict[str, Any]:
    num_cut = sum(p.pop("num_cut") for p in parts)
    graph_json: dict[str, Any] = {
        "source": graph.source,
        "input_format": graph.input_format,
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
    }
    # Arrays added from extra files, so `gpart verify --graph` can load them again.
    if node_data:
        graph_json["node_data_files"] = {k: str(v) for k, v in node_data.items()}
    if edge_data:
        graph_json["edge_data_files"] = {k: str(v) for k, v in edge_data.items()}
    return {
        "format": FORMAT,
        "version": VERSION,
        "storage": storage,
        "created_by": f"gpart {__version__}",
        "graph": graph_json,
        "num_parts": len(parts),
        "method": method,
        "params": params,
        "halo": halo,
        "book": book_json,
        "node_data": {k: {"dtype": dtype_name(a.dtype), "row_shape": list(a.shape[1:])} for k, a in graph.node_data.items()},
        "edge_data": {k: {"dtype": dtype_name(a.dtype), "row_shape": list(a.shape[1:])} for k, a in graph.edge_data.items()},
        "partitions": parts,
        "stats": partition_stats(parts, graph.num_nodes, graph.num_edges, num_cut),
    }


def _count_train(graph: Graph, nodes: "_NodeOrder", parts: list[dict[str, Any]]) -> None:
    """Record each partition's training nodes (`num_train`) when the graph has a training mask."""
    train = train_mask(graph)
    if train is None:
        return
    counts = np.zeros(len(parts), dtype=np.int64)
    for start in range(0, graph.num_nodes, EDGE_CHUNK):
        block = train[start:start + EDGE_CHUNK]
        counts += np.bincount(nodes.owner[start:start + EDGE_CHUNK][block], minlength=len(parts))
    for part, count in zip(parts, counts):
        part["num_train"] = int(count)


def partition_stats(parts: list[dict[str, Any]], num_nodes: int, num_edges: int, num_cut: int) -> dict[str, Any]:
    """Edge cut and balance figures of a result (SPEC.md 4.4 `stats`)."""
    halo = sum(p["num_halo"] for p in parts)
    return {
        "edge_cut": int(num_cut),
        "edge_cut_ratio": num_cut / num_edges if num_edges else 0.0,
        "node_balance": share_balance([p["num_owned"] for p in parts]),
        "edge_balance": share_balance([p["num_edges"] for p in parts]),
        "halo_ratio": halo / num_nodes if num_nodes else 0.0,
        "train_balance": share_balance([p["num_train"] for p in parts]) if parts and "num_train" in parts[0] else None,
    }
