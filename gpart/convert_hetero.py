"""`gpart convert --to pyg` of a typed result (SPEC.md 7.5): PyG's HeteroData partition layout.

gpart stores a typed result as the type-erased graph (SPEC.md 8.2) plus an
`edge_type` per stored edge and per-type data; PyG's layout is per type with
typed ids. One pass over the partitions, as the homogeneous converter: each
partition's CSC becomes erased (source, destination, edge id) triples, a
stable sort by edge type splits them into per-type runs that keep CSC order
(so each type's destinations stay non-decreasing, PyG's `is_sorted`), and
subtracting the type offsets gives typed ids. Owned nodes of a type are one
contiguous block of the partition's node ids (SPEC.md 8.2), so their typed
ids and data rows are slices. Node and edge maps fill scratch memory maps over
erased ids and are saved per type at the end: memory holds one partition's
edges, not the graph.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Union

import numpy as np

from gpart.base.errors import InputError
from gpart.formats import pyg_hetero
from gpart.formats.hetero_partition import HeteroMeta, edge_data_key, etype_key, node_data_key, part_counts
from gpart.formats.partition_reader import PartitionReader

PathLike = Union[str, "os.PathLike[str]"]


def typed_plan(meta: HeteroMeta, rename: Mapping[str, str], defaults: Mapping[str, str], where: PathLike) -> dict[str, Any]:
    """PyG keys of every typed array: {"node": {ntype: {name: key}}, "edge": {"s:r:d": {name: key}}, "skipped": []}."""
    from gpart.convert import check_rename, data_keys

    pyg_hetero.check_edge_types(meta.edge_types, where)
    check_rename(rename, {n for d in meta.node_data.values() for n in d} | {n for d in meta.edge_data.values() for n in d}, where)
    return {
        "node": {t: data_keys(list(meta.node_data[t]), rename, defaults, f"{t!r} node", where) for t in meta.node_types},
        "edge": {etype_key(e): data_keys(list(meta.edge_data[e]), rename, defaults, f"{etype_key(e)!r} edge", where) for e in meta.edge_types},
        "skipped": [],
    }


def write_pyg_hetero(reader: PartitionReader, plan: dict[str, Any], stage: Path, progress) -> list[dict[str, Any]]:
    """Every partition of the typed result `reader` in PyG's layout under `stage`; the written files."""
    from gpart.convert import scratch_array

    meta = reader.hetero
    node_map = scratch_array(stage, "node_map", (reader.num_nodes,), np.int64)
    edge_map = scratch_array(stage, "edge_map", (reader.num_edges,), np.int64)
    files: list[dict[str, Any]] = []
    with progress.stage("converting to pyg (typed)", total=reader.num_parts) as bar:
        for p in range(reader.num_parts):
            nodes, edges = _partition(reader, meta, plan, p, node_map, edge_map)
            files += pyg_hetero.write_partition(stage, p, nodes=nodes, edges=edges)
            bar.advance(1)
    noff, eoff = meta.node_offsets, meta.edge_offsets
    files += pyg_hetero.write_maps(
        stage,
        {t: node_map[noff[i]: noff[i + 1]] for i, t in enumerate(meta.node_types)},
        {e: edge_map[eoff[r]: eoff[r + 1]] for r, e in enumerate(meta.edge_types)},
    )
    files.append(pyg_hetero.write_meta(stage, reader.num_parts, meta.node_types, meta.edge_types, noff[:-1].tolist()))
    for scratch in stage.glob(".*.scratch"):
        scratch.unlink()
    return files


def _partition(reader: PartitionReader, meta: HeteroMeta, plan: dict[str, Any], p: int, node_map: np.ndarray, edge_map: np.ndarray):
    """(nodes, edges) of partition p as pyg_hetero.write_partition takes them; marks its nodes and edges in the maps."""
    from gpart.convert import partition_edges

    counts = part_counts(reader.part_info(p), meta, p, reader.directory)
    owned, row, col, eids = partition_edges(reader, p)
    node_map[owned] = p
    edge_map[eids] = p
    noff, eoff = meta.node_offsets, meta.edge_offsets
    node_start = np.concatenate([[0], np.cumsum(counts["num_owned"])])
    nodes = {}
    for t, ntype in enumerate(meta.node_types):
        ids = _typed(owned[node_start[t]: node_start[t + 1]], noff[t], meta.num_nodes[t], f"partition {p}: owned {ntype!r} node", reader)
        nodes[ntype] = (ids, _rows(reader, p, plan["node"][ntype], meta.node_data[ntype], lambda n, t=ntype: node_data_key(t, n), ids.size))
    # A stable sort by type keeps CSC order within each type (int16 keys: numpy sorts them by radix, O(E)).
    order = np.argsort(np.asarray(reader.array(p, "edge_type")), kind="stable")
    edge_start = np.concatenate([[0], np.cumsum(counts["num_edges"])])
    edges = {}
    for r, etype in enumerate(meta.edge_types):
        sel = order[edge_start[r]: edge_start[r + 1]]
        s, d = meta.node_types.index(etype[0]), meta.node_types.index(etype[2])
        what = f"partition {p}: {etype_key(etype)!r}"
        eid = _typed(eids[sel], eoff[r], meta.num_edges[r], f"{what} edge", reader)
        src = _typed(row[sel], noff[s], meta.num_nodes[s], f"{what} source", reader)
        dst = _typed(col[sel], noff[d], meta.num_nodes[d], f"{what} destination", reader)
        feats = _rows(reader, p, plan["edge"][etype_key(etype)], meta.edge_data[etype], lambda n, e=etype: edge_data_key(e, n), eid.size)
        edges[etype] = (eid, src, dst, (meta.num_nodes[s], meta.num_nodes[d]), feats)
    return nodes, edges


def _typed(erased: np.ndarray, offset: int, count: int, what: str, reader: PartitionReader) -> np.ndarray:
    """Typed ids of erased ids of one type; an id outside the type's range means a damaged result (one-line error)."""
    typed = erased - offset
    if typed.size and (typed.min() < 0 or typed.max() >= count):
        raise InputError(reader.directory, f"{what} ids fall outside their type's range 0..{count - 1} (edge_type or hetero counts damaged)")
    return typed


def _rows(reader: PartitionReader, p: int, keys: Mapping[str, str], specs: Mapping[str, tuple[str, Any]], key_of, n: int):
    """{PyG key: (the first n rows of the typed array, dtype)}: owned rows come first, halo rows (halo 1) are left out."""
    return {key: (reader.array(p, key_of(name), mode="c")[:n], specs[name][0]) for name, key in keys.items()}
