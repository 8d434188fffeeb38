"""The reverse edges of a partition result (`--add-reverse`, SPEC.md 4.7): the manifest's `reverse`
object and its `reverse/input_edge` array, which map every reverse copy back to its input edge.

A result with reverse edges stores the graph whose edges are the input's (ids `0..E-1`, or per
edge type the typed ids below `num_input_edges`) followed by the reverse copies; `input_edge`
lists, copy after copy in stored id order, the input edge each copy reverses. Writers write both
with `write_reverse`; `ReverseMeta.from_manifest` validates it before any data is read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np

from gpart.base.errors import InputError
from gpart.formats.files.arrays import ArrayEntry
from gpart.formats.partition.typed import EdgeType, HeteroMeta, etype_key

REVERSE_KEY = "reverse"
INPUT_EDGE_KEY = "reverse/input_edge"
INPUT_EDGE_DTYPE = "int64"
Where = Union[str, "os.PathLike[str]", None]


@dataclass
class ReverseType:
    """One stored edge type of a typed result: its input edges come first, then its reverse copies,
    which reverse edges of `reverses` (None: the type takes no copies)."""

    edge_type: EdgeType
    reverses: Optional[EdgeType]
    num_input_edges: int
    num_reverse_edges: int

    def to_json(self) -> dict[str, Any]:
        return {"edge_type": list(self.edge_type), "reverses": None if self.reverses is None else list(self.reverses),
                "num_input_edges": self.num_input_edges, "num_reverse_edges": self.num_reverse_edges}


@dataclass
class ReverseMeta:
    """Counts of input edges and reverse copies; `edge_types` (typed results) one per stored edge type, in type order."""

    num_input_edges: int
    num_reverse_edges: int
    edge_types: Optional[list[ReverseType]] = None

    def blocks(self, hetero: Optional[HeteroMeta]) -> list[tuple[str, int, int, int]]:
        """(stored edge type, first row, end row of its copies in `input_edge`, input edges its copies may reverse)
        per stored edge type; a homogeneous result is one block over all copies."""
        if self.edge_types is None:
            return [("edges", 0, self.num_reverse_edges, self.num_input_edges)]
        inputs = {t.edge_type: t.num_input_edges for t in self.edge_types}
        out, start = [], 0
        for t in self.edge_types:
            reversible = 0 if t.reverses is None else inputs.get(t.reverses, 0)
            out.append((etype_key(t.edge_type), start, start + t.num_reverse_edges, reversible))
            start += t.num_reverse_edges
        return out

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any], where: Where,
                      hetero: Optional[HeteroMeta]) -> Optional[tuple["ReverseMeta", ArrayEntry]]:
        """The validated `reverse` object and its array entry, or None for a result without reverse edges."""
        obj = manifest.get(REVERSE_KEY)
        if obj is None:
            return None
        try:
            return _parse(obj, manifest, where, hetero)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise InputError(where, f"malformed 'reverse' object: {type(exc).__name__}: {exc}") from None


def write_reverse(writer: Any, meta: ReverseMeta, input_edge: np.ndarray) -> dict[str, Any]:
    """Write `reverse/input_edge` through a PartitionWriter; returns the manifest's `reverse` object (SPEC.md 4.7)."""
    out: dict[str, Any] = {"num_input_edges": meta.num_input_edges, "num_reverse_edges": meta.num_reverse_edges,
                           "input_edge": writer.write_array(INPUT_EDGE_KEY, input_edge, INPUT_EDGE_DTYPE).to_json()}
    if meta.edge_types is not None:
        out["edge_types"] = [t.to_json() for t in meta.edge_types]
    return out


def _parse(obj: dict[str, Any], manifest: dict[str, Any], where: Where,
           hetero: Optional[HeteroMeta]) -> tuple[ReverseMeta, ArrayEntry]:
    meta = ReverseMeta(_count(obj["num_input_edges"]), _count(obj["num_reverse_edges"]))
    if meta.num_input_edges + meta.num_reverse_edges != manifest["graph"]["num_edges"]:
        raise ValueError(f"{meta.num_input_edges} input edges and {meta.num_reverse_edges} reverse copies, "
                         f"the graph stores {manifest['graph']['num_edges']} edges")
    entry = ArrayEntry.from_json(obj["input_edge"], where)
    if entry.dtype != INPUT_EDGE_DTYPE or entry.shape != (meta.num_reverse_edges,):
        raise ValueError(f"input_edge is {entry.dtype} {list(entry.shape)}, expected {INPUT_EDGE_DTYPE} [{meta.num_reverse_edges}]")
    if (hetero is None) != ("edge_types" not in obj):
        raise ValueError("edge_types belong to typed results, and to them only")
    if hetero is not None:
        meta.edge_types = [_reverse_type(x) for x in obj["edge_types"]]
        _check_types(meta, hetero)
    return meta, entry


def _reverse_type(x: dict[str, Any]) -> ReverseType:
    reverses = None if x["reverses"] is None else _triplet(x["reverses"])
    return ReverseType(_triplet(x["edge_type"]), reverses, _count(x["num_input_edges"]), _count(x["num_reverse_edges"]))


def _check_types(meta: ReverseMeta, hetero: HeteroMeta) -> None:
    types = meta.edge_types or []
    if [t.edge_type for t in types] != hetero.edge_types:
        raise ValueError("edge_types do not list the result's edge types in their order")
    for t, stored in zip(types, hetero.num_edges):
        if t.num_input_edges + t.num_reverse_edges != stored:
            raise ValueError(f"edge type {etype_key(t.edge_type)!r}: input edges and copies do not add up to its {stored} edges")
        if t.reverses is None and t.num_reverse_edges:
            raise ValueError(f"edge type {etype_key(t.edge_type)!r} holds copies but names no relation they reverse")
        if t.reverses is not None and (t.reverses not in hetero.edge_types
                                       or (t.reverses[2], t.reverses[0]) != (t.edge_type[0], t.edge_type[2])):
            raise ValueError(f"edge type {etype_key(t.edge_type)!r} cannot hold reverses of {etype_key(t.reverses)!r}")
    if sum(t.num_input_edges for t in types) != meta.num_input_edges or sum(t.num_reverse_edges for t in types) != meta.num_reverse_edges:
        raise ValueError("per-type counts do not add up to num_input_edges and num_reverse_edges")


def _triplet(value: Any) -> EdgeType:
    if not isinstance(value, list) or len(value) != 3 or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{value!r} is not a [src, relation, dst] triplet")
    return (value[0], value[1], value[2])


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"count {value!r} is not a non-negative integer")
    return value
