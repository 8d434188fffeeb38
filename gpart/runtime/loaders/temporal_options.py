"""The loaders' time options (PyG's `time_attr`, `temporal_strategy`, `input_time` / `edge_label_time`).

    problem = time_problem(part, TimeOptions("t", "uniform"), disjoint=True, weight=None, sampler=None)
    attach_temporal(part, sampler, options, timeout_s)     # a collective: the owner's TemporalIndex
    times = seed_times(part, options, seeds, given, timeout_s)  # a collective: each seed's time

`time` names a node data array (node times: an in-edge's time is its
source node's) or an edge data array (edge times) of the partition; a name
that is both is refused. The owner draws (gpart.runtime.sampling.temporal):
its in-edges' times are read once, in CSC order, into a TemporalIndex set on
the sampler. Node times of the halo sources come from their owners once,
when the loader is built, unless the partition stores halo data. Seed times
default to the seed node's own time (node times only; with edge times they
must be given). Every check that can fail is made before any collective and
reaches every rank through the loader's settings agreement; the collectives
here are made on every rank under the same agreed settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from gpart.base.errors import GpartError
from gpart.runtime.loaders.typed_times import typed_position_times, typed_seed_times, typed_time_kind, typed_time_problem
from gpart.runtime.partition.interface import Partition
from gpart.runtime.sampling.csc_runs import csc_runs
from gpart.runtime.sampling.temporal import STRATEGIES, TemporalIndex, check_times, time_values


@dataclass(frozen=True)
class TimeOptions:
    """The time array's name (None: no temporal draws) and the strategy ("uniform" or "last")."""

    name: Optional[str] = None
    strategy: str = "uniform"

    def describe(self) -> str:
        return f"time={self.name!r} temporal_strategy={self.strategy!r}"


def time_kind(part: Partition, name: str) -> Optional[str]:
    """"node" or "edge": where the array `name` is (None: in neither; typed: "both" when it is in both)."""
    if part.typed:
        return typed_time_kind(part, name)
    if name in part.node_data:
        return "node"
    return "edge" if name in part.edge_data else None


def time_problem(part: Partition, options: TimeOptions, disjoint: bool, weight: Any, sampler: Any) -> Optional[str]:
    """What is wrong with the time options on this rank (None: nothing, or no time asked); `sampler`: the caller's
    own sampler, or None."""
    if options.name is None:
        return None if options.strategy == "uniform" else "temporal_strategy needs time= (the time array's name)"
    if options.strategy not in STRATEGIES:
        return f"temporal_strategy {options.strategy!r} is not one of {', '.join(STRATEGIES)}"
    if not disjoint:
        return "time= needs disjoint=True (as in PyG: every sampled node carries its own seed's time)"
    if weight is not None and options.strategy != "uniform":
        return "weight= with time= draws by weight among the allowed in-edges: temporal_strategy must be 'uniform'"
    if sampler is not None and getattr(sampler, "temporal", None) is None:
        return "the sampler was given without a temporal index: set sampler.temporal (gpart.runtime.sampling.temporal)"
    name = options.name
    kind = time_kind(part, name)
    if kind == "both" or (name in part.node_data and name in part.edge_data):
        return f"time {name!r} names both a node data array and an edge data array: rename one"
    if kind is None:
        return f"time {name!r} is neither a node data nor an edge data array of the partition"
    if part.typed:
        return typed_time_problem(part, name, kind)
    table = part.node_data[name] if kind == "node" else part.edge_data[name]
    # one time per owned node (halo rows too when stored) or per stored in-edge: a shorter array would index past its end
    rows = (part.num_owned + (part.num_halo if part.halo else 0)) if kind == "node" else part.indices.numel()
    try:
        check_times(table.reshape(-1) if table.ndim == 2 and table.shape[1] == 1 else table, rows,
                    f"{kind} time {name!r}")
    except GpartError as err:
        return err.problem
    return None


def seed_time_problem(given: Any, count: int, what: str, kind: Optional[str]) -> Optional[str]:
    """What is wrong with the given seed times (None: nothing); edge times need them."""
    if given is None:
        return f"{what} is needed with edge times (a seed has no node time to default to)" if kind == "edge" else None
    try:
        check_times(given, count, what)
    except GpartError as err:
        return err.problem
    return None


def attach_temporal(part: Partition, sampler: Any, options: TimeOptions, timeout_s: float) -> None:
    """Set `sampler.temporal` to the partition's TemporalIndex for `options` (no time, or a caller's sampler that has
    its own: nothing). A collective when node times are read across partitions without halo data: every rank calls
    it under the same settings."""
    if options.name is None or getattr(sampler, "temporal", None) is not None:
        return
    if part.typed:
        cand = typed_position_times(part, options.name, time_kind(part, options.name) or "", timeout_s)
    elif time_kind(part, options.name) == "edge":  # edge data is stored in CSC order: one time per position
        cand = time_values(part.edge_data[options.name])
    else:
        cand = torch.index_select(_local_node_times(part, options.name, timeout_s), 0, part.indices.to(torch.int64))
    index = TemporalIndex(cand.to(part.device), csc_runs(part)).carrying(part.indices, part.edge_ids)
    sampler.temporal = (index.placed(part.place_edge_array), options.strategy)


def seed_times(part: Partition, options: TimeOptions, seeds: torch.Tensor, given: Any, timeout_s: float) -> Optional[torch.Tensor]:
    """Each seed's time, float64 on the partition's device: `given` (checked by seed_time_problem), else the seed
    node's time. With node times across partitions a collective, made by every rank whether it was given times or
    not (it then asks for none). None: no time."""
    if options.name is None:
        return None
    own = time_kind(part, options.name) == "node"
    ids = seeds.to(torch.int64) if given is None else seeds[:0].to(torch.int64)
    if own and part.typed:
        found = typed_seed_times(part, options.name, ids, timeout_s)
    elif own and part.num_parts > 1:  # every rank gathers (its seeds' times, or none) whatever it was given
        found = time_values(part.gather(options.name, ids, timeout_s=timeout_s)).to(part.device)
    elif own:
        found = torch.index_select(time_values(part.node_data[options.name]).to(part.device), 0, ids)
    if given is not None:
        return torch.as_tensor(given).to(device=part.device, dtype=torch.float64).reshape(-1)
    return found if own else None


def _local_node_times(part: Partition, name: str, timeout_s: float) -> torch.Tensor:
    """Node times by local id (owned, then halo): the halo's from the partition's halo data, or from their owners
    (part.gather: a collective whenever there are several partitions and no halo data)."""
    table = time_values(part.node_data[name])
    if part.num_parts == 1 or part.halo:
        return table
    halo_gids = part.node_ids[part.num_owned:].to(torch.int64)  # local ids num_owned.. in their stored order
    halo = time_values(part.gather(name, halo_gids, timeout_s=timeout_s)).to(table.device)
    return torch.cat([table[: part.num_owned], halo])
