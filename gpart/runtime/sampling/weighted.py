"""Weighted (biased) neighbour draws: in-edges taken with probability proportional to an edge data array.

    weights = SegmentWeights.of(part, "w")            # or weight_problem(part, "w") -> one line / None
    picks = weights.sample_segments(start, deg, fanout, replace, generator)

The owner draws: the partition holds its owned columns' in-edges and their
edge data (SPEC.md 4), so the weights never travel. The array is read once,
in CSC order (`edge_data` rows are in the order of `indices`), and one
per-partition table is built from it:

- with replacement, inverse CDF: `prefix` is the exclusive cumulative sum
  over all CSC positions; a draw for segment [s, s + d) is the first
  position j with prefix[j + 1] > t, t = prefix[s] + u * (prefix[s + d] - prefix[s]).
  A zero-weight edge spans an empty interval (adding 0.0 is exact), so it
  is never found; a target that rounding pushes to the segment's end is
  moved just below it. Segments whose weights sum to 0 take nothing.
  Where the segments drawn are the partition's CSC runs (`runs`), the
  draws read alias tables instead (gpart.runtime.sampling.alias_table: one
  table read per draw, no search); the searched prefix serves segments
  that are part of a run (a temporal prefix). Memory: 8 bytes per stored
  edge for `prefix`, 8 for the alias tables, beside the weights as stored.
- without replacement, exact weighted sampling without replacement
  (Efraimidis-Spirakis): a segment with no more positive-weight edges than
  the fanout takes them all (no draw); in the others every positive-weight
  edge gets the key -log(U) / w and the segment keeps its `fanout`
  smallest: the keys laid in one [segments, widest] table, +inf past a
  segment's edges, and one topk per row (one float64 sort on segment * 2 +
  (1 - exp(-key)) instead where the table would be mostly padding). Zero-weight
  edges are never kept. This reads every
  in-edge of the segment (O(degree) per node, as PyG's weighted sampler),
  so it serves the segments with at most WIDE x fanout positive edges.
  A wider segment (a hub) draws from a stream instead: i.i.d. draws by
  inverse CDF, 2 x what it still needs per round, keeping each edge's
  first appearance; the first `fanout` distinct edges of an i.i.d. weighted
  stream are exactly a draw one by one without replacement by weight
  (successive sampling), and a segment still short after STREAM_ROUNDS
  rounds takes the rest by the keys above among its positive edges not yet
  taken (the same process continued: given the edges taken so far, the
  rest is successive sampling from the remainder). Cost: O(fanout log E)
  per hub instead of O(degree). `positive_prefix` (8 bytes per stored
  edge) counts the positive edges of any segment in O(1).

Tensor operations only, no loop per node; the picks are grouped by segment,
as gpart.runtime.sampling.kernels.sample_segments gives them.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from gpart.runtime.sampling.alias_table import AliasTable
from gpart.runtime.sampling.csc_runs import csc_runs
from gpart.runtime.sampling.kernels import Picks, merge_grouped, sample_segments


def weight_problem(part: Any, name: Any) -> Optional[str]:
    """The one-line problem with `part`'s edge data `name` as sampling weights (None: none; the caller names the
    partition's folder: the loaders' settings agreement does). A typed partition
    needs the array for every edge type: ((s, r, d), name), rows in CSC order within the type."""
    if part.typed:
        for r, etype in enumerate(part.edge_types):  # a loop over edge types
            if (etype, name) not in part.edge_data:
                return f"sampling weight {name!r}: edge type {':'.join(etype)} has no such edge data (every edge type needs one)"
            stored = int((part.edge_type == r).sum())
            problem = _array_problem(part.edge_data[(etype, name)], stored, f"sampling weight {':'.join(etype)}/{name}")
            if problem:
                return problem
        return None
    if name not in part.edge_data:
        have = ", ".join(sorted(map(str, part.edge_data))) or "none"
        return f"sampling weight {name!r}: no such edge data (the partition has: {have})"
    return _array_problem(part.edge_data[name], part.indices.numel(), f"sampling weight {name!r}")


def position_weights(part: Any, name: Any) -> torch.Tensor:
    """The weight of every stored in-edge (CSC position) of `part`: the edge data `name`, for a typed partition
    gathered from each edge type's array (checked first with weight_problem)."""
    if not part.typed:
        return part.edge_data[name].reshape(-1).to(part.device)
    first = part.edge_data[(part.edge_types[0], name)]
    out = torch.empty(part.edge_type.numel(), dtype=first.dtype, device=part.device)
    for r, etype in enumerate(part.edge_types):  # a loop over edge types
        at = torch.nonzero(part.edge_type == r).reshape(-1)
        table = part.edge_data[(etype, name)].reshape(-1).to(part.device, first.dtype)
        out[at] = torch.index_select(table, 0, torch.index_select(part.edge_rows, 0, at))
    return out


def _array_problem(w: torch.Tensor, stored: int, where: str) -> Optional[str]:
    """What is wrong with `w` as one weight per stored in-edge (None: nothing)."""
    if w.dim() != 1 and not (w.dim() == 2 and w.shape[1] == 1):
        return f"{where}: must be one value per edge, got shape {tuple(w.shape)}"
    if w.shape[0] != stored:
        return f"{where}: has {w.shape[0]} rows, the partition stores {stored} in-edges"
    if w.dtype == torch.bool or w.is_complex():
        return f"{where}: must be a real number per edge, got dtype {w.dtype}"
    w = w.reshape(-1).to(torch.float64)
    if bool(torch.isnan(w).any()):
        return f"{where}: holds NaN"
    if bool(torch.isinf(w).any()):
        return f"{where}: holds an infinite value"
    if bool((w < 0).any()):
        return f"{where}: holds a negative value (min {float(w.min())})"
    return None


WIDE = 4  # a segment with more than WIDE x fanout positive edges draws from a stream (see the module)
STREAM_ROUNDS = 3  # rounds of stream draws before a short segment takes the rest by keys
SPARSE_TABLE = 4  # keys take a per-row topk unless the [rows, widest] table would hold more than 4x the keys


class SegmentWeights:
    """A partition's sampling weights in CSC order with the tables of both draws (see the module)."""

    def __init__(self, weights: torch.Tensor, runs: Optional[torch.Tensor] = None):
        """`runs`: the boundaries of the segments every draw takes whole (csc_runs), for alias tables; None: the
        segments drawn are any (a temporal prefix of a run) and draws search the prefix."""
        self.weights = weights.reshape(-1)  # as stored (float32: 4 B per edge); keys are computed in float64
        w64 = self.weights.to(torch.float64)
        zero = torch.zeros(1, dtype=torch.int64, device=w64.device)
        self.prefix = torch.cat([zero.to(torch.float64), torch.cumsum(w64, 0)])
        self.positive_prefix = torch.cat([zero, torch.cumsum((w64 > 0).to(torch.int64), 0)])
        self.alias = AliasTable(w64, runs) if runs is not None else None

    @classmethod
    def of(cls, part: Any, name: Any) -> "SegmentWeights":
        """The weights of edge data `name` of `part`, typed or not (checked first with weight_problem), with the
        alias tables of its CSC runs."""
        return cls(position_weights(part, name), csc_runs(part)).placed(part.place_edge_array)

    def placed(self, keep: Callable[[torch.Tensor], torch.Tensor]) -> "SegmentWeights":
        """These tables with each per-position array replaced by keep(array) (where the partition keeps its
        topology: Partition.place_edge_array); returns self."""
        self.weights, self.prefix, self.positive_prefix = keep(self.weights), keep(self.prefix), keep(self.positive_prefix)
        if self.alias is not None:
            self.alias.packed = keep(self.alias.packed)
        return self

    def sample_segments(self, start: torch.Tensor, deg: torch.Tensor, fanout: int, replace: bool,
                        generator: Optional[torch.Generator]) -> Picks:
        """Up to `fanout` positions of each segment [start[i], start[i] + deg[i]) drawn by weight (-1: every
        positive-weight edge), grouped by segment."""
        if fanout < 0 or not replace:
            return self._without_replacement(start, deg, fanout, generator)
        return self._with_replacement(start, deg, fanout, generator)

    def _with_replacement(self, start, deg, fanout, generator) -> Picks:
        """`fanout` i.i.d. draws per segment with a positive weight (`fanout` may be a tensor: per segment)."""
        base = torch.index_select(self.prefix, 0, start)
        end = torch.index_select(self.prefix, 0, start + deg)
        counts = torch.where(end > base, fanout, 0)
        n = int(counts.sum()) if counts.numel() else 0
        u = torch.rand(n, dtype=torch.float64, device=start.device, generator=generator)
        if self.alias is not None:  # the segments are whole runs
            return Picks(counts, self.alias.draw(start, deg, counts, u))
        base, end = torch.repeat_interleave(base, counts, output_size=n), torch.repeat_interleave(end, counts, output_size=n)
        # below the segment's end even when rounding pushed it there: the search then stays in the segment
        target = torch.minimum(base + u * (end - base), torch.nextafter(end, torch.zeros_like(end)))
        return Picks(counts, torch.searchsorted(self.prefix[1:], target, right=True))

    def _without_replacement(self, start, deg, fanout, generator) -> Picks:
        """Up to `fanout` distinct positive-weight positions per segment, one by one by weight: wide segments from
        a stream, the others by keys over every in-edge (see the module); grouped by segment."""
        positive = torch.index_select(self.positive_prefix, 0, start + deg) - torch.index_select(self.positive_prefix, 0, start)
        wide = positive > WIDE * fanout if fanout >= 0 else torch.zeros_like(positive, dtype=torch.bool)
        if not bool(wide.any()):
            return self._by_keys(start, deg, fanout, generator)
        counts = torch.clamp(positive, max=fanout)
        narrow_at, wide_at = torch.nonzero(~wide).reshape(-1), torch.nonzero(wide).reshape(-1)
        narrow = self._by_keys(torch.index_select(start, 0, narrow_at), torch.index_select(deg, 0, narrow_at), fanout, generator)
        streamed = self._by_stream(torch.index_select(start, 0, wide_at), torch.index_select(deg, 0, wide_at), fanout, generator)
        return Picks(counts, merge_grouped(counts, [(narrow_at, narrow), (wide_at, streamed)]))

    def _by_stream(self, start, deg, fanout, generator) -> Picks:
        """`fanout` distinct positions of each (wide) segment: the first distinct ones of a stream of i.i.d. weighted
        draws, the rest (segments still short after STREAM_ROUNDS) by keys among the edges not taken."""
        s, dev = start.numel(), start.device
        span = int(self.prefix.numel())  # keys segment * span + position are distinct across segments
        need = torch.full((s,), fanout, dtype=torch.int64, device=dev)
        taken_keys = torch.zeros(0, dtype=torch.int64, device=dev)
        for _ in range(STREAM_ROUNDS):  # a few rounds, each vectorised over every segment still short
            draws = self._with_replacement(start, deg, 2 * need, generator)
            seg = torch.repeat_interleave(torch.arange(s, device=dev), draws.counts, output_size=draws.positions.numel())
            keys = seg * span + draws.positions
            fresh = _first_appearances(keys)
            if taken_keys.numel():
                fresh &= ~torch.isin(keys, taken_keys)
            rank = _rank_in_group(fresh, seg, draws.counts)
            keep = fresh & (rank < torch.index_select(need, 0, seg))
            taken_keys = torch.cat([taken_keys, torch.masked_select(keys, keep)])
            need = need - torch.zeros_like(need).index_add_(0, seg, keep.to(torch.int64))
            if not bool((need > 0).any()):
                break
        if bool((need > 0).any()):
            taken_keys = torch.cat([taken_keys, self._rest_by_keys(start, deg, need, taken_keys, span, generator)])
        taken_keys = torch.sort(taken_keys).values  # grouped by segment
        return Picks(torch.full((s,), fanout, dtype=torch.int64, device=dev), torch.remainder(taken_keys, span))

    def _rest_by_keys(self, start, deg, need, taken_keys, span, generator) -> torch.Tensor:
        """Keys (segment * span + position) of `need` more positions of each short segment, by exponential keys among
        its positive edges not in `taken_keys`."""
        short = torch.nonzero(need > 0).reshape(-1)
        every = sample_segments(torch.index_select(start, 0, short), torch.index_select(deg, 0, short), -1)
        seg = torch.repeat_interleave(short, every.counts, output_size=every.positions.numel())
        keys = seg * span + every.positions
        chosen = (torch.index_select(self.weights, 0, every.positions) > 0) & ~torch.isin(keys, taken_keys)
        w = torch.where(chosen, torch.index_select(self.weights, 0, every.positions).to(torch.float64), 0.0)
        local = torch.repeat_interleave(torch.arange(short.numel(), device=start.device), every.counts,
                                        output_size=keys.numel())
        crowded = torch.ones(short.numel(), dtype=torch.bool, device=start.device)
        self._draw_crowded(chosen, w, local, crowded, torch.index_select(need, 0, short), generator)
        return torch.masked_select(keys, chosen)

    def _by_keys(self, start, deg, fanout, generator) -> Picks:
        every = sample_segments(start, deg, -1)  # every candidate, grouped by segment
        w = torch.index_select(self.weights, 0, every.positions)
        n, dev = w.numel(), w.device
        segment = torch.repeat_interleave(torch.arange(deg.numel(), device=dev), deg, output_size=n)
        positive = torch.zeros_like(deg).index_add_(0, segment, (w > 0).to(torch.int64))
        counts = positive if fanout < 0 else torch.clamp(positive, max=fanout)
        chosen = w > 0
        crowded = positive > counts  # only these draw: the others take every positive-weight edge
        if bool(crowded.any()):
            self._draw_crowded(chosen, w, segment, crowded, counts, generator)
        return Picks(counts, torch.masked_select(every.positions, chosen))

    @staticmethod
    def _draw_crowded(chosen, w, segment, crowded, counts, generator) -> None:
        """Keep in `chosen` the `counts` smallest exponential keys -log(U) / w of each crowded segment's positive
        edges: the keys laid in one [crowded segments, widest] table (+inf past a segment's edges), one topk per row."""
        edges = torch.nonzero(torch.index_select(crowded, 0, segment) & chosen).reshape(-1)
        row = torch.index_select(torch.cumsum(crowded.to(torch.int64), 0) - 1, 0, torch.index_select(segment, 0, edges))
        rows = int(crowded.sum())
        sizes = torch.zeros(rows, dtype=torch.int64, device=w.device).index_add_(0, row, torch.ones_like(row))
        first = torch.cumsum(sizes, 0) - sizes
        width, take = int(sizes.max()), torch.masked_select(counts, crowded)
        u = torch.rand(edges.numel(), dtype=torch.float64, device=w.device, generator=generator)
        keys = -torch.log1p(-u) / torch.index_select(w, 0, edges).to(torch.float64)  # u in [0, 1): finite, w > 0
        if rows * width > SPARSE_TABLE * edges.numel() + 4096:  # segments of very unequal sizes (a hub's rest)
            kept = _smallest_by_sort(keys, row, sizes, first, take)
        else:
            kept = _smallest_by_table(keys, row, rows, width, first, take)
        chosen.index_fill_(0, edges, False)
        chosen.index_fill_(0, torch.index_select(edges, 0, kept), True)


def _smallest_by_table(keys, row, rows, width, first, take) -> torch.Tensor:
    """Indices into `keys` of the take[r] smallest of each row r (keys grouped by row, sizes from `first`): the keys in a
    [rows, width] table, +inf past a row's keys, one topk per row."""
    table = torch.full((rows * width,), float("inf"), dtype=torch.float64, device=keys.device)
    col = torch.arange(keys.numel(), device=keys.device) - torch.index_select(first, 0, row)
    table.index_copy_(0, row * width + col, keys)
    most = int(take.max())
    best = torch.topk(table.view(rows, width), most, dim=1, largest=False, sorted=False).indices
    return torch.masked_select(best + first.unsqueeze(1), torch.arange(most, device=keys.device) < take.unsqueeze(1))


def _smallest_by_sort(keys, row, sizes, first, take) -> torch.Tensor:
    """What _smallest_by_table gives, by one sort of row * 2 + (1 - exp(-key)) (in [0, 1], so rows never interleave;
    float64), for rows of very unequal sizes."""
    order = torch.argsort(row.to(torch.float64) * 2 - torch.expm1(-keys))
    rank = torch.arange(keys.numel(), device=keys.device) - torch.repeat_interleave(first, sizes, output_size=keys.numel())
    return torch.masked_select(order, rank < torch.repeat_interleave(take, sizes, output_size=keys.numel()))


def _first_appearances(keys: torch.Tensor) -> torch.Tensor:
    """Whether each key is the first of its value in `keys` (stream order): a stable sort puts equal keys in stream
    order, so the first of each run of equal sorted keys is the first appearance."""
    ordered, order = torch.sort(keys, stable=True)
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[1:] = ordered[1:] != ordered[:-1]
    return torch.empty_like(first).index_copy_(0, order, first)


def _rank_in_group(mask: torch.Tensor, group: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """For each item of consecutive groups (`sizes` items each), how many items of its group before it are in `mask`."""
    before = torch.cumsum(mask.to(torch.int64), 0) - mask.to(torch.int64)
    group_first = torch.cumsum(sizes, 0) - sizes
    at_start = torch.index_select(before, 0, torch.clamp(group_first, max=max(mask.numel() - 1, 0))) if mask.numel() else before
    return before - torch.index_select(at_start, 0, group)
