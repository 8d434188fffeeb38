"""Writing a partition result's arrays: every partition's topology and edge data, then node data
in one sequential pass over each input array (SPEC.md 4.2). Keys and dtypes are
gpart.formats.partition.writer's: this module hands it logical arrays.

Node and edge data are streamed from the (memory-mapped) input in chunks whose
pages are released after use.
"""

from __future__ import annotations

import collections
import functools
import queue
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator, Mapping, Optional

import numpy as np

from gpart.base.graph import Graph
from gpart.base.progress import StageTimer
from gpart.bytes.crc import CHUNK_BYTES
from gpart.bytes.reader import evict_rows, release_rows
from gpart.formats.partition.writer import PartitionWriter, data_key, part_entry
from gpart.pipeline.csc_order import OwnerBucketOrder
from gpart.pipeline.layout import AnyNodeOrder, Layout, NodeOrder, Scratch, layout_of
from gpart.pipeline.memory_plan import BOUNDED_CHUNK_BYTES
from gpart.pipeline.write_plan import ResultPlan


def write_all_topology(writer: PartitionWriter, graph: Graph, nodes: AnyNodeOrder, edges: Any, plan: ResultPlan, threads: int,
                       bar: Any, timer: StageTimer, sources: Optional[np.ndarray] = None) -> tuple[list[dict[str, Any]], list[np.ndarray]]:
    """Every partition's topology and edge data, one partition at a time; returns parts and halos (empty
    without `plan.halo`). In memory, `threads` layouts are computed at once (gpart.pipeline.memory_plan.layout_threads),
    each gathering its edge sources from `sources` (graph.src or its copy in RAM,
    gpart.pipeline.memory_plan.resident_sources).

    `plan.extension.edges(writer, p, part, chunks, topology)` (typed graphs, gpart.pipeline.typed) runs after
    each partition: in memory `topology` is (node_ids, indices, num_owned) and `chunks()` yields
    (edge ids, None); on the bounded path `topology` is None and `chunks()` yields (edge ids,
    sources) per block (gpart.pipeline.write_result.partition_with_book)."""
    halo, extension = plan.halo, plan.extension
    with timer("write topology"):
        parts, halos = [], []
        num_parts = nodes.offsets.shape[0] - 1
        bounded = isinstance(edges, OwnerBucketOrder)
        # the bounded pass's halo lookup: each halo node's local id in the partition being written, 0 elsewhere
        mark = np.zeros(graph.num_nodes if bounded else 0, dtype=np.int32 if graph.num_nodes < 2**31 else np.int64)
        layouts = None if bounded else layouts_in_order(graph, nodes, edges, num_parts, threads,
                                                         graph.src if sources is None else sources)
        for p in range(num_parts):
            if bounded:
                part, halo_ids = write_topology_blocks(writer, p, graph.edge_data, nodes, edges, mark, bar, BOUNDED_CHUNK_BYTES)
                chunks = functools.partial(lambda part_: ((ids, sources) for ids, _, sources in edges.blocks(part_)), p)
                topology = None
            else:
                layout = next(layouts)
                part, halo_ids = write_topology(writer, p, layout, graph, bar), layout.node_ids[layout.num_owned:]
                chunks = functools.partial(iter, [(layout.edge_ids, None)])
                topology = (layout.node_ids, layout.indices, layout.num_owned)
                del layout
            if extension is not None:
                extension.edges(writer, p, part, chunks, topology)
            del chunks, topology
            parts.append(part)
            # without halo rows no halo is kept (an empty view would keep the whole array alive)
            halos.append(halo_ids if halo else np.empty(0, dtype=np.int64))
        release_rows(graph.src)
    return parts, halos


def layouts_in_order(graph: Graph, nodes: NodeOrder, edges, num_parts: int, threads: int,
                     sources: np.ndarray) -> Iterator[Layout]:
    """Every partition's Layout, in order, `threads` computed at a time, its edge sources gathered from
    `sources` (graph.src or a copy of it).

    The source gathers of a layout are cache-missing random reads that numpy
    runs without the GIL, so two threads overlap their memory latency. With
    more than one thread, threads + 1 layouts are alive (those being computed
    and the one being written); gpart.pipeline.memory_plan.layout_threads counts them.
    """
    if threads <= 1:
        scratch = Scratch(graph.num_nodes)
        for p in range(num_parts):
            yield layout_of(p, sources, nodes, edges, scratch)
        return
    scratches: queue.SimpleQueue = queue.SimpleQueue()
    for _ in range(threads):
        scratches.put(Scratch(graph.num_nodes))

    def compute(part: int) -> Layout:
        scratch = scratches.get()
        try:
            return layout_of(part, sources, nodes, edges, scratch)
        finally:
            scratches.put(scratch)

    with ThreadPoolExecutor(threads, thread_name_prefix="gpart-layout") as pool:
        pending = collections.deque(pool.submit(compute, p) for p in range(min(threads, num_parts)))
        for p in range(threads, num_parts + threads):
            layout = pending.popleft().result()
            if p < num_parts:
                pending.append(pool.submit(compute, p))
            yield layout
            del layout


def write_topology(writer: PartitionWriter, part: int, layout: Layout, graph: Graph, bar) -> dict[str, Any]:
    """A partition's node ids, CSC arrays and edge data rows; node data follows in one pass for all."""
    arrays: dict[str, Any] = {}
    for key, arr in (("node_ids", layout.node_ids), ("indptr", layout.indptr), ("indices", layout.indices), ("edge_ids", layout.edge_ids)):
        arrays[key] = writer.write_topology(part, key, arr)
        bar.advance(1)
    num_edges = int(layout.edge_ids.shape[0])
    for name, arr in graph.edge_data.items():
        chunks = gather_chunks(arr, layout.edge_ids, writer.after_writes)
        arrays[data_key("edge", name)] = writer.write_data(part, "edge", name, arr, num_edges, chunks)
        bar.advance(1)
    return part_entry(part, layout.num_owned, layout.num_halo, num_edges, layout.num_cut, arrays)


def write_topology_blocks(writer: PartitionWriter, part: int, edge_data: Mapping[str, np.ndarray], nodes: AnyNodeOrder,
                          edges: OwnerBucketOrder, mark: np.ndarray, bar, chunk_bytes: int = CHUNK_BYTES) -> tuple[dict[str, Any], np.ndarray]:
    """layout_of + write_topology in bounded memory: the partition's edges come block by block from disk.

    A first pass over the blocks counts each column and marks the halo in
    `mark` (N integers, all 0 between calls); the arrays are then written
    in the order and with the values layout_of gives (indices, edge ids and
    edge data streamed block by block), so the bytes are the same: a halo
    source's local id is its rank in the ascending halo list plus the owned
    count, which `mark` holds for each halo node while the indices are
    written (a binary search per source took 51 of 67 s on R-MAT 8M/120M, 8
    parts, where 77% of the sources are halo). Edge data rows (`edge_data`: the input's arrays, or templates
    of their dtype and row shape where the edges carry them) are gathered `chunk_bytes` at a time, or read
    with the blocks where the edges carry them. Returns the partition's manifest entry and its halo.
    """
    owned = nodes.owned(part)
    num_owned, first = owned.shape[0], nodes.offsets[part]
    counts = np.zeros(num_owned, dtype=np.int64)
    num_cut = 0
    for _, local_dst, sources in edges.blocks(part):
        counts += np.bincount(local_dst, minlength=num_owned)
        local = nodes.position_of(sources) - first
        remote = sources[(local < 0) | (local >= num_owned)]
        mark[remote] = 1
        num_cut += int(remote.shape[0])
    halo = np.flatnonzero(mark)
    mark[halo] = np.arange(num_owned, num_owned + halo.shape[0], dtype=mark.dtype)
    indptr = np.zeros(num_owned + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    num_edges = int(indptr[-1])

    def indices():
        for _, _, sources in edges.blocks(part):
            local = nodes.position_of(sources) - first
            remote = (local < 0) | (local >= num_owned)
            local[remote] = mark[sources[remote]]
            yield local

    arrays = {"node_ids": writer.write_topology(part, "node_ids", iter([owned, halo]), num_owned + halo.shape[0]),
              "indptr": writer.write_topology(part, "indptr", indptr),
              "indices": writer.write_topology(part, "indices", indices(), num_edges),
              "edge_ids": writer.write_topology(part, "edge_ids", (ids for ids, _, _ in edges.blocks(part)), num_edges)}
    mark[halo] = 0
    bar.advance(4)
    for name, arr in edge_data.items():
        if edges.carries(name):
            chunks = (rows.view(arr.dtype).reshape(-1, *arr.shape[1:]) for rows in edges.carried(part, name))
        else:
            chunks = (chunk for ids, _, _ in edges.blocks(part) for chunk in gather_chunks(arr, ids, writer.after_writes, chunk_bytes))
        arrays[data_key("edge", name)] = writer.write_data(part, "edge", name, arr, num_edges, chunks)
        bar.advance(1)
    return part_entry(part, num_owned, halo.shape[0], num_edges, num_cut, arrays), halo


def write_node_data(writer: PartitionWriter, graph: Graph, nodes: AnyNodeOrder, halos: list[np.ndarray], bar,
                    chunk_bytes: int = CHUNK_BYTES) -> list[dict[str, Any]]:
    """Node data rows of every partition from one sequential pass over each input array.

    A chunk of input rows is split by owner (a stable radix sort of the
    narrow owner ids keeps each partition's rows ascending) and each piece is
    appended to its partition's file; owned lists ascend, so the pieces land
    in local order. Halo rows (halo 1) are gathered afterwards. `chunk_bytes`
    of rows at a time. Returns, per partition, the array entries (key -> entry JSON).
    """
    num_parts = len(halos)
    owned = np.diff(nodes.offsets)
    entries: list[dict[str, Any]] = [{} for _ in range(num_parts)]
    for name, arr in graph.node_data.items():
        key = data_key("node", name)
        writers = [writer.data_array(p, "node", name, arr, int(owned[p]) + halos[p].shape[0]) for p in range(num_parts)]
        row_bytes = max(1, int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize)
        step = max(1, chunk_bytes // row_bytes)
        for start in range(0, arr.shape[0], step):
            stop = min(start + step, arr.shape[0])
            owner = nodes.owner_of(start, stop)
            block = arr[start:stop]
            if num_parts > 1 and not bool(np.all(owner[1:] >= owner[:-1])):
                block = np.take(block, np.argsort(owner, kind="stable"), axis=0)
            bounds = np.zeros(num_parts + 1, dtype=np.int64)
            np.cumsum(np.bincount(owner, minlength=num_parts), out=bounds[1:])
            for p in np.flatnonzero(bounds[1:] > bounds[:-1]):
                writers[p].write(block[bounds[p] : bounds[p + 1]])
            del block
            # pieces may be views of the input, written later: release their pages after that (read once: from
            # the page cache too)
            writer.after_writes(functools.partial(evict_rows, arr, start, stop))
        for p in range(num_parts):
            for chunk in gather_chunks(arr, halos[p], writer.after_writes, chunk_bytes):
                writers[p].write(chunk)
            entries[p][key] = writers[p].finish().to_json()
            bar.advance(1)
    return entries


def gather_chunks(arr: np.ndarray, ids: np.ndarray, after_writes: Callable[[Callable[[], None]], None], chunk_bytes: int = CHUNK_BYTES):
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
            after_writes(functools.partial(release_rows, arr, first, last + 1))
    if ids.shape[0] and not ascending:
        after_writes(functools.partial(release_rows, arr))
