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
  table read per draw, no search), and a run of weight 0 is told by its
  draws (one past its end), not by the prefix; the searched prefix serves segments
  that are part of a run (a temporal prefix). Memory: 8 bytes per stored
  edge for `prefix`, 8 for the alias tables, 4 for the weights (float32, each
  over its run's heaviest, so that any scale of weights draws the same).
- without replacement, exact weighted sampling without replacement
  (Efraimidis-Spirakis), each segment by its degree d (which the caller
  has, so nothing is read to sort them), into one [segments, fanout]
  table of offsets that one compaction turns into the picks:
  d <= fanout takes every positive-weight edge (no draw); d <= WIDE x
  fanout gives every in-edge the key -log(1 - U) / w and keeps the
  `fanout` smallest, in rows of the segment's edges (one strided view of
  the weights, two widths of rows) sorted per row (int_sort.sort_rows) as
  int64 values of the key's float32 bits above the edge's offset; zero
  weights sort after every positive edge and are never kept. That reads
  every in-edge (O(degree), as PyG's weighted sampler). A wider segment (a
  hub) draws from a stream instead: STREAM_WIDTH x fanout i.i.d. draws per
  round through the alias tables (the searched prefix for a temporal
  prefix), keeping each edge's first appearance; the first `fanout`
  distinct edges of an i.i.d. weighted stream are exactly a draw one by
  one without replacement by weight (successive sampling), and a segment
  still short after STREAM_ROUNDS rounds (very skewed weights, fewer
  than `fanout` positive edges, or a run of weight 0, whose alias draws
  fall one past its end) takes the rest by the keys above among its
  positive edges not yet taken (the same process continued: given the
  edges taken so far, the rest is successive sampling from the
  remainder). Cost: O(fanout) table reads per hub instead of O(degree).
  `positive_prefix` (8 bytes per stored edge) counts the positive edges of
  any segment in O(1) (fanout -1, and the searched hubs).

Tensor operations only, no loop per node; the picks are grouped by segment,
as gpart.runtime.sampling.kernels.sample_segments gives them.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
import torch

from gpart.runtime.sampling.alias_table import AliasTable
from gpart.runtime.sampling.csc_runs import csc_runs
from gpart.runtime.sampling.int_sort import sort_ints, sort_rows
from gpart.runtime.sampling.kernels import Picks, sample_segments


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
STREAM_WIDTH = 2.0  # draws a round per wide segment, x fanout (1.5: -1% on power-law, +3% on Enron, whose hubs are smaller)
ROW_PAD = 256  # zeros after the weights: the widest window read as rows of one strided view
MIN_RELATIVE = 1e-30  # a weight below this share of its run's heaviest counts as 0 (keys: |log(1 - U)| <= 17)
NEG_INF_BITS = -(1 << 23)  # float32 -inf's bits as an int32: every finite key <= -0.0 is below, NaN and -inf are not


class SegmentWeights:
    """A partition's sampling weights in CSC order with the tables of both draws (see the module)."""

    def __init__(self, weights: torch.Tensor, runs: Optional[torch.Tensor] = None):
        """`runs`: the boundaries of the segments every draw takes whole (csc_runs), for alias tables; None: the
        segments drawn are any (a temporal prefix of a run) and draws search the prefix."""
        # each weight over its run's heaviest (over the heaviest of all without runs), in float32 (4 B per edge): every
        # draw is the same for any scale of a run's weights, and this keeps float32 keys and float64 sums in range
        # for weights near 1e-300 or 1e300; a weight below MIN_RELATIVE of its run's heaviest counts as 0, so that
        # every positive weight's key log(1 - U) / w is finite in float32 (_smallest_keys)
        relative = _relative_to_heaviest(weights.reshape(-1).to(torch.float64), runs)
        relative = torch.where(relative >= MIN_RELATIVE, relative, 0.0).to(torch.float32)
        # followed by ROW_PAD zeros, so that any [segments, width <= ROW_PAD] window of it is one strided view, whose
        # rows a gather copies whole (_row_weights: several times cheaper than a gather per element)
        self._padded = torch.cat([relative, relative.new_zeros(ROW_PAD)])
        self.weights = self._padded[: relative.numel()]
        w64 = relative.to(torch.float64)
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
        self._padded, self.prefix, self.positive_prefix = keep(self._padded), keep(self.prefix), keep(self.positive_prefix)
        self.weights = self._padded[: self.weights.numel()]
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
        if self.alias is not None and isinstance(fanout, int) and start.numel():
            return self._whole_runs_with_replacement(start, deg, fanout, generator)
        base = torch.index_select(self.prefix, 0, start)
        end = torch.index_select(self.prefix, 0, start + deg)
        counts = torch.where(end > base, fanout, 0)
        n = int(counts.sum()) if counts.numel() else 0
        segment = torch.repeat_interleave(torch.arange(start.numel(), device=start.device), counts, output_size=n)
        return Picks(counts, self._iid(start, deg, segment, generator, (base, end)))

    def _whole_runs_with_replacement(self, start, deg, fanout, generator) -> Picks:
        """`fanout` alias draws from each segment (whole runs), as one [segments, fanout] table: which segments have
        weight is read off the draws (a run of weight 0 draws one past its end; an empty one reads a slot of another
        run, whose offsets, >= 0 like every table entry's, its size 0 drops), not off the cumulative weights: two
        reads a segment at random places fewer (power-law 1M / 10M: x1.47 -> x1.40 of uniform's CPU per edge)."""
        first = torch.clamp(start, max=self.weights.numel() - 1).unsqueeze(1)  # an empty last run: a slot that exists
        size = deg.unsqueeze(1)
        u = torch.rand((start.numel(), fanout), dtype=torch.float64, device=start.device, generator=generator)
        offsets = self.alias.draw_offsets(first, torch.clamp(size, min=1), u)
        return _compact(_or_none(offsets, offsets < size), start)

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
        """Up to `fanout` distinct positive-weight positions per segment, one by one by weight: segments of at most
        `fanout` in-edges take every positive one, those of at most WIDE x fanout by keys over every in-edge (in two
        widths of rows), wider ones from a stream (see the module); grouped by segment."""
        if fanout < 0:
            positive = torch.index_select(self.positive_prefix, 0, start + deg) - torch.index_select(self.positive_prefix, 0, start)
            return Picks(positive, self._every_positive(start, deg))
        n = start.numel()
        if fanout == 0 or n == 0 or self.weights.numel() == 0:
            return Picks(torch.zeros_like(deg), torch.zeros(0, dtype=torch.int64, device=start.device))
        # each kind fills its segments' rows of one [segments, fanout] table of offsets (-1: none), which one
        # compaction turns into the picks grouped by segment. Kinds by degree, which the caller has: no read per
        # segment of its positive edges' count
        table = None
        draws = (self._every_positive_rows, self._smallest_keys, self._smallest_keys, self._by_stream)
        for at, draw in zip(_kinds(deg, (fanout, 2 * fanout, WIDE * fanout)), draws):  # a loop over kinds of segment
            if at.numel() == n:
                table = draw(start, deg, fanout, generator)
            elif at.numel():
                table = torch.full((n, fanout), -1, dtype=torch.int64, device=start.device) if table is None else table
                table.index_copy_(0, at, draw(torch.index_select(start, 0, at), torch.index_select(deg, 0, at), fanout, generator))
        return _compact(table, start)

    def _every_positive(self, start, deg) -> torch.Tensor:
        """Every positive-weight position of each segment, grouped by segment."""
        every = sample_segments(start, deg, -1).positions
        return every if self.all_positive else torch.masked_select(every, torch.index_select(self.weights, 0, every) > 0)

    def _row_weights(self, start, width) -> tuple[torch.Tensor, torch.Tensor]:
        """([segments, width] column offsets, the weights at start + offset): past a segment's end any stored
        edge's (the callers mask them by degree)."""
        col = torch.arange(width, device=start.device)
        if width <= ROW_PAD:  # row i of the view: positions i .. i + width - 1 (start <= stored edges)
            return col, torch.as_strided(self._padded, (self.weights.numel() + 1, width), (1, 1)).index_select(0, start)
        at = (start.unsqueeze(1) + col).clamp_(max=self.weights.numel() - 1)
        return col, torch.index_select(self.weights, 0, at.reshape(-1)).view(at.shape)

    def _every_positive_rows(self, start, deg, fanout, generator) -> torch.Tensor:
        """[segments, fanout] offsets of every positive-weight in-edge (no draw: at most `fanout`), -1 elsewhere."""
        col = torch.arange(fanout, device=start.device)
        taken = col < deg.unsqueeze(1)
        if not self.all_positive:
            col, w = self._row_weights(start, fanout)
            taken &= w > 0
        return _or_none(col, taken)

    def _smallest_keys(self, start, deg, fanout, generator) -> torch.Tensor:
        """[segments, fanout] offsets of the `fanout` in-edges with the smallest exponential keys -log(1 - U) / w, -1
        past the segment's positive edges: one row per segment, as wide as the widest, sorted by row (sort_rows)."""
        col, w = self._row_weights(start, int(deg.max()))
        w = w * (col < deg.unsqueeze(1))  # past the segment: weight 0 (a product: cheaper than where on the CPU)
        u = torch.rand(w.shape, dtype=torch.float32, device=start.device, generator=generator)
        # log(1 - U) / w = minus the key, <= -0.0 and finite for w > 0 (MIN_RELATIVE); -inf or NaN for w = 0. The
        # bits of floats <= -0.0 read as int32 order as the floats reversed (-0.0 is the least), and -inf's and
        # NaN's come after every finite one: so an ascending sort puts the smallest keys first, zero weights last.
        # The offset below the bits makes a row's values distinct, and the sorted row names its edges.
        bits = u.neg_().log1p_().div_(w).view(torch.int32).to(torch.int64)
        first = sort_rows(bits.bitwise_left_shift_(32).bitwise_or_(col))[:, :fanout]
        return _or_none(torch.bitwise_and(first, 0xFFFFFFFF), first < (NEG_INF_BITS << 32))

    def _by_stream(self, start, deg, fanout, generator) -> torch.Tensor:
        """[segments, fanout] offsets of wide segments: the first distinct ones of a stream of i.i.d. weighted draws
        (STREAM_WIDTH x fanout more a round, for the segments still short); after STREAM_ROUNDS, and for segments
        with fewer than `fanout` positive edges, the rest by keys among the edges not taken (_rest_by_keys)."""
        table = torch.full((start.numel(), fanout), -1, dtype=torch.int64, device=start.device)
        rows = None  # None: every row; the alias tables need no count of positive edges (a run of weight 0 draws
        if self.alias is None and not self.all_positive:  # one past its end, which _rest_by_keys clears), a search does
            positive = torch.index_select(self.positive_prefix, 0, start + deg) - torch.index_select(self.positive_prefix, 0, start)
            rows = torch.nonzero(positive >= fanout).reshape(-1)
        stream = None
        for _ in range(STREAM_ROUNDS):  # a few rounds, each over every segment still short
            first, size = (t if rows is None else torch.index_select(t, 0, rows) for t in (start, deg))
            more = self._draw_rows(first, size, max(fanout, int(STREAM_WIDTH * fanout)), generator)
            stream = more if stream is None else torch.cat([stream, more], 1)  # each row's stream continued
            got, short = _first_distinct(stream, fanout)
            if rows is None:
                table = got
            else:
                table.index_copy_(0, rows, got)
            short = torch.nonzero(short).reshape(-1)
            if short.numel() == 0:
                break
            rows = short if rows is None else torch.index_select(rows, 0, short)
            stream = torch.index_select(stream, 0, short)
        short = torch.nonzero(table[:, -1] < 0).reshape(-1)  # rows fill from the left
        if short.numel():
            table.index_copy_(0, short, self._rest_by_keys(*(torch.index_select(t, 0, short) for t in (start, deg, table)),
                                                            generator))
        return table

    def _draw_rows(self, start, deg, width, generator) -> torch.Tensor:
        """[segments, width] i.i.d. weighted draws of each segment (of positive weight), as offsets within it."""
        u = torch.rand((start.numel(), width), dtype=torch.float64, device=start.device, generator=generator)
        first, size = start.unsqueeze(1), deg.unsqueeze(1)
        if self.alias is not None:  # the segments are whole runs: one table read per draw
            return self.alias.draw_offsets(first, size, u)
        base = torch.index_select(self.prefix, 0, start).unsqueeze(1)
        end = torch.index_select(self.prefix, 0, start + deg).unsqueeze(1)
        target = torch.minimum(base + u * (end - base), torch.nextafter(end, torch.zeros_like(end)))  # as in _iid
        return torch.searchsorted(self.prefix[1:], target.reshape(-1), right=True).view(u.shape) - first

    def _rest_by_keys(self, start, deg, table, generator) -> torch.Tensor:
        """`table` ([segments, fanout] offsets, -1 past those taken) filled up to `fanout` per row, as far as the
        positive edges go, with the positive edges not taken that have the smallest exponential keys: the same
        one-by-one draw continued (see the module). A run of weight 0's one draw (one past its end) is cleared."""
        table = torch.where(table < deg.unsqueeze(1), table, -1)
        every = sample_segments(start, deg, -1)
        row = torch.repeat_interleave(torch.arange(start.numel(), device=start.device), deg, output_size=every.positions.numel())
        offset = every.positions - torch.index_select(start, 0, row)
        # an edge is (row << 40) + offset: rows may be the same column (disjoint seeds), so offsets alone can collide
        taken = torch.isin(row * (1 << 40) + offset, torch.masked_select(
            torch.arange(start.numel(), device=start.device).unsqueeze(1) * (1 << 40) + table, table >= 0))
        w = torch.index_select(self.weights, 0, every.positions)
        edges = torch.nonzero((w > 0) & ~taken).reshape(-1)
        u = torch.rand(edges.numel(), dtype=torch.float64, device=start.device, generator=generator)
        exp_keys = -torch.log1p(-u) / torch.index_select(w, 0, edges).to(torch.float64)  # u in [0, 1): finite, w > 0
        got = (table >= 0).sum(1)
        kept = torch.index_select(edges, 0, _smallest_per_row(exp_keys, torch.index_select(row, 0, edges), table.shape[1] - got))
        kept_row = torch.index_select(row, 0, kept)  # by row, then key
        sizes = torch.bincount(kept_row, minlength=start.numel())
        col = torch.index_select(got - (torch.cumsum(sizes, 0) - sizes), 0, kept_row) + torch.arange(kept.numel(), device=start.device)
        return table.index_put_((kept_row, col), torch.index_select(offset, 0, kept))


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


def _kinds(deg: torch.Tensor, bounds: tuple) -> list[torch.Tensor]:
    """Indices of the segments whose degree d has bounds[i - 1] < d <= bounds[i], for i = 0 .. len(bounds) (through
    numpy on the CPU, whose calls on a few thousand entries cost a third of torch's)."""
    if deg.device.type == "cpu":
        kind = np.searchsorted(np.asarray(bounds, dtype=np.int64), deg.numpy())
        return [torch.from_numpy(np.flatnonzero(kind == i)) for i in range(len(bounds) + 1)]
    kind = torch.bucketize(deg, torch.tensor(bounds, dtype=deg.dtype, device=deg.device))
    return [torch.nonzero(kind == i).reshape(-1) for i in range(len(bounds) + 1)]


def _compact(table: torch.Tensor, start: torch.Tensor) -> Picks:
    """The picks of a [segments, fanout] table of offsets (-1: none): counts per row, and start + offset of each
    kept entry in row order. On the CPU through numpy: its boolean index takes a third of masked_select's time,
    and a float32 product with ones counts a row (exact below 2^24) in half of torch's sum."""
    kept = table >= 0
    if table.device.type == "cpu":
        flags = kept.numpy()
        positions = torch.from_numpy((table + start.unsqueeze(1)).numpy()[flags])
        return Picks(torch.from_numpy(flags.astype(np.float32) @ np.ones(table.shape[1], dtype=np.float32)).to(torch.int64),
                     positions)
    return Picks(kept.sum(1), torch.masked_select(table + start.unsqueeze(1), kept))


def _first_distinct(stream: torch.Tensor, fanout: int) -> tuple[torch.Tensor, torch.Tensor]:
    """([rows, fanout] table, whether each row is short): the first `fanout` distinct values of each row of `stream`
    (offsets >= 0, in stream order; width >= fanout) in columns 0.., -1 after them (short: fewer). Two row sorts, no
    scatter: values packed above their column put each value's first appearance first among its equals; then those
    first appearances' columns (the others' pushed past every column) sorted give them in stream order."""
    width = stream.shape[1]
    bits = max(1, (width - 1).bit_length())
    ordered = sort_rows(torch.bitwise_left_shift(stream, bits).bitwise_or_(torch.arange(width, device=stream.device)))
    value = torch.bitwise_right_shift(ordered, bits)
    later = torch.zeros_like(ordered)
    later[:, 1:] = value[:, 1:] == value[:, :-1]  # not the first appearance of its value
    columns = sort_rows(torch.bitwise_and(ordered, (1 << bits) - 1).bitwise_or_(later.bitwise_left_shift_(bits)))[:, :fanout]
    kept = columns < (1 << bits)
    got = torch.gather(stream, 1, torch.bitwise_and(columns, (1 << bits) - 1))
    return _or_none(got, kept), ~kept[:, -1]


def _or_none(values: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """`values` where `kept`, -1 elsewhere: (values + 1) x kept - 1, about half torch.where's CPU time."""
    return torch.mul(values + 1, kept).sub_(1)
