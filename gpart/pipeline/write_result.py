"""A graph and its partition book -> a committed partition result (SPEC.md section 4).

`partition_with_book` is the write half of gpart.pipeline.partition.partition_graph, and
the pass typed graphs (gpart.pipeline.typed) and tests call directly with a book made
elsewhere: per-partition layouts (gpart.pipeline.layout) in memory with as many layout
threads as fit, or with edges bucketed on disk past `max_memory` (SPEC.md 4.6),
arrays through gpart.pipeline.write_arrays, statistics, and the manifest last, all inside
a staging directory (formats.commit.staged_output).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.base.memory import default_max_memory, parse_memory_size
from gpart.base.progress import Progress, StageTimer, or_null
from gpart.base.version import __version__
from gpart.bytes.crc import CHUNK_BYTES
from gpart.engines.balance import share_balance, train_mask
from gpart.formats.files.commit import staged_output
from gpart.formats.files.dtypes import is_supported
from gpart.formats.files.manifest import write_manifest
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.partition.book import PartitionBook
from gpart.formats.partition.reverse import write_reverse
from gpart.formats.partition.writer import STORAGES, PartitionManifest, PartitionWriter
from gpart.pipeline.layout import AnyNodeOrder, BookOrder, node_order, order_edges
from gpart.pipeline.memory_plan import (
    BOUNDED_CHUNK_BYTES,
    WRITE_QUEUE_BYTES,
    block_edges_for,
    book_node_bytes,
    bounded_budget,
    layout_threads,
    resident_sources,
)
from gpart.pipeline.request import VerboseLog
from gpart.pipeline.write_arrays import write_all_topology, write_node_data
from gpart.pipeline.write_plan import LayoutPass, PathLike, ResultPlan

# Edges handled per vectorised step when building sort keys.
EDGE_CHUNK = 1 << 22


def partition_with_book(graph: Graph, book: PartitionBook, out_dir: PathLike, plan: ResultPlan, *, force: bool = False,
                        progress: Optional[Progress] = None, verbose_log: VerboseLog = None,
                        max_memory: Union[str, int, None] = None, scratch_dir: Optional[PathLike] = None) -> dict[str, Any]:
    """Write the partition result of `graph` under an assignment already made (`book`), as `plan` says.

    `max_memory` (bytes or '2GB'; default: a fraction of the available RAM)
    chooses the in-memory or the bounded pass as partition_graph does; the bounded pass spills into
    `scratch_dir` (default: beside the output).
    `plan.extension` (typed graphs, gpart.pipeline.typed) adds arrays and manifest fields:
    `nodes(writer, owned, halos) -> [array entries per partition]` beside the node data,
    `edges(writer, p, part, chunks, topology)` after each partition's topology:
    in memory `topology` is its (node_ids, indices, num_owned) and `chunks()` yields
    (edge ids, None) once; on the bounded path `topology` is None and `chunks()`
    (callable again) yields (edge ids, their erased sources) block by block, in CSC order.
    `manifest(m)` comes last. `plan.reverse`: `graph` holds reverse copies (gpart.pipeline.reverse_edges), recorded
    in the manifest's `reverse` object.
    """
    check_options(plan.storage, plan.halo)
    check_graph(graph, book.num_parts, graph.source)
    if book.num_nodes != graph.num_nodes:
        raise ValueError(f"book covers {book.num_nodes} nodes, graph has {graph.num_nodes}")
    timer = StageTimer(verbose_log)
    inputs = [graph.source] if graph.source and Path(graph.source).exists() else []
    with staged_output(out_dir, force=force, inputs=inputs) as stage:
        limit = parse_memory_size(max_memory) or default_max_memory()
        return write_within(limit, graph, book, stage, plan, progress, timer, scratch_dir)


def write_within(limit: int, graph: Graph, book: PartitionBook, stage: Path, plan: ResultPlan, progress: Optional[Progress],
                 timer: StageTimer, scratch_dir: Optional[PathLike] = None) -> dict[str, Any]:
    """_write_result within `limit` bytes (SPEC.md 4.6): in memory with as many layout threads as fit
    (gpart.pipeline.memory_plan.layout_threads), or, where the in-memory pass does not fit, with edges bucketed
    on disk in a scratch directory in `scratch_dir` (default: next to the output)."""
    threads = layout_threads(graph.num_nodes, graph.num_edges, book.num_parts, limit)
    if threads:
        resident = resident_sources(graph.num_nodes, graph.num_edges, book.num_parts, threads, limit)
        return _write_result(graph, book, stage, plan, LayoutPass(threads=threads, resident_sources=resident), progress, timer)
    with ScratchDir(stage.parent if scratch_dir is None else scratch_dir, prefix=f"{stage.name}-scratch-") as scratch:
        budget = bounded_budget(limit, graph.num_nodes, book_node_bytes(book))
        layouts = LayoutPass(scratch=scratch, block_edges=block_edges_for(budget))
        return _write_result(graph, book, stage, plan, layouts, progress, timer)


def check_options(storage: str, halo: int) -> None:
    if storage not in STORAGES:
        raise ValueError(f"unknown storage {storage!r} (expected one of {', '.join(STORAGES)})")
    if halo not in (0, 1):
        raise ValueError(f"halo must be 0 or 1, got {halo!r}")


def check_graph(graph: Graph, num_parts: int, source: Optional[PathLike]) -> None:
    where = source if source is not None else graph.source
    if num_parts < 1:
        raise InputError(where, f"number of parts must be at least 1, got {num_parts}")
    if num_parts > graph.num_nodes:
        raise InputError(where, f"cannot split {graph.num_nodes} nodes into {num_parts} parts (parts must not exceed nodes)")
    for kind, arrays in (("node", graph.node_data), ("edge", graph.edge_data)):
        for name, arr in arrays.items():
            if not is_supported(arr.dtype) or arr.ndim < 1:
                raise InputError(where, f"{kind} array {name!r}: dtype {arr.dtype} with {arr.ndim} dimensions cannot be stored")


def _write_result(graph: Graph, book: PartitionBook, stage: Path, plan: ResultPlan, layouts: LayoutPass,
                  progress: Optional[Progress], timer: StageTimer) -> dict[str, Any]:
    """Write every partition and the manifest; with `layouts.scratch`, edges are ordered through buckets on disk;
    `layouts.resident_sources`: the layouts gather edge sources from a copy in RAM
    (gpart.pipeline.memory_plan.resident_sources)."""
    progress = or_null(progress)
    storage, reverse, extension = plan.storage, plan.reverse, plan.extension
    num_parts, num_edges = book.num_parts, graph.num_edges
    with timer("order nodes"):  # the bounded pass holds no node arrays beyond the book's own
        nodes = node_order(book) if layouts.scratch is None else BookOrder(book)
    # the bounded pass keeps the writer's queue within its floor (memory_plan.BOUNDED_FLOOR_BYTES)
    writer = PartitionWriter(stage, storage, queue_bytes=None if layouts.scratch is None else WRITE_QUEUE_BYTES)
    try:
        arrays_per_part = 4 + len(graph.node_data) + len(graph.edge_data)
        with progress.stage("write partitions", total=num_parts * arrays_per_part, unit="arrays") as bar:
            book_json = writer.write_book(book)
            reverse_json = None if reverse is None else write_reverse(writer, reverse.meta, reverse.input_edge)
            parts, halos, node_entries = _write_partitions(writer, graph, nodes, plan, layouts, bar, timer)
            for part, entries in zip(parts, node_entries):
                part["arrays"].update(entries)
        _count_train(graph, nodes, parts)
        del nodes, halos
        manifest = _manifest(graph, book_json, plan, parts, reverse_json)
        if extension is not None:
            extension.manifest(manifest)
        assert sum(p["num_owned"] for p in parts) == graph.num_nodes and sum(p["num_edges"] for p in parts) == num_edges
        with timer("manifest"):
            writer.close(manifest)
            write_manifest(stage, manifest)
    except BaseException:
        writer.abort()
        raise
    return manifest


def _write_partitions(writer: PartitionWriter, graph: Graph, nodes: AnyNodeOrder, plan: ResultPlan, layouts: LayoutPass,
                      bar: Any, timer: StageTimer) -> tuple[list, list, list]:
    """Every partition's topology and node data: (part entries, halo ids per part, node data entries per part)."""
    scratch, block_edges, threads, resident = layouts.scratch, layouts.block_edges, layouts.threads, layouts.resident_sources
    extension = plan.extension
    if plan.halo:
        # Halo rows follow owned rows in each node data file: the halos come from the topology.
        edges, seconds = order_edges(graph, nodes, scratch, block_edges)
        timer.record("order edges", seconds)
        sources = np.array(graph.src) if resident else graph.src
        parts, halos = write_all_topology(writer, graph, nodes, edges, plan, threads, bar, timer, sources)
        with timer("write node data"):
            node_entries = _node_entries(writer, graph, nodes, halos, bar, extension, layouts)
        return parts, halos, node_entries
    # Without halo rows, node data needs only the book: write it while another
    # thread orders the edges (numpy's sort releases the GIL), so the sort
    # overlaps the node data's I/O.
    # The copy of the sources (resident) is read there too, after the sort.
    with ThreadPoolExecutor(1, thread_name_prefix="gpart-order") as pool:
        ordering = pool.submit(order_edges, graph, nodes, scratch, block_edges)
        copying = pool.submit(np.array, graph.src) if resident else None
        try:
            with timer("write node data"):
                node_entries = _node_entries(writer, graph, nodes, [np.empty(0, np.int64)] * (len(nodes.offsets) - 1), bar, extension,
                                             layouts)
        finally:
            edges, seconds = ordering.result()
            sources = copying.result() if copying is not None else graph.src
    timer.record("order edges (overlapped)", seconds)
    parts, halos = write_all_topology(writer, graph, nodes, edges, plan, threads, bar, timer, sources)
    return parts, halos, node_entries


def _node_entries(writer, graph: Graph, nodes: AnyNodeOrder, halos: list[np.ndarray], bar, extension: Any,
                  layouts: LayoutPass) -> list[dict[str, Any]]:
    """Node data entries per partition, with the extension's (typed node data) added; the bounded pass
    (`layouts.scratch`) moves BOUNDED_CHUNK_BYTES of rows at a time."""
    entries = write_node_data(writer, graph, nodes, halos, bar, CHUNK_BYTES if layouts.scratch is None else BOUNDED_CHUNK_BYTES)
    if extension is not None:
        for mine, more in zip(entries, extension.nodes(writer, nodes.owned, halos)):
            mine.update(more)
    return entries


def _manifest(graph: Graph, book_json: dict[str, Any], plan: ResultPlan, parts: list[dict[str, Any]],
              reverse: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The manifest of a result (SPEC.md 4.4): what `plan` records, the book, the parts and their statistics."""
    method, params, storage, halo = plan.method, plan.params, plan.storage, plan.halo
    node_data, edge_data = plan.node_data, plan.edge_data
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
    return PartitionManifest(
        graph=graph_json, storage=storage, created_by=f"gpart {__version__}", method=method, params=params, halo=halo,
        book=book_json, node_data=graph.node_data, edge_data=graph.edge_data, parts=parts,
        stats=partition_stats(parts, graph.num_nodes, graph.num_edges, num_cut), reverse=reverse,
    ).to_json()


def _count_train(graph: Graph, nodes: AnyNodeOrder, parts: list[dict[str, Any]]) -> None:
    """Record each partition's training nodes (`num_train`) when the graph has a training mask."""
    train = train_mask(graph)
    if train is None:
        return
    counts = np.zeros(len(parts), dtype=np.int64)
    for start in range(0, graph.num_nodes, EDGE_CHUNK):
        block = train[start:start + EDGE_CHUNK]
        counts += np.bincount(nodes.owner_of(start, min(start + EDGE_CHUNK, graph.num_nodes))[block], minlength=len(parts))
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
