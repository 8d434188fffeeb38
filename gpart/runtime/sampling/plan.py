"""What a loader samples, checked on this rank: seeds, fanouts per hop and edge type, and the rows it carries.

    plan = plan_for(part, seeds, fanouts, node_data, labels, source)   # source: the row source
    plan.seeds          # erased global ids (a typed seed type's ids shifted by its offset), on the device
    plan.hop_fanouts    # [hop][edge type]: -1 all, 0 not sampled (a homogeneous graph has one edge type)
    plan.rows           # the row fetcher: one kind per node type (one kind when homogeneous)
    plan.problem        # None, or what is wrong with this rank's arguments (the loader makes every rank raise)

A typed graph is the general case; a homogeneous partition is the case of
one node type and one edge type, whose seeds are global ids and fanouts a
plain list. Only the parsing of the user's arguments differs: the sampler,
the exchange and the row fetcher work on erased ids either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from gpart.runtime.partition.interface import Partition
from gpart.runtime.sampling.row_fetcher import PlainRows, RowFetcher, TypedRows
from gpart.runtime.sampling.row_source import RowSource


@dataclass
class SamplingPlan:
    seeds: torch.Tensor
    hop_fanouts: list[list[int]]
    rows: Optional[RowFetcher]
    input_type: Optional[str]  # the seed node type of a typed graph; None: homogeneous
    settings: str  # what every rank must agree on
    problem: Optional[str]


def plan_for(part: Partition, seeds: Any, fanouts: Any, names: list[str], labels: Optional[str],
             source: RowSource) -> SamplingPlan:
    """The plan for a homogeneous LoadedPartition or a typed HeteroPartition, its rows read from `source`."""
    if part.typed:
        return _typed_plan(part, seeds, fanouts, names, labels, source)
    return _plain_plan(part, seeds, fanouts, names, labels, source)


def _integer_ids(ids: Any, device: torch.device, what: str) -> tuple[torch.Tensor, Optional[str]]:
    ids = torch.as_tensor(ids)
    if ids.dtype == torch.bool or ids.dtype.is_floating_point or ids.dtype.is_complex:
        return torch.zeros(0, dtype=torch.int64, device=device), f"seeds must be integer {what}, got dtype {ids.dtype}"
    return ids.reshape(-1).to(device=device, dtype=torch.int64), None


def _plain_plan(part: Partition, seeds: Any, fanouts: Sequence[int], names: list[str], labels: Optional[str],
                source: RowSource) -> SamplingPlan:
    fans = [int(f) for f in fanouts]
    ids, problem = _integer_ids(seeds, part.device, "global node ids")
    if problem is None and ids.numel():
        lo, hi = (int(v) for v in torch.aminmax(ids))
        if lo < 0 or hi >= part.num_nodes:
            ids, problem = ids[:0], f"seeds hold ids outside 0..{part.num_nodes - 1} (min {lo}, max {hi})"
    have_keys = list(source.keys())
    missing = [n for n in names + ([labels] if labels is not None else []) if n not in have_keys]
    if missing:
        have = ", ".join(map(str, have_keys)) or "none"
        problem = f"no node data {', '.join(map(repr, missing))} loaded (loaded: {have})"
    if not fans or any(f == 0 or f < -1 for f in fans):
        problem = f"fanouts must be a non-empty list of positive integers or -1, got {fans}"
    rows = PlainRows(part, source, names, labels) if not missing else None
    # a row source's layouts size the answers' bytes, so every rank must agree on them too
    settings = f"fanouts={fans} node_data={names} labels={labels}" + (f" rows={rows.describe()}" if rows is not None else "")
    return SamplingPlan(ids, [[f] for f in fans], rows, None, settings, problem)


def _typed_plan(part: Partition, seeds: Any, fanouts: Any, names: list[str], labels: Optional[str],
                source: RowSource) -> SamplingPlan:
    hop_fanouts, problem = _typed_fanouts(part, fanouts)
    ids, input_type, seed_problem = _typed_seeds(part, seeds, names, labels, set(source.keys()))
    rows = TypedRows(part, source, names, labels, input_type) if seed_problem is None else None
    listed = sorted((r, fans) for r, fans in enumerate(zip(*hop_fanouts)) if any(fans)) if hop_fanouts else []
    # the rows' layouts size the answers' bytes, so every rank must agree on them too
    settings = (f"typed fanouts={listed} input_type={input_type} node_data={names} labels={labels} "
                f"rows={rows.describe() if rows is not None else ''}")
    return SamplingPlan(ids, hop_fanouts, rows, input_type, settings, problem or seed_problem)


def _typed_fanouts(part: Partition, fanouts: Any) -> tuple[list[list[int]], Optional[str]]:
    """([hop][edge type] fanouts, 0 for types without one; or [] and the problem)."""
    if not isinstance(fanouts, dict) or not fanouts:
        return [], "fanouts of a typed graph are a dict {(src, relation, dst): [fanout per hop]}"
    per_type: dict[int, list[int]] = {}
    for etype, values in fanouts.items():
        if not isinstance(etype, (tuple, list)) or len(etype) != 3:
            return [], f"edge type {etype!r} is not a (src, relation, dst) triplet"
        key = tuple(str(x) for x in etype)
        if key not in part.edge_types:
            return [], f"unknown edge type {key} (edge types: {', '.join(':'.join(e) for e in part.edge_types)})"
        values = [int(v) for v in values]
        if not values or any(v == 0 or v < -1 for v in values):
            return [], f"fanouts of {key} must be positive integers or -1, got {values}"
        per_type[part.edge_types.index(key)] = values
    lengths = sorted({len(v) for v in per_type.values()})
    if len(lengths) != 1:
        return [], f"every edge type needs the same number of hops, got lists of lengths {lengths}"
    return [[per_type.get(r, [0] * lengths[0])[h] for r in range(len(part.edge_types))] for h in range(lengths[0])], None


def _typed_seeds(part: Partition, seeds: Any, names: list[str], labels: Optional[str],
                 have: set) -> tuple[torch.Tensor, str, Optional[str]]:
    """(erased seed ids, the seed node type, None; or no ids and the problem)."""
    none = torch.zeros(0, dtype=torch.int64, device=part.device)
    if not isinstance(seeds, dict) or len(seeds) != 1:
        return none, "", "seeds of a typed graph are {node type: typed ids} with one node type"
    (ntype, given), = seeds.items()
    ntype = str(ntype)
    if ntype not in part.node_types:
        return none, ntype, f"unknown seed node type {ntype!r} (node types: {', '.join(part.node_types)})"
    ids, problem = _integer_ids(given, part.device, "typed ids")
    if problem:
        return none, ntype, problem
    n = part.num_nodes_of(ntype)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
        return none, ntype, f"seeds hold ids outside 0..{n - 1} of node type {ntype!r}"
    missing = [name for name in names + ([labels] if labels else []) if not any(k[1] == name for k in have)]
    if missing:
        return none, ntype, f"no typed node data named {', '.join(map(repr, missing))} loaded"
    if labels is not None and (ntype, labels) not in have:
        return none, ntype, f"no labels {labels!r} of the seed node type {ntype!r} loaded"
    return ids + part.node_offsets[part.node_types.index(ntype)], ntype, None
