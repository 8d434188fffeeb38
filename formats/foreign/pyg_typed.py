"""PyG's distributed partition layout for typed graphs (SPEC.md 7.5): what
`torch_geometric.distributed.Partitioner` writes for a `HeteroData` and
`LocalGraphStore.from_partition` / `LocalFeatureStore.from_partition` load::

    OUT/META.json                 {"num_parts", "node_types", "edge_types", "node_offset", "is_hetero": true, "is_sorted": true}
    OUT/node_map/<ntype>.pt       int64 [N_t]  partition of each typed node
    OUT/edge_map/<s__r__d>.pt     int64 [E_r]  partition of each typed edge (its destination's)
    OUT/part_<p>/graph.pt         {(s, r, d): {"edge_id", "row", "col": int64 [E_rp], "size": (N_s, N_d)}}
    OUT/part_<p>/node_feats.pt    {ntype: {"global_id", "id": int64 [n_tp], "feats": {key: rows}}}
    OUT/part_<p>/edge_feats.pt    {(s, r, d): {"global_id": int64 [E_rp], "feats": {key: rows}}}

All ids are typed ids (per type from 0), so each indexes its type's map; see
SPEC.md 7.5 for why this differs from PyG 2.8's own writer in two fields.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence, Union

import numpy as np

from gpart.base.errors import InputError
from gpart.formats.foreign import pyg
from gpart.formats.foreign.torch_files import FileEntry, as_torch, save_torch_file

NODE_MAP_DIR = "node_map"
EDGE_MAP_DIR = "edge_map"
EdgeType = tuple[str, str, str]
Feats = Mapping[str, tuple[np.ndarray, str]]  # PyG key -> (rows, dtype name)


def etype_file(etype: EdgeType) -> str:
    """The map file stem PyG's loader looks up for an edge type (its `as_str`: the triplet joined by `__`)."""
    return "__".join(etype)


def check_edge_types(edge_types: Sequence[EdgeType], where: Union[str, "os.PathLike[str]", None], shared: str = "PyG's edge map file {}.pt") -> None:
    """Refuse edge types that would share one edge map file (`a_`,`b`,`c` and `a`,`_b`,`c` both give `a___b__c`);
    `shared` names what they would share (GLT's layout names its folders the same way)."""
    seen: dict[str, EdgeType] = {}
    for etype in edge_types:
        other = seen.setdefault(etype_file(etype), etype)
        if other != etype:
            raise InputError(where, f"edge types {':'.join(other)!r} and {':'.join(etype)!r} would share {shared.format(etype_file(etype))}; "
                                    "rename a relation to convert")


def write_meta(directory: Path, num_parts: int, node_types: Sequence[str], edge_types: Sequence[EdgeType], node_offset: Sequence[int]) -> FileEntry:
    return pyg.write_meta(directory, num_parts, list(node_types), list(edge_types), list(node_offset))


def write_maps(directory: Path, node_maps: Mapping[str, np.ndarray], edge_maps: Mapping[EdgeType, np.ndarray]) -> list[FileEntry]:
    """node_map/<ntype>.pt and edge_map/<s__r__d>.pt, one int64 tensor per type."""
    files = []
    by_stem = {str(ntype): owners for ntype, owners in node_maps.items()}, {etype_file(etype): owners for etype, owners in edge_maps.items()}
    for sub, maps in zip((NODE_MAP_DIR, EDGE_MAP_DIR), by_stem):
        (directory / sub).mkdir()
        for stem, owners in maps.items():
            entry = save_torch_file(as_torch(owners, "int64"), directory / sub / f"{stem}.pt")
            files.append({**entry, "file": f"{sub}/{entry['file']}"})
    return files


def write_partition(
    directory: Path,
    part: int,
    *,
    nodes: Mapping[str, tuple[np.ndarray, Feats]],
    edges: Mapping[EdgeType, tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int], Feats]],
) -> list[FileEntry]:
    """part_<p>/graph.pt, node_feats.pt and edge_feats.pt of one partition.

    `nodes`: ntype -> (typed ids of the owned nodes, feats); `edges`: edge type ->
    (typed edge ids, typed sources, typed destinations, (N_s, N_d), feats), every
    edge type present (PyG's graph store registers each one, edges or not).
    """
    graph = {
        etype: {"edge_id": as_torch(eid, "int64"), "row": as_torch(row, "int64"), "col": as_torch(col, "int64"), "size": (int(size[0]), int(size[1]))}
        for etype, (eid, row, col, size, _) in edges.items()
    }
    # PyG's put_global_id takes the max of the ids, so a type with none here gets no entry.
    nfeat = {
        ntype: {"global_id": as_torch(ids, "int64"), "id": as_torch(ids, "int64"), "feats": pyg.feats_dict(feats)}
        for ntype, (ids, feats) in nodes.items() if ids.size
    }
    efeat = {
        etype: {"global_id": as_torch(eid, "int64"), "feats": pyg.feats_dict(feats)}
        for etype, (eid, _, _, _, feats) in edges.items() if feats and eid.size
    }
    return pyg.save_part_files(directory, part, {"graph.pt": graph, "node_feats.pt": nfeat, "edge_feats.pt": efeat})
