"""`gpart convert`: a gpart partition result in another system's partition layout (SPEC.md section 7).

Both gpart and the targets store each edge with the partition that owns its
destination (PyG's Partitioner builds CSC clusters; GLT's `by_dst` edge
assignment), so a gpart result maps onto them without moving an edge:

- `pyg`: torch_geometric.distributed's layout (gpart.formats.pyg);
- `glt`: graphlearn_torch's layout (gpart.formats.glt), loaded with
  `DistDataset(edge_dir="in")`;
- `dgl`: DGL's layout (gpart.formats.dgl, needs DGL importable). DGL wants each
  partition's nodes and edges to be one contiguous id range, so nodes are
  relabelled partition by partition (new id = the partition's offset + the
  node's local id, owned nodes in ascending input id) and edges likewise in
  CSC order; `orig_nids` / `orig_eids` map the new ids back, as DGL's
  `partition_graph(return_mapping=True)` does (gpart.convert_dgl).

Typed (heterogeneous) results convert to PyG only, in PyG's HeteroData layout
(gpart.convert_hetero, gpart.formats.pyg_hetero).

One pass over the partitions: each partition's CSC over local ids becomes
global `row`/`col` arrays (`node_ids[indices]`, owned ids repeated by column
length), its node and edge data rows are handed to the writer as memory maps,
and the node and edge maps fill scratch memory maps in the staging directory.
Memory holds one partition's edge arrays at a time, not the graph.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import numpy as np

from gpart.base.version import __version__
from gpart.base.errors import InputError
from gpart.formats import dgl, glt, pyg
from gpart.formats.commit import staged_output
from gpart.formats.filelist import check_export_name
from gpart.formats.manifest import write_manifest
from gpart.formats.partition_reader import PartitionReader
from gpart.convert_hetero import typed_plan, write_pyg_hetero
from gpart.base.progress import or_null

PathLike = Union[str, "os.PathLike[str]"]

TARGETS = ("pyg", "glt", "dgl")
CONVERT_FORMAT = "gpart.convert"
# gpart data array -> the key PyG's loaders look up (x: node features, y: labels, edge_attr: edge features)
PYG_DEFAULT_KEYS = {"feat": "x", "label": "y", "edge_feat": "edge_attr"}


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
    progress=None,
) -> dict[str, Any]:
    """Write the partition result `parts_dir` in `to`'s layout to `out_dir`; return the summary written as its manifest.

    pyg: every node and edge array, under `rename` or PYG_DEFAULT_KEYS or its own name.
    dgl: every node and edge array, under `rename` or its own name; the part config is `<graph_name>.json`.
    glt: one node feature table (`node_feat`, default `feat`), one edge feature
    table (`edge_feat`, default `edge_feat`) and whole-graph labels (`label`,
    default `label`), the slots GLT has; other arrays are listed as not converted.
    """
    if to not in TARGETS:
        raise InputError(None, f"unknown target {to!r} (expected one of {', '.join(TARGETS)})")
    if to == "dgl":
        check_export_name(graph_name)
    reader = PartitionReader(parts_dir)
    if reader.hetero is not None and to != "pyg":  # SPEC.md 8.5: GLT's and DGL's typed layouts are not written
        raise InputError(parts_dir, f"is a typed (heterogeneous) result; convert --to {to} handles homogeneous results only (typed ones convert --to pyg)")
    if to == "dgl":  # after the typed check: a typed result is refused whether or not DGL is installed
        dgl.require_dgl()
    if reader.hetero is not None:
        plan = typed_plan(reader.hetero, rename or {}, PYG_DEFAULT_KEYS, parts_dir)
    else:
        plan = _plan(reader, to, parts_dir, rename, node_feat, edge_feat, label)
    progress = or_null(progress)
    with staged_output(out_dir, force=force, inputs=[parts_dir]) as stage:
        if to == "dgl":
            from gpart.convert_dgl import write_dgl

            files = write_dgl(reader, plan, stage, progress, graph_name)
        elif reader.hetero is not None:
            files = write_pyg_hetero(reader, plan, stage, progress)
        else:
            files = _write(reader, to, plan, stage, progress)
        summary = _summary(reader, to, parts_dir, plan, files)
        write_manifest(stage, summary)
    return summary


def _summary(reader: PartitionReader, to: str, parts_dir: PathLike, plan: dict[str, Any], files: Any) -> dict[str, Any]:
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
        "node_data": plan["node"],
        "edge_data": plan["edge"],
        "labels": plan.get("label"),
        "not_converted": plan["skipped"],
        "hetero": reader.hetero is not None,
        "files": files,
    }


def check_rename(rename: Mapping[str, str], names: set[str], where: PathLike) -> None:
    """Every --rename NAME must be a data array of the result."""
    for name in rename:
        if name not in names:
            raise InputError(where, f"--rename names {name!r}, which is no node or edge array (arrays: {', '.join(sorted(names)) or 'none'})")


def data_keys(names: list[str], rename: Mapping[str, str], defaults: Mapping[str, str], kind: str, where: PathLike) -> dict[str, str]:
    """{array name: the target's key} for one kind (and type) of array; two arrays under one key is an error."""
    keys = {n: rename.get(n, defaults.get(n, n)) for n in names}
    if len(set(keys.values())) < len(keys):
        dup = next(k for k in keys.values() if list(keys.values()).count(k) > 1)
        raise InputError(where, f"two {kind} arrays would both be key {dup!r}; choose other keys with --rename NAME=KEY")
    return keys


def _keys_plan(nodes: list[str], edges: list[str], rename: Mapping[str, str], defaults: Mapping[str, str], where: PathLike) -> dict[str, Any]:
    check_rename(rename, set(nodes) | set(edges), where)
    return {"skipped": [], "node": data_keys(nodes, rename, defaults, "node", where), "edge": data_keys(edges, rename, defaults, "edge", where)}


def _plan(reader: PartitionReader, to: str, parts_dir: PathLike, rename, node_feat, edge_feat, label) -> dict[str, Any]:
    """Which arrays go where in `to`'s layout (node, edge, label, skipped)."""
    nodes, edges = reader.node_data_names(), reader.edge_data_names()
    if reader.halo and nodes:
        raise InputError(
            parts_dir, f"stores node data for halo nodes (halo: 1), which {to}'s layout has no place for; partition with --halo 0 to convert"
        )
    if to == "glt":
        return _glt_plan(nodes, edges, node_feat, edge_feat, label, parts_dir)
    return _keys_plan(nodes, edges, rename or {}, PYG_DEFAULT_KEYS if to == "pyg" else {}, parts_dir)


def _glt_plan(nodes: list[str], edges: list[str], node_feat, edge_feat, label, where: PathLike) -> dict[str, Any]:
    def pick(given: Optional[str], default: str, names: list[str], what: str) -> Optional[str]:
        if given is not None and given not in names:
            raise InputError(where, f"has no {what} array {given!r} (arrays: {', '.join(names) or 'none'})")
        return given if given is not None else (default if default in names else None)

    nf, ef, lb = pick(node_feat, "feat", nodes, "node"), pick(edge_feat, "edge_feat", edges, "edge"), pick(label, "label", nodes, "node")
    if nf is not None and nf == lb:
        raise InputError(where, f"node array {nf!r} cannot be both the features and the labels")
    return {
        "node": {nf: glt.FEATS} if nf else {},
        "edge": {ef: glt.FEATS} if ef else {},
        "label": {lb: lb} if lb else None,
        "skipped": [n for n in nodes if n not in (nf, lb)] + [e for e in edges if e != ef],
    }


def scratch_array(stage: Path, name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A writable memory map in the staging directory (deleted before commit), or an empty array."""
    if not shape[0] or not np.prod(shape[1:], dtype=np.int64):
        return np.zeros(shape, dtype=dtype)
    return np.memmap(stage / f".{name}.scratch", dtype=dtype, mode="w+", shape=shape)


def partition_edges(reader: PartitionReader, part: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(owned global ids, global sources, global destinations, edge ids) of partition `part`, in its CSC order."""
    info = reader.part_info(part)
    owned = np.asarray(reader.array(part, "node_ids")[: info["num_owned"]], dtype=np.int64)
    indptr = np.asarray(reader.array(part, "indptr"), dtype=np.int64)
    node_ids = reader.array(part, "node_ids")
    row = np.asarray(node_ids[np.asarray(reader.array(part, "indices"))], dtype=np.int64)
    col = np.repeat(owned, np.diff(indptr))
    edge_ids = np.asarray(reader.array(part, "edge_ids"), dtype=np.int64)
    return owned, row, col, edge_ids


def _write(reader: PartitionReader, to: str, plan: dict[str, Any], stage: Path, progress) -> list[dict[str, Any]]:
    m = reader.manifest
    node_map = scratch_array(stage, "node_map", (reader.num_nodes,), np.int64)
    edge_map = scratch_array(stage, "edge_map", (reader.num_edges,), np.int64)
    labels = None
    if plan.get("label"):
        (name,) = plan["label"]
        spec = m["node_data"][name]
        labels = scratch_array(stage, "labels", (reader.num_nodes, *spec["row_shape"]), reader.array(0, f"node_data/{name}").dtype)
    files: list[dict[str, Any]] = []
    with progress.stage(f"converting to {to}", total=reader.num_parts) as bar:
        for p in range(reader.num_parts):
            owned, row, col, edge_ids = partition_edges(reader, p)
            node_map[owned] = p
            edge_map[edge_ids] = p
            rows = {key: (reader.array(p, f"node_data/{n}", mode="c"), m["node_data"][n]["dtype"]) for n, key in plan["node"].items()}
            erows = {key: (reader.array(p, f"edge_data/{n}", mode="c"), m["edge_data"][n]["dtype"]) for n, key in plan["edge"].items()}
            if labels is not None:
                labels[owned] = reader.array(p, f"node_data/{name}")
            if to == "pyg":
                files += pyg.write_partition(stage, p, num_nodes=reader.num_nodes, node_ids=owned, row=row, col=col, edge_ids=edge_ids,
                                             node_feats=rows, edge_feats=erows)
            else:
                files += glt.write_partition(stage, p, node_ids=owned, row=row, col=col, edge_ids=edge_ids,
                                             node_feats=rows, edge_feats=erows)
            bar.advance(1)
    if to == "pyg":
        files += pyg.write_maps(stage, node_map, edge_map) + [pyg.write_meta(stage, reader.num_parts)]
    else:
        files += glt.write_maps(stage, node_map, edge_map) + [glt.write_meta(stage, reader.num_parts)]
        if labels is not None:
            files.append(glt.write_labels(stage, labels, m["node_data"][name]["dtype"]))
    for scratch in stage.glob(".*.scratch"):
        scratch.unlink()
    return files

