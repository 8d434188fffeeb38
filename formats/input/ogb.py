"""OGB dataset folders (SPEC.md 3.10): the files OGB downloads for a homogeneous node- or link-property
dataset, read as one gpart graph without OGB, pandas or torch.

    DATASET/raw/edge.csv.gz            E rows `src,dst`               -> src, dst (as listed)
    DATASET/raw/num-node-list.csv.gz   one row: N                    -> num_nodes
    DATASET/raw/num-edge-list.csv.gz   one row: E
    DATASET/raw/node-feat.csv.gz       N rows of D numbers (optional) -> node array feat [N, D]
    DATASET/raw/node-label.csv.gz      N rows (optional)              -> node array label
    DATASET/raw/node_<x>.csv.gz        N rows (optional)              -> node array <x>
    DATASET/raw/edge-feat.csv.gz       E rows (optional)              -> edge array edge_feat
    DATASET/raw/edge_<x>.csv.gz        E rows (optional)              -> edge array edge_<x>
    DATASET/split/<name>/{train,valid,test}.csv.gz  node ids          -> train_mask, val_mask, test_mask

or, for the datasets OGB ships as numpy (ogbn-papers100M), `raw/data.npz` (edge_index, num_nodes_list,
num_edges_list, node_*, edge_*) and `raw/node-label.npz` (node_label), memory-mapped where stored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.input.checks import check_data_array, check_node_count_fits, scan_range
from gpart.formats.input.edge_table import read_edge_table
from gpart.formats.input.npz import read_npz_arrays
from gpart.formats.input.numeric_csv import read_numeric_csv
from gpart.formats.input.options import ReadOptions

SPLIT_FILES = (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask"))
# OGB's file or key names -> gpart's (SPEC.md 3.1: feat, label, edge_feat); other node_<x> become <x>
OGB_NAMES = {"node-feat": "feat", "node_feat": "feat", "node-label": "label", "node_label": "label", "edge-feat": "edge_feat"}
FEATURES = ("feat", "edge_feat")  # kept 2-D, [rows, D], even with one column


def is_ogb_dir(path: Path) -> bool:
    """Whether `path` is an OGB dataset folder (raw/edge.csv.gz, or raw/data.npz)."""
    return (path / "raw" / "edge.csv.gz").is_file() or (path / "raw" / "data.npz").is_file()


def read_ogb(path: Path, options: ReadOptions) -> Graph:
    """The graph of an OGB dataset folder, its splits as boolean node masks (options.split chooses one)."""
    raw = path / "raw"
    if (raw / "num-node-dict.csv.gz").is_file() or (raw / "relations").is_dir():
        raise InputError(path, "a heterogeneous OGB dataset (raw/relations/): gpart reads homogeneous ones; "
                               "write it as a typed .npz (SPEC.md section 8)")
    graph = _read_csv_raw(raw, options.spill) if (raw / "edge.csv.gz").is_file() else _read_binary_raw(raw, options.spill)
    for name, mask in _split_masks(path, graph.num_nodes, options.split).items():
        graph.node_data[name] = mask
    return graph


def _count(path: Path, what: str) -> int:
    """The one value of num-node-list / num-edge-list: one graph; several are a graph-property dataset."""
    if not path.is_file():
        raise InputError(path, "no such file (an OGB dataset folder has raw/num-node-list.csv.gz and raw/num-edge-list.csv.gz)")
    values = read_numeric_csv(path)
    if values.dtype != np.int64 or values.shape[1:] != (1,) or values.shape[0] < 1:
        raise InputError(path, f"expected one integer per line (the {what} of each graph)")
    if values.shape[0] > 1:
        raise InputError(path, f"{values.shape[0]} graphs: a graph-property dataset (ogbg-*); gpart partitions one graph")
    value = int(values[0, 0])
    if value < 0:
        raise InputError(path, f"negative number of {what} ({value})")
    return value


def _read_csv_raw(raw: Path, spill: Optional[ScratchDir]) -> Graph:
    """The CSV layout; with `spill`, the edges and the node and edge arrays are parsed into scratch files there, mapped
    (the counts and split ids, a few numbers or one per node, are read into memory)."""
    num_nodes = _count(raw / "num-node-list.csv.gz", "nodes")
    check_node_count_fits(raw / "num-node-list.csv.gz", num_nodes)
    num_edges = _count(raw / "num-edge-list.csv.gz", "edges")
    edges = read_edge_table(raw / "edge.csv.gz", "csv", ReadOptions(header=False, spill=spill))
    if edges.num_edges != num_edges:
        raise InputError(raw / "edge.csv.gz", f"{edges.num_edges} edges, raw/num-edge-list.csv.gz says {num_edges}")
    _check_ids(raw / "edge.csv.gz", edges.src, edges.dst, num_nodes)
    graph = Graph(num_nodes, edges.src, edges.dst)
    for file in sorted(raw.glob("*.csv.gz")):
        stem = file.name[: -len(".csv.gz")]
        if stem in OGB_NAMES or stem.startswith(("node_", "edge_")):
            _add_array(graph, file, stem, read_numeric_csv(file, spill, stem))
    return graph


def _add_array(graph: Graph, file: Path, stem: str, values: np.ndarray) -> None:
    """A node or edge array named as gpart names them (feat, label, year, edge_feat); one column -> 1-D."""
    name = OGB_NAMES.get(stem, stem[len("node_"):] if stem.startswith("node_") else stem)
    if name in FEATURES and values.ndim == 1:
        values = values.reshape(-1, 1)
    elif name not in FEATURES and values.ndim == 2 and values.shape[1] == 1:
        values = values.reshape(-1)
    is_edge = stem.startswith("edge")
    rows, counted = (graph.num_edges, "edges") if is_edge else (graph.num_nodes, "nodes")
    if values.shape[0] != rows:
        raise InputError(file, f"{values.shape[0]} rows, the graph has {rows} {counted}")
    check_data_array(file, name, values, "edge array" if is_edge else "node array")
    (graph.edge_data if is_edge else graph.node_data)[name] = values


def _check_ids(path: Path, src: np.ndarray, dst: np.ndarray, num_nodes: int) -> None:
    for ids in (src, dst):
        lo, hi = scan_range(ids)
        if ids.size and hi >= num_nodes:
            at = int(np.argmax(np.asarray(ids) >= num_nodes))
            raise InputError(path, f"edge {at}: node id {hi} >= the dataset's {num_nodes} nodes (num-node-list)")
        if ids.size and lo < 0:
            at = int(np.argmax(np.asarray(ids) < 0))
            raise InputError(path, f"edge {at}: negative node id {lo}")


def _read_binary_raw(raw: Path, spill: Optional[ScratchDir]) -> Graph:
    """The binary layout (raw/data.npz); with `spill`, its large compressed members are inflated into scratch files
    there, mapped."""
    data_file = raw / "data.npz"
    arrays = read_npz_arrays(data_file, spill=spill)
    for key in ("edge_index", "num_nodes_list", "num_edges_list"):
        if key not in arrays:
            raise InputError(data_file, f"no {key!r} array (OGB's data.npz has edge_index, num_nodes_list, num_edges_list)")
    counts = [arrays.pop(k).reshape(-1) for k in ("num_nodes_list", "num_edges_list")]
    if counts[0].shape[0] != 1 or counts[1].shape[0] != 1:
        raise InputError(data_file, f"{counts[0].shape[0]} graphs: a graph-property dataset (ogbg-*); gpart partitions one graph")
    num_nodes, num_edges = int(counts[0][0]), int(counts[1][0])
    check_node_count_fits(data_file, num_nodes)
    edge_index = arrays.pop("edge_index")
    if edge_index.ndim != 2 or edge_index.shape != (2, num_edges) or edge_index.dtype.kind not in "iu":
        raise InputError(data_file, f"'edge_index' is {edge_index.dtype} {list(edge_index.shape)}, expected integers [2, {num_edges}]")
    graph = Graph(num_nodes, edge_index[0], edge_index[1])
    _check_ids(data_file, graph.src, graph.dst, num_nodes)
    for key, values in arrays.items():
        if not key.startswith(("node_", "edge_")):
            raise InputError(data_file, f"array {key!r}: OGB's data.npz names arrays node_* or edge_*")
        _add_array(graph, data_file, key, values)
    label_file = raw / "node-label.npz"
    if label_file.is_file():
        labels = read_npz_arrays(label_file)
        if "node_label" not in labels:
            raise InputError(label_file, "no 'node_label' array")
        _add_array(graph, label_file, "node-label", labels["node_label"])
    return graph


def _split_masks(path: Path, num_nodes: int, split: Optional[str]) -> dict[str, np.ndarray]:
    """train_mask / val_mask / test_mask from split/<name>/{train,valid,test}.csv.gz."""
    folder = path / "split"
    names = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    if split == "none" or (split is None and not names):
        return {}
    if split is None and len(names) > 1:
        raise InputError(folder, f"several splits ({', '.join(names)}): choose one with --split NAME (or --split none)")
    chosen = folder / (split if split is not None else names[0])
    if not chosen.is_dir():
        raise InputError(chosen, f"no such split (the dataset has: {', '.join(names) or 'none'})")
    masks = {}
    for stem, name in SPLIT_FILES:
        file = chosen / f"{stem}.csv.gz"
        if not file.is_file():
            other = sorted(p.name for p in chosen.iterdir())
            hint = " (link-prediction splits of edges, which gpart does not read: pass --split none)" \
                if any(n.endswith(".pt") for n in other) else ""
            raise InputError(file, f"no such file{hint}")
        masks[name] = _mask(file, num_nodes)
    return masks


def _mask(file: Path, num_nodes: int) -> np.ndarray:
    ids = read_numeric_csv(file)
    if ids.size and (ids.dtype != np.int64 or ids.shape[1] != 1):
        raise InputError(file, f"expected one integer node id per line, found {ids.shape[1]} columns of {ids.dtype}")
    ids = ids.reshape(-1)
    bad = (ids < 0) | (ids >= num_nodes)
    if bad.any():
        at = int(np.argmax(bad))
        raise InputError(file, f"line {at + 1}: node id {int(ids[at])} outside 0..{num_nodes - 1}")
    mask = np.zeros(num_nodes, dtype=bool)
    mask[ids] = True
    return mask
