"""`gpart convert`: a gpart partition result in another system's partition layout (SPEC.md section 7).

Both gpart and the targets store each edge with the partition that owns its
destination (PyG's Partitioner builds CSC clusters; GLT's `by_dst` edge
assignment; DGL's inner edges), so a gpart result maps onto them without
moving an edge. Each target is one module implementing ConvertTarget
(gpart.convert.target), registered in gpart.convert.registry: `pyg`
(pyg_target, typed results too), `glt` (glt_target), `dgl` (dgl_target,
needs DGL importable). All of them read the result one partition at a time
(gpart.convert.partition_pass).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from gpart.base.errors import InputError
from gpart.base.progress import Progress, or_null
from gpart.base.version import __version__
from gpart.convert.partition_pass import refuse_halo_rows, remove_scratch
from gpart.convert.registry import get_target, typed_target_names
from gpart.convert.target import ConvertOptions, ConvertPlan, FileEntry, PathLike
from gpart.formats.files.commit import staged_output
from gpart.formats.files.manifest import write_manifest
from gpart.formats.partition.reader import PartitionReader

CONVERT_FORMAT = "gpart.convert"


@dataclass(frozen=True)
class ConvertRequest:
    """One conversion: the target layout (`to`, a registered target), the target's options, whether an
    existing output is replaced, and where progress goes."""

    to: str
    options: ConvertOptions
    force: bool = False
    progress: Optional[Progress] = None


def convert_partitions(
    parts_dir: PathLike,
    out_dir: PathLike,
    *,
    to: str,
    rename: Optional[Mapping[str, str]] = None,
    node_feat: Optional[str] = None,
    edge_feat: Optional[str] = None,
    label: Optional[str] = None,
    graph_name: str = "graph",
    force: bool = False,
    progress: Optional[Progress] = None,
) -> dict[str, Any]:
    """Write the partition result `parts_dir` in `to`'s layout to `out_dir`; return the summary written as its manifest.

    pyg: every node and edge array, under `rename` or PyG's default keys (feat=x, label=y, edge_feat=edge_attr) or its own name.
    dgl: every node and edge array, under `rename` or its own name; the part config is `<graph_name>.json`.
    glt: one node feature table (`node_feat`, default `feat`), one edge feature
    table (`edge_feat`, default `edge_feat`) and whole-graph labels (`label`,
    default `label`), the slots GLT has; other arrays are listed as not converted.

    The keywords are the library's documented API (as sqlite-utils' table methods take theirs): they are
    packed at once into a ConvertRequest, which every step below takes (`convert_request`).
    """
    options = ConvertOptions(rename=dict(rename or {}), node_feat=node_feat, edge_feat=edge_feat, label=label, graph_name=graph_name)
    return convert_request(parts_dir, out_dir, ConvertRequest(to, options, force, progress))


def convert_request(parts_dir: PathLike, out_dir: PathLike, request: ConvertRequest) -> dict[str, Any]:
    """convert_partitions with its keywords packed."""
    to, options = request.to, request.options
    target = get_target(to)
    target.check_options(options)
    reader = PartitionReader(parts_dir)
    typed = reader.hetero is not None
    if typed and not target.accepts_typed:  # SPEC.md 8.5
        also = " or ".join(f"--to {name}" for name in typed_target_names())
        raise InputError(parts_dir, f"is a typed (heterogeneous) result; convert --to {to} handles homogeneous results only (typed ones convert {also})")
    target.require()  # after the typed check: a typed result is refused whether or not the target's package is installed
    if typed:
        plan = target.plan_typed(reader.hetero, options, parts_dir)
    else:
        refuse_halo_rows(reader, to, parts_dir)
        plan = target.plan(reader, options, parts_dir)
    with staged_output(out_dir, force=request.force, inputs=[parts_dir]) as stage:
        write = target.write_typed if typed else target.write
        files = write(reader, plan, stage, or_null(request.progress), options)
        remove_scratch(stage)
        summary = _summary(reader, to, parts_dir, plan, files)
        write_manifest(stage, summary)
    return summary


def _summary(reader: PartitionReader, to: str, parts_dir: PathLike, plan: ConvertPlan, files: list[FileEntry]) -> dict[str, Any]:
    """The conversion's own manifest: what was converted from where, and the files written."""
    return {
        "format": CONVERT_FORMAT,
        "version": 1,
        "created_by": f"gpart {__version__}",
        "target": to,
        "source": os.fspath(parts_dir),
        "num_parts": reader.num_parts,
        "num_nodes": reader.num_nodes,
        "num_edges": reader.num_edges,
        "node_data": plan.node,
        "edge_data": plan.edge,
        "labels": plan.label,
        "not_converted": plan.skipped,
        "hetero": reader.hetero is not None,
        "files": files,
    }
