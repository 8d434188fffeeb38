"""What every loader composes: the trainer layout, the exchange, the plan, the sampler and the protocol.

    pieces = compose(part, seeds, SamplingRequest(fanouts, names, labels, timeout_s=60.0))
    sampled = pieces.protocol.sample(seeds, generator)

The caller may pass its own sampler (an object with LocalSampler's
interface, built for the same number of hops) and its own row source
(gpart.runtime.sampling.row_source.RowSource); the defaults are the
partition's in-edges and node data. `problem` says what is wrong with this
rank's arguments or its place in the job (None: nothing); the loader makes
every rank raise it through its settings agreement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

from gpart.runtime.loaders.temporal_options import TimeOptions, time_problem
from gpart.runtime.partition.exchange import Exchange
from gpart.runtime.partition.interface import Partition
from gpart.runtime.partition.row_cache import CacheStatsView
from gpart.runtime.partition.trainers import TrainerLayout, trainer_layout, wrong_partition
from gpart.runtime.sampling.neighbor_sampler import LocalSampler
from gpart.runtime.sampling.plan import SamplingPlan, plan_for
from gpart.runtime.sampling.protocol import DistSampler
from gpart.runtime.sampling.row_source import PartitionRows, RowSource
from gpart.runtime.sampling.weighted import weight_problem

DEFAULT_NODE_DATA = ("feat",)


@dataclass
class LoaderOptions:
    """The settings every loader takes (DistNeighborLoader and DistLinkNeighborLoader say what each means)."""

    fanouts: Any = (15, 10)
    batch_size: int = 1024
    shuffle: bool = True
    seed: int = 0
    node_data: Union[str, Sequence[str], None] = DEFAULT_NODE_DATA
    replace: bool = False
    drop_last: bool = False
    timeout_s: Optional[float] = None
    pyg: bool = False
    disjoint: bool = False
    prefetch: int = 0
    weight: Any = None  # edge data name of sampling weights (PyG's weight_attr)
    time: Optional[str] = None  # node or edge data name of times (PyG's time_attr)
    temporal_strategy: str = "uniform"

    def time_options(self) -> TimeOptions:
        return TimeOptions(self.time, self.temporal_strategy)


def prefetch_problem(prefetch: Any) -> Optional[str]:
    """None when `prefetch` is a batch count >= 0, else the one-line problem."""
    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
        return f"prefetch must be a number of batches >= 0, got {prefetch!r}"
    return None


def prefetch_ahead(pieces_protocol: Optional[DistSampler], prefetch: int) -> None:
    """With prefetch, move the protocol's collectives onto process groups of the loader's own (a collective: call it
    on every rank, after the settings agreed; gpart.runtime.loaders.prefetch says why)."""
    if prefetch and pieces_protocol is not None and pieces_protocol.exchange.active:
        pieces_protocol.exchange = pieces_protocol.exchange.on_own_groups()


@dataclass(frozen=True)
class SamplingRequest:
    """What a loader asks of its pieces: the hops' fanouts, the rows carried, and how the hops draw."""

    fanouts: Any
    names: list[str]  # node data carried for every batch node
    labels: Optional[str]  # the seeds' labels (None: none)
    replace: bool = False
    disjoint: bool = False
    timeout_s: float = 60.0
    weight: Any = None  # edge data name of sampling weights (None: uniform)
    time: TimeOptions = TimeOptions()  # temporal draws (gpart.runtime.loaders.temporal_options; no name: none)


@dataclass
class Pieces:
    layout: TrainerLayout
    exchange: Exchange
    plan: SamplingPlan
    sampler: Any  # a LocalSampler, or the caller's sampler with its interface
    protocol: Optional[DistSampler]  # None when the plan has a problem
    stats: dict
    problem: Optional[str]


def new_stats() -> dict:
    """A loader's counters: batches, seeds, sampled edges, collectives and the seconds spent."""
    return {"batches": 0, "sampled_edges": 0, "seeds": 0, "collective_s": 0.0, "total_s": 0.0, "collectives": 0}


def compose(part: Partition, seeds: Any, request: SamplingRequest, sampler: Any = None, row_source: Optional[RowSource] = None,
            carry_rows: bool = True) -> Pieces:
    """The pieces of a loader over `part` for `seeds` (see the module); no collective."""
    layout = trainer_layout(part.num_parts, request.timeout_s, path=part.directory)
    stats = new_stats()
    if getattr(part, "row_cache", None) is not None:  # load_partition(cache=...): hits and misses per array, live
        stats["cache"] = CacheStatsView(part.row_cache)
    exchange = Exchange(layout, request.timeout_s, stats)
    plan = plan_for(part, seeds, request.fanouts, request.names, request.labels, row_source if row_source is not None else PartitionRows(part))
    problem = plan.problem or _placement_problem(part, layout)
    if not problem and request.weight is not None:
        problem = "the sampler was given: pass weight to its LocalSampler" if sampler is not None else weight_problem(part, request.weight)
    problem = problem or time_problem(part, request.time, request.disjoint, request.weight, sampler)
    if not problem and request.time.name is not None and any(len({f for f in fans if f}) > 1 for fans in plan.hop_fanouts):
        problem = "time= takes one fanout per hop: give every sampled edge type of a hop the same fanout"
    if sampler is not None and not problem and sampler.num_hops != len(plan.hop_fanouts):
        problem = f"the sampler takes {sampler.num_hops} hops, the fanouts {len(plan.hop_fanouts)}"
    if problem:
        return Pieces(layout, exchange, plan, sampler, None, stats, problem)
    sampler = sampler if sampler is not None else LocalSampler(part, plan.hop_fanouts, request.replace, weight=request.weight)
    protocol = DistSampler(part, sampler, exchange, plan.rows, request.disjoint, carry_rows)
    return Pieces(layout, exchange, plan, sampler, protocol, stats, problem)


def _placement_problem(part: Partition, layout: TrainerLayout) -> Optional[str]:
    """What is wrong with this rank's place in the job (None: nothing)."""
    if layout.world_size > 1 and layout.partition != part.rank:
        return wrong_partition(layout.rank, layout.world_size, part.num_parts, part.rank, "the loader")
    if layout.world_size == 1 and part.num_parts > 1:
        return f"has {part.num_parts} partitions: initialise torch.distributed with one rank per partition (or several)"
    return None
