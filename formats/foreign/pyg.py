"""PyG's distributed partition layout (SPEC.md 7.2): what `torch_geometric.distributed.Partitioner`
writes for a homogeneous graph and `LocalGraphStore.from_partition` /
`LocalFeatureStore.from_partition` load (PyG 2.6-2.8)::

    OUT/META.json            {"num_parts", "node_types": null, "edge_types": null, "node_offset": null,
                              "is_hetero": false, "is_sorted": true}
    OUT/node_map.pt          int64 [N]  partition of each node
    OUT/edge_map.pt          int64 [E]  partition of each edge (its destination's)
    OUT/part_<p>/graph.pt    {"edge_id", "row", "col": int64 [E_p], "size": (N, N)}, sorted by col
    OUT/part_<p>/node_feats.pt  {"global_id": int64 [n_p], "feats": {key: rows}}
    OUT/part_<p>/edge_feats.pt  {"global_id": int64 [E_p], "feats": {key: rows}}, or {} without edge data

Every `.pt` is a torch.save of plain dicts, tuples and tensors (PyG loads it
with weights_only=True).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np

from gpart.formats.files.manifest import write_json_atomic
from gpart.formats.foreign.torch_files import FileEntry, as_torch, file_entry, save_torch_file

META = "META.json"
NODE_MAP = "node_map.pt"
EDGE_MAP = "edge_map.pt"


def part_dir(part: int) -> str:
    return f"part_{part}"


def write_meta(
    directory: Path, num_parts: int, node_types: Optional[list[str]] = None, edge_types: Optional[list[tuple[str, str, str]]] = None,
    node_offset: Optional[list[int]] = None,
) -> FileEntry:
    """META.json as PyG's Partitioner writes it: homogeneous without types, typed (SPEC.md 7.5) with them."""
    meta: dict[str, Any] = {
        "num_parts": int(num_parts),
        "node_types": None,
        "edge_types": None,
        "node_offset": None,
        "is_hetero": node_types is not None,
        "is_sorted": True,  # edges by destination: gpart's CSC order
    }
    if node_types is not None:  # the keys above keep their places: PyG's own order
        if edge_types is None or node_offset is None:
            raise ValueError("a typed META.json needs edge_types and node_offset besides node_types")
        meta.update(node_types=list(node_types), edge_types=[list(e) for e in edge_types], node_offset=[int(o) for o in node_offset])
    write_json_atomic(directory / META, meta)
    return file_entry(directory / META)


def save_part_files(directory: Path, part: int, objs: Mapping[str, Any]) -> list[FileEntry]:
    """torch.save each `name -> obj` into a new part_<p>/; file entries relative to `directory`."""
    sub = directory / part_dir(part)
    sub.mkdir()
    files = [save_torch_file(obj, sub / name) for name, obj in objs.items()]
    return [{**f, "file": f"{part_dir(part)}/{f['file']}"} for f in files]


def feats_dict(feats: Mapping[str, tuple[np.ndarray, str]]) -> dict[str, Any]:
    """{PyG key: tensor} from {PyG key: (rows, dtype name)}, without copying the rows."""
    return {k: as_torch(a, dt) for k, (a, dt) in feats.items()}


def write_maps(directory: Path, node_map: np.ndarray, edge_map: np.ndarray) -> list[FileEntry]:
    return [save_torch_file(as_torch(node_map, "int64"), directory / NODE_MAP), save_torch_file(as_torch(edge_map, "int64"), directory / EDGE_MAP)]


def write_partition(
    directory: Path,
    part: int,
    *,
    num_nodes: int,
    node_ids: np.ndarray,
    row: np.ndarray,
    col: np.ndarray,
    edge_ids: np.ndarray,
    node_feats: Mapping[str, tuple[np.ndarray, str]],
    edge_feats: Mapping[str, tuple[np.ndarray, str]],
) -> list[FileEntry]:
    """part_<p>/graph.pt, node_feats.pt and edge_feats.pt; `*_feats` map PyG keys to (rows, dtype name)."""
    graph = {"edge_id": as_torch(edge_ids, "int64"), "row": as_torch(row, "int64"), "col": as_torch(col, "int64"), "size": (int(num_nodes), int(num_nodes))}
    nfeat = {"global_id": as_torch(node_ids, "int64"), "feats": feats_dict(node_feats)}
    efeat: dict[str, Any] = {}
    if edge_feats:
        efeat = {"global_id": as_torch(edge_ids, "int64"), "feats": feats_dict(edge_feats)}
    return save_part_files(directory, part, {"graph.pt": graph, "node_feats.pt": nfeat, "edge_feats.pt": efeat})
