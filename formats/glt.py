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

import os
import pickle
from pathlib import Path
from typing import Any, Optional

import numpy as np

from gpart.base.errors import OutputError
from gpart.formats.torch_files import as_torch, file_entry, save_torch_file

META = "META"
# rows per pickled piece of a .pkl feature file: at most this many bytes
PIECE_BYTES = 16 << 20
NODE_PB = "node_pb.pt"
EDGE_PB = "edge_pb.pt"


def part_dir(part: int) -> str:
    return f"part{part}"


def write_meta(directory: Path, num_parts: int) -> dict[str, Any]:
    """META: GLT's own pickle of its partition meta (protocol HIGHEST, as its save_meta)."""
    path = directory / META
    meta = {"num_parts": int(num_parts), "data_cls": "homo", "node_types": None, "edge_types": None}
    try:
        with open(path, "xb") as fh:
            pickle.dump(meta, fh, pickle.HIGHEST_PROTOCOL)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise OutputError(path, f"write failed: {exc.strerror or exc}") from None
    return file_entry(path)


def write_books(directory: Path, node_pb: np.ndarray, edge_pb: np.ndarray) -> list[dict[str, Any]]:
    return [save_torch_file(as_torch(node_pb, "int64"), directory / NODE_PB), save_torch_file(as_torch(edge_pb, "int64"), directory / EDGE_PB)]


def write_partition(
    directory: Path,
    part: int,
    *,
    node_ids: np.ndarray,
    row: np.ndarray,
    col: np.ndarray,
    edge_ids: np.ndarray,
    node_feat: Optional[tuple[np.ndarray, str]],
    edge_feat: Optional[tuple[np.ndarray, str]],
) -> list[dict[str, Any]]:
    """part<p>/graph/{rows,cols,eids}.pt and, when given, node_feat/ and edge_feat/ {feats,ids}.pkl."""
    sub = directory / part_dir(part)
    files: list[dict[str, Any]] = []
    graph = {"rows.pt": as_torch(row, "int64"), "cols.pt": as_torch(col, "int64"), "eids.pt": as_torch(edge_ids, "int64")}
    (sub / "graph").mkdir(parents=True)
    for name, tensor in graph.items():
        files.append({**save_torch_file(tensor, sub / "graph" / name), "file": f"{part_dir(part)}/graph/{name}"})
    for group, feat, ids in (("node_feat", node_feat, node_ids), ("edge_feat", edge_feat, edge_ids)):
        if feat is None:
            continue
        (sub / group).mkdir()
        for name, (rows, dtype) in (("feats.pkl", feat), ("ids.pkl", (ids, "int64"))):
            files.append({**_write_pickled_pieces(sub / group / name, rows, dtype), "file": f"{part_dir(part)}/{group}/{name}"})
    return files


def _write_pickled_pieces(path: Path, rows: np.ndarray, dtype: str) -> dict[str, Any]:
    """`rows` as consecutive pickled tensors of at most PIECE_BYTES each (at least one, possibly empty)."""
    row_bytes = max(1, rows.itemsize * int(np.prod(rows.shape[1:], dtype=np.int64)))
    step = max(1, PIECE_BYTES // row_bytes)
    try:
        with open(path, "xb") as fh:
            for a in range(0, max(1, rows.shape[0]), step):
                # a copy: pickling a view would write the whole storage it views
                pickle.dump(as_torch(np.array(rows[a : a + step]), dtype), fh, pickle.HIGHEST_PROTOCOL)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise OutputError(path, f"write failed: {exc.strerror or exc}") from None
    return file_entry(path)


LABELS = "label.pt"


def write_labels(directory: Path, labels: np.ndarray, dtype: str) -> dict[str, Any]:
    """label.pt: whole-graph labels in global node order, for DistDataset.load's whole_node_label_file."""
    return save_torch_file(as_torch(labels, dtype), directory / LABELS)
