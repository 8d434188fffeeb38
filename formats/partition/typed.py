"""The typed fields of a partition result (SPEC.md 8.3-8.4): manifest `hetero`, per-partition typed arrays.

`HeteroMeta.from_manifest` validates the manifest's `hetero` object (names,
triplets, counts, offsets) without touching data; `expected_arrays` gives
the typed arrays a partition must hold (key -> dtype, shape), which
PartitionReader checks beside the arrays of section 4. Writers build the
same objects with `HeteroMeta.to_json` and `part_counts_json`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import numpy as np

from gpart.base.errors import InputError
from gpart.formats.files.dtypes import storage_dtype
from gpart.formats.files.names import safe_name

HETERO_KEY = "hetero"
EDGE_TYPE_KEY = "edge_type"
EDGE_TYPE_DTYPE = "int16"
MAX_EDGE_TYPES = 32767
EdgeType = tuple[str, str, str]
Where = Union[str, "os.PathLike[str]", None]
COUNT_KEYS = ("num_owned", "num_halo", "num_edges", "num_cut")


def etype_key(etype: EdgeType) -> str:
    return ":".join(etype)


def etype_path(etype: EdgeType) -> str:
    return ".".join(etype)


def node_data_key(ntype: str, name: str) -> str:
    return f"node_data/{ntype}/{name}"


def edge_data_key(etype: EdgeType, name: str) -> str:
    return f"edge_data/{etype_path(etype)}/{name}"


@dataclass
class HeteroMeta:
    """Node types, edge types (triplets), their counts and offsets in the erased id space, and the typed data."""

    node_types: list[str]
    num_nodes: list[int]
    edge_types: list[EdgeType]
    num_edges: list[int]
    node_data: dict[str, dict[str, tuple[str, tuple[int, ...]]]]  # ntype -> name -> (dtype, row_shape)
    edge_data: dict[EdgeType, dict[str, tuple[str, tuple[int, ...]]]]

    @property
    def node_offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.num_nodes, dtype=np.int64)]).astype(np.int64)

    @property
    def edge_offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.num_edges, dtype=np.int64)]).astype(np.int64)

    def ntype_index(self, ntype: str, where: Where = None) -> int:
        try:
            return self.node_types.index(ntype)
        except ValueError:
            raise InputError(where, f"unknown node type {ntype!r} (node types: {', '.join(self.node_types)})") from None

    def etype_index(self, etype: Any, where: Where = None) -> int:
        key = etype_key(tuple(etype)) if isinstance(etype, (tuple, list)) else str(etype)
        keys = [etype_key(e) for e in self.edge_types]
        if key not in keys:
            raise InputError(where, f"unknown edge type {key!r} (edge types: {', '.join(keys)}; give (src, relation, dst) triplets)")
        return keys.index(key)

    def to_json(self) -> dict[str, Any]:
        noff, eoff = self.node_offsets, self.edge_offsets
        spec = lambda d: {n: {"dtype": dt, "row_shape": list(rs)} for n, (dt, rs) in d.items()}  # noqa: E731
        return {
            "node_types": [{"name": t, "num_nodes": int(n), "offset": int(noff[i])}
                           for i, (t, n) in enumerate(zip(self.node_types, self.num_nodes))],
            "edge_types": [{"src": e[0], "rel": e[1], "dst": e[2], "num_edges": int(n), "offset": int(eoff[i])}
                           for i, (e, n) in enumerate(zip(self.edge_types, self.num_edges))],
            "node_data": {t: spec(self.node_data.get(t, {})) for t in self.node_types},
            "edge_data": {etype_key(e): spec(self.edge_data.get(e, {})) for e in self.edge_types},
            "edge_type_dtype": EDGE_TYPE_DTYPE,
        }

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any], where: Where) -> Optional["HeteroMeta"]:
        """The validated `hetero` object of a manifest, or None for a homogeneous result."""
        h = manifest.get(HETERO_KEY)
        if h is None:
            return None
        try:
            return cls._parse(h, manifest, where)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise InputError(where, f"malformed 'hetero' object: {type(exc).__name__}: {exc}") from None

    @classmethod
    def _parse(cls, h: dict[str, Any], manifest: dict[str, Any], where: Where) -> "HeteroMeta":
        ntypes = [safe_name(str(x["name"]), "node type", where) for x in h["node_types"]]
        nnodes = [_count(x["num_nodes"]) for x in h["node_types"]]
        etypes = [(str(x["src"]), str(x["rel"]), str(x["dst"])) for x in h["edge_types"]]
        nedges = [_count(x["num_edges"]) for x in h["edge_types"]]
        if len(set(ntypes)) != len(ntypes) or len(set(etypes)) != len(etypes) or len(etypes) > MAX_EDGE_TYPES:
            raise ValueError("node or edge types repeat, or more than 32767 edge types")
        for e in etypes:
            for part in e:
                safe_name(part, "edge type part", where)
            if e[0] not in ntypes or e[2] not in ntypes:
                raise ValueError(f"edge type {etype_key(e)!r} names a node type that is not listed")
        if h.get("edge_type_dtype") != EDGE_TYPE_DTYPE:
            raise ValueError(f"edge_type_dtype must be {EDGE_TYPE_DTYPE!r}")
        meta = cls(ntypes, nnodes, etypes, nedges, {}, {})
        for i, x in enumerate(h["node_types"]):
            if int(x["offset"]) != int(meta.node_offsets[i]):
                raise ValueError(f"node type {ntypes[i]!r}: offset {x['offset']} is not the sum of the counts before it")
        for i, x in enumerate(h["edge_types"]):
            if int(x["offset"]) != int(meta.edge_offsets[i]):
                raise ValueError(f"edge type {etype_key(etypes[i])!r}: offset {x['offset']} is not the sum of the counts before it")
        graph = manifest["graph"]
        if sum(nnodes) != graph["num_nodes"] or sum(nedges) != graph["num_edges"]:
            raise ValueError(f"types count {sum(nnodes)} nodes and {sum(nedges)} edges, the graph {graph['num_nodes']} and {graph['num_edges']}")
        if set(h["node_data"]) != set(ntypes) or set(h["edge_data"]) != {etype_key(e) for e in etypes}:
            raise ValueError("node_data / edge_data must list every node / edge type")
        meta.node_data = {t: _specs(h["node_data"][t], where) for t in ntypes}
        meta.edge_data = {e: _specs(h["edge_data"][etype_key(e)], where) for e in etypes}
        return meta

    def expected_arrays(self, part: dict[str, Any], p: int, where: Where, halo: int = 0) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Typed arrays of partition p (key -> (dtype, shape)), after checking its `hetero` counts; with
        halo 1 typed node arrays also hold their type's halo rows."""
        counts = part_counts(part, self, p, where)
        out: dict[str, tuple[str, tuple[int, ...]]] = {EDGE_TYPE_KEY: (EDGE_TYPE_DTYPE, (int(part["num_edges"]),))}
        for t, ntype in enumerate(self.node_types):
            for name, (dtype, row) in self.node_data[ntype].items():
                out[node_data_key(ntype, name)] = (dtype, (counts["num_owned"][t] + (counts["num_halo"][t] if halo else 0), *row))
        for r, etype in enumerate(self.edge_types):
            for name, (dtype, row) in self.edge_data[etype].items():
                out[edge_data_key(etype, name)] = (dtype, (counts["num_edges"][r], *row))
        return out


def part_counts(part: dict[str, Any], meta: HeteroMeta, p: int, where: Where) -> dict[str, list[int]]:
    """The validated per-type counts of partition p (`partitions[p].hetero`)."""
    h = part.get(HETERO_KEY)
    if not isinstance(h, dict):
        raise InputError(where, f"partition {p} has no 'hetero' counts")
    out = {}
    for key, total, size in (("num_owned", "num_owned", len(meta.node_types)), ("num_halo", "num_halo", len(meta.node_types)),
                             ("num_edges", "num_edges", len(meta.edge_types)), ("num_cut", None, len(meta.edge_types))):
        values = h.get(key)
        if not isinstance(values, list) or len(values) != size or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
            raise InputError(where, f"partition {p}: hetero.{key} must list {size} non-negative integers")
        if total is not None and sum(values) != part[total]:
            raise InputError(where, f"partition {p}: hetero.{key} adds up to {sum(values)}, {total} is {part[total]}")
        out[key] = values
    return out


def part_counts_json(
    num_owned: Sequence[int], num_halo: Sequence[int], num_edges: Sequence[int], num_cut: Sequence[int]
) -> dict[str, list[int]]:
    """A partition's per-type counts (one value per node or edge type) as the manifest's `hetero` object holds them."""
    return {k: [int(v) for v in vals] for k, vals in zip(COUNT_KEYS, (num_owned, num_halo, num_edges, num_cut))}


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"count {value!r} is not a non-negative integer")
    return value


def _specs(obj: dict[str, Any], where: Where) -> dict[str, tuple[str, tuple[int, ...]]]:
    out = {}
    for name, spec in obj.items():
        safe_name(name, "data array name", where)
        dtype = str(spec["dtype"])
        storage_dtype(dtype, where)
        out[name] = (dtype, tuple(int(s) for s in spec["row_shape"]))
    return out
