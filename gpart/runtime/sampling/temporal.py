"""Temporal neighbour draws: only in-edges whose time is <= the time of the segment's seed (PyG's `time_attr`).

    check_times(times, num, "node time 't'")               # one-line InputError: wrong length, NaN, not numeric
    seg_time = resolve_seed_time(seeds, seed_time, node_time)
    picks = sample_temporal_segments(start, deg, seg_time, cand_time, fanout, "uniform", gen)

`cand_time[p]` is the time of the candidate at CSC position p: the time of its
source node (node times, `node_time[indices]`) or of the edge itself (edge
times). As in PyG every sampled node carries its seed's time, so a segment's
time is the time of the seed it was reached from (disjoint sampling, which
PyG requires with time and so does `check_temporal_options`).

Vectorised over all segments at once, never a loop per node: every candidate
position of every segment is listed (repeat_interleave), masked by
time <= segment time and compacted; "uniform" then runs the ordinary draw
(kernels.sample_segments) over the compacted segments and maps the picks
back, "last" sorts each segment's allowed candidates by time, newest first
(ties: the later CSC position first, so the result is deterministic) with
stable sorts and keeps the first `fanout`.
"""

from __future__ import annotations

from typing import Optional

import torch

from gpart.base.errors import InputError
from gpart.runtime.sampling.kernels import Picks, sample_segments

STRATEGIES = ("uniform", "last")


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


def resolve_seed_time(seeds: torch.Tensor, seed_time: Optional[object], node_time: Optional[torch.Tensor]) -> torch.Tensor:
    """The time of each seed: `seed_time` given per seed, else the seed node's own time (needs node times)."""
    if seed_time is not None:
        return check_times(seed_time, seeds.numel(), "seed_time")
    if node_time is None:
        raise InputError(None, "seed_time is needed with edge times (seeds have no node time to default to)")
    return torch.index_select(node_time, 0, seeds.to(torch.int64).to(node_time.device))


def allowed_candidates(start: torch.Tensor, deg: torch.Tensor, seg_time: torch.Tensor, cand_time: torch.Tensor):
    """(CSC positions allowed, grouped by segment in order; allowed count per segment; segment of each allowed)."""
    total = int(deg.sum()) if deg.numel() else 0
    dev = start.device
    seg_of = torch.repeat_interleave(torch.arange(deg.numel(), device=dev), deg, output_size=total)
    first = torch.cumsum(deg, 0) - deg
    pos = torch.arange(total, dtype=torch.int64, device=dev) + torch.index_select(start - first, 0, seg_of)
    keep = torch.index_select(cand_time, 0, pos) <= torch.index_select(seg_time.to(cand_time.dtype), 0, seg_of)
    kept = torch.nonzero(keep).reshape(-1)
    seg_kept = torch.index_select(seg_of, 0, kept)
    counts = torch.zeros_like(deg).index_add_(0, seg_kept, torch.ones_like(seg_kept))
    return torch.index_select(pos, 0, kept), counts, seg_kept


def sample_temporal_segments(start: torch.Tensor, deg: torch.Tensor, seg_time: torch.Tensor, cand_time: torch.Tensor,
                             fanout: int, strategy: str = "uniform", generator: Optional[torch.Generator] = None,
                             replace: bool = False) -> Picks:
    """Up to `fanout` positions of each segment `[start[i], start[i] + deg[i])` among those with
    cand_time <= seg_time[i]: uniform among them, or the latest by time ("last"); fanout -1 takes all allowed."""
    pos, counts, seg_kept = allowed_candidates(start, deg.to(torch.int64), seg_time, cand_time)
    if strategy == "uniform" or fanout < 0:
        picks = sample_segments(torch.cumsum(counts, 0) - counts, counts, fanout, replace, generator)
        return Picks(picks.counts, torch.index_select(pos, 0, picks.positions))
    if strategy != "last":
        raise InputError(None, f"temporal_strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    # Newest first within each segment: stable sorts, least significant key first (position, time, segment).
    order = torch.flip(torch.arange(pos.numel(), device=pos.device), [0])  # later position first among equal times
    order = torch.index_select(order, 0, torch.sort(-torch.index_select(cand_time, 0, torch.index_select(pos, 0, order)),
                                                     stable=True).indices)
    order = torch.index_select(order, 0, torch.sort(torch.index_select(seg_kept, 0, order), stable=True).indices)
    first = torch.cumsum(counts, 0) - counts
    rank = torch.arange(pos.numel(), device=pos.device) - torch.index_select(first, 0, torch.index_select(seg_kept, 0, order))
    take = torch.nonzero(rank < fanout).reshape(-1)
    return Picks(torch.clamp(counts, max=fanout), torch.index_select(pos, 0, torch.index_select(order, 0, take)))


def position_times(part, node_time: Optional[torch.Tensor] = None, edge_time: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The time of each CSC position of partition `part`: its source node's time (node_time over global node
    ids) or the edge's own time (edge_time over global edge ids), on the partition's device."""
    dev = part.device
    if edge_time is not None:
        return torch.index_select(edge_time.to(dev), 0, part.edge_ids.to(torch.int64))
    if node_time is None:
        raise InputError(None, "temporal sampling needs node times or edge times")
    src = part.indices.to(torch.int64)
    if part.num_parts > 1:  # local ids: map to global ids first (one partition: local ids are global, SPEC.md 4.1)
        src = torch.index_select(part.node_ids.to(torch.int64), 0, src)
    return torch.index_select(node_time.to(dev), 0, src)
