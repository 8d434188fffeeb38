"""DGL's distributed partition layout (SPEC.md 7.4, typed 7.6): what `dgl.distributed.partition_graph`
writes and `dgl.distributed.load_partition` reads::

    OUT/<graph_name>.json        part config: graph_name, num_nodes, num_edges, part_method, num_parts,
                                 halo_hops, node_map {ntype: [[start, end], ...]}, edge_map
                                 {"s:r:d": [[start, end], ...]}, ntypes, etypes, "part-<p>": file names
                                 (a homogeneous graph: the one node type _N, the one edge type _N:_E:_N)
    OUT/part<p>/graph.dgl        the partition's DGLGraph (inner nodes, then halo nodes; inner edges,
                                 then out-edges of inner nodes stored elsewhere) with ndata _ID (int64,
                                 new global id), inner_node (uint8), part_id (int64) and edata _ID
                                 (int64, new global edge id), inner_edge (uint8); typed: ndata _TYPE
                                 (int16) and edata _TYPE (int32), the type indices
    OUT/part<p>/node_feat.dgl    {"<ntype>/<name>": rows of the inner nodes of the type}
    OUT/part<p>/edge_feat.dgl    {"s:r:d/<name>": rows of the inner edges of the type}
    OUT/orig_nids.pt, orig_eids.pt   int64: the input id of each new node / edge id (return_mapping);
                                 typed: {ntype: ...} and {(s, r, d): ...} over per-type ids

graph.dgl and the feature files are DGL's own serialisation, so writing them
needs DGL importable (`dgl` is imported here and nowhere else in gpart).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np

from gpart.base.errors import InputError, OutputError
from gpart.formats.foreign.torch_files import FileEntry, as_torch, file_entry, save_torch_file, write_new_file

NTYPE = "_N"
ETYPE = "_N:_E:_N"
TYPE_FIELD = "_TYPE"  # DGL's ndata / edata name of the type index (dgl.NTYPE, dgl.ETYPE)
MAX_NODE_TYPES = 32767  # DGL keeps node type indices as int16
HOW_TO_GET_DGL = (
    "--to dgl writes DGL's own graph.dgl files, so it needs the dgl package importable; DGL 2.1 installs only with "
    "torch <= 2.2.1: in a separate venv run `pip install torch==2.2.1 'numpy<2' 'setuptools<70' torchdata==0.7.1 "
    "dgl==2.1.0 pandas pyyaml pydantic` and install gpart there"
)


def require_dgl() -> Any:
    """The dgl module, or a one-line InputError saying how to get it."""
    os.environ.setdefault("DGLBACKEND", "pytorch")
    try:  # here, not at the top: dgl is optional (and installs only beside an older torch)
        import dgl
        from dgl.data.utils import save_graphs, save_tensors  # noqa: F401  (imported to see that DGL works against this torch)
    except Exception:  # ImportError, or DGL failing against this torch
        raise InputError(None, HOW_TO_GET_DGL) from None
    return dgl


def part_dir(part: int) -> str:
    return f"part{part}"


@dataclass
class LocalGraph:
    """One partition's graph as graph.dgl holds it, in local ids: inner nodes first, then halo nodes;
    inner edges first, then the out-edges of inner nodes stored elsewhere."""

    src: np.ndarray  # local source and destination id of each local edge
    dst: np.ndarray
    num_local: int  # local nodes (inner and halo)
    num_inner: int
    new_node_ids: np.ndarray  # ndata _ID: DGL's new global id of each local node
    owners: np.ndarray  # ndata part_id: the partition owning each local node
    new_edge_ids: np.ndarray  # edata _ID: the new global id of each local edge
    num_inner_edges: int
    node_types: Optional[np.ndarray] = None  # typed only: ndata / edata _TYPE, the type index of each local node / edge
    edge_types: Optional[np.ndarray] = None


def write_partition(
    directory: Path,
    part: int,
    graph: LocalGraph,
    node_feats: Mapping[str, tuple[np.ndarray, str]],
    edge_feats: Mapping[str, tuple[np.ndarray, str]],
) -> list[FileEntry]:
    """part<p>/graph.dgl and its feature files, keyed "<ntype>/<name>" and "s:r:d/<name>" (rows of inner
    nodes and inner edges)."""
    if (graph.node_types is None) != (graph.edge_types is None):
        raise ValueError("a typed DGL partition needs both node_types and edge_types")
    dgl = require_dgl()
    import torch  # on first use, as in torch_files (start-up time)
    from dgl.data.utils import save_graphs, save_tensors  # dgl is optional: only where require_dgl found it

    sub = directory / part_dir(part)
    sub.mkdir()
    g = dgl.graph((as_torch(graph.src, "int64"), as_torch(graph.dst, "int64")), num_nodes=int(graph.num_local), idtype=torch.int64)
    inner = np.zeros(graph.num_local, dtype=np.uint8)
    inner[:graph.num_inner] = 1
    g.ndata["part_id"] = as_torch(graph.owners, "int64")
    g.ndata["inner_node"] = as_torch(inner, "uint8")
    g.ndata["_ID"] = as_torch(graph.new_node_ids, "int64")
    inner_edge = np.zeros(graph.src.size, dtype=np.uint8)
    inner_edge[:graph.num_inner_edges] = 1
    g.edata["inner_edge"] = as_torch(inner_edge, "uint8")
    g.edata["_ID"] = as_torch(graph.new_edge_ids, "int64")
    if graph.node_types is not None:
        g.ndata[TYPE_FIELD] = as_torch(np.asarray(graph.node_types, dtype=np.int16), "int16")
        g.edata[TYPE_FIELD] = as_torch(np.asarray(graph.edge_types, dtype=np.int32), "int32")
    files = []
    try:
        save_tensors(str(sub / "node_feat.dgl"), {k: as_torch(a, dt) for k, (a, dt) in node_feats.items()})
        save_tensors(str(sub / "edge_feat.dgl"), {k: as_torch(a, dt) for k, (a, dt) in edge_feats.items()})
        save_graphs(str(sub / "graph.dgl"), [g])
    except OSError as exc:
        raise OutputError(sub, f"write failed: {exc.strerror or exc}") from None
    for name in ("graph.dgl", "node_feat.dgl", "edge_feat.dgl"):
        with open(sub / name, "rb") as fh:  # DGL writes through its own C++ stream: fsync here
            os.fsync(fh.fileno())
        files.append({**file_entry(sub / name), "file": f"{part_dir(part)}/{name}"})
    return files


def write_meta(directory: Path, graph_name: str, *, num_nodes: int, num_edges: int, part_method: str, num_parts: int,
               node_map: Mapping[str, list[list[int]]], edge_map: Mapping[str, list[list[int]]]) -> FileEntry:
    """<graph_name>.json: DGL's part config (its partition meta), the [start, end) id range of every type in every
    partition; the types' indices are their order in the maps."""
    config: dict[str, Any] = {
        "graph_name": graph_name,
        "num_nodes": int(num_nodes),
        "num_edges": int(num_edges),
        "part_method": part_method,
        "num_parts": int(num_parts),
        "halo_hops": 1,
        "node_map": {t: [[int(a), int(b)] for a, b in ranges] for t, ranges in node_map.items()},
        "edge_map": {t: [[int(a), int(b)] for a, b in ranges] for t, ranges in edge_map.items()},
        "ntypes": {t: i for i, t in enumerate(node_map)},
        "etypes": {t: i for i, t in enumerate(edge_map)},
    }
    for p in range(num_parts):
        config[f"part-{p}"] = {name: f"{part_dir(p)}/{file}" for name, file in
                               (("node_feats", "node_feat.dgl"), ("edge_feats", "edge_feat.dgl"), ("part_graph", "graph.dgl"))}
    path = directory / f"{graph_name}.json"
    write_new_file(path, lambda fh: fh.write(json.dumps(config, indent=4).encode()))
    return file_entry(path)


def write_orig_ids(directory: Path, orig_nids: Any, orig_eids: Any) -> list[FileEntry]:
    """orig_nids.pt / orig_eids.pt: what partition_graph(return_mapping=True) returns, saved with torch.save:
    one int64 tensor each (homogeneous), or {ntype: tensor} and {(s, r, d): tensor} (typed)."""
    def tensors(ids: Any) -> Any:
        return {k: as_torch(v, "int64") for k, v in ids.items()} if isinstance(ids, Mapping) else as_torch(ids, "int64")

    return [save_torch_file(tensors(orig_nids), directory / "orig_nids.pt"), save_torch_file(tensors(orig_eids), directory / "orig_eids.pt")]
