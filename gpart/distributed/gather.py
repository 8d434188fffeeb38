"""Books of the methods that read the edges (needs_edges: balanced, metis, kaminpar, stream) in a distributed run.

Every rank sends its edges (and the node arrays
the method reads: its options' node_arrays, train_mask and --balance arrays)
to rank 0 in bounded rounds (each message --max-message, or less where rank
0's budget calls for it: rank 0 receives from every rank at once), rank 0
runs the single-machine method on the
graph exactly as a single-machine run would read it, and broadcasts the owner
array in bounded pieces and the parameters as JSON. Every rank then builds
the same ArrayBook.

Where the method takes its compressed path on rank 0 (the default and
kaminpar past the in-memory path's memory, gpart.partition_methods.memory),
rank 0 writes the edges into two scratch files (src and dst, 16 bytes per
edge on disk, not in RAM), run by run, each run written back and dropped
from the page cache as it lands, maps them read-only, and the method builds
its adjacency on disk from them as from a single machine's mapped input
(whose files drop their pages the same way): rank 0's peak is then
the compressed path's (its node arrays and KaMinPar's compressed graph),
every other rank's its own share, and the book the single-machine run's.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Optional

import numpy as np

from gpart.base.errors import GpartError
from gpart.base.graph import Graph
from gpart.base.memory import default_max_memory
from gpart.bytes.sink import pwrite_all
from gpart.bytes.written_pages import drop_written
from gpart.distributed.partition_job import PartitionJob, edge_blocks, node_blocks, round_bytes
from gpart.distributed.shuffle import column, shuffle
from gpart.engines.symmetric_file import least_scratch_bytes
from gpart.formats.files.scratch import ScratchDir, check_free_disk
from gpart.formats.partition.book import ArrayBook, PartitionBook
from gpart.partition_methods.memory import check_assign_memory, runs_compressed
from gpart.partition_methods.method import MethodContext, PartitionMethod
from gpart.partition_methods.options import MethodOptions
from gpart.partition_methods.registry import bounded_method_names

MAX_RUNS = 64  # runs of consecutive edge ids a round's rows are written in as they come


def gathered_book(job: PartitionJob, method: PartitionMethod, options: MethodOptions, context: MethodContext,
                  stage: Path) -> tuple[PartitionBook, dict]:
    """Gather the structure on rank 0, assign there, broadcast the assignment; (book, params) on every rank.

    `context.max_memory` None: rank 0's default; `context.scratch_dir` None: beside the output."""
    comm, cg = job.comm, job.cg
    root = comm.rank == 0
    limit = (context.max_memory or default_max_memory()) if root else 0
    scratch_parent = stage.parent if context.scratch_dir is None else context.scratch_dir
    error = None
    if root:  # before any edge moves: the method must fit rank 0, in memory or compressed
        try:
            check_assign_memory(method, cg.num_edges, limit, os.fspath(cg.directory), bounded_method_names(), cg.num_nodes)
            if runs_compressed(method, cg.num_nodes, cg.num_edges, limit):  # the gathered edges stay on disk beside it
                check_free_disk(scratch_parent, 16 * cg.num_edges + least_scratch_bytes(cg.num_nodes, cg.num_edges),
                                "rank 0's gathered edges and compressed adjacency")
        except GpartError as exc:
            error = exc
    comm.agree(error, f"method {method.name!r} on rank 0")
    on_disk = root and runs_compressed(method, cg.num_nodes, cg.num_edges, limit)
    gather_job = replace(job, max_message=round_bytes(comm, job.max_message, limit))  # rank 0 receives from every rank
    with ScratchDir(scratch_parent) if on_disk else contextlib.nullcontext() as scratch:
        edges = _GatheredEdges(cg.num_edges if root else 0, scratch)
        try:
            return _gathered(gather_job, method, options, replace(context, max_memory=limit or None), stage, edges)
        finally:
            edges.close()


class _GatheredEdges:
    """Rank 0's src and dst of the gathered graph: arrays in memory, or (`scratch`) two files written run by run,
    each run's pages written back and dropped as it lands (a memory cgroup counts dirty pages, and a mapped
    array's writes would stay dirty until the method ends), then mapped read-only."""

    def __init__(self, num_edges: int, scratch: Optional[ScratchDir]):
        self.num_edges, self.paths, self.fds = num_edges, [], []
        self.src, self.dst = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        if scratch is None:
            self.src, self.dst = np.empty(num_edges, dtype=np.int64), np.empty(num_edges, dtype=np.int64)
            return
        for name in ("gathered-src", "gathered-dst"):
            self.paths.append(scratch.file(name, 8 * num_edges))
            self.fds.append(os.open(self.paths[-1], os.O_RDWR))

    def place(self, eid: np.ndarray, src: np.ndarray, dst: np.ndarray) -> None:
        """Edges `eid` have sources `src` and destinations `dst`."""
        if not self.fds:
            self.src[eid], self.dst[eid] = src, dst
            return
        columns = (src, dst)
        cuts = np.flatnonzero(np.diff(eid) != 1) + 1  # runs of consecutive edge ids: one write each
        if cuts.shape[0] > MAX_RUNS:  # the blocks of a round arrive as a few runs; anything else is sorted first
            order = np.argsort(eid, kind="stable")
            eid, columns = eid[order], (src[order], dst[order])
            cuts = np.flatnonzero(np.diff(eid) != 1) + 1
        for a, b in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [eid.shape[0]]])):
            for fd, values in zip(self.fds, columns):
                pwrite_all(fd, values[a:b], 8 * int(eid[a]))
                drop_written(fd, 8 * int(eid[a]), 8 * int(b - a))

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) once every edge is placed; this object lets go of them (and of its files)."""
        if self.paths:
            self.close()
            self.src, self.dst = (np.memmap(p, dtype=np.int64, mode="r", shape=(self.num_edges,)) if self.num_edges
                                  else np.empty(0, dtype=np.int64) for p in self.paths)
        got, (self.src, self.dst) = (self.src, self.dst), (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
        return got

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def _gathered(job: PartitionJob, method: PartitionMethod, options: MethodOptions, context: MethodContext, stage: Path,
              edges: _GatheredEdges) -> tuple[PartitionBook, dict]:
    """gathered_book once rank 0's edge arrays are made."""
    comm, cg = job.comm, job.cg
    root = comm.rank == 0
    rounds, blocks, row_bytes = edge_blocks(job, lambda d: np.zeros(d.shape[0], dtype=np.int64), [])

    def place_edges(rows: np.ndarray) -> None:
        edges.place(column(rows, 16, np.int64), column(rows, 0, np.int64), column(rows, 8, np.int64))

    job.rounds["gather edges"] = shuffle(comm, blocks, rounds, row_bytes, place_edges, "gathering edges on rank 0")
    src, dst = edges.arrays()
    names = [n for n in job.node_layout if n in options.node_arrays()]
    node_data = {n: np.empty((cg.num_nodes if root else 0, *job.node_layout[n][1]), dtype=job.node_layout[n][0]) for n in names}
    at = {}
    offset = 8
    for n in names:
        at[n] = offset
        offset += int(np.prod(job.node_layout[n][1], dtype=np.int64)) * job.node_layout[n][0].itemsize
    rounds, blocks, row_bytes = node_blocks(job, lambda ids: np.zeros(ids.shape[0], dtype=np.int64), names)

    def place_nodes(rows: np.ndarray) -> None:
        ids = column(rows, 0, np.int64)
        for n in names:
            node_data[n][ids] = column(rows, at[n], job.node_layout[n][0], job.node_layout[n][1])

    job.rounds["gather nodes"] = shuffle(comm, blocks, rounds, row_bytes, place_nodes, "gathering node arrays on rank 0")
    error, owner, params = None, None, b""
    if root:
        try:
            owner, params = _assign_on_root(cg, src, dst, node_data, job.num_parts, method, options, context, stage)
        except GpartError as exc:
            error = exc
        del src, dst, node_data
    comm.agree(error, f"method {method.name!r} on rank 0")
    owner = comm.broadcast_array(owner, cg.num_nodes, np.int32, job.max_message)
    params_json = json.loads(comm.broadcast_bytes(params if root else None))
    return ArrayBook(owner, job.num_parts), params_json


def _assign_on_root(cg, src, dst, node_data, num_parts, method: PartitionMethod, options: MethodOptions, context: MethodContext,
                    stage: Path) -> tuple[np.ndarray, bytes]:
    graph = Graph(cg.num_nodes, src, dst, node_data, source=os.fspath(cg.directory), input_format="chunked")
    limit = context.max_memory or default_max_memory()
    check_assign_memory(method, graph.num_edges, limit, graph.source, bounded_method_names(), graph.num_nodes)
    context = replace(context, max_memory=limit, scratch_dir=stage.parent if context.scratch_dir is None else context.scratch_dir)
    result = method.assign(graph, num_parts, options, context)
    return np.ascontiguousarray(result.book.owner_array, dtype=np.int32), json.dumps(result.params).encode()
