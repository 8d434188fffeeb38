"""Partition a chunked graph on W torch.distributed ranks (SPEC.md 10.2).

    read my chunks -> book (every rank from N, or on rank 0 from gathered edges)
    -> shuffle edges to the rank writing their destination's partition, node
       rows to the rank writing their owner's partition (bounded rounds)
    -> each rank writes its partitions with gpart.pipeline.partition's writer pieces
    -> every rank reports; rank 0 writes the manifest last, only if all succeeded

Partition p is written by rank p % W. Because the arrays are computed by the
same functions from the same values in the same order (edges of a partition
sorted by destination position, then edge id), the result is byte-identical
to single-machine `gpart partition` of the same chunked directory.
"""

from __future__ import annotations

import json
import os
import resource
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from gpart.base.errors import GpartError, InputError
from gpart.base.graph import Graph
from gpart.base.memory import default_max_memory, memory_pool, parse_memory_size, return_large_frees
from gpart.base.version import __version__
from gpart.collectives.comm import Comm
from gpart.distributed.gather import gathered_book
from gpart.distributed.halo import fetch_halo_rows
from gpart.distributed.partition_job import ID_BYTES, Log, PartitionJob, edge_blocks, node_blocks, round_bytes
from gpart.distributed.placement import Output, check_my_files, commit_output, layouts_from_json, layouts_json, stage_output
from gpart.distributed.received_edges import write_topologies
from gpart.distributed.shuffle import PartFiles, column, shuffle, take_rows
from gpart.formats.files.scratch import ScratchDir, checked_parent
from gpart.formats.input.chunked import ChunkedGraph, check_same_layout
from gpart.formats.partition.book import PartitionBook
from gpart.formats.partition.writer import PartitionManifest, PartitionWriter, data_key
from gpart.partition_methods.method import MethodContext, PartitionMethod
from gpart.partition_methods.options import MethodOptions
from gpart.partition_methods.registry import method_options, resolve_method
from gpart.pipeline.layout import AnyNodeOrder
from gpart.pipeline.write_result import partition_stats

PathLike = Union[str, "os.PathLike[str]"]

DEFAULT_MAX_MESSAGE = 256 << 20


@dataclass
class RunInfo:
    """What a distributed run did, beside the manifest (every rank gets the same)."""

    manifest: dict[str, Any]
    world_size: int
    largest_message: int  # bytes, over all ranks and rounds
    rounds: dict[str, int] = field(default_factory=dict)
    peak_rss: list[int] = field(default_factory=list)  # bytes, per rank
    memory_budgets: list[int] = field(default_factory=list)  # bytes, per rank: what bounded its shuffles and writes


@dataclass(frozen=True)
class MethodRun:
    """The method of a distributed run, its options and its context (max_memory None: rank 0's default)."""

    method: PartitionMethod
    options: MethodOptions
    context: MethodContext


@dataclass(frozen=True)
class ChunksRequest:
    """partition_chunks' keywords, packed (as partition_chunks describes them): `max_message` bytes per
    message of the shuffles, `log` a line sink for progress (None: silent)."""

    num_parts: int
    method: Optional[str] = None
    storage: str = "binary"
    halo: int = 0
    force: bool = False
    max_message: int = DEFAULT_MAX_MESSAGE
    log: Log = None
    method_params: dict[str, Any] = field(default_factory=dict)


def partition_chunks(chunks: PathLike, out_dir: PathLike, num_parts: int, method: Optional[str] = None, *,
                     storage: str = "binary", halo: int = 0, force: bool = False,
                     max_message: int = DEFAULT_MAX_MESSAGE, timeout_s: float = 600.0, comm: Optional[Comm] = None,
                     log: Log = None, **method_params: Any) -> RunInfo:
    """Partition the chunked graph `chunks` into `num_parts` partitions under `out_dir` on every rank of the job.

    Call on every rank (torch.distributed initialised, or a world of one).
    `method` (a registered method; None: gpart.pipeline.partition.partition_graph's default, so the
    result is byte-identical to it) and `method_params` are those of partition_graph (seed,
    assignment, imbalance, balance, ..., max_memory and scratch_dir for the methods that
    gather the graph on rank 0).
    Raises on every rank, within `timeout_s` of a peer's failure, when any rank
    fails; the manifest is then not written.

    The keywords are the library's documented API (as partition_graph's): they are packed at once into
    a ChunksRequest, which every step below takes (`partition_chunks_request`).
    """
    request = ChunksRequest(num_parts, method, storage=storage, halo=halo, force=force, max_message=max_message, log=log,
                            method_params=method_params)
    return partition_chunks_request(comm or Comm(timeout_s), chunks, out_dir, request)


def partition_chunks_request(comm: Comm, chunks: PathLike, out_dir: PathLike, request: ChunksRequest) -> RunInfo:
    """partition_chunks with its keywords packed, on the ranks of `comm`."""
    return_large_frees()
    job, run = _open_input(comm, chunks, request)
    method_params = request.method_params
    with ExitStack() as stack:
        inputs = [chunks] + ([method_params["assignment"]] if isinstance(method_params.get("assignment"), (str, os.PathLike)) else [])
        out = stage_output(comm, stack, out_dir, request.force, inputs)
        reports, book_json, params = _run(job, out, run)
        manifest = commit_output(comm, out, stack, lambda: _manifest(job, chunks, book_json, run.method.name, params, reports))
    largest = max(r["largest_message"] for r in reports)
    return RunInfo(manifest, comm.world, largest, dict(job.rounds), [r["peak_rss"] for r in reports],
                   [r["memory_budget"] for r in reports])


def _check_options(request: ChunksRequest) -> None:
    storage, halo, max_message = request.storage, request.halo, request.max_message
    if storage != "binary":
        raise InputError(None, f"the distributed partitioner writes binary storage only, not {storage!r}")
    if halo not in (0, 1):
        raise InputError(None, f"halo must be 0 or 1, got {halo!r}")
    if not isinstance(max_message, int) or max_message < 1:
        raise InputError(None, f"--max-message must be a positive number of bytes, got {max_message!r}")


def _method_run(chunks: PathLike, method: Optional[str], method_params: dict) -> MethodRun:
    """The method (from the registry, as partition_graph picks it), its validated options and its context."""
    where = os.fspath(chunks)
    params = dict(method_params)
    scratch = params.pop("scratch_dir", None)  # this rank's own: each host may spill to a disk of its own
    context = MethodContext(max_memory=parse_memory_size(params.pop("max_memory", None)),
                            scratch_dir=None if scratch is None else checked_parent(scratch))
    chosen = resolve_method(method, params, where)
    return MethodRun(chosen, method_options(chosen, params, where), context)


def _open_input(comm: Comm, chunks: PathLike, request: ChunksRequest) -> tuple[PartitionJob, MethodRun]:
    """Metadata, part count and this rank's chunk files (the only ones its machine must hold); the
    arrays' dtypes and row shapes from rank 0 (which reads chunk 0); the method; every rank agrees or raises."""
    job, error, layouts, run = None, None, None, None
    try:
        _check_options(request)
        run = _method_run(chunks, request.method, request.method_params)
        job = PartitionJob(comm, ChunkedGraph(chunks), int(request.num_parts), int(request.max_message), request.log,
                           int(request.halo))
        _check_files(job)
        if comm.rank == 0:
            layouts = json.dumps([layouts_json(job.cg.data_layout(kind)) for kind in ("node", "edge")]).encode()
    except GpartError as exc:
        error = exc
    comm.agree(error, "reading the chunked input")
    assert job is not None
    job.node_layout, job.edge_layout = (layouts_from_json(d) for d in json.loads(comm.broadcast_bytes(layouts)))
    error = None
    try:
        _check_input(job)
    except GpartError as exc:
        error = exc
    comm.agree(error, "checking the chunked input")
    assert run is not None
    job.memory_budget = _rank_budget(comm, run.context.max_memory)
    job.max_message = round_bytes(comm, job.max_message, job.memory_budget)  # every rank's own budget has a say
    return job, run


def _rank_budget(comm: Comm, max_memory: Optional[int]) -> int:
    """This rank's memory budget for the shuffles and its writes (a collective): its --max-memory, else its default
    divided among the ranks that take their defaults from the same memory (gpart.base.memory.memory_pool: ranks
    started on one machine, in one cgroup), which shuffle and write at the same time."""
    pools = [pool.decode() for pool in comm.all_gather_bytes(memory_pool().encode())]
    return int(max_memory) if max_memory else default_max_memory() // pools.count(pools[comm.rank])


def _check_files(job: PartitionJob) -> None:
    cg, rank, world = job.cg, job.comm.rank, job.comm.world
    if job.num_parts < 1 or job.num_parts > cg.num_nodes:
        raise InputError(cg.directory, f"cannot split {cg.num_nodes} nodes into {job.num_parts} parts "
                                       f"(parts must be between 1 and the number of nodes)")
    mine = job.my_chunks(cg.num_edge_chunks)
    edge_files = [f for i in mine for f in (cg.edge_files[i] if cg.edge_format == "numpy" else [cg.edge_files[i]])]
    check_my_files(edge_files, rank, world, "edge chunk")
    for kind, files, count in (("node", cg.node_data, cg.num_node_chunks), ("edge", cg.edge_data, cg.num_edge_chunks)):
        for name in files:
            check_my_files([files[name][i] for i in job.my_chunks(count)], rank, world, f"{kind} data chunk")


def _check_input(job: PartitionJob) -> None:
    """The headers of this rank's data chunks against the layouts: all cheap, all before any output."""
    cg = job.cg
    for kind, layout, count in (("node", job.node_layout, cg.num_node_chunks), ("edge", job.edge_layout, cg.num_edge_chunks)):
        for name in layout:
            for i in job.my_chunks(count):
                check_same_layout((cg.node_data if kind == "node" else cg.edge_data)[name][i], name,
                                  cg.data_chunk(kind, name, i), layout[name])
    mask = job.node_layout.get("train_mask")
    if mask is not None and (mask[1] != () or (mask[0] != np.bool_ and mask[0].kind not in "iu")):
        raise InputError(cg.directory, f"training mask 'train_mask' must be 1-D boolean or 0/1, got {mask[0]} rows {list(mask[1])}")


def _run(job: PartitionJob, out: Output, run: MethodRun) -> tuple[list[dict], dict, dict]:
    """Book, shuffles and this rank's partitions; returns every rank's report (in rank order)."""
    comm, stage = job.comm, out.stage
    start = time.perf_counter()
    book, params = _book(job, run, stage)
    job.say("assign", start)
    error, parts, book_json = None, [], {}
    spill = stage.parent if run.context.scratch_dir is None else run.context.scratch_dir
    with ScratchDir(spill, prefix=f"{stage.name}-scratch-{comm.rank}-") as scratch:
        start = time.perf_counter()
        edge_files = _shuffle_edges(job, book, scratch.path)
        job.say("shuffle edges", start)
        start = time.perf_counter()
        node_files = _shuffle_nodes(job, book, scratch.path)
        job.say("shuffle nodes", start)
        start = time.perf_counter()
        writer = PartitionWriter(stage, "binary")
        halos: dict[int, np.ndarray] = {}
        try:
            book_json = writer.write_book(book) if out.writes_shared(comm.rank) else {}
            parts, nodes = write_topologies(job, writer, book, edge_files, scratch.path, job.memory_budget, halos)
        except Exception as exc:
            error = exc
        # halo 1: every rank takes part in the exchange (a rank that failed above reports it there)
        try:
            halo_files = fetch_halo_rows(job, halos, scratch.path, error) if job.halo and job.node_layout else None
        except BaseException:
            writer.abort()
            raise
        try:
            if error is None:
                for entry in parts:
                    _write_node_data(job, writer, entry, nodes, node_files, halo_files)
                writer.close({})
        except Exception as exc:
            error = exc
        if error is not None:
            writer.abort()
        job.say("write", start)
    comm.agree(error, "writing partitions")
    mine = {"parts": parts, "largest_message": comm.largest_message,
            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "memory_budget": job.memory_budget}
    reports = [json.loads(r) for r in comm.all_gather_bytes(json.dumps(mine).encode())]
    return reports, book_json, params


def _manifest(job: PartitionJob, chunks: PathLike, book_json: dict, method: str, params: dict, reports: list[dict]) -> dict:
    """The manifest gpart.pipeline.partition writes for the same input (its graph entry and stats, built alike)."""
    parts = sorted((p for r in reports for p in r["parts"]), key=lambda p: p["part"])
    assert [p["part"] for p in parts] == list(range(job.num_parts))
    cg = job.cg
    assert sum(p["num_owned"] for p in parts) == cg.num_nodes and sum(p["num_edges"] for p in parts) == cg.num_edges
    num_cut = sum(p.pop("num_cut") for p in parts)
    graph = {"source": os.fspath(chunks), "input_format": "chunked", "num_nodes": cg.num_nodes, "num_edges": cg.num_edges}
    return PartitionManifest(
        graph=graph, storage="binary", created_by=f"gpart {__version__}", method=method, params=params, halo=job.halo,
        book=book_json, node_data=_like(job.node_layout), edge_data=_like(job.edge_layout), parts=parts,
        stats=partition_stats(parts, cg.num_nodes, cg.num_edges, num_cut)).to_json()


def _like(layout: dict) -> dict[str, np.ndarray]:
    """Empty arrays of each data array's dtype and row shape (what the manifest describes)."""
    return {k: np.empty((0, *s), dtype=d) for k, (d, s) in layout.items()}


# --------------------------------------------------------------------------- book


def _book(job: PartitionJob, run: MethodRun, stage: Path) -> tuple[PartitionBook, dict]:
    comm, cg = job.comm, job.cg
    if not run.method.needs_edges:
        error, result = None, None
        try:  # every rank computes the same book from N (and the same seed or file)
            empty = np.zeros(0, dtype=np.int64)
            graph = Graph(cg.num_nodes, empty, empty, source=os.fspath(cg.directory), input_format="chunked")
            result = run.method.assign(graph, job.num_parts, run.options, run.context)
        except GpartError as exc:
            error = exc
        comm.agree(error, "assigning nodes")
        return result.book, result.params
    return gathered_book(job, run.method, run.options, run.context, stage)


# --------------------------------------------------------------------------- shuffles


def _shuffle_edges(job: PartitionJob, book: PartitionBook, directory: Path) -> PartFiles:
    world = job.comm.world
    rounds, blocks, row_bytes = edge_blocks(job, lambda dst: np.asarray(book.owner(dst)) % world, list(job.edge_layout))
    files = PartFiles(directory, "edges", job.my_parts(), row_bytes)

    def deliver(rows: np.ndarray) -> None:
        files.append_grouped(rows, np.asarray(book.owner(column(rows, ID_BYTES, np.int64))), job.num_parts)

    job.rounds["edges"] = shuffle(job.comm, blocks, rounds, row_bytes, deliver, "shuffling edges")
    return files


def _shuffle_nodes(job: PartitionJob, book: PartitionBook, directory: Path) -> PartFiles:
    world = job.comm.world
    rounds, blocks, row_bytes = node_blocks(job, lambda ids: np.asarray(book.owner(ids)) % world, list(job.node_layout))
    files = PartFiles(directory, "nodes", job.my_parts(), row_bytes)

    def deliver(rows: np.ndarray) -> None:
        files.append_grouped(rows, np.asarray(book.owner(column(rows, 0, np.int64))), job.num_parts)

    job.rounds["nodes"] = shuffle(job.comm, blocks, rounds, row_bytes, deliver, "shuffling node data")
    return files


# --------------------------------------------------------------------------- writing


def _write_node_data(job: PartitionJob, writer: PartitionWriter, entry: dict[str, Any], nodes: AnyNodeOrder, node_files: PartFiles,
                     halo_files: Optional[PartFiles]) -> None:
    """Partition `entry["part"]`'s node data: its owned rows in local order, then (halo 1) its halo rows."""
    part = entry["part"]
    node_rows = node_files.read(part)
    owned = nodes.owned(part)
    assert node_rows.shape[0] == (owned.shape[0] if job.node_layout else 0), "node rows do not cover the owned nodes"
    if halo_files is not None:
        halo_rows = halo_files.read(part)
        assert halo_rows.shape[0] == entry["num_halo"], "halo rows do not cover the halo"
        node_rows = np.concatenate([node_rows, halo_rows])
    # owned nodes ascend (local order), then halo nodes ascend: one sort by id gives both runs
    # because every halo id is placed after the owned ones by its key
    key = column(node_rows, 0, np.int64).copy()
    key[owned.shape[0]:] += np.int64(job.cg.num_nodes)
    node_rows, at = take_rows(node_rows, np.argsort(key, kind="stable")), ID_BYTES
    for name, (dtype, shape) in job.node_layout.items():
        values = column(node_rows, at, dtype, shape)
        if name == "train_mask":  # owned rows only, as gpart.pipeline.partition counts
            entry["num_train"] = int(np.count_nonzero(values[:owned.shape[0]].astype(bool)))
        entry["arrays"][data_key("node", name)] = writer.write_data(part, "node", name, values, values.shape[0], [values])
        at += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
