"""Chunked graph directories (SPEC.md section 10.1): the writer and the reader, side by side.

A chunked graph is a directory of `.npy` chunk files and a `manifest.json`
laid out like DGL's chunked graph format (homogeneous graphs only), so that
W processes can each read a share of the edges and node rows without any of
them reading the whole input. `write_chunked` streams any Graph (possibly
memory-mapped) into one; `ChunkedGraph` validates the metadata before it
opens a chunk, opens chunks one at a time (memory-mapped, never unpickled),
and `read_chunked_graph` turns the directory back into the Graph it stands
for (single-machine runs over the same input).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

from gpart.base.errors import InputError, OutputError
from gpart.base.graph import Graph
from gpart.bytes.reader import drop_pages
from gpart.bytes.sink import ByteSink
from gpart.formats.files.commit import staged_output
from gpart.formats.files.manifest import fsync_dir, read_json, write_json_atomic
from gpart.formats.files.names import safe_name, safe_relpath
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.input.checks import scan_range
from gpart.formats.input.npz import npy_header, open_array_input, open_npy

PathLike = Union[str, "os.PathLike[str]"]

FORMAT = "gpart.chunked"
VERSION = 1
METADATA = "manifest.json"  # DGL names it metadata.json; gpart keeps its commit record's name
NODE_TYPE = "_N"
EDGE_TYPE = "_N:_E:_N"
WRITE_BYTES = 64 << 20  # rows per streamed piece of the writer: bounds its temporaries


def is_chunked_dir(path: PathLike) -> bool:
    """Whether `path` is a directory holding a chunked graph's manifest.json."""
    return Path(path).is_dir() and (Path(path) / METADATA).is_file()


# --------------------------------------------------------------------------- writer


def chunk_bounds(total: int, num_chunks: int) -> np.ndarray:
    """Boundaries of `num_chunks` chunks of ceil(total / num_chunks) rows (the last ones smaller, maybe empty)."""
    step = -(-total // num_chunks) if total else 0
    return np.minimum(np.arange(num_chunks + 1, dtype=np.int64) * step, total)


def _write_rows(path: Path, arr: np.ndarray, start: int, stop: int, dtype: np.dtype) -> None:
    """Rows [start, stop) of `arr` as a new .npy file, streamed in pieces, the input's pages dropped after use."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(path.parent, f"cannot create directory: {exc.strerror or exc}") from None
    in_row = int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize
    step = max(1, WRITE_BYTES // max(1, int(np.prod(arr.shape[1:], dtype=np.int64)) * np.dtype(dtype).itemsize))
    with ByteSink(path, npy_header(np.dtype(dtype), (stop - start, *arr.shape[1:]))) as out:
        for a in range(start, stop, step):
            out.write(np.ascontiguousarray(arr[a:min(a + step, stop)], dtype=dtype))
            drop_pages(arr, a * in_row, (min(a + step, stop) - a) * in_row)  # a mapped input's pages: read once


def write_chunked(graph: Graph, out_dir: PathLike, num_chunks: int, *, force: bool = False,
                  graph_name: Optional[str] = None, inputs: Sequence[PathLike] = ()) -> dict[str, Any]:
    """Write `graph` as a chunked directory of `num_chunks` edge and node chunks; return its metadata.

    Ids are stored as int64, data arrays in their own dtype; the directory is
    staged and committed with manifest.json last (formats.commit).
    """
    if num_chunks < 1:
        raise InputError(graph.source, f"number of chunks must be at least 1, got {num_chunks}")
    ebounds = chunk_bounds(graph.num_edges, num_chunks)
    nbounds = chunk_bounds(graph.num_nodes, num_chunks)
    for name in (*graph.node_data, *graph.edge_data):
        safe_name(name, "data array name", graph.source)
    edges: list[list[str]] = []
    node_files: dict[str, list[str]] = {name: [] for name in graph.node_data}
    edge_files: dict[str, list[str]] = {name: [] for name in graph.edge_data}
    with staged_output(out_dir, force=force, inputs=inputs) as stage:
        for i in range(num_chunks):
            a, b = int(ebounds[i]), int(ebounds[i + 1])
            pair = [f"edges/src-{i}.npy", f"edges/dst-{i}.npy"]
            _write_rows(stage / pair[0], graph.src, a, b, np.dtype(np.int64))
            _write_rows(stage / pair[1], graph.dst, a, b, np.dtype(np.int64))
            edges.append(pair)
            for name, arr in graph.edge_data.items():
                edge_files[name].append(f"edge_data/{name}-{i}.npy")
                _write_rows(stage / edge_files[name][-1], arr, a, b, arr.dtype)
        for j in range(num_chunks):
            for name, arr in graph.node_data.items():
                node_files[name].append(f"node_data/{name}-{j}.npy")
                _write_rows(stage / node_files[name][-1], arr, int(nbounds[j]), int(nbounds[j + 1]), arr.dtype)
        for sub in ("edges", "edge_data", "node_data"):
            if (stage / sub).is_dir():
                fsync_dir(stage / sub)
        numpy_format = {"name": "numpy"}
        metadata = {
            "format": FORMAT,
            "version": VERSION,
            "graph_name": graph_name or (Path(graph.source).name.split(".")[0] if graph.source else "graph"),
            "num_nodes": int(graph.num_nodes),
            "node_type": [NODE_TYPE],
            "num_nodes_per_chunk": [np.diff(nbounds).tolist()],
            "edge_type": [EDGE_TYPE],
            "num_edges_per_chunk": [np.diff(ebounds).tolist()],
            "edges": {EDGE_TYPE: {"format": numpy_format, "data": edges}},
            "node_data": {NODE_TYPE: {k: {"format": numpy_format, "data": v} for k, v in node_files.items()}},
            "edge_data": {EDGE_TYPE: {k: {"format": numpy_format, "data": v} for k, v in edge_files.items()}},
        }
        write_json_atomic(stage / METADATA, metadata)
    return metadata


# --------------------------------------------------------------------------- reader


def _counts(meta: dict[str, Any], key: str, where: Path) -> np.ndarray:
    value = meta.get(key)
    if not (isinstance(value, list) and len(value) == 1 and isinstance(value[0], list)):
        raise InputError(where, f"{key!r} must be a list holding one list of chunk sizes (one node and edge type)")
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in value[0]):
        raise InputError(where, f"{key!r} must hold non-negative integers")
    return np.asarray(value[0], dtype=np.int64).reshape(-1)


def _typed(meta: dict[str, Any], key: str, type_name: str, where: Path) -> dict[str, Any]:
    """meta[key][type_name] (a dict; {} when the key is absent or empty)."""
    outer = meta.get(key, {})
    if not isinstance(outer, dict) or (outer and set(outer) != {type_name}) or not isinstance(outer.get(type_name, {}), dict):
        raise InputError(where, f"{key!r} must be an object keyed by {type_name!r}")
    return outer.get(type_name, {})


class ChunkedGraph:
    """A chunked graph directory, its metadata validated; chunks are opened one at a time."""

    def __init__(self, directory: PathLike):
        self.directory = Path(directory)
        where = self.where = self.directory / METADATA
        if not self.directory.is_dir():
            raise InputError(self.directory, "no such directory")
        meta = read_json(where)
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise InputError(where, f"not a chunked graph (format must be {FORMAT!r})")
        if meta.get("version") != VERSION:
            raise InputError(where, f"{FORMAT} version {meta.get('version')!r} is not supported (supported: [{VERSION}])")
        if meta.get("node_type") != [NODE_TYPE] or meta.get("edge_type") != [EDGE_TYPE]:
            raise InputError(where, f"only homogeneous graphs are supported: node_type [{NODE_TYPE!r}], edge_type [{EDGE_TYPE!r}]")
        self.meta = meta
        num_nodes = meta.get("num_nodes")
        if not isinstance(num_nodes, int) or isinstance(num_nodes, bool) or num_nodes < 0:
            raise InputError(where, f"'num_nodes' must be a non-negative integer, got {num_nodes!r}")
        self.num_nodes: int = num_nodes
        self.node_counts = _counts(meta, "num_nodes_per_chunk", where)
        self.edge_counts = _counts(meta, "num_edges_per_chunk", where)
        if int(self.node_counts.sum()) != self.num_nodes:
            raise InputError(where, f"num_nodes_per_chunk sums to {int(self.node_counts.sum())}, num_nodes is {self.num_nodes}")
        self.node_offsets = np.concatenate([[0], np.cumsum(self.node_counts)]).astype(np.int64)
        self.edge_offsets = np.concatenate([[0], np.cumsum(self.edge_counts)]).astype(np.int64)
        self.num_edges = int(self.edge_offsets[-1])
        edges = _typed(meta, "edges", EDGE_TYPE, where)
        self.edge_format = (edges.get("format") or {}).get("name") if isinstance(edges.get("format"), dict) else None
        if self.edge_format not in ("numpy", "parquet"):
            raise InputError(where, f"edges format must be 'numpy' or 'parquet', got {self.edge_format!r}")
        self.edge_files = self._files(edges, len(self.edge_counts), "edges", pairs=self.edge_format == "numpy")
        self.node_data = self._arrays(_typed(meta, "node_data", NODE_TYPE, where), len(self.node_counts), "node_data")
        self.edge_data = self._arrays(_typed(meta, "edge_data", EDGE_TYPE, where), len(self.edge_counts), "edge_data")

    @property
    def num_node_chunks(self) -> int:
        return int(self.node_counts.shape[0])

    @property
    def num_edge_chunks(self) -> int:
        return int(self.edge_counts.shape[0])

    def _path(self, name: Any) -> Path:
        if isinstance(name, str) and os.path.isabs(name):
            return Path(name)
        return self.directory / safe_relpath(name, "chunk file name", self.where)

    def _files(self, spec: dict[str, Any], count: int, what: str, pairs: bool = False) -> list:
        data = spec.get("data")
        if not isinstance(data, list) or len(data) != count:
            raise InputError(self.where, f"{what}: 'data' must list {count} chunk files (one per chunk)")
        if pairs:
            if not all(isinstance(d, list) and len(d) == 2 for d in data):
                raise InputError(self.where, f"{what}: each numpy edge chunk is a [src, dst] pair of .npy files")
            return [(self._path(s), self._path(d)) for s, d in data]
        return [self._path(d) for d in data]

    def _arrays(self, spec: dict[str, Any], count: int, what: str) -> dict[str, list[Path]]:
        out = {}
        for name, entry in spec.items():
            safe_name(name, f"{what} name", self.where)
            fmt = entry.get("format") if isinstance(entry, dict) else None
            if not isinstance(fmt, dict) or fmt.get("name") != "numpy":
                raise InputError(self.where, f"{what} {name!r}: format must be {{'name': 'numpy'}}")
            out[name] = self._files(entry, count, f"{what} {name!r}")
        return out

    # -- chunks

    def edges(self, i: int, check_ids: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) of edge chunk i, memory-mapped, shapes and (optionally) id ranges checked."""
        expected = int(self.edge_counts[i])
        if self.edge_format == "parquet":
            src, dst, path_s, path_d = *_read_parquet(self.edge_files[i]), self.edge_files[i], self.edge_files[i]
        else:
            path_s, path_d = self.edge_files[i]
            src, dst = open_npy(path_s), open_npy(path_d)
        for path, arr, key in ((path_s, src, "src"), (path_d, dst, "dst")):
            if arr.dtype.kind not in "iu" or arr.ndim != 1:
                raise InputError(path, f"{key} chunk must be a 1-D integer array, got {arr.dtype} of shape {list(arr.shape)}")
            if arr.shape[0] != expected:
                raise InputError(path, f"{key} chunk has {arr.shape[0]} entries, num_edges_per_chunk says {expected}")
            if check_ids and arr.size:
                lo, hi = scan_range(arr)
                if lo < 0 or hi >= self.num_nodes:
                    raise InputError(path, f"{key} chunk holds id {lo if lo < 0 else hi} outside [0, {self.num_nodes})")
        return src, dst

    def data_chunk(self, kind: str, name: str, i: int) -> np.ndarray:
        """Chunk i of node or edge array `name` (kind 'node' or 'edge'), memory-mapped, rows checked."""
        files, counts = (self.node_data, self.node_counts) if kind == "node" else (self.edge_data, self.edge_counts)
        path = files[name][i]
        if path.suffix.lower() != ".npy":
            raise InputError(path, "data chunks must be .npy files")
        arr, _ = open_array_input(os.fspath(path))
        if arr.shape[0] != int(counts[i]):
            raise InputError(path, f"{kind} data {name!r} chunk has {arr.shape[0]} rows, the manifest's chunk size is {int(counts[i])}")
        return arr

    def data_layout(self, kind: str) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        """Dtype and row shape of every node or edge array: those of its first chunk."""
        files = self.node_data if kind == "node" else self.edge_data
        count = self.num_node_chunks if kind == "node" else self.num_edge_chunks
        return {name: _layout_of(self.data_chunk(kind, name, 0)) for name in files} if count else {}


def _layout_of(arr: np.ndarray) -> tuple[np.dtype, tuple[int, ...]]:
    return arr.dtype, tuple(int(s) for s in arr.shape[1:])


def check_same_layout(path: Path, name: str, arr: np.ndarray, layout: tuple[np.dtype, tuple[int, ...]]) -> None:
    """A data chunk must match its array's dtype and row shape (those of its first chunk)."""
    if _layout_of(arr) != layout:
        raise InputError(path, f"array {name!r}: chunk is {arr.dtype} rows {list(arr.shape[1:])}, "
                               f"the first chunk is {layout[0]} rows {list(layout[1])}")


def _read_parquet(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        import pyarrow.parquet as pq  # optional: only Parquet edge chunks need it
    except ImportError:
        raise InputError(path, "Parquet edge chunks need pyarrow, which is not installed") from None
    try:
        table = pq.read_table(path, columns=["src", "dst"])
    except Exception as exc:  # pyarrow raises assorted errors on damaged files
        raise InputError(path, f"cannot read Parquet edge chunk: {' '.join(str(exc).split())[:200]}") from None
    return table.column("src").to_numpy(), table.column("dst").to_numpy()


def read_chunked_graph(directory: PathLike, spill: Optional[ScratchDir] = None) -> Graph:
    """The graph a chunked directory stands for, its chunks concatenated: in memory, or (`spill`, more than one chunk)
    into files of that scratch directory, mapped read-only, so that a graph larger than memory costs page cache,
    not anonymous memory (one chunk stays memory-mapped either way)."""
    cg = ChunkedGraph(directory)
    spill = spill if cg.num_edge_chunks > 1 or cg.num_node_chunks > 1 else None
    edges = cg.num_edges
    src = _join(spill, "src", (cg.edges(i)[0] for i in range(cg.num_edge_chunks)), edges, np.dtype(np.int64))
    dst = _join(spill, "dst", (cg.edges(i, check_ids=False)[1] for i in range(cg.num_edge_chunks)), edges, np.dtype(np.int64))
    graph = Graph(cg.num_nodes, src, dst, source=os.fspath(directory), input_format="chunked")
    for kind, names, target in (("node", cg.node_data, graph.node_data), ("edge", cg.edge_data, graph.edge_data)):
        count, rows = (cg.num_node_chunks, cg.num_nodes) if kind == "node" else (cg.num_edge_chunks, cg.num_edges)
        for name in names:
            first = cg.data_chunk(kind, name, 0) if count else np.zeros(0, dtype=np.float32)
            target[name] = _join(spill, f"{kind}-{name}", _data_chunks(cg, kind, name, count, _layout_of(first)), rows,
                                 first.dtype, first.shape[1:])
    return graph


def _data_chunks(cg: ChunkedGraph, kind: str, name: str, count: int, layout: tuple[np.dtype, tuple[int, ...]]) -> Iterator[np.ndarray]:
    """The `count` chunks of data array `name`, each checked against the first's layout."""
    files = cg.node_data if kind == "node" else cg.edge_data
    for i in range(count):
        arr = cg.data_chunk(kind, name, i)
        check_same_layout(files[name][i], name, arr, layout)
        yield arr


def _join(spill: Optional[ScratchDir], name: str, pieces: Iterator[np.ndarray], rows: int, dtype: np.dtype,
          row_shape: tuple[int, ...] = ()) -> np.ndarray:
    """The pieces concatenated: in memory, or in a file of `spill` mapped read-only."""
    if spill is None:
        return _concat(list(pieces), dtype)
    return spill.concatenated(name, pieces, dtype, (rows, *row_shape))


def _concat(arrays: list[np.ndarray], dtype: npt.DTypeLike) -> np.ndarray:
    if len(arrays) == 1:
        return arrays[0]
    if not arrays:
        return np.zeros(0, dtype=dtype)
    return np.concatenate(arrays)
