"""Typed `.npz` input (SPEC.md 8.1) and the type-erased graph (SPEC.md 8.2).

    g = read_hetero_graph("hetero.npz")      # HeteroGraph: per-type counts, edges, data
    erased = g.erased()                      # a gpart.base.graph.Graph over one global id space

An archive is typed when it declares a node type (a key `<type>/num_nodes`). Everything is validated before a
HeteroGraph is returned (one InputError line naming the file); members stored
uncompressed stay memory-mapped, id ranges are checked in bounded chunks.
"""

from __future__ import annotations

import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.bytes.reader import drop_pages
from gpart.formats.files.dtypes import is_supported
from gpart.formats.files.names import safe_name
from gpart.formats.input.checks import check_input_file, scan_range
from gpart.formats.input.npz import read_npz_arrays
from gpart.formats.partition.typed import EdgeType

PathLike = Union[str, "os.PathLike[str]"]
TYPE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]{0,63}$")
TYPED_MARK = re.compile(r"^[^/]+/num_nodes\.npy$")  # a member declaring a node type makes an archive typed
TYPE_RULE = "use letters, digits, '_' and '-' (not starting with '-'; at most 64 characters; no '.', ':' or '/')"
# Edges per step when building erased id arrays (bounds temporaries).
ERASE_CHUNK = 1 << 22


@dataclass
class HeteroGraph:
    """A typed graph: node types in name order, edge types (triplets) in (s, r, d) order."""

    num_nodes: dict[str, int]
    edges: dict[EdgeType, tuple[np.ndarray, np.ndarray]]
    node_data: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    edge_data: dict[EdgeType, dict[str, np.ndarray]] = field(default_factory=dict)
    source: Optional[str] = None

    @property
    def node_types(self) -> list[str]:
        return sorted(self.num_nodes)

    @property
    def edge_types(self) -> list[EdgeType]:
        return sorted(self.edges)

    def num_edges(self, etype: EdgeType) -> int:
        return int(self.edges[etype][0].shape[0])

    def node_offsets(self) -> np.ndarray:
        counts = [self.num_nodes[t] for t in self.node_types]
        return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)

    def edge_offsets(self) -> np.ndarray:
        counts = [self.num_edges(e) for e in self.edge_types]
        return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)

    def erased(self, scratch: Any = None) -> Graph:
        """The homogeneous graph over erased ids (SPEC.md 8.2), without data arrays.

        With `scratch` (a gpart.formats.files.scratch.ScratchDir) the erased ids are written to
        scratch files and returned as read-only memory maps, whose pages the partition
        pass releases as it goes (as for a mapped homogeneous input); the typed input's
        pages are released chunk by chunk either way."""
        noff, eoff = self.node_offsets(), self.edge_offsets()
        index = {t: i for i, t in enumerate(self.node_types)}
        total = int(eoff[-1])
        out = [_target(scratch, name, total) for name in ("erased_src", "erased_dst")]
        for r, etype in enumerate(self.edge_types):
            for side, arr, ntype in ((0, self.edges[etype][0], etype[0]), (1, self.edges[etype][1], etype[2])):
                for start in range(0, arr.shape[0], ERASE_CHUNK):
                    stop = min(start + ERASE_CHUNK, arr.shape[0])
                    lo = int(eoff[r]) + start
                    np.add(arr[start:stop], noff[index[ntype]], out=out[side][lo:lo + stop - start], casting="unsafe")
                    drop_pages(arr, start * arr.itemsize, (stop - start) * arr.itemsize)
                    # written pages of a scratch map stay in the page cache (and reach the file); unmapped,
                    # they no longer count in this process's RSS, which then stays off the edges' size
                    drop_pages(out[side], lo * 8, (stop - start) * 8, modes=("r+",))
        if scratch is not None:
            out = [_reopened_read_only(arr) for arr in out]
        return Graph(int(noff[-1]), out[0], out[1], source=self.source, input_format="npz")

    def type_masks(self) -> dict[str, np.ndarray]:
        """`ntype_<t>` -> bool [N]: 1 on the erased ids of type t (per-type balance constraints)."""
        noff = self.node_offsets()
        out = {}
        for t, name in enumerate(self.node_types):
            mask = np.zeros(int(noff[-1]), dtype=bool)
            mask[noff[t]:noff[t + 1]] = True
            out[f"ntype_{name}"] = mask
        return out


def _target(scratch: Any, name: str, length: int) -> np.ndarray:
    if scratch is None or length == 0:
        return np.empty(length, dtype=np.int64)
    return scratch.array(name, np.int64, length)


def _reopened_read_only(arr: np.ndarray) -> np.ndarray:
    """A written scratch map flushed and mapped again read-only (its pages can then be dropped
    as clean cache); an array that is no file map (an empty result) as it is."""
    if not isinstance(arr, np.memmap) or arr.filename is None:
        return arr
    arr.flush()
    return np.memmap(arr.filename, dtype=np.int64, mode="r", shape=arr.shape)


def is_typed_npz(path: PathLike) -> bool:
    """True for an existing `.npz` declaring a node type (a member `<type>/num_nodes.npy`, SPEC.md 8.1)."""
    p = Path(path)
    if p.suffix.lower() != ".npz" or not p.is_file():
        return False
    try:
        with zipfile.ZipFile(p) as zf:
            return any(TYPED_MARK.match(info.filename) for info in zf.infolist())
    except (zipfile.BadZipFile, OSError):
        return False  # the homogeneous reader reports the damage


def read_hetero_graph(path: PathLike) -> HeteroGraph:
    """Read and validate a typed `.npz` (SPEC.md 8.1)."""
    path = Path(path)
    check_input_file(path)
    arrays = read_npz_arrays(path)
    fields: dict[str, dict[str, np.ndarray]] = {}
    for key, arr in arrays.items():
        if key.count("/") != 1:
            raise InputError(path, f"key {key!r} is not <type>/<field>: a typed .npz names every array so (SPEC.md 8.1)")
        kind, name = key.split("/")
        fields.setdefault(kind, {})[name] = arr
    num_nodes = {}
    for kind, group in fields.items():
        if ":" not in kind:
            _type_name(path, kind, "node type")
            if "num_nodes" not in group:
                raise InputError(path, f"node type {kind!r} has no '{kind}/num_nodes'")
            num_nodes[kind] = _count(path, f"{kind}/num_nodes", group["num_nodes"])
    graph = HeteroGraph(num_nodes, {}, source=os.fspath(path))
    for kind, group in fields.items():
        if ":" in kind:
            _read_edge_type(path, graph, kind, group)
        else:
            graph.node_data[kind] = {n: _data(path, f"{kind}/{n}", a, num_nodes[kind], f"{kind}/num_nodes")
                                     for n, a in group.items() if n != "num_nodes"}
    if not num_nodes:
        raise InputError(path, "typed .npz declares no node type (no '<type>/num_nodes' key)")
    return graph


def _read_edge_type(path: Path, graph: HeteroGraph, kind: str, group: dict[str, np.ndarray]) -> None:
    parts = kind.split(":")
    if len(parts) != 3:
        raise InputError(path, f"edge type {kind!r} is not a src:relation:dst triplet")
    for part in parts:
        _type_name(path, part, "edge type part")
    s, _, d = parts
    for t in (s, d):
        if t not in graph.num_nodes:
            raise InputError(path, f"edge type {kind!r} names unknown node type {t!r} (declared: {', '.join(sorted(graph.num_nodes))})")
    if "src" not in group or "dst" not in group:
        have, miss = ("src", "dst") if "src" in group else ("dst", "src")
        raise InputError(path, f"edge type {kind!r} has no '{kind}/{miss}'" + (f" beside '{kind}/{have}'" if have in group else ""))
    src, dst = group["src"], group["dst"]
    for key, arr, bound_type in ((f"{kind}/src", src, s), (f"{kind}/dst", dst, d)):
        _ids(path, key, arr, graph.num_nodes[bound_type], bound_type)
    if src.shape[0] != dst.shape[0]:
        raise InputError(path, f"'{kind}/src' has {src.shape[0]} ids but '{kind}/dst' has {dst.shape[0]}")
    etype = (s, parts[1], d)
    graph.edges[etype] = (src, dst)
    graph.edge_data[etype] = {n: _data(path, f"{kind}/{n}", a, src.shape[0], f"len('{kind}/src')")
                              for n, a in group.items() if n not in ("src", "dst")}


def _type_name(path: Path, name: str, what: str) -> None:
    if not TYPE_RE.match(name):
        raise InputError(path, f"{what} {name!r} is not allowed: {TYPE_RULE}")


def _count(path: Path, key: str, arr: np.ndarray) -> int:
    if arr.dtype.kind not in "iu" or arr.size != 1 or arr.ndim > 1:
        raise InputError(path, f"{key!r} must be an integer scalar, got {arr.dtype} of shape {list(arr.shape)}")
    value = int(np.asarray(arr).reshape(-1)[0])
    if value < 0:
        raise InputError(path, f"{key!r} is negative ({value})")
    return value


def _ids(path: Path, key: str, arr: np.ndarray, bound: int, ntype: str) -> None:
    if arr.dtype.kind not in "iu":
        raise InputError(path, f"{key!r} has dtype {arr.dtype}; node ids must be integers")
    if arr.ndim != 1:
        raise InputError(path, f"{key!r} must be 1-D, has shape {list(arr.shape)}")
    lo, hi = scan_range(arr)
    if arr.size and lo < 0:
        raise InputError(path, f"{key!r} holds a negative id {lo}")
    if arr.size and hi >= bound:
        at = int(np.argmax(np.asarray(arr) >= bound))
        raise InputError(path, f"{key!r} holds id {hi} >= {ntype}/num_nodes {bound} (first bad at index {at})")


def _data(path: Path, key: str, arr: np.ndarray, rows: int, counted: str) -> np.ndarray:
    safe_name(key.split("/")[1], "data array name", path)
    if not is_supported(arr.dtype) or arr.ndim < 1:
        raise InputError(path, f"data array {key!r}: dtype {arr.dtype} with {arr.ndim} dimensions cannot be stored")
    if arr.shape[0] != rows:
        raise InputError(path, f"data array {key!r} has {arr.shape[0]} rows, expected {counted} = {rows}")
    return arr
