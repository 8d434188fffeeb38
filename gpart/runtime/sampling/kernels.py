"""Vectorised neighbour sampling over a CSC of in-edges, and relabelling into a batch's node list.

    picks = sample_columns(indptr, cols, fanout, replace=False, generator=gen)
    picks.counts        # in-edges taken per column: min(fanout, in-degree)
    picks.positions     # their positions in `indices` / `edge_ids`, grouped by column

Every column is sampled at once with tensor operations, never a Python loop
per node, so the same code runs on CPU and CUDA:

- without replacement, a column with in-degree <= fanout takes all its
  in-edges; a column with more draws `fanout` distinct positions with
  Floyd's algorithm run over all such columns at once (`fanout` rounds; in
  round i each column draws t in [0, d - fanout + i] and keeps
  d - fanout + i instead when t was already drawn, a check over the i
  columns drawn so far). Every subset of size `fanout` is equally likely.
  For small fanouts the positions come from one [columns, fanout] table of
  offsets and one masked_select (no per-run index arithmetic).
- with replacement, `fanout` uniform positions per column with in-degree > 0.
- fanout -1 takes every in-edge.

`Relabeller` maps global ids to positions in a batch's node list through a
reusable global-size scratch map on the device (as DGL's to_block does), which
is faster than sorting: a lookup is one index_select, and only the touched
entries are reset. `sample_table` and `Relabeller.add_masked` are the static-
shape forms (a [columns, fanout] table, -1 padded) that need one host
synchronisation per hop in all: the sizes of the hop's edges and new nodes.
`KeyRelabeller` does the same for int64 keys of any range (disjoint sampling's
seed * num_nodes + node, too many for a scratch map) by sorting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from gpart.runtime.sampling.int_sort import sort_ints

# Unlisted ids hold the largest int64, so the first occurrence of new ids wins a scatter "amin".
_UNSET = torch.iinfo(torch.int32).max
# Up to this fanout a [columns, fanout] table of offsets is cheaper than building positions by runs.
SLOT_TABLE_FANOUT = 32


@dataclass
class Picks:
    """Sampled in-edges of a list of columns: `counts[i]` edges for column i, their CSC positions grouped by column."""

    counts: torch.Tensor
    positions: torch.Tensor


def sample_columns(
    indptr: torch.Tensor,
    cols: torch.Tensor,
    fanout: int,
    replace: bool = False,
    generator: Optional[torch.Generator] = None,
) -> Picks:
    """Sample up to `fanout` in-edges of each column `cols` (local ids) of a CSC with pointers `indptr`."""
    cols = cols.to(torch.int64)
    start = torch.index_select(indptr, 0, cols)
    deg = torch.index_select(indptr, 0, cols + 1).sub_(start)
    return sample_segments(start, deg, fanout, replace, generator)


def sample_segments(
    start: torch.Tensor,
    deg: torch.Tensor,
    fanout: int,
    replace: bool = False,
    generator: Optional[torch.Generator] = None,
) -> Picks:
    """Sample up to `fanout` positions of each segment `[start[i], start[i] + deg[i])` (e.g. one edge type's
    slice of a column, SPEC.md 8.2); the rules of sample_columns."""
    if fanout < 0:
        return _take_all(start, deg)
    if replace:
        return _with_replacement(start, deg, fanout, generator)
    big = torch.nonzero(deg > fanout).reshape(-1)
    subsets = floyd_offsets(torch.index_select(deg, 0, big), fanout, generator) if big.numel() else None
    if fanout <= SLOT_TABLE_FANOUT:
        return _from_slot_table(start, deg, fanout, big, subsets)
    counts = torch.clamp(deg, max=fanout)
    offsets = torch.cumsum(counts, 0) - counts
    total = int(counts.sum()) if counts.numel() else 0
    # Every column first takes positions start .. start + count - 1 ...
    positions = torch.arange(total, dtype=torch.int64, device=start.device)
    positions += torch.repeat_interleave(start - offsets, counts, output_size=total)
    if subsets is not None:  # ... then columns with more in-edges than the fanout take their uniform subset.
        slots = torch.index_select(offsets, 0, big).unsqueeze(1) + torch.arange(fanout, device=start.device)
        positions.index_copy_(0, slots.reshape(-1), subsets.add_(torch.index_select(start, 0, big).unsqueeze(1)).reshape(-1))
    return Picks(counts, positions)


def merge_grouped(counts: torch.Tensor, parts: list[tuple[torch.Tensor, Picks]]) -> torch.Tensor:
    """Positions grouped by segment in segment order (`counts` per segment), from (segment indices, their Picks)
    parts that together cover every segment once."""
    offsets = torch.cumsum(counts, 0) - counts
    out = torch.empty(int(counts.sum()), dtype=torch.int64, device=counts.device)
    for at, picks in parts:  # a loop over parts (one per fanout or kind of segment), not over segments
        total = picks.positions.numel()
        first = torch.cumsum(picks.counts, 0) - picks.counts
        dest = torch.repeat_interleave(torch.index_select(offsets, 0, at) - first, picks.counts, output_size=total)
        out.index_copy_(0, dest + torch.arange(total, device=counts.device), picks.positions)
    return out


def sample_table(
    start: torch.Tensor,
    deg: torch.Tensor,
    fanout: int,
    replace: bool = False,
    generator: Optional[torch.Generator] = None,
) -> torch.Tensor:
    """[n, fanout] positions sampled from each segment `[start[i], start[i] + deg[i])` (fanout > 0), -1 in the
    slots past min(fanout, deg[i]): the rules of sample_segments in a static shape, without a host
    synchronisation (no nonzero, no masked_select): every row runs Floyd's rounds, rows with deg <= fanout
    then take 0..deg-1. For the GPU, where a synchronisation costs more than the rows' wasted draws."""
    slots = torch.arange(fanout, dtype=torch.int64, device=start.device)
    if replace:
        draws = _uniform_below(deg.clamp(min=1).unsqueeze(1).expand(deg.numel(), fanout).contiguous(), generator)
        return torch.where((deg > 0).unsqueeze(1), start.unsqueeze(1) + draws, -1)
    big = deg > fanout
    offsets = floyd_offsets(torch.where(big, deg, fanout + 1), fanout, generator)
    offsets = torch.where(big.unsqueeze(1), offsets, slots)
    return torch.where(slots < deg.unsqueeze(1), start.unsqueeze(1) + offsets, -1)


def _from_slot_table(start: torch.Tensor, deg: torch.Tensor, fanout: int, big: torch.Tensor, subsets: Optional[torch.Tensor]) -> Picks:
    """Small fanouts: one row of `fanout` offsets per column (0..fanout-1, or the column's subset when it has
    more in-edges); the first min(fanout, deg) of each row are kept, row by row: one masked_select."""
    slots = torch.arange(fanout, dtype=torch.int64, device=start.device)
    offsets = slots.expand(start.numel(), fanout)
    if subsets is not None:
        offsets = offsets.clone().index_copy_(0, big, subsets)
    counts = torch.clamp(deg, max=fanout)
    positions = torch.masked_select(offsets + start.unsqueeze(1), slots < counts.unsqueeze(1))
    return Picks(counts, positions)


def _take_all(start: torch.Tensor, deg: torch.Tensor) -> Picks:
    offsets = torch.cumsum(deg, 0) - deg
    total = int(deg.sum()) if deg.numel() else 0
    positions = torch.arange(total, dtype=torch.int64, device=start.device)
    positions += torch.repeat_interleave(start - offsets, deg, output_size=total)
    return Picks(deg, positions)


def _with_replacement(start: torch.Tensor, deg: torch.Tensor, fanout: int, generator: Optional[torch.Generator]) -> Picks:
    counts = torch.where(deg > 0, fanout, 0)
    total = int(counts.sum()) if counts.numel() else 0
    seg_start = torch.repeat_interleave(start, counts, output_size=total)
    seg_deg = torch.repeat_interleave(deg, counts, output_size=total)
    draws = _uniform_below(seg_deg, generator)
    return Picks(counts, seg_start + draws)


def _uniform_below(bound: torch.Tensor, generator: Optional[torch.Generator]) -> torch.Tensor:
    """One uniform integer in [0, bound) per entry (bound > 0), in float64 so large bounds stay unbiased."""
    u = torch.rand(bound.shape, dtype=torch.float64, device=bound.device, generator=generator)
    draw = (u * bound).to(torch.int64)
    return torch.minimum(draw, bound - 1)  # u * bound can round up to bound


def floyd_offsets(deg: torch.Tensor, k: int, generator: Optional[torch.Generator], use_numpy: Optional[bool] = None) -> torch.Tensor:
    """[n, k] distinct offsets in [0, deg) per row (deg > k), each k-subset equally likely (Floyd's algorithm).

    The k rounds run over all rows at once; on CPU through numpy views of the
    same memory (use_numpy None: on CPU), whose per-call cost is a third of
    torch's on rows this small. Both paths give the same offsets.
    """
    n = deg.shape[0]
    # Round i draws t in [0, top_i] with top_i = deg - k + i; all rounds' draws at once, [k, n].
    tops = deg.unsqueeze(0) - torch.arange(k, 0, -1, dtype=torch.int64, device=deg.device).unsqueeze(1)
    draws = torch.rand((k, n), dtype=torch.float64, device=deg.device, generator=generator)
    chosen = torch.minimum(draws.mul_(tops + 1).to(torch.int64), tops)  # u * (top + 1) can round up
    if chosen.device.type == "cpu" if use_numpy is None else use_numpy:
        c, t = chosen.numpy(), tops.numpy()
        for i in range(1, k):  # a draw already taken in an earlier round becomes top_i, not taken before
            np.copyto(c[i], t[i], where=(c[:i] == c[i]).any(0))
    else:
        for i in range(1, k):
            seen = (chosen[:i] == chosen[i]).any(0)
            chosen[i] = torch.where(seen, tops[i], chosen[i])
    return chosen.t()


class Relabeller:
    """Positions of global ids in a growing node list, through a global-size scratch map.

    add_unique(ids) appends the ids not yet listed (first appearance order)
    and returns every id's position; reset() clears only the touched entries.
    The map holds int32 positions (4 bytes per node of the graph).
    """

    def __init__(self, num_nodes: int, device: torch.device):
        # one slot more than nodes: add_masked points its padding there
        self.slot = torch.full((num_nodes + 1,), _UNSET, dtype=torch.int32, device=device)
        self.num_nodes = int(num_nodes)
        self.size = 0
        self._touched: list[torch.Tensor] = []

    def start(self, seeds: torch.Tensor) -> None:
        """Begin a node list with `seeds` as given (positions 0..len-1, duplicates kept)."""
        self.reset()
        self.slot.index_copy_(0, seeds, torch.arange(seeds.numel(), dtype=torch.int32, device=seeds.device))
        self._touched.append(seeds)
        self.size = int(seeds.numel())

    def add_unique(self, ids: torch.Tensor, final: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(positions of `ids` (int64), the ids newly appended, in first-appearance order).

        final=True: no later call will look the new ids up (the last hop), so
        the map keeps their claims instead of their positions (reset() still
        clears them) and one global-size write pass is saved.
        """
        if ids.numel() == 0:
            return ids.clone(), ids
        # Listed ids keep their position (< size); an unlisted id takes size + the index of its first occurrence.
        claim = torch.arange(self.size, self.size + ids.numel(), dtype=torch.int32, device=ids.device)
        self.slot.scatter_reduce_(0, ids, claim, reduce="amin")
        got = torch.index_select(self.slot, 0, ids)
        first = got == claim
        new_ids = torch.masked_select(ids, first)
        # A new id's position: size + its rank among the first occurrences, looked up in this call's arrays
        # (small, in cache) rather than in the global map again.
        rank = torch.cumsum(first, 0, dtype=torch.int32).sub_(1)
        fresh = got >= self.size
        got = torch.where(fresh, torch.index_select(rank, 0, (got - self.size).clamp_(min=0)) + self.size, got)
        if not final:
            self.slot.index_copy_(0, new_ids, torch.arange(self.size, self.size + new_ids.numel(), dtype=torch.int32, device=ids.device))
        self._touched.append(new_ids)
        self.size += int(new_ids.numel())
        return got.to(torch.int64), new_ids

    def add_masked(self, ids: torch.Tensor, valid: torch.Tensor, final: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """add_unique for the entries of `ids` where `valid` (padding elsewhere): (positions of the valid ids, the ids
        newly appended, the indices of the valid entries). One host synchronisation: both sizes at once."""
        padded = torch.where(valid, ids, self.num_nodes)
        claim = torch.arange(self.size, self.size + ids.numel(), dtype=torch.int32, device=ids.device)
        self.slot.scatter_reduce_(0, padded, claim, reduce="amin")
        got = torch.index_select(self.slot, 0, padded)
        self.slot[self.num_nodes] = _UNSET  # the padding's slot claims nothing
        first = (got == claim) & valid
        total, new = torch.stack([valid.sum(), first.sum()]).tolist()  # the one synchronisation: the sizes
        keep = torch.nonzero_static(valid, size=total).reshape(-1)
        new_ids = torch.index_select(ids, 0, torch.nonzero_static(first, size=new).reshape(-1))
        rank = torch.cumsum(first, 0, dtype=torch.int32).sub_(1)
        got = torch.index_select(got, 0, keep)
        fresh = got >= self.size
        got = torch.where(fresh, torch.index_select(rank, 0, (got - self.size).clamp_(min=0)) + self.size, got)
        if not final:
            self.slot.index_copy_(0, new_ids, torch.arange(self.size, self.size + new, dtype=torch.int32, device=ids.device))
        self._touched.append(new_ids)
        self.size += new
        return got.to(torch.int64), new_ids, keep

    def reorder_added(self, positions: torch.Tensor, order: torch.Tensor, final: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """The last add's new ids listed in `order` instead (new_ids[order], a permutation of them): (`positions`, that
        add's result, moved to the new places; the new ids in their new order). final as given to that add."""
        added = self._touched[-1]
        base = self.size - int(added.numel())
        added = torch.index_select(added, 0, order)
        place = torch.arange(base, self.size, dtype=torch.int32, device=order.device)
        if not final:
            self.slot.index_copy_(0, added, place)
        self._touched[-1] = added
        moved = torch.empty_like(place).index_copy_(0, order, place)  # old place - base -> new place
        fresh = positions >= base
        positions = torch.where(fresh, torch.index_select(moved, 0, (positions - base).clamp_(min=0)).to(positions.dtype), positions)
        return positions, added

    def reset(self) -> None:
        for ids in self._touched:
            self.slot.index_fill_(0, ids, _UNSET)
        self._touched.clear()
        self.size = 0


class KeyRelabeller:
    """Relabeller's add_unique over int64 keys of any range, by sorting (a key space too large for a scratch map:
    disjoint sampling's keys seed * num_nodes + node). The listed keys are held sorted, with their positions."""

    def __init__(self) -> None:
        self.size = 0
        self._sorted = self._at = torch.zeros(0, dtype=torch.int64)

    def start(self, keys: torch.Tensor) -> None:
        """Begin a node list with `keys` (distinct) at positions 0..len-1."""
        self._sorted, self._at = sort_ints(keys)
        self.size = int(keys.numel())

    def add_unique(self, ids: torch.Tensor, final: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(positions of `ids` (int64), the keys newly appended, in first-appearance order); final=True: the list
        is not kept sorted for later calls (the last hop)."""
        if ids.numel() == 0:
            return ids.clone(), ids
        dev = ids.device
        # one stable sort: the distinct keys, the first occurrence of each (the head of its run) and every id's run
        ordered, perm = sort_ints(ids)
        head = torch.ones_like(ordered, dtype=torch.bool)
        torch.ne(ordered[1:], ordered[:-1], out=head[1:])
        uniq, first = torch.masked_select(ordered, head), torch.masked_select(perm, head)
        run = torch.empty_like(perm).index_copy_(0, perm, torch.cumsum(head, 0).sub_(1))
        at = torch.searchsorted(self._sorted, uniq)
        at_clamped = at.clamp(max=max(self._sorted.numel() - 1, 0))
        if self._sorted.numel():
            listed = torch.index_select(self._sorted, 0, at_clamped) == uniq
        else:
            listed = torch.zeros_like(uniq, dtype=torch.bool)
        fresh = torch.nonzero(~listed).reshape(-1)  # indices into uniq of the new keys, in key order ...
        by_appearance = torch.index_select(fresh, 0, sort_ints(torch.index_select(first, 0, fresh))[1])  # ... as first seen
        positions = torch.where(listed, torch.index_select(self._at, 0, at_clamped) if self._at.numel() else at, 0)
        positions.index_copy_(0, by_appearance, torch.arange(self.size, self.size + by_appearance.numel(), device=dev))
        if not final:  # merge the new keys in: the j-th new key goes before its insertion point's key, j places on
            self._merge(*(torch.index_select(t, 0, fresh) for t in (uniq, at, positions)))
        self.size += int(by_appearance.numel())
        return torch.index_select(positions, 0, run), torch.index_select(uniq, 0, by_appearance)

    def _merge(self, keys: torch.Tensor, insert_at: torch.Tensor, positions: torch.Tensor) -> None:
        """Put sorted new `keys` (their insertion points in the sorted list, their positions) into the sorted list."""
        total = self._sorted.numel() + keys.numel()
        slot = insert_at + torch.arange(keys.numel(), device=keys.device)
        old = torch.ones(total, dtype=torch.bool, device=keys.device)
        old.index_fill_(0, slot, False)
        old_slot = torch.nonzero(old).reshape(-1)
        self._sorted = _interleaved(total, slot, keys, old_slot, self._sorted)
        self._at = _interleaved(total, slot, positions, old_slot, self._at)

    def reset(self) -> None:
        self.size = 0
        self._sorted = self._at = self._sorted[:0]


def _interleaved(total: int, at_a: torch.Tensor, a: torch.Tensor, at_b: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A [total] tensor holding `a` at positions `at_a` and `b` at `at_b`."""
    return torch.empty(total, dtype=a.dtype, device=a.device).index_copy_(0, at_a, a).index_copy_(0, at_b, b)
