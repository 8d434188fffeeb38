"""A typed graph as a partition method sees it (SPEC.md section 8): erased ids and one mask per node type.

gpart.pipeline.typed erases a typed graph into one homogeneous graph (node ids offset
per type, edges concatenated per type); a method's run_typed gets this view of
it, with the node types' masks and the typed node arrays over erased ids.
"""

from __future__ import annotations

from functools import cached_property
from typing import Optional, Sequence

import numpy as np

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.engines.balance import TRAIN_MASK
from gpart.formats.input.typed import HeteroGraph


class TypedInput:
    """The typed graph `hg` and its erased graph (`erased`: ids offset per node type)."""

    def __init__(self, hg: HeteroGraph, erased: Graph):
        self.hg, self.erased = hg, erased

    @cached_property
    def masks(self) -> dict[str, np.ndarray]:
        """One bool [N] per node type over erased ids, in node-type order."""
        return self.hg.type_masks()

    def graph(self, balance: Sequence[str] = ()) -> Graph:
        """The erased graph with node arrays: the type masks, train_mask where any type has one, and the
        `balance` arrays (node arrays of the types that have them)."""
        erased = self.erased
        g = Graph(erased.num_nodes, erased.src, erased.dst, dict(self.masks), source=erased.source, input_format=erased.input_format)
        train = erased_mask(self.hg, TRAIN_MASK)
        if train is not None:
            g.node_data[TRAIN_MASK] = train
        for name in balance:
            if name not in g.node_data:
                g.node_data[name] = erased_mask(self.hg, name, required=True)
        return g


def erased_mask(hg: HeteroGraph, name: str, required: bool = False) -> Optional[np.ndarray]:
    """Node array `name` of every type that has it, as one bool [N] over erased ids (False elsewhere)."""
    noff = hg.node_offsets()
    out = np.zeros(int(noff[-1]), dtype=bool)
    found = False
    for t, ntype in enumerate(hg.node_types):
        arr = hg.node_data.get(ntype, {}).get(name)
        if arr is not None:
            if arr.ndim != 1 or (arr.dtype != np.bool_ and arr.dtype.kind not in "iu"):
                raise InputError(hg.source, f"node array '{ntype}/{name}' must be 1-D boolean or 0/1 to balance on")
            out[noff[t]:noff[t + 1]] = np.asarray(arr) != 0
            found = True
    if not found and required:
        raise InputError(hg.source, f"balance array {name!r} is no node array of any type")
    return out if found else None
