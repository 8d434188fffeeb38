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
  edge for `prefix`, 8 for the alias tables, 4 for the weights (float32, each
  over its run's heaviest, so that any scale of weights draws the same).
- without replacement, exact weighted sampling without replacement
  (Efraimidis-Spirakis): a segment with no more positive-weight edges than
  the fanout takes them all (no draw); in the others every positive-weight
  edge gets the key -log(U) / w (a zero weight +inf) and the segment keeps
  its `fanout` smallest, found for all segments at once by one integer sort
  of segment * 2^32 + the key's float32 bits (non-negative floats' bits order
  as the floats; integers sort by radix, int_sort.sort_ints). Zero-weight edges are never
  kept. This reads every
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
from gpart.runtime.sampling.int_sort import sort_ints
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


class SegmentWeights:
    """A partition's sampling weights in CSC order with the tables of both draws (see the module)."""

    def __init__(self, weights: torch.Tensor, runs: Optional[torch.Tensor] = None):
        """`runs`: the boundaries of the segments every draw takes whole (csc_runs), for alias tables; None: the
        segments drawn are any (a temporal prefix of a run) and draws search the prefix."""
        # each weight over its run's heaviest (over the heaviest of all without runs), in float32 (4 B per edge): every
        # draw is the same for any scale of a run's weights, and this keeps float32 keys and float64 sums in range
        # for weights near 1e-300 or 1e300; a weight below 1e-45 of its run's heaviest counts as 0
        self.weights = _relative_to_heaviest(weights.reshape(-1).to(torch.float64), runs).to(torch.float32)
        w64 = self.weights.to(torch.float64)
        zero = torch.zeros(1, dtype=torch.int64, device=w64.device)
        self.prefix = torch.cat([zero.to(torch.float64), torch.cumsum(w64, 0)])
        self.positive_prefix = torch.cat([zero, torch.cumsum((w64 > 0).to(torch.int64), 0)])
        self.alias = AliasTable(w64, runs) if runs is not None else None
        self.all_positive = bool((self.weights > 0).all())  # then a segment's positive edges are all its edges

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
        segment = torch.repeat_interleave(torch.arange(start.numel(), device=start.device), counts, output_size=n)
        return Picks(counts, self._iid(start, deg, segment, generator, (base, end)))

    def _iid(self, start, deg, segment, generator, bounds=None) -> torch.Tensor:
        """One i.i.d. weighted draw per entry of `segment` (indices into start/deg, each segment of positive weight);
        `bounds`: the segments' prefix sums at their start and end, where the caller has them."""
        u = torch.rand(segment.numel(), dtype=torch.float64, device=start.device, generator=generator)
        if self.alias is not None:  # the segments are whole runs: one table read per draw
            return self.alias.draw(torch.index_select(start, 0, segment), torch.index_select(deg, 0, segment), u)
        if bounds is None:
            bounds = (torch.index_select(self.prefix, 0, start), torch.index_select(self.prefix, 0, start + deg))
        base, end = (torch.index_select(b, 0, segment) for b in bounds)
        # below the segment's end even when rounding pushed it there: the search then stays in the segment
        target = torch.minimum(base + u * (end - base), torch.nextafter(end, torch.zeros_like(end)))
        return torch.searchsorted(self.prefix[1:], target, right=True)

    def _without_replacement(self, start, deg, fanout, generator) -> Picks:
        """Up to `fanout` distinct positive-weight positions per segment, one by one by weight: every positive edge
        where there are no more than `fanout`, wide segments from a stream, the others by keys over every in-edge
        (see the module); grouped by segment."""
        positive = torch.index_select(self.positive_prefix, 0, start + deg) - torch.index_select(self.positive_prefix, 0, start)
        counts = positive if fanout < 0 else torch.clamp(positive, max=fanout)
        kind = (positive > counts).to(torch.int8)
        if fanout >= 0:
            kind += positive > WIDE * fanout
        parts = []
        for value, draw in ((0, self._every_positive), (1, self._smallest_keys), (2, self._by_stream)):
            at = torch.nonzero(kind == value).reshape(-1)  # a loop over the three kinds of segment
            if at.numel():
                part_counts = torch.index_select(counts, 0, at)
                taken = draw(torch.index_select(start, 0, at), torch.index_select(deg, 0, at), part_counts, generator)
                parts.append((at, Picks(part_counts, taken)))
        if len(parts) == 1:
            return Picks(counts, parts[0][1].positions)
        return Picks(counts, merge_grouped(counts, parts))

    def _every_positive(self, start, deg, counts, generator) -> torch.Tensor:
        """Every positive-weight position of each segment (no draw: there are no more than the fanout)."""
        every = sample_segments(start, deg, -1).positions
        return every if self.all_positive else torch.masked_select(every, torch.index_select(self.weights, 0, every) > 0)

    def _smallest_keys(self, start, deg, take, generator) -> torch.Tensor:
        """The take[i] positions of segment i with the smallest exponential keys -log(U) / w among its edges
        (zero weights last, never among them, as every segment here has more positive edges than it takes)."""
        n, dev = int(deg.sum()), start.device
        # one repeat_interleave, the rest gathers by segment (a gather from a small table is the cheaper op)
        segment = torch.repeat_interleave(torch.arange(deg.numel(), device=dev), deg, output_size=n)
        offset = torch.arange(n, device=dev) - torch.index_select(torch.cumsum(deg, 0) - deg, 0, segment)
        positions = torch.index_select(start, 0, segment) + offset
        w = torch.index_select(self.weights, 0, positions)  # relative to the run's heaviest: in [0, 1] (__init__)
        u = torch.rand(n, dtype=torch.float32, device=dev, generator=generator)
        # u in [0, 1): a key >= 0 for w > 0; a zero weight's NaN, whose bits order after +inf's, comes after every
        # positive edge
        keys = torch.where(w > 0, -torch.log1p(-u) / w, float("nan"))
        return torch.index_select(positions, 0, _smallest_per_row(keys, segment, take, offset))

    def _by_stream(self, start, deg, take, generator) -> torch.Tensor:
        """take[i] distinct positions of each (wide) segment i: the first distinct ones of a stream of i.i.d.
        weighted draws, the rest (segments still short after STREAM_ROUNDS) by keys among the edges not taken."""
        s, dev = start.numel(), start.device
        # key = position + shift[segment]: segment i's keys are cum_deg[i] .. cum_deg[i] + deg[i] - 1, distinct across
        # segments, ascending by segment, and below the segments' total in-edges (int32 for the sort, where that fits)
        shift = torch.cumsum(deg, 0) - deg - start
        need = take.clone()
        taken_keys = torch.zeros(0, dtype=torch.int64, device=dev)
        batches = 0  # of keys in taken_keys: one round's are in stream order, which is grouped by segment
        for _ in range(STREAM_ROUNDS):  # a few rounds, each vectorised over every segment still short
            counts = 2 * need  # every segment here has positive weight (more positive edges than 4 x fanout)
            seg = torch.repeat_interleave(torch.arange(s, device=dev), counts, output_size=int(counts.sum()))
            keys = self._iid(start, deg, seg, generator) + torch.index_select(shift, 0, seg)
            fresh = _first_appearances(keys)
            if taken_keys.numel():
                fresh &= ~torch.isin(keys, taken_keys)
            rank = _rank_in_group(fresh, seg, counts)
            keep = fresh & (rank < torch.index_select(need, 0, seg))
            taken_keys = torch.cat([taken_keys, torch.masked_select(keys, keep)])
            batches += 1
            need = need - torch.zeros_like(need).index_add_(0, seg, keep.to(torch.int64))
            if not bool((need > 0).any()):
                break
        if bool((need > 0).any()):
            taken_keys = torch.cat([taken_keys, self._rest_by_keys(start, deg, need, taken_keys, shift, generator)])
            batches += 1
        # the usual case, one round filled every segment: no sort
        taken_keys = taken_keys if batches == 1 else sort_ints(taken_keys)[0]
        return taken_keys - torch.repeat_interleave(shift, take, output_size=taken_keys.numel())

    def _rest_by_keys(self, start, deg, need, taken_keys, shift, generator) -> torch.Tensor:
        """Keys (position + shift[segment], _by_stream) of `need` more positions of each short segment, by exponential keys among
        its positive edges not in `taken_keys`."""
        short = torch.nonzero(need > 0).reshape(-1)
        every = sample_segments(torch.index_select(start, 0, short), torch.index_select(deg, 0, short), -1)
        seg = torch.repeat_interleave(short, every.counts, output_size=every.positions.numel())
        keys = every.positions + torch.index_select(shift, 0, seg)
        w = torch.index_select(self.weights, 0, every.positions)
        # the positive edges not taken yet, each with an exponential key -log(U) / w; the `need` smallest per segment
        edges = torch.nonzero((w > 0) & ~torch.isin(keys, taken_keys)).reshape(-1)
        u = torch.rand(edges.numel(), dtype=torch.float64, device=start.device, generator=generator)
        exp_keys = -torch.log1p(-u) / torch.index_select(w, 0, edges).to(torch.float64)  # u in [0, 1): finite, w > 0
        kept = _smallest_per_row(exp_keys, torch.index_select(seg, 0, edges), need)  # rows: the segments, ascending
        return torch.index_select(keys, 0, torch.sort(torch.index_select(edges, 0, kept)).values)


def _relative_to_heaviest(w: torch.Tensor, runs: Optional[torch.Tensor]) -> torch.Tensor:
    """`w` (>= 0) over the heaviest weight of its run (`runs`: boundaries), or of all when `runs` is None; 0 stays 0."""
    if runs is None:
        top = w.max() if w.numel() else w.new_ones(())
        return w / top if bool(top > 0) else w
    runs = runs.to(torch.int64).to(w.device)
    run = torch.repeat_interleave(torch.arange(runs.numel() - 1, device=w.device), runs[1:] - runs[:-1], output_size=w.numel())
    top = torch.zeros(runs.numel() - 1, dtype=w.dtype, device=w.device).scatter_reduce_(0, run, w, reduce="amax")
    top_of = torch.index_select(top, 0, run)
    return torch.where(top_of > 0, w / torch.where(top_of > 0, top_of, 1.0), 0.0)


def _smallest_per_row(keys: torch.Tensor, row: torch.Tensor, take: torch.Tensor,
                      rank: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Indices into `keys` (>= 0; +inf, then NaN, order last) of the take[r] smallest of each row r, `row`
    non-decreasing (the keys grouped by row; each key's `rank` in its row when the caller has it): one integer sort
    of row * 2^32 + the key's float32 bits (those of a non-negative float order as the floats do, so rows never
    interleave and each row comes out ascending, in the same span of indices as before). Integers sort by radix on
    the CPU (sort_ints), several times faster than floats; float32 keys tie with probability about 2^-24 per pair,
    which only decides which of two equal keys comes first."""
    n = keys.numel()
    order = sort_ints(row * (1 << 32) + keys.to(torch.float32).view(torch.int32).to(torch.int64))[1]
    if rank is None:
        sizes = torch.bincount(row, minlength=take.numel())
        rank = torch.arange(n, device=keys.device) - torch.index_select(torch.cumsum(sizes, 0) - sizes, 0, row)
    return torch.masked_select(order, rank < torch.index_select(take, 0, row))


def _first_appearances(keys: torch.Tensor) -> torch.Tensor:
    """Whether each key is the first of its value in `keys` (stream order): a stable sort puts equal keys in stream
    order, so the first of each run of equal sorted keys is the first appearance."""
    ordered, order = sort_ints(keys)
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[1:] = ordered[1:] != ordered[:-1]
    return torch.empty_like(first).index_copy_(0, order, first)


def _rank_in_group(mask: torch.Tensor, group: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    """For each item of consecutive groups (`sizes` items each), how many items of its group before it are in `mask`."""
    before = torch.cumsum(mask.to(torch.int64), 0) - mask.to(torch.int64)
    group_first = torch.cumsum(sizes, 0) - sizes
    at_start = torch.index_select(before, 0, torch.clamp(group_first, max=max(mask.numel() - 1, 0))) if mask.numel() else before
    return before - torch.index_select(at_start, 0, group)
