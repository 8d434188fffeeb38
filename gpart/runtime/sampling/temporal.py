"""Temporal neighbour draws: only in-edges whose time is <= the time of the segment's seed (PyG's `time_attr`).

    check_times(times, num, "node time 't'")               # one-line InputError: wrong length, NaN, not numeric
    seg_time = resolve_seed_time(seeds, seed_time, node_time)
    index = TemporalIndex(cand_time, boundaries)            # once: candidate times sorted within each CSC run
    picks = sample_temporal_segments(start, deg, seg_time, index, fanout, "uniform", gen)

`cand_time[p]` is the time of the candidate at CSC position p: the time of its
source node (node times, `node_time[indices]`) or of the edge itself (edge
times). As in PyG every sampled node carries its seed's time, so a segment's
time is the time of the seed it was reached from (disjoint sampling, which
PyG requires with time and so does `check_temporal_options`).

Vectorised over all segments at once, never a loop per node, and not over
every candidate: TemporalIndex sorts the candidates' times within each CSC
run once (PyG samples a time-sorted CSC too), so a segment's allowed
candidates are a prefix of its run in sorted order, counted by a binary
search within the run (all segments in step). "uniform" runs the ordinary draw
(kernels.sample_segments) over the prefixes, "last" takes each prefix's last
`fanout`, newest first (ties: the later CSC position first, so the result is
deterministic); the picks are positions in the sorted order, where the index
carries the sources and edge ids (TemporalIndex.carrying), or are mapped back
through the sort.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
import torch

from gpart.base.errors import InputError
from gpart.runtime.sampling.csc_runs import csc_runs
from gpart.runtime.sampling.kernels import Picks, sample_segments
from gpart.runtime.sampling.weighted import SegmentWeights

STRATEGIES = ("uniform", "last")
NUMPY_ROUNDS = True  # TemporalIndex.allowed's rounds through numpy on the CPU (False: torch's, as on CUDA)


def check_temporal_options(disjoint: bool, strategy: str) -> None:
    """PyG's rules: time needs disjoint sampling (each node carries its seed's time) and a known strategy."""
    if strategy not in STRATEGIES:
        raise InputError(None, f"temporal_strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    if not disjoint:
        raise InputError(None, "temporal sampling needs disjoint=True (every sampled node carries its own seed's time)")


def check_times(times: object, num: int, what: str) -> torch.Tensor:
    """`times` as a 1-D float64 tensor of length `num`; one-line InputError naming `what` otherwise."""
    if times is None:
        raise InputError(None, f"{what} is missing")
    try:
        got = torch.as_tensor(times)
    except (TypeError, ValueError, RuntimeError) as err:
        raise InputError(None, f"{what} is not a numeric array: {err}") from None
    if got.dtype == torch.bool or got.is_complex() or got.ndim != 1:
        raise InputError(None, f"{what} must be a 1-D real array, got dtype {got.dtype} and shape {tuple(got.shape)}")
    if got.numel() != num:
        raise InputError(None, f"{what} has {got.numel()} entries, expected {num}")
    got = got.to(torch.float64)
    if bool(torch.isnan(got).any()):
        raise InputError(None, f"{what} holds NaN at entry {int(torch.nonzero(torch.isnan(got))[0])}")
    return got


def time_values(table: torch.Tensor) -> torch.Tensor:
    """A time array as float64 values, one per row ([N] or [N, 1])."""
    return table.reshape(table.shape[0]).to(torch.float64)


def resolve_seed_time(seeds: torch.Tensor, seed_time: Optional[object], node_time: Optional[torch.Tensor]) -> torch.Tensor:
    """The time of each seed: `seed_time` given per seed, else the seed node's own time (needs node times)."""
    if seed_time is not None:
        return check_times(seed_time, seeds.numel(), "seed_time")
    if node_time is None:
        raise InputError(None, "seed_time is needed with edge times (seeds have no node time to default to)")
    return torch.index_select(node_time, 0, seeds.to(torch.int64).to(node_time.device))


def sample_temporal_segments(start: torch.Tensor, deg: torch.Tensor, seg_time: torch.Tensor, index: "TemporalIndex",
                             fanout: int, strategy: str = "uniform", generator: Optional[torch.Generator] = None,
                             replace: bool = False) -> Picks:
    """Up to `fanout` positions of each segment `[start[i], start[i] + deg[i])` among those with time <=
    seg_time[i] (`index`: the candidates' times): uniform among them, or the latest by time ("last", ties: the later
    CSC position first); fanout -1 takes all allowed. CSC positions: draw_temporal's mapped back through the sort."""
    picks = draw_temporal(start, deg, seg_time, index, fanout, strategy, generator, replace)
    return Picks(picks.counts, index.csc_positions(picks.positions))


def draw_temporal(start: torch.Tensor, deg: torch.Tensor, seg_time: torch.Tensor, index: "TemporalIndex", fanout: int,
                  strategy: str = "uniform", generator: Optional[torch.Generator] = None, replace: bool = False) -> Picks:
    """sample_temporal_segments' draw, its positions in the index's sorted order (TemporalIndex.topology_at)."""
    deg = deg.to(torch.int64)
    counts = index.allowed(start, deg, seg_time)  # the allowed are start .. start + count - 1 in sorted order
    if strategy == "uniform" or fanout < 0:
        return sample_segments(start, counts, fanout, replace, generator)
    if strategy != "last":
        raise InputError(None, f"temporal_strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    take = torch.clamp(counts, max=fanout)
    total = int(take.sum()) if take.numel() else 0
    first = torch.cumsum(take, 0) - take
    within = torch.arange(total, dtype=torch.int64, device=start.device) - torch.repeat_interleave(first, take, output_size=total)
    last = torch.repeat_interleave(start + counts - 1, take, output_size=total)  # newest first: count - 1 down
    return Picks(take, last - within)


def draw_temporal_weighted(start: torch.Tensor, deg: torch.Tensor, seg_time: torch.Tensor, index: "TemporalIndex",
                           sorted_weights: SegmentWeights, fanout: int, generator: Optional[torch.Generator] = None,
                           replace: bool = False) -> Picks:
    """"uniform" temporal draws by weight, positions in the index's sorted order: up to `fanout` positions of each
    segment among those with time <= seg_time[i], drawn with probability proportional to their weights
    (`sorted_weights`: the weights in the index's sorted order, index.weights_in_order), zero weights never; the
    allowed are a prefix in sorted order, so the weighted draw runs over the prefixes."""
    counts = index.allowed(start, deg.to(torch.int64), seg_time)
    return sorted_weights.sample_segments(start, counts, fanout, replace, generator)


class TemporalIndex:
    """Candidate times sorted within each run of the CSC (a column, or a typed column's edge-type slice), made once:
    a segment's allowed candidates (time <= t) are then a prefix of its run in sorted order (PyG samples a
    time-sorted CSC too), counted by a binary search within the run itself (allowed)."""

    def __init__(self, cand_time: torch.Tensor, boundaries: torch.Tensor):
        dev = cand_time.device
        self.times = torch.unique(cand_time)  # sorted distinct times
        n = cand_time.numel()
        rank = torch.searchsorted(self.times, cand_time, out_int32=self.times.numel() < (1 << 31))  # 4 B per edge
        bounds = boundaries.to(torch.int64).to(dev)
        run = torch.searchsorted(bounds, torch.arange(n, device=dev), right=True, out_int32=n < (1 << 31))
        # by run, then by time rank, equal ranks in CSC order (later position last): two stable sorts, no key that
        # could overflow however many distinct times there are
        by_rank = torch.sort(rank, stable=True).indices
        self.perm = _narrow(torch.index_select(by_rank, 0, torch.sort(torch.index_select(run, 0, by_rank), stable=True).indices), n)
        del by_rank, run
        self.ranks = torch.index_select(rank, 0, self.perm)
        # the sources and edge ids of the positions in sorted order (carrying): a draw's positions read them
        # directly instead of through perm, one gather at random places a sampled edge fewer
        self.sources: Optional[torch.Tensor] = None
        self.edge_ids: Optional[torch.Tensor] = None

    def carrying(self, indices: torch.Tensor, edge_ids: torch.Tensor) -> "TemporalIndex":
        """This index holding `indices` and `edge_ids` (one per CSC position) in its sorted order, int32 where the
        ids fit: 8 bytes an edge, or 16. Power-law 1M / 10M, "uniform": 1.63-2.01x -> 1.33-1.59x uniform's CPU per
        sampled edge in 4 runs, email-Enron 1.50-1.62x -> 1.22-1.34x (docs/benchmarks.md). Returns self."""
        self.sources, self.edge_ids = (_narrow(sorted_ids, int(sorted_ids.max()) + 1 if sorted_ids.numel() else 0)
                                       for sorted_ids in (torch.index_select(ids, 0, self.perm) for ids in (indices, edge_ids)))
        return self

    def placed(self, keep: Callable[[torch.Tensor], torch.Tensor]) -> "TemporalIndex":
        """This index with its per-position arrays replaced by keep(array) (Partition.place_edge_array); returns self."""
        self.ranks, self.perm = keep(self.ranks), keep(self.perm)
        if self.sources is not None and self.edge_ids is not None:
            self.sources, self.edge_ids = keep(self.sources), keep(self.edge_ids)
        return self

    def csc_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """The CSC positions of `positions` in this index's sorted order."""
        return torch.index_select(self.perm, 0, positions).to(torch.int64)

    def topology_at(self, positions: torch.Tensor, indices: torch.Tensor, edge_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(sources, edge ids) as int64 of `positions` in sorted order: the carried ones, else the partition's
        `indices` and `edge_ids` through perm."""
        if self.sources is not None and self.edge_ids is not None:
            return (torch.index_select(self.sources, 0, positions).to(torch.int64),
                    torch.index_select(self.edge_ids, 0, positions).to(torch.int64))
        at = self.csc_positions(positions)
        return torch.index_select(indices, 0, at), torch.index_select(edge_ids, 0, at)

    def weights_in_order(self, weights: torch.Tensor) -> SegmentWeights:
        """Per-position sampling weights (CSC order) as SegmentWeights over this index's sorted order."""
        return SegmentWeights(torch.index_select(weights.reshape(-1), 0, self.perm))

    def allowed(self, start: torch.Tensor, deg: torch.Tensor, seg_time: torch.Tensor) -> torch.Tensor:
        """How many candidates of each segment [start, start + deg) (whole runs) have time <= seg_time: one binary
        search per segment within its own run, all segments in step (as many rounds as the widest segment needs).
        Searching only the run is 1.6x faster on the CPU than one searchsorted over the whole index (a 2M-edge
        partition, 12K segments: its misses in a large array cost more than the rounds)."""
        rank = (torch.searchsorted(self.times, seg_time.to(self.times.dtype), right=True) - 1).to(self.ranks.dtype)
        # the rounds through numpy's views on the CPU: a round is a few ops on a few thousand entries, where numpy's
        # calls cost about a third of torch's (the search 0.39 -> 0.26 ms per call on a 2M-edge partition); grouping
        # the narrow segments apart, for fewer rounds, measured within 5% and was not kept
        on_cpu = NUMPY_ROUNDS and start.device.type == "cpu" and self.ranks.device.type == "cpu"
        if on_cpu:
            count = _lifted(np, self.ranks.numpy(), *(t.to(torch.int64).numpy() for t in (start, deg, rank)))
            return torch.from_numpy(count)
        return _lifted(torch, self.ranks, *(t.to(torch.int64) for t in (start, deg, rank)))


def _narrow(ids: torch.Tensor, bound: int) -> torch.Tensor:
    """`ids` (all below `bound`) as int32 where the bound fits, else int64: half the bytes, and half the cache."""
    return ids.to(torch.int32 if bound < (1 << 31) else torch.int64)


def _lifted(xp: Any, ranks: Any, start: Any, deg: Any, rank: Any) -> Any:
    """How many of ranks[start .. start + deg) are <= rank per segment (each run sorted), by binary lifting over `xp`
    (numpy or torch) arrays: `at` is the last position known allowed (start - 1 at first), and each round probes
    `step` further. A probe past the run reads the run's last position instead, which then says whether all are
    allowed: the answer stays monotone in the probe, so no bounds are kept per round (three ops and one gather) and
    min(count, deg) at the end is exact."""
    before = start - 1
    last = (before + deg).clip(0)
    at = before + 0
    width = int(deg.max()) if deg.shape[0] else 0
    step = 1 << (width.bit_length() - 1) if width > 0 else 0
    while step:  # a loop over rounds (halving steps), not over segments
        at += (xp.take(ranks, xp.minimum(at + step, last)) <= rank) * step
        step >>= 1
    return xp.minimum(at - before, deg)


def position_times(part, node_time: Optional[torch.Tensor] = None, edge_time: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The time of each CSC position of partition `part`: its source node's time (node_time over global node
    ids) or the edge's own time (edge_time over global edge ids), on the partition's device (see temporal_index)."""
    dev = part.device
    if edge_time is not None:
        return torch.index_select(edge_time.to(dev), 0, part.edge_ids.to(torch.int64))
    if node_time is None:
        raise InputError(None, "temporal sampling needs node times or edge times")
    src = part.indices.to(torch.int64)
    if part.num_parts > 1:  # local ids: map to global ids first (one partition: local ids are global, SPEC.md 4.1)
        src = torch.index_select(part.node_ids.to(torch.int64), 0, src)
    return torch.index_select(node_time.to(dev), 0, src)


def temporal_index(part, node_time: Optional[torch.Tensor] = None, edge_time: Optional[torch.Tensor] = None) -> "TemporalIndex":
    """The TemporalIndex of partition `part` (LocalSampler.temporal = (index, strategy)): runs are its columns, and
    for a typed partition each column's edge-type slices (SPEC.md 8.2)."""
    return TemporalIndex(position_times(part, node_time, edge_time), csc_runs(part)).carrying(
        part.indices, part.edge_ids).placed(part.place_edge_array)
