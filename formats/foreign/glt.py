"""graphlearn_torch's partition layout (SPEC.md 7.3, typed 7.7): what GLT 0.2.4's partitioners write
(`graphlearn_torch.partition.base`) and `DistDataset.load` reads. A homogeneous graph::

    OUT/META                     pickle of {"num_parts", "data_cls": "homo", "node_types": None, "edge_types": None}
    OUT/node_pb.pt               int64 [N]  partition of each node
    OUT/edge_pb.pt               int64 [E]  partition of each edge
    OUT/part<p>/graph/rows.pt    int64 [E_p] global source ids
    OUT/part<p>/graph/cols.pt    int64 [E_p] global destination ids
    OUT/part<p>/graph/eids.pt    int64 [E_p] global edge ids
    OUT/part<p>/node_feat/feats.pkl, ids.pkl  one node feature table's rows and their global ids
    OUT/part<p>/edge_feat/feats.pkl, ids.pkl  one edge feature table's rows and their edge ids
    OUT/label.pt                 optional whole-graph labels in global order (DistDataset.load's whole_node_label_file)

A typed graph: META with "data_cls": "hetero" and the types; node_pb/<ntype>.pt, edge_pb/<s__r__d>.pt;
part<p>/graph/<s__r__d>/, part<p>/node_feat/<ntype>/, part<p>/edge_feat/<s__r__d>/ holding the same files
in typed ids; label/<ntype>.pt. The writers below take {type folder: ...}, "" (no folder) for the homogeneous graph.

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
from typing import BinaryIO, Mapping, Optional, Sequence

import numpy as np

from gpart.formats.foreign.torch_files import FileEntry, as_torch, file_entry, save_torch_file, write_new_file

META = "META"
# rows per pickled piece of a .pkl feature file: at most this many bytes
PIECE_BYTES = 16 << 20
NODE_PB = "node_pb.pt"
EDGE_PB = "edge_pb.pt"
LABELS = "label.pt"
LABEL_DIR = "label"  # typed: label/<ntype>.pt
# GLT holds one feature table per kind (node_feat/, edge_feat/): the only key its feats may have (file feats.pkl)
FEATS = "feats"


def part_dir(part: int) -> str:
    return f"part{part}"


def write_meta(directory: Path, num_parts: int, node_types: Optional[Sequence[str]] = None,
               edge_types: Optional[Sequence[tuple[str, str, str]]] = None) -> FileEntry:
    """META: GLT's own pickle of its partition meta (protocol HIGHEST, as its save_meta); typed with the types."""
    meta = {"num_parts": int(num_parts), "data_cls": "homo" if node_types is None else "hetero",
            "node_types": None if node_types is None else list(node_types),
            "edge_types": None if edge_types is None else [tuple(e) for e in edge_types]}
    write_new_file(directory / META, lambda fh: pickle.dump(meta, fh, pickle.HIGHEST_PROTOCOL))
    return file_entry(directory / META)


def type_dir(etype: Optional[tuple[str, ...]] = None, ntype: Optional[str] = None) -> str:
    """GLT's folder (and file stem) of a type, its `as_str`: the node type, or the edge type's triplet joined by `__`."""
    if ntype is not None:
        return ntype
    if etype is None:
        raise ValueError("type_dir needs a node type or an edge type")
    return "__".join(etype)


def write_maps(directory: Path, node_maps: Mapping[str, np.ndarray], edge_maps: Mapping[str, np.ndarray]) -> list[FileEntry]:
    """GLT's partition books: the partition of every node and every edge; {"": map} gives node_pb.pt / edge_pb.pt,
    {type folder: map} node_pb/<ntype>.pt / edge_pb/<s__r__d>.pt."""
    files = []
    for stem, maps in (("node_pb", node_maps), ("edge_pb", edge_maps)):
        for key, owners in maps.items():
            if key:
                (directory / stem).mkdir(exist_ok=True)
            rel = f"{stem}/{key}.pt" if key else f"{stem}.pt"
            files.append({**save_torch_file(as_torch(owners, "int64"), directory / rel), "file": rel})
    return files


def write_partition(
    directory: Path,
    part: int,
    *,
    graphs: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
    node_feats: Mapping[str, tuple[np.ndarray, np.ndarray, str]],
    edge_feats: Mapping[str, tuple[np.ndarray, np.ndarray, str]],
) -> list[FileEntry]:
    """part<p>/graph[/<type>]/{rows,cols,eids}.pt for each {type folder: (row, col, edge ids)} and, for each
    {type folder: (ids, rows, dtype name)} of GLT's one feature table, node_feat[/<type>]/ and edge_feat[/<type>]/
    {feats,ids}.pkl."""
    files: list[FileEntry] = []
    for key, (row, col, edge_ids) in graphs.items():
        rel = f"{part_dir(part)}/graph/{key}".rstrip("/")
        (directory / rel).mkdir(parents=True)
        for name, ids in (("rows.pt", row), ("cols.pt", col), ("eids.pt", edge_ids)):
            files.append({**save_torch_file(as_torch(ids, "int64"), directory / rel / name), "file": f"{rel}/{name}"})
    for group, feats in (("node_feat", node_feats), ("edge_feat", edge_feats)):
        for key, (ids, rows, dtype) in feats.items():
            rel = f"{part_dir(part)}/{group}/{key}".rstrip("/")
            (directory / rel).mkdir(parents=True)
            for name, (data, dt) in (("feats.pkl", (rows, dtype)), ("ids.pkl", (ids, "int64"))):
                files.append({**_write_pickled_pieces(directory / rel / name, data, dt), "file": f"{rel}/{name}"})
    return files


def _write_pickled_pieces(path: Path, rows: np.ndarray, dtype: str) -> FileEntry:
    """`rows` as consecutive pickled tensors of at most PIECE_BYTES each (at least one, possibly empty)."""
    row_bytes = max(1, rows.itemsize * int(np.prod(rows.shape[1:], dtype=np.int64)))
    step = max(1, PIECE_BYTES // row_bytes)

    def fill(fh: BinaryIO) -> None:
        for a in range(0, max(1, rows.shape[0]), step):
            # a copy: pickling a view would write the whole storage it views
            pickle.dump(as_torch(np.array(rows[a : a + step]), dtype), fh, pickle.HIGHEST_PROTOCOL)

    write_new_file(path, fill)
    return file_entry(path)


def write_labels(directory: Path, labels: np.ndarray, dtype: str, ntype: Optional[str] = None) -> FileEntry:
    """label.pt (or label/<ntype>.pt): whole-graph labels in global (typed) id order, for DistDataset.load's
    whole_node_label_file (a path, or {ntype: path})."""
    rel = LABELS if ntype is None else f"{LABEL_DIR}/{ntype}.pt"
    (directory / rel).parent.mkdir(exist_ok=True)
    return {**save_torch_file(as_torch(labels, dtype), directory / rel), "file": rel}
