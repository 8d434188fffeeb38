"""graphlearn_torch's partition layout (SPEC.md 7.3): what GLT 0.2.4's partitioners write
(`graphlearn_torch.partition.base`) and `DistDataset.load` reads, for a
homogeneous graph::

    OUT/META                     pickle of {"num_parts", "data_cls": "homo", "node_types": None, "edge_types": None}
    OUT/node_pb.pt               int64 [N]  partition of each node
    OUT/edge_pb.pt               int64 [E]  partition of each edge
    OUT/part<p>/graph/rows.pt    int64 [E_p] global source ids
    OUT/part<p>/graph/cols.pt    int64 [E_p] global destination ids
    OUT/part<p>/graph/eids.pt    int64 [E_p] global edge ids
    OUT/part<p>/node_feat/feats.pkl, ids.pkl  one node feature table's rows and their global ids
    OUT/part<p>/edge_feat/feats.pkl, ids.pkl  one edge feature table's rows and their edge ids
    OUT/label.pt                 optional whole-graph labels in global order (DistDataset.load's whole_node_label_file)

A `.pkl` file is a sequence of pickled tensors, one after another, that GLT
reads with pickle.load until EOF and concatenates (its append_tensor_to_file /
load_and_concatenate_tensors); gpart appends one per piece of rows, so memory
holds one piece. GLT reads META and the .pkl files with pickle: gpart writes
those pickles (a dict of ints, strings and None; tensors) for GLT, and never
reads one.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Mapping

import numpy as np

from gpart.formats.torch_files import FileEntry, as_torch, file_entry, save_torch_file, write_new_file

META = "META"
# rows per pickled piece of a .pkl feature file: at most this many bytes
PIECE_BYTES = 16 << 20
NODE_PB = "node_pb.pt"
EDGE_PB = "edge_pb.pt"
LABELS = "label.pt"
# GLT holds one feature table per kind (node_feat/, edge_feat/): the only key its feats may have (file feats.pkl)
FEATS = "feats"


def part_dir(part: int) -> str:
    return f"part{part}"


def write_meta(directory: Path, num_parts: int) -> FileEntry:
    """META: GLT's own pickle of its partition meta (protocol HIGHEST, as its save_meta)."""
    meta = {"num_parts": int(num_parts), "data_cls": "homo", "node_types": None, "edge_types": None}
    write_new_file(directory / META, lambda fh: pickle.dump(meta, fh, pickle.HIGHEST_PROTOCOL))
    return file_entry(directory / META)


def write_maps(directory: Path, node_map: np.ndarray, edge_map: np.ndarray) -> list[FileEntry]:
    """node_pb.pt / edge_pb.pt: the partition of every node and every edge (GLT's partition books)."""
    return [save_torch_file(as_torch(node_map, "int64"), directory / NODE_PB), save_torch_file(as_torch(edge_map, "int64"), directory / EDGE_PB)]


def write_partition(
    directory: Path,
    part: int,
    *,
    node_ids: np.ndarray,
    row: np.ndarray,
    col: np.ndarray,
    edge_ids: np.ndarray,
    node_feats: Mapping[str, tuple[np.ndarray, str]],
    edge_feats: Mapping[str, tuple[np.ndarray, str]],
) -> list[FileEntry]:
    """part<p>/graph/{rows,cols,eids}.pt and, where `*_feats` holds GLT's one table ({FEATS: (rows, dtype name)}),
    node_feat/ and edge_feat/ {feats,ids}.pkl; `{}` writes no such folder."""
    sub = directory / part_dir(part)
    files: list[FileEntry] = []
    graph = {"rows.pt": as_torch(row, "int64"), "cols.pt": as_torch(col, "int64"), "eids.pt": as_torch(edge_ids, "int64")}
    (sub / "graph").mkdir(parents=True)
    for name, tensor in graph.items():
        files.append({**save_torch_file(tensor, sub / "graph" / name), "file": f"{part_dir(part)}/graph/{name}"})
    for group, feats, ids in (("node_feat", node_feats, node_ids), ("edge_feat", edge_feats, edge_ids)):
        if not feats:
            continue
        if set(feats) != {FEATS}:
            raise ValueError(f"GLT's {group} holds one table, under key {FEATS!r}; got {sorted(feats)}")
        (sub / group).mkdir()
        for name, (rows, dtype) in (("feats.pkl", feats[FEATS]), ("ids.pkl", (ids, "int64"))):
            files.append({**_write_pickled_pieces(sub / group / name, rows, dtype), "file": f"{part_dir(part)}/{group}/{name}"})
    return files


def _write_pickled_pieces(path: Path, rows: np.ndarray, dtype: str) -> FileEntry:
    """`rows` as consecutive pickled tensors of at most PIECE_BYTES each (at least one, possibly empty)."""
    row_bytes = max(1, rows.itemsize * int(np.prod(rows.shape[1:], dtype=np.int64)))
    step = max(1, PIECE_BYTES // row_bytes)

    def fill(fh) -> None:
        for a in range(0, max(1, rows.shape[0]), step):
            # a copy: pickling a view would write the whole storage it views
            pickle.dump(as_torch(np.array(rows[a : a + step]), dtype), fh, pickle.HIGHEST_PROTOCOL)

    write_new_file(path, fill)
    return file_entry(path)


def write_labels(directory: Path, labels: np.ndarray, dtype: str) -> FileEntry:
    """label.pt: whole-graph labels in global node order, for DistDataset.load's whole_node_label_file."""
    return save_torch_file(as_torch(labels, dtype), directory / LABELS)
