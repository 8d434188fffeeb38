"""A typed partition's time arrays for temporal draws: node times per node type, edge times per edge type.

    kind = typed_time_kind(part, "t")                  # "node", "edge" or None
    cand = typed_position_times(part, "t", kind, timeout_s)   # one time per CSC position (a collective)
    times = typed_seed_times(part, "t", erased_seeds, timeout_s)  # a collective across partitions

The same name is looked up per type: `node_data[(ntype, name)]` (rows in
typed id order) or `edge_data[((s, r, d), name)]` (rows in CSC order within
the type, part.edge_rows). Every sampled source type (node times) or every
edge type (edge times) must have it; the loader checks that first
(typed_time_problem). The loops here run over node or edge types, never
over nodes or edges.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from gpart.base.errors import GpartError
from gpart.runtime.sampling.temporal import check_times, time_values


def typed_time_kind(part: Any, name: str) -> Optional[str]:
    """"node" or "edge": which typed arrays are called `name` (None: none; both: "both")."""
    node = any(n == name for _, n in part.node_data)
    edge = any(n == name for _, n in part.edge_data)
    return "both" if node and edge else "node" if node else "edge" if edge else None


def typed_time_problem(part: Any, name: str, kind: str) -> Optional[str]:
    """What is wrong with the typed time arrays `name` (None: nothing): a type without one, NaN, a wrong shape."""
    if kind == "node":
        types = sorted({s for s, _, _ in part.edge_types})  # every node type an in-edge can come from
        keys = [(t, name) for t in types]
    else:
        keys = [(e, name) for e in part.edge_types]
    for key in keys:
        label = "/".join(key) if kind == "node" else f"{':'.join(key[0])}/{name}"
        table = (part.node_data if kind == "node" else part.edge_data).get(key)
        if table is None:
            return f"{kind} time {label!r} is missing: every {'source node' if kind == 'node' else 'edge'} type needs one"
        # at least one time per owned node of the type, exactly one per stored in-edge of the type: shorter arrays
        # would be read past their end
        rows = _owned_of(part, key[0]) if kind == "node" else int((part.edge_type == part.edge_types.index(key[0])).sum())
        try:
            check_times(time_values(table)[:rows] if kind == "node" else time_values(table), rows, f"{kind} time {label!r}")
        except GpartError as err:
            return err.problem
    return None


def _owned_of(part: Any, ntype: str) -> int:
    """How many nodes of `ntype` this partition owns."""
    return int(part.num_owned_by_type[part.node_types.index(ntype)])


def typed_position_times(part: Any, name: str, kind: str, timeout_s: float) -> torch.Tensor:
    """The time of each stored in-edge (CSC position) of `part`. Node times: its source's, gathered per node type
    (a collective whenever torch.distributed is on: every rank asks for every type, in type order)."""
    dev = part.device
    if kind == "edge":
        cand = torch.empty(part.edge_type.numel(), dtype=torch.float64, device=dev)
        for r, etype in enumerate(part.edge_types):  # a loop over edge types
            at = torch.nonzero(part.edge_type == r).reshape(-1)
            rows = torch.index_select(part.edge_rows, 0, at)
            cand[at] = torch.index_select(time_values(part.edge_data[(etype, name)]).to(dev), 0, rows)
        return cand
    src = part.indices.to(torch.int64)
    if part.num_parts > 1:
        src = torch.index_select(part.node_ids.to(torch.int64), 0, src)
    nodes, inverse = torch.unique(src, return_inverse=True)
    return torch.index_select(_erased_times(part, name, nodes, timeout_s), 0, inverse)


def typed_seed_times(part: Any, name: str, seeds: torch.Tensor, timeout_s: float) -> torch.Tensor:
    """The node time of each erased seed id (a collective whenever torch.distributed is on, as gather)."""
    return _erased_times(part, name, seeds.to(torch.int64), timeout_s)


def _erased_times(part: Any, name: str, erased: torch.Tensor, timeout_s: float) -> torch.Tensor:
    """Node times of erased ids, per node type through part.gather (types without the array: +inf, never asked)."""
    dev = part.device
    out = torch.full((erased.numel(),), float("inf"), dtype=torch.float64, device=dev)
    kind = torch.searchsorted(part.node_offsets, erased, right=True) - 1
    for t, ntype in enumerate(part.node_types):  # a loop over node types; every rank makes the same gathers
        if (ntype, name) not in part.node_data:
            continue
        at = torch.nonzero(kind == t).reshape(-1)
        typed = torch.index_select(erased, 0, at) - part.node_offsets[t]
        out[at] = time_values(part.gather((ntype, name), typed, timeout_s=timeout_s)).to(dev)
    return out
