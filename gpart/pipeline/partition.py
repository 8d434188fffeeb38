"""From a graph to per-partition files, in one readable pass (SPEC.md section 4).

    read (formats.readers) -> assign (the method, gpart.partition_methods) -> order edges by destination
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

import os
from typing import Any, Optional, Union

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.base.memory import default_max_memory, parse_memory_size, return_large_frees
from gpart.base.progress import Progress, StageTimer, or_null
from gpart.formats.files.commit import staged_output
from gpart.formats.files.scratch import ScratchDir, checked_parent
from gpart.formats.input.readers import read_graph
from gpart.formats.input.typed import is_typed_npz
from gpart.partition_methods.memory import check_assign_memory
from gpart.partition_methods.method import MethodContext
from gpart.partition_methods.registry import bounded_method_names, method_options, resolve_method
from gpart.pipeline.memory_plan import check_node_memory
from gpart.pipeline.request import PartitionRequest, VerboseLog
from gpart.pipeline.reverse_edges import reverse_scratch_dir, with_reverse_edges
from gpart.pipeline.typed import partition_typed
from gpart.pipeline.write_plan import DataSpec, PathLike, ResultPlan
from gpart.pipeline.write_result import check_graph, check_options, write_within


def partition_graph(
    input: Union[PathLike, Graph],
    out_dir: PathLike,
    num_parts: int,
    method: Optional[str] = None,
    *,
    storage: str = "binary",
    halo: int = 0,
    force: bool = False,
    max_memory: Union[str, int, None] = None,
    node_data: DataSpec = None,
    edge_data: DataSpec = None,
    progress: Optional[Progress] = None,
    verbose_log: VerboseLog = None,
    add_reverse: bool = False,
    **method_params: Any,
) -> dict[str, Any]:
    """Partition a graph (a path or a Graph) into `num_parts` partitions under `out_dir`.

    `method` is a registered method (gpart.partition_methods.registry:
    balanced, metis, kaminpar, stream, remainder, range, random) or None for
    the default (balanced, or metis when a METIS-only option is given, as for
    `gpart partition`: registry.resolve_method); `method_params` are its
    options (`assignment=` a file or array computed elsewhere replaces it). `max_memory` (bytes or '2GB'; default: a fraction of
    the available RAM, gpart.pipeline.memory_plan): past it, edges are bucketed on disk
    instead of sorted in memory, and methods that need the whole adjacency
    stop up front. `node_data`/`edge_data` add NAME -> .npy arrays to an input
    path. `add_reverse` stores every edge in both directions (gpart.pipeline.reverse_edges,
    SPEC.md 4.7). Returns the manifest that was written.

    The keywords are the library's documented API (as sqlite-utils' table methods take theirs): they are
    packed at once into a gpart.pipeline.request.PartitionRequest, which every step below takes
    (`partition_request`).
    """
    scratch_dir = method_params.pop("scratch_dir", None)
    request = PartitionRequest(num_parts, method, storage=storage, halo=halo, force=force, max_memory=max_memory,
                               node_data=node_data, edge_data=edge_data, progress=progress, verbose_log=verbose_log,
                               add_reverse=add_reverse, scratch_dir=scratch_dir, method_params=method_params)
    return partition_request(input, out_dir, request)


def partition_request(input: Union[PathLike, Graph], out_dir: PathLike, request: PartitionRequest) -> dict[str, Any]:
    """partition_graph with its keywords packed: typed inputs to gpart.pipeline.typed, the rest here."""
    check_options(request.storage, request.halo)
    return_large_frees()
    if not isinstance(input, Graph) and is_typed_npz(input):  # typed graphs: SPEC.md section 8, gpart.pipeline.typed
        return partition_typed(input, out_dir, request)
    limit = parse_memory_size(request.max_memory) or default_max_memory()
    timer = StageTimer(request.verbose_log)
    progress, num_parts, method_params = request.progress, request.num_parts, request.method_params
    source = None if isinstance(input, Graph) else input
    inputs = _input_paths(source, request.node_data, request.edge_data, method_params.get("assignment"))
    if num_parts < 1:
        raise InputError(source, f"number of parts must be at least 1, got {num_parts}")
    where = input.source if isinstance(input, Graph) else os.fspath(input)
    chosen = resolve_method(request.method, method_params, where)
    options = method_options(chosen, method_params, where)  # before any work: a bad option stops here
    spill = None if request.scratch_dir is None else checked_parent(request.scratch_dir)
    with staged_output(out_dir, force=request.force, inputs=inputs) as stage, \
            reverse_scratch_dir(request.add_reverse, stage, spill) as scratch, \
            ScratchDir(stage.parent if spill is None else spill, prefix=f"{stage.name}-scratch-") as input_scratch:
        with timer("read graph"):  # a chunked input's pieces are joined in input_scratch, not in memory
            graph = _load_graph(input, request.node_data, request.edge_data, input_scratch)
        check_graph(graph, num_parts, source)
        check_node_memory(chosen.name, graph.num_nodes, limit, graph.source, chosen.book_bytes_per_node)
        reverse = None
        if request.add_reverse:
            with timer("add reverse edges"), or_null(progress).stage("add reverse edges"):
                graph, reverse = with_reverse_edges(graph, scratch, limit)
        check_assign_memory(chosen, graph.num_edges, limit, graph.source, bounded_method_names(), graph.num_nodes)
        # the method may use `limit` (balanced skips a METIS fallback that cannot fit) and spills next to the output, not to /tmp
        context = MethodContext(or_null(progress), limit, stage.parent if spill is None else spill)
        with timer("assign"):
            assignment = chosen.assign(graph, num_parts, options, context)
        plan = ResultPlan(assignment.method, assignment.params, request.storage, request.halo, request.node_data,
                          request.edge_data, reverse=reverse)
        manifest = write_within(limit, graph, assignment.book, stage, plan, progress, timer, spill)
    return manifest


def _input_paths(source, node_data: DataSpec, edge_data: DataSpec, assignment: Any) -> list[PathLike]:
    paths = [] if source is None else [source]
    for spec in (node_data or {}, edge_data or {}):
        paths += [str(p).split(".npz:")[0] for p in spec.values()]
    if isinstance(assignment, (str, os.PathLike)):
        paths.append(assignment)
    return paths


def _load_graph(input: Union[PathLike, Graph], node_data: DataSpec, edge_data: DataSpec, spill: ScratchDir) -> Graph:
    if isinstance(input, Graph):
        if node_data or edge_data:
            raise ValueError("node_data/edge_data name files to add to an input path; put arrays into the Graph instead")
        return input
    return read_graph(input, node_data=node_data, edge_data=edge_data, spill=spill)
