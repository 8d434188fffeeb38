"""`gpart convert --to glt`: graphlearn_torch's partition layout (SPEC.md 7.3, typed 7.7), loaded with
`DistDataset(edge_dir="in")`.

GLT's `by_dst` edge assignment stores each edge with the partition that owns
its destination, as gpart does, so ids stay gpart's (typed results: typed
ids). GLT has one slot per kind of data, per type: one node feature table,
one edge feature table and whole-graph labels; other arrays are listed as
not converted. One writer for both: a homogeneous result is the one-type
case, written without type folders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from gpart.base.errors import InputError
from gpart.base.progress import Progress
from gpart.convert.partition_pass import PartitionEdges, data_rows, pass_in_global_ids, scratch_array
from gpart.convert.target import ConvertOptions, ConvertPlan, ConvertTarget, FileEntry, PathLike
from gpart.convert.typed_partition import per_type, type_starts, typed_partition
from gpart.formats.foreign import glt
from gpart.formats.foreign.pyg_typed import check_edge_types
from gpart.formats.partition.reader import PartitionReader
from gpart.formats.partition.typed import HeteroMeta, etype_key, node_data_key


class GltTarget(ConvertTarget):
    """--node-feat (default feat), --edge-feat (default edge_feat) and --label (default label) into GLT's slots."""

    name = "glt"
    accepts_typed = True

    def plan(self, reader: PartitionReader, options: ConvertOptions, where: PathLike) -> ConvertPlan:
        nodes, edges = reader.node_data_names(), reader.edge_data_names()
        nf, ef, lb = _slots(options, [nodes], [edges], where)
        return ConvertPlan(
            node={nf: glt.FEATS} if nf in nodes else {},
            edge={ef: glt.FEATS} if ef in edges else {},
            label={lb: lb} if lb in nodes else None,
            skipped=[n for n in nodes if n not in (nf, lb)] + [e for e in edges if e != ef],
        )

    def plan_typed(self, meta: HeteroMeta, options: ConvertOptions, where: PathLike) -> ConvertPlan:
        check_edge_types(meta.edge_types, where, shared="GLT's folders and edge_pb file {}")
        node_names = [list(meta.node_data[t]) for t in meta.node_types]
        edge_names = [list(meta.edge_data[e]) for e in meta.edge_types]
        nf, ef, lb = _slots(options, node_names, edge_names, where)
        return ConvertPlan(
            node={t: ({nf: glt.FEATS} if nf in names else {}) for t, names in zip(meta.node_types, node_names)},
            edge={etype_key(e): ({ef: glt.FEATS} if ef in names else {}) for e, names in zip(meta.edge_types, edge_names)},
            label={t: lb for t, names in zip(meta.node_types, node_names) if lb in names} or None,
            skipped=[f"{t}/{n}" for t, names in zip(meta.node_types, node_names) for n in names if n not in (nf, lb)]
            + [f"{etype_key(e)}/{n}" for e, names in zip(meta.edge_types, edge_names) for n in names if n != ef],
        )

    def write(self, reader: PartitionReader, plan: ConvertPlan, stage: Path, progress: Progress, options: ConvertOptions) -> list[FileEntry]:
        _refuse_empty(reader, [("", [reader.part_info(p)["num_edges"] for p in range(reader.num_parts)])])

        def write_part(p: int, edges: PartitionEdges) -> list[FileEntry]:
            nodes, kept = data_rows(reader, p, "node", plan.node), data_rows(reader, p, "edge", plan.edge)
            return glt.write_partition(stage, p, graphs={"": (edges.row, edges.col, edges.edge_ids)},
                                       node_feats={"": (edges.owned, *nodes[glt.FEATS])} if nodes else {},
                                       edge_feats={"": (edges.edge_ids, *kept[glt.FEATS])} if kept else {})

        files, node_map, edge_map = pass_in_global_ids(reader, stage, progress, "converting to glt", write_part)
        files += glt.write_maps(stage, {"": node_map}, {"": edge_map}) + [glt.write_meta(stage, reader.num_parts)]
        if plan.label:
            (name,) = plan.label
            spec = reader.manifest["node_data"][name]
            files.append(glt.write_labels(stage, _labels(reader, stage, f"node_data/{name}", "", reader.num_nodes, 0), spec["dtype"]))
        return files

    def write_typed(self, reader: PartitionReader, plan: ConvertPlan, stage: Path, progress: Progress, options: ConvertOptions) -> list[FileEntry]:
        meta = reader.hetero
        starts = [type_starts(reader, p)[1] for p in range(reader.num_parts)]
        _refuse_empty(reader, [(f" of type {etype_key(e)!r}", [int(s[r + 1] - s[r]) for s in starts]) for r, e in enumerate(meta.edge_types)])

        def write_part(p: int, erased: PartitionEdges) -> list[FileEntry]:
            nodes, edges = typed_partition(reader, plan, p, erased)
            return glt.write_partition(
                stage, p, graphs={glt.type_dir(e): (src, dst, eid) for e, (eid, src, dst, _, _) in edges.items()},
                node_feats={t: (ids, *rows[glt.FEATS]) for t, (ids, rows) in nodes.items() if rows and ids.size},
                edge_feats={glt.type_dir(e): (eid, *rows[glt.FEATS]) for e, (eid, _, _, _, rows) in edges.items() if rows and eid.size})

        files, node_map, edge_map = pass_in_global_ids(reader, stage, progress, "converting to glt (typed)", write_part)
        node_maps, edge_maps = per_type(meta, node_map, edge_map)
        files += glt.write_maps(stage, node_maps, {glt.type_dir(e): m for e, m in edge_maps.items()})
        files.append(glt.write_meta(stage, reader.num_parts, meta.node_types, meta.edge_types))
        for ntype, name in (plan.label or {}).items():
            t = meta.node_types.index(ntype)
            labels = _labels(reader, stage, node_data_key(ntype, name), ntype, meta.num_nodes[t], int(meta.node_offsets[t]), t)
            files.append(glt.write_labels(stage, labels, meta.node_data[ntype][name][0], ntype))
        return files


def _refuse_empty(reader: PartitionReader, counts: list[tuple[str, list[int]]]) -> None:
    """GLT 0.2.4's loader builds each edge type's CSC from its partition's edges and fails on none (row.max() of an
    empty tensor), as it would on its own partitioners' files: refuse such a result with one line, before writing."""
    for what, per_part in counts:
        for p, n in enumerate(per_part):
            if n == 0:
                raise InputError(reader.directory, f"partition {p} stores no edges{what}, which GLT 0.2.4's DistDataset.load cannot "
                                                   "load (it fails on an empty edge list); partition into fewer parts to convert --to glt")


def _slots(options: ConvertOptions, node_names: list[list[str]], edge_names: list[list[str]], where: PathLike) -> tuple[str, str, str]:
    """The arrays for GLT's slots (node features, edge features, labels): the ones asked for, which some (type's)
    arrays must hold, else the defaults feat, edge_feat, label."""
    nf = _pick(options.node_feat, "feat", node_names, "node", where)
    ef = _pick(options.edge_feat, "edge_feat", edge_names, "edge", where)
    lb = _pick(options.label, "label", node_names, "node", where)
    if nf == lb and any(nf in names for names in node_names):
        raise InputError(where, f"node array {nf!r} cannot be both the features and the labels")
    return nf, ef, lb


def _pick(given: Optional[str], default: str, names: list[list[str]], what: str, where: PathLike) -> str:
    if given is not None and not any(given in n for n in names):
        have = sorted({x for n in names for x in n})
        raise InputError(where, f"has no {what} array {given!r} (arrays: {', '.join(have) or 'none'})")
    return given if given is not None else default


def _labels(reader: PartitionReader, stage: Path, key: str, ntype: str, count: int, offset: int, t: Optional[int] = None) -> np.ndarray:
    """Node array `key` over all `count` nodes (of one type) in (typed) id order, GLT's whole-graph labels, from each
    partition's owned rows (a typed array: the rows of the type's owned nodes, which come first)."""
    spec = reader.array(0, key)
    labels = scratch_array(stage, f"labels_{ntype}", (count, *spec.shape[1:]), spec.dtype)
    for p in range(reader.num_parts):
        node_ids = reader.array(p, "node_ids")
        if t is None:
            lo, hi = 0, reader.part_info(p)["num_owned"]
        else:
            starts = type_starts(reader, p)[0]
            lo, hi = int(starts[t]), int(starts[t + 1])
        owned = np.asarray(node_ids[lo:hi], dtype=np.int64) - offset
        labels[owned] = reader.array(p, key)[: hi - lo]
    return labels
