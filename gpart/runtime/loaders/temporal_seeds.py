"""The loaders' temporal settings (PyG's time_attr / temporal_strategy / seed_time / edge_label_time): checked on
this rank, then the sampler's time index built, then each batch's seed times.

    seeds = TemporalSeeds.check(part, TemporalOptions("t", seed_time, "uniform"), seed_ids, disjoint)
    # seeds.problem: one line, raised on every rank through the loader's settings agreement
    seeds.attach(part, sampler)          # after the agreement; a collective with several partitions
    protocol.sample(batch_seeds, gen, seed_time=seeds.times[batch_positions])

`time` names a node data array (node times: a candidate in-edge's time is its
source node's time) or else an edge data array (edge times, one per stored
in-edge, CSC order as SPEC.md 4 stores edge data). A name present as both is
taken as node times (the node loader's default seed time is then the seed's
own time). Seed times default to the seed nodes' own node times; with edge
times they must be given. Across partitions a source may be a halo or remote
node: attach() reads the node times of all of the partition's local nodes
with part.gather once (a collective every rank makes, since the agreed
settings say time is on). Typed partitions are refused in one line: their
node times would be per node type and their CSC typed (not supported yet).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from gpart.base.errors import InputError
from gpart.runtime.sampling.temporal import STRATEGIES, TemporalIndex, check_times


@dataclass(frozen=True)
class TemporalOptions:
    """What the caller asked: the time array's name (None: no temporal sampling), per-seed times, the strategy."""

    time: Any = None
    seed_time: Any = None  # one per seed (node loader) or per seed edge (link loader: edge_label_time)
    strategy: str = "uniform"

    def settings(self) -> str:
        """The part of the loader's agreed settings (empty without time, so other loaders' settings are unchanged)."""
        return "" if self.time is None else f" time={self.time!r} temporal_strategy={self.strategy!r}"


@dataclass
class TemporalSeeds:
    """This rank's checked temporal settings: `times` each seed's time (None without time), `kind` "node" / "edge"."""

    options: TemporalOptions
    times: Optional[torch.Tensor]
    kind: str
    problem: Optional[str]

    @classmethod
    def check(cls, part: Any, options: TemporalOptions, seeds: Optional[torch.Tensor], disjoint: bool,
              num_seeds: Optional[int] = None, what: str = "seed_time") -> "TemporalSeeds":
        """The settings for `seeds` (global node ids; None: seeds with no node of their own, e.g. seed edges, whose
        count is `num_seeds`), or none and the one-line problem; no collective."""
        if options.time is None:
            problem = None if options.seed_time is None else f"{what} was given without time (the name of the time array)"
            return cls(options, None, "", problem)
        try:
            kind = _check_setting(part, options, disjoint)
            count = int(seeds.numel()) if seeds is not None else int(num_seeds or 0)
            if options.seed_time is not None:
                times = check_times(options.seed_time, count, what).to(part.device)
            elif kind == "node" and seeds is not None:
                times = _own_times(part, options.time, seeds)
            else:
                raise InputError(None, f"{what} is needed with edge times {options.time!r} (a seed has no node time)"
                                 if kind == "edge" else f"{what} is needed: give each seed edge its time")
        except InputError as err:
            return cls(options, None, "", f"{err}")
        return cls(options, times, kind, None)

    def attach(self, part: Any, sampler: Any, timeout_s: float) -> None:
        """Set `sampler.temporal` to the partition's time index (the agreed settings hold time on every rank, so
        every rank calls this: with several partitions the node times of halo and remote sources are gathered)."""
        if self.options.time is None:
            return
        if self.kind == "node":
            local = part.gather(self.options.time, part.node_ids, timeout_s=timeout_s)
            cand = torch.index_select(_flat(local).to(torch.float64), 0, part.indices.to(torch.int64))
        else:
            cand = _flat(part.edge_data[self.options.time]).to(torch.float64)
        sampler.temporal = (TemporalIndex(cand.to(part.device), part.indptr.to(torch.int64)), self.options.strategy)

    def of(self, positions: torch.Tensor) -> Optional[torch.Tensor]:
        """The seed times at `positions` of this rank's seeds (None without time)."""
        return None if self.times is None else torch.index_select(self.times, 0, positions.to(self.times.device))


def _check_setting(part: Any, options: TemporalOptions, disjoint: bool) -> str:
    """"node" or "edge": which array `options.time` names; InputError (one line) for every problem."""
    if options.strategy not in STRATEGIES:
        raise InputError(None, f"temporal_strategy {options.strategy!r} is not one of {', '.join(STRATEGIES)}")
    if not disjoint:
        raise InputError(None, "time needs disjoint=True (every sampled node carries its own seed's time, as in PyG)")
    if part.typed:
        raise InputError(None, "temporal sampling takes a homogeneous partition (typed partitions are not supported yet)")
    name = options.time
    where = f"{part.directory}: time {name!r}"
    if name in part.node_data:
        table = _flat(part.node_data[name])
        check_times(table[: part.num_owned], part.num_owned, f"{where} (node data)")
        return "node"
    if name in part.edge_data:
        check_times(_flat(part.edge_data[name]), part.indices.numel(), f"{where} (edge data)")
        return "edge"
    have = ", ".join(sorted(map(str, [*part.node_data, *part.edge_data]))) or "none"
    raise InputError(None, f"{where}: no such node or edge data (the partition has: {have})")


def _own_times(part: Any, name: str, seeds: torch.Tensor) -> torch.Tensor:
    """Each seed's own node time (the default seed time): the seeds must have rows in this partition."""
    rows = part.local_rows(seeds) if part.num_parts > 1 else seeds.to(torch.int64)
    if rows.numel() and bool((rows < 0).any()):
        bad = int(seeds[torch.nonzero(rows < 0)[0, 0]])
        raise InputError(None, f"seed {bad} has no node time in this partition: pass seed_time")
    table = _flat(part.node_data[name]).to(torch.float64)
    return torch.index_select(table, 0, rows.to(table.device)).to(part.device)


def _flat(table: torch.Tensor) -> torch.Tensor:
    """One value per row: a [n, 1] array read as [n] (any other shape is left for check_times to refuse)."""
    return table.reshape(-1) if table.dim() == 2 and table.shape[1] == 1 else table
