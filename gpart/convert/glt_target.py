"""`gpart convert --to glt`: graphlearn_torch's partition layout (SPEC.md 7.3), loaded with `DistDataset(edge_dir="in")`.

GLT's `by_dst` edge assignment stores each edge with the partition that owns
its destination, as gpart does, so ids stay gpart's. GLT has one slot per
kind of data: one node feature table, one edge feature table and whole-graph
labels; other arrays are listed as not converted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from gpart.base.errors import InputError
from gpart.base.progress import Progress
from gpart.convert.partition_pass import scratch_array, write_in_global_ids
from gpart.convert.target import ConvertOptions, ConvertPlan, ConvertTarget, FileEntry, PathLike
from gpart.formats import glt
from gpart.formats.partition_reader import PartitionReader


class GltTarget(ConvertTarget):
    """--node-feat (default feat), --edge-feat (default edge_feat) and --label (default label) into GLT's slots."""

    name = "glt"

    def plan(self, reader: PartitionReader, options: ConvertOptions, where: PathLike) -> ConvertPlan:
        nodes, edges = reader.node_data_names(), reader.edge_data_names()
        nf = _pick(options.node_feat, "feat", nodes, "node", where)
        ef = _pick(options.edge_feat, "edge_feat", edges, "edge", where)
        lb = _pick(options.label, "label", nodes, "node", where)
        if nf is not None and nf == lb:
            raise InputError(where, f"node array {nf!r} cannot be both the features and the labels")
        return ConvertPlan(
            node={nf: glt.FEATS} if nf else {},
            edge={ef: glt.FEATS} if ef else {},
            label={lb: lb} if lb else None,
            skipped=[n for n in nodes if n not in (nf, lb)] + [e for e in edges if e != ef],
        )

    def write(self, reader: PartitionReader, plan: ConvertPlan, stage: Path, progress: Progress, options: ConvertOptions) -> list[FileEntry]:
        files, node_map, edge_map = write_in_global_ids(reader, plan, stage, progress, "converting to glt", glt.write_partition)
        files += glt.write_maps(stage, node_map, edge_map) + [glt.write_meta(stage, reader.num_parts)]
        if plan.label:
            (name,) = plan.label
            files.append(glt.write_labels(stage, _labels(reader, name, stage), reader.manifest["node_data"][name]["dtype"]))
        return files


def _pick(given: Optional[str], default: str, names: list[str], what: str, where: PathLike) -> Optional[str]:
    """The array for one of GLT's slots: the one asked for (which must exist), else `default` where the result has it."""
    if given is not None and given not in names:
        raise InputError(where, f"has no {what} array {given!r} (arrays: {', '.join(names) or 'none'})")
    return given if given is not None else (default if default in names else None)


def _labels(reader: PartitionReader, name: str, stage: Path) -> np.ndarray:
    """Node array `name` over all nodes in global order (GLT's whole-graph labels), from each partition's owned rows."""
    spec = reader.manifest["node_data"][name]
    labels = scratch_array(stage, "labels", (reader.num_nodes, *spec["row_shape"]), reader.array(0, f"node_data/{name}").dtype)
    for p in range(reader.num_parts):
        owned = np.asarray(reader.array(p, "node_ids")[: reader.part_info(p)["num_owned"]], dtype=np.int64)
        labels[owned] = reader.array(p, f"node_data/{name}")
    return labels
