"""`gpart info` and `gpart verify`: describe a result and prove it intact.

Both dispatch on the manifest's `format`: partition results are handled here,
checkpoints by gpart.ckpt (imported only when one is met).

verify() checks every checksum and every invariant of SPEC.md 4.4 and, given
the input graph, proves that the partitions reconstruct it exactly: each
stored edge `(node_ids[indices[k]], node_ids[column of k])` equals
`(src[e], dst[e])` for its edge id `e`, every edge id appears exactly once,
and node and edge data rows are byte-identical to the input's. Problems are
collected, not raised, so one run lists all the damage.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import numpy as np

from gpart.balance import train_mask
from gpart.errors import GpartError, InputError, IntegrityError
from gpart.formats.arrays import CHUNK_BYTES
from gpart.formats.dtypes import storage_dtype
from gpart.formats.filelist import interrupted_exports, open_filelist
from gpart.formats.names import parse_work_name
from gpart.formats.manifest import MANIFEST_NAME, manifest_path, read_json
from gpart.formats.partition import FORMAT as PARTITION_FORMAT
from gpart.formats.partition import PartitionReader, part_dir
from gpart.graph import Graph
from gpart.progress import Progress, or_null

PathLike = Union[str, "os.PathLike[str]"]
CHECKPOINT_FORMAT = "gpart.checkpoint"
FILELIST_FORMAT = "gpart.filelist"


def _export_files(directory: PathLike) -> tuple[list[Path], list[Path]]:
    """(`<name>.json` files of gpart.filelist exports, commit records of interrupted ones) in `directory`;
    two empty lists when it holds neither (then it is not an export directory)."""
    jsons = []
    for path in sorted(Path(directory).glob("*.json")):
        if path.name.startswith("."):
            continue
        try:
            obj = read_json(path)
        except GpartError:
            jsons.append(path)  # unreadable: reported by the checks, not silently skipped
            continue
        if isinstance(obj, dict) and obj.get("format") == FILELIST_FORMAT:
            jsons.append(path)
    records = interrupted_exports(directory)
    return (jsons, records) if jsons or records else ([], [])


def _interrupted_lines(records: list[Path]) -> tuple[list[str], list[str]]:
    """(problems, notes) for commit records of killed exports. Until its parts start moving, a
    record sits beside the old `<name>.json`, which is still intact (a note); once they move,
    the JSON is gone and only the record describes the export (a problem until completed)."""
    problems, notes = [], []
    for record in records:
        target = parse_work_name(record).target
        line = f"{record}: an export-feat commit of {target.name} was interrupted; the next export-feat writing to {record.parent} completes it"
        (notes if target.exists() else problems).append(line)
    return problems, notes


def _format_of(directory: PathLike, missing_is_damage: bool) -> str:
    """The manifest's `format`, read before anything else to pick the handler."""
    if Path(directory).is_dir() and not (Path(directory) / MANIFEST_NAME).exists() and any(_export_files(directory)):
        return FILELIST_FORMAT
    path = manifest_path(directory, IntegrityError if missing_is_damage else InputError)
    try:
        obj = read_json(path)
    except InputError as exc:
        if missing_is_damage:
            raise IntegrityError(exc.path, exc.problem) from None
        raise
    fmt = obj.get("format") if isinstance(obj, dict) else None
    if not isinstance(fmt, str):
        raise (IntegrityError if missing_is_damage else InputError)(path, "manifest has no 'format' string")
    return fmt


# --------------------------------------------------------------------------- info


def info(directory: PathLike) -> dict[str, Any]:
    """Sizes, edge cut, balance, halo ratio and dtypes of a result (or a checkpoint's summary)."""
    fmt = _format_of(directory, missing_is_damage=False)
    if fmt == FILELIST_FORMAT:
        return _exports_info(directory)
    if fmt == CHECKPOINT_FORMAT:
        from gpart.ckpt import checkpoint_info

        return checkpoint_info(directory)
    if fmt != PARTITION_FORMAT:
        raise InputError(Path(directory) / MANIFEST_NAME, f"format {fmt!r} is not a partition result or checkpoint")
    with PartitionReader(directory) as reader:
        return _partition_info(reader)


def _exports_info(directory: PathLike) -> dict[str, Any]:
    jsons, records = _export_files(directory)
    problems, _ = _interrupted_lines(records)
    if problems:
        raise IntegrityError(None, problems[0])
    exports = []
    for path in jsons:
        fl = open_filelist(path)
        exports.append({"name": fl.name, "dtype": fl.dtype, "shape": list(fl.shape), "files": len(fl.entries),
                        "bytes": sum(e.nbytes for e in fl.entries), "json": os.fspath(path)})
    return {"format": FILELIST_FORMAT, "directory": os.fspath(directory), "exports": exports}


def verify_exports(directory: PathLike) -> dict[str, Any]:
    """Every export JSON in `directory` validated and every part file's size and CRC-32 checked."""
    jsons, records = _export_files(directory)
    problems, notes = _interrupted_lines(records)
    files = 0
    for path in jsons:
        try:
            fl = open_filelist(path)
        except GpartError as exc:
            problems.append(exc.one_line())
            continue
        files += len(fl.entries)
        problems += fl.verify()
    return {
        "path": os.fspath(directory),
        "directory": os.fspath(directory),
        "format": FILELIST_FORMAT,
        "ok": not problems,
        "problems": problems,
        "notes": notes,
        "checked": {"checksums": True, "invariants": False, "arrays": files},
    }


def _numbers(obj: Any) -> dict[str, Optional[float]]:
    # None is kept: a figure the result does not have (train_balance without a training mask)
    if not isinstance(obj, dict):
        return {}
    return {k: v for k, v in obj.items() if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))}


def _is_count(value: Any) -> bool:
    # descriptive: a training-node count of the wrong type is dropped, as the stats are (verify reports it)
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _text_or_none(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


def _partition_info(reader: PartitionReader) -> dict[str, Any]:
    m = reader.manifest
    parts = []
    for p in range(reader.num_parts):
        pi = reader.part_info(p)
        nbytes = sum(reader.entry(p, k).nbytes for k in reader.keys(p))
        parts.append(
            {
                "part": p,
                "num_owned": pi["num_owned"],
                "num_halo": pi["num_halo"],
                "num_edges": pi["num_edges"],
                "bytes": nbytes,
                "halo_ratio": pi["num_halo"] / pi["num_owned"] if pi["num_owned"] else 0.0,
            }
            | ({"num_train": pi["num_train"]} if _is_count(pi.get("num_train")) else {})
        )
    book_bytes = sum(e.nbytes for e in reader.book_entries().values())
    total_halo = sum(p["num_halo"] for p in parts)
    # descriptive fields are not needed to read the data: keep what has the right type, drop the rest
    stats = _numbers(m.get("stats"))
    stats.setdefault("halo_ratio", total_halo / reader.num_nodes if reader.num_nodes else 0.0)
    params = m.get("params") if isinstance(m.get("params"), dict) else {}
    return {
        "format": PARTITION_FORMAT,
        "version": m["version"],
        "directory": str(reader.directory),
        "storage": reader.storage,
        "source": _text_or_none(m["graph"].get("source")),
        "num_nodes": reader.num_nodes,
        "num_edges": reader.num_edges,
        "num_parts": reader.num_parts,
        "method": _text_or_none(m.get("method")),
        "params": params,
        "halo": reader.halo,
        "book": m["book"]["kind"],
        "node_data": m["node_data"],
        "edge_data": m["edge_data"],
        "topology_dtype": "int64",
        "partitions": parts,
        "bytes": book_bytes + sum(p["bytes"] for p in parts),
        "stats": stats,
    }


# --------------------------------------------------------------------------- verify


def verify(
    directory: PathLike,
    graph: Union[PathLike, Graph, None] = None,
    *,
    node_data: Optional[Mapping[str, PathLike]] = None,
    edge_data: Optional[Mapping[str, PathLike]] = None,
    progress: Optional[Progress] = None,
) -> dict[str, Any]:
    """Check every checksum and invariant; with `graph`, prove the result reconstructs it.

    Returns a report: `ok`, `problems` (one line each), `notes`, `checked`.
    Raises InputError when the directory does not exist, IntegrityError when
    it has no readable manifest.
    """
    fmt = _format_of(directory, missing_is_damage=True)
    if fmt == FILELIST_FORMAT:
        if graph is not None or node_data or edge_data:
            raise InputError(directory, "holds export-feat exports: --graph, --node-data and --edge-data apply to partition results")
        return verify_exports(directory)
    if fmt == CHECKPOINT_FORMAT:
        if graph is not None or node_data or edge_data:
            raise InputError(directory, "is a checkpoint: --graph, --node-data and --edge-data apply to partition results")
        from gpart.ckpt import verify_checkpoint

        return verify_checkpoint(directory)
    if fmt != PARTITION_FORMAT:
        raise InputError(Path(directory) / MANIFEST_NAME, f"format {fmt!r} is not a partition result or checkpoint")
    try:
        reader = PartitionReader(directory, check_files=False)
    except GpartError as exc:
        raise IntegrityError(exc.path, f"manifest is invalid: {exc.problem}") from None
    with reader:
        return _PartitionVerifier(reader, or_null(progress)).run(graph, node_data, edge_data)


class _PartitionVerifier:
    def __init__(self, reader: PartitionReader, progress: Progress):
        self.reader = reader
        self.progress = progress
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.damaged: set[str] = set()

    def problem(self, where: str, text: str) -> None:
        self.problems.append(f"{self.reader.directory / where}: {text}")

    def run(self, graph: Union[PathLike, Graph, None], node_data, edge_data) -> dict[str, Any]:
        reader = self.reader
        entries = reader.all_entries()
        with self.progress.stage("checksums", total=len(entries)) as bar:
            for label, entry in entries:
                problems = self._checksum(entry)
                if problems:
                    self.damaged.add(label)
                    self.problems += problems
                bar.advance(1)
        structure_checked = self._invariants()
        source = None
        if graph is not None:
            g = self._load_graph(graph, node_data, edge_data)
            source = g.source if isinstance(g.source, str) else None
            if structure_checked:
                self._against_graph(g)
            else:
                self.notes.append("reconstruction of the input not checked: the result is damaged")
        return {
            "format": PARTITION_FORMAT,
            "directory": str(reader.directory),
            "ok": not self.problems,
            "problems": list(dict.fromkeys(self.problems)),  # a broken HDF5 file fails every dataset alike
            "notes": self.notes,
            "checked": {
                "arrays": len(entries),
                "checksums": True,
                "invariants": structure_checked,
                "graph": source if graph is not None else None,
                "reconstruction": graph is not None and structure_checked,
            },
        }

    def _checksum(self, entry) -> list[str]:
        try:
            self.reader.check_checksum(entry)
        except GpartError as exc:
            return [exc.one_line()]
        return []

    # -- structure without the input

    def _array(self, part: int, key: str) -> Optional[np.ndarray]:
        if f"{part_dir(part)}/{key}" in self.damaged:
            return None
        try:
            return np.asarray(self.reader.array(part, key))
        except GpartError as exc:
            self.problems.append(exc.one_line())
            return None

    def _invariants(self) -> bool:
        """SPEC.md 4.4 invariants. Returns False when damaged arrays prevent the check."""
        reader = self.reader
        if any(label.startswith("book/") for label in self.damaged):
            return False
        try:
            book = reader.book()
        except GpartError as exc:
            self.problems.append(exc.one_line())
            return False
        n, num_edges = reader.num_nodes, reader.num_edges
        problems_before = len(self.problems)
        seen = np.zeros(num_edges, dtype=bool)
        complete = True
        edge_cut = 0
        with self.progress.stage("invariants", total=reader.num_parts) as bar:
            for p in range(reader.num_parts):
                arrays = {k: self._array(p, k) for k in ("node_ids", "indptr", "indices", "edge_ids")}
                if any(a is None for a in arrays.values()):
                    complete = False
                    bar.advance(1)
                    continue
                edge_cut += self._check_part(p, book, n, num_edges, seen, **arrays)
                bar.advance(1)
        if not complete:
            return False
        if not seen.all():
            missing = np.flatnonzero(~seen)
            self.problem(MANIFEST_NAME, f"{missing.shape[0]} edge ids stored in no partition (first {missing[:5].tolist()})")
        stats = reader.manifest.get("stats")
        stats = stats if isinstance(stats, dict) else {}
        if stats.get("edge_cut") != edge_cut:
            self.problem(MANIFEST_NAME, f"stats.edge_cut is {stats.get('edge_cut')}, the partitions cut {edge_cut} edges")
        return len(self.problems) == problems_before

    def _check_part(self, p, book, n, num_edges, seen, node_ids, indptr, indices, edge_ids) -> int:
        pi = self.reader.part_info(p)
        owned_n, halo_n, edges_n = pi["num_owned"], pi["num_halo"], pi["num_edges"]
        here = part_dir(p)
        owned, halo = node_ids[:owned_n], node_ids[owned_n:]
        for what, ids in (("owned", owned), ("halo", halo)):
            if ids.size and (ids.min() < 0 or ids.max() >= n):
                self.problem(here, f"{what} node ids outside 0..{n - 1}")
                return 0
            if ids.size > 1 and not np.all(np.diff(ids) > 0):
                self.problem(here, f"{what} node ids are not strictly ascending")
        if owned.size:
            if not np.all(book.owner(owned) == p):
                self.problem(here, "owned nodes disagree with the partition book's owner")
            if not np.array_equal(book.local(owned), np.arange(owned_n)):
                self.problem(here, "owned nodes disagree with the partition book's local ids")
        if halo.size and np.any(book.owner(halo) == p):
            self.problem(here, "halo lists nodes this partition owns")
        if indptr[0] != 0 or indptr[-1] != edges_n or np.any(np.diff(indptr) < 0):
            self.problem(f"{here}/indptr", f"not non-decreasing from 0 to {edges_n}")
        if indices.size and (indices.min() < 0 or indices.max() >= owned_n + halo_n):
            self.problem(f"{here}/indices", f"local ids outside 0..{owned_n + halo_n - 1}")
            return 0
        remote = indices[indices >= owned_n] - owned_n
        if halo_n and np.bincount(remote, minlength=halo_n).min() == 0:
            self.problem(here, "halo lists nodes that are the source of no stored edge")
        if edge_ids.size:
            if edge_ids.min() < 0 or edge_ids.max() >= num_edges:
                self.problem(f"{here}/edge_ids", f"edge ids outside 0..{num_edges - 1}")
                return int(remote.shape[0])
            order = np.sort(edge_ids)
            dup_here = order.size > 1 and bool(np.any(order[1:] == order[:-1]))
            if dup_here or seen[edge_ids].any():
                self.problem(f"{here}/edge_ids", "edge ids stored more than once")
            seen[edge_ids] = True
        return int(remote.shape[0])

    # -- against the input

    def _load_graph(self, graph, node_data, edge_data) -> Graph:
        if isinstance(graph, Graph):
            return graph
        from gpart.formats.readers import read_graph

        recorded = self.reader.manifest["graph"]
        extra_nodes = {k: v for k, v in recorded.get("node_data_files", {}).items() if Path(str(v).split(".npz:")[0]).exists()}
        extra_edges = {k: v for k, v in recorded.get("edge_data_files", {}).items() if Path(str(v).split(".npz:")[0]).exists()}
        extra_nodes.update(node_data or {})
        extra_edges.update(edge_data or {})
        return read_graph(graph, node_data=extra_nodes or None, edge_data=extra_edges or None)

    def _against_graph(self, g: Graph) -> None:
        reader = self.reader
        if (g.num_nodes, g.num_edges) != (reader.num_nodes, reader.num_edges):
            self.problem(
                MANIFEST_NAME,
                f"result has {reader.num_nodes} nodes and {reader.num_edges} edges, the input {g.num_nodes} and {g.num_edges}",
            )
            return
        self._data_names("node", reader.manifest["node_data"], g.node_data)
        self._data_names("edge", reader.manifest["edge_data"], g.edge_data)
        with self.progress.stage("reconstruct input", total=reader.num_parts) as bar:
            for p in range(reader.num_parts):
                self._reconstruct_part(p, g)
                bar.advance(1)

    def _data_names(self, kind: str, stored: dict, given: dict) -> None:
        for name in given:
            if name not in stored:
                self.problem(MANIFEST_NAME, f"the input's {kind} array {name!r} is not in the result")
        for name in stored:
            if name not in given:
                self.notes.append(f"{kind} array {name!r} not checked against the input: the input has no such array")

    def _reconstruct_part(self, p: int, g: Graph) -> None:
        here = part_dir(p)
        node_ids = self._array(p, "node_ids")
        indptr = self._array(p, "indptr")
        indices = self._array(p, "indices")
        edge_ids = self._array(p, "edge_ids")
        columns = np.repeat(np.arange(indptr.shape[0] - 1, dtype=np.int64), np.diff(indptr))
        if edge_ids.size:
            src = np.asarray(g.src[edge_ids], dtype=np.int64)
            dst = np.asarray(g.dst[edge_ids], dtype=np.int64)
            bad_src = np.flatnonzero(src != node_ids[indices])
            bad_dst = np.flatnonzero(dst != node_ids[columns])
            if bad_src.size or bad_dst.size:
                k = int((bad_src if bad_src.size else bad_dst)[0])
                self.problem(
                    here,
                    f"{bad_src.size + bad_dst.size} stored edges differ from the input's "
                    f"(edge {int(edge_ids[k])}: stored {int(node_ids[indices[k]])}->{int(node_ids[columns[k]])}, "
                    f"input {int(src[k])}->{int(dst[k])})",
                )
        # Edges are in CSC order, ascending edge id within a column (SPEC.md 4.1).
        if edge_ids.size > 1:
            same_column = columns[1:] == columns[:-1]
            if np.any(edge_ids[1:][same_column] <= edge_ids[:-1][same_column]):
                self.problem(f"{here}/edge_ids", "edges of a column are not in ascending edge id")
        info = self.reader.part_info(p)
        train = train_mask(g)
        if "num_train" in info and train is not None:  # SPEC.md 4.5
            counted = int(np.count_nonzero(train[node_ids[:info["num_owned"]]]))
            if counted != info["num_train"]:
                self.problem(here, f"num_train is {info['num_train']}, the owned nodes hold {counted} training nodes")
        rows = node_ids.shape[0] if self.reader.halo else info["num_owned"]
        for name in self.reader.node_data_names():
            if name in g.node_data:
                self._compare_rows(p, f"node_data/{name}", g.node_data[name], node_ids[:rows])
        for name in self.reader.edge_data_names():
            if name in g.edge_data:
                self._compare_rows(p, f"edge_data/{name}", g.edge_data[name], edge_ids)

    def _compare_rows(self, p: int, key: str, source: np.ndarray, ids: np.ndarray) -> None:
        from gpart.partition import _release  # drops pages of memory-mapped rows once compared

        if f"{part_dir(p)}/{key}" in self.damaged:
            return
        try:
            stored = self.reader.array(p, key)  # a memmap for binary results: pages released as we go
        except GpartError as exc:
            self.problems.append(exc.one_line())
            return
        entry = self.reader.entry(p, key)
        dtype = storage_dtype(entry.dtype)
        where = f"{part_dir(p)}/{key}"
        if tuple(source.shape[1:]) != tuple(stored.shape[1:]):
            self.problem(where, f"rows of shape {list(stored.shape[1:])}, the input's are {list(source.shape[1:])}")
            return
        row_bytes = max(1, int(np.prod(source.shape[1:], dtype=np.int64)) * dtype.itemsize)
        step = max(1, CHUNK_BYTES // row_bytes)
        for start in range(0, ids.shape[0], step):
            chunk = ids[start : start + step]
            want = np.ascontiguousarray(source[chunk], dtype=dtype)
            have = np.ascontiguousarray(stored[start : start + step])
            _release(stored, start, start + chunk.shape[0])
            _release(source, int(chunk.min()), int(chunk.max()) + 1)
            # byte comparison: NaN payloads and -0.0 must survive exactly
            differ = want.reshape(want.shape[0], -1).view(np.uint8) != have.reshape(have.shape[0], -1).view(np.uint8)
            bad = np.flatnonzero(differ.any(axis=1)) if differ.size else np.empty(0, dtype=np.int64)
            if bad.size:
                row = start + int(bad[0])
                self.problem(where, f"{bad.size} rows differ from the input's (first: row {row}, id {int(ids[row])})")
                return


def report_exit_code(report: dict[str, Any]) -> int:
    """0 when a verify report found nothing wrong, 1 otherwise."""
    return 0 if report.get("ok") else 1

