"""Alias tables over a partition's CSC runs: a weighted draw with replacement in O(1), one table read per draw.

    table = AliasTable(weights, runs)               # runs: csc_runs(part), boundaries of the segments drawn whole
    positions = table.draw(first, size, u)          # draw i from run [first[i], first[i] + size[i])

Walker's alias method: a run of d positions has d slots of equal probability;
slot k keeps position s + k with probability own[k] and otherwise gives its
alias, so a draw is one uniform u: the slot floor(u * d), then the fraction
u * d - floor(u * d) against own[k]. One int64 per stored edge packs both
(alias offset within the run << 32 | own threshold).

The tables are built with tensor operations only, by the sweep of
Huebschle-Schneider and Sanders ("Parallel weighted random sampling",
ESA 2019) written as two searches: in units of one slot (C = 2^K), an
item of mass m < C is light (deficit C - m), the others heavy (excess
m - C). Lay the lights' deficits end to end on one line and the heavies'
excesses on another, both in CSC order; within a run they have the same
length, so both lines meet at every run's end. A light takes as alias the
heavy whose excess interval holds its deficit's start, and that heavy
serves the whole deficit; where the deficit runs past the heavy's interval
by o, the heavy keeps C - o of its own slot and aliases the next heavy,
which serves those o from the start of its own interval. A heavy's own
slot and all it serves then add up to its mass (the spills telescope), so
each position's total probability is its mass / (d C). Masses are integers
(floor of w / total * d * C, the rounding remainder put on the run's
heaviest position), so the lines meet exactly: a position's probability is
its weight's to within one part in 2^K of a slot; zero weight is never
drawn. A run whose weights sum to 0 draws one past its end (every slot
gives that as its alias), so that a caller drawing before it knows which
runs have weight (the weighted stream's hubs) tells them apart. Built in pieces of whole runs (bounded temporaries, about 100 bytes
per position of the piece).
"""

from __future__ import annotations

import torch

PIECE = 1 << 20  # positions per piece of the build (whole runs; a longer run is one piece)
OWN_BITS = 32  # the low half of a packed entry: the own threshold; the high half: the alias offset in the run


class AliasTable:
    """Packed alias tables (see the module) of `weights` (one per CSC position) over the runs `runs` (boundaries)."""

    def __init__(self, weights: torch.Tensor, runs: torch.Tensor):
        runs = runs.to(torch.int64).to(weights.device)
        longest = int((runs[1:] - runs[:-1]).max()) if runs.numel() > 1 else 1
        # a run's line holds d * C units: kept below 2^62 (int64), C = 2^K at most 2^32 (the threshold's bits)
        self.unit_bits = max(1, min(OWN_BITS, 62 - max(1, longest).bit_length()))
        self.packed = torch.empty(weights.numel(), dtype=torch.int64, device=weights.device)
        w = weights.reshape(-1).to(torch.float64)
        for first, last in _pieces(runs, PIECE):  # a loop over pieces of whole runs
            bounds = runs[(runs >= first) & (runs <= last)] - first
            self.packed[first:last] = _piece_table(w[first:last], bounds, self.unit_bits)

    def draw(self, first: torch.Tensor, size: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """One position per uniform `u` (float64 in [0, 1)): draw i from the run [first[i], first[i] + size[i]) (a
        run of the table; one of total 0 gives first + size); first and size broadcast against u ([runs, 1] for [runs, k])."""
        return self.draw_offsets(first, size, u).add_(first)

    def draw_offsets(self, first: torch.Tensor, size: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """draw's positions less `first`: offsets within the runs."""
        spot = u * size
        slot = spot.to(torch.int64)
        torch.minimum(slot, size - 1, out=slot)  # u * size can round up to size
        # the fraction of the slot in units of 2^-unit_bits; in place from here, as a hub's draws are [hubs, 2 x fanout]
        # tables and each temporary is a pass over them
        fraction = spot.sub_(slot).mul_(float(1 << self.unit_bits))
        entry = torch.index_select(self.packed, 0, (slot + first).reshape(-1)).view(slot.shape)
        keep = fraction < torch.bitwise_and(entry, (1 << OWN_BITS) - 1)
        alias = entry.bitwise_right_shift_(OWN_BITS)
        return slot.sub_(alias).mul_(keep).add_(alias)  # slot where keep, else alias: cheaper than torch.where on the CPU


def _pieces(runs: torch.Tensor, size: int) -> list[tuple[int, int]]:
    """[first, last) position ranges of whole runs, about `size` positions each."""
    stored = int(runs[-1])
    marks = torch.arange(0, stored, size, dtype=torch.int64, device=runs.device)
    cuts = torch.unique(torch.cat([runs[torch.clamp(torch.searchsorted(runs, marks), max=runs.numel() - 1)],
                                   runs[-1:]]))
    return list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))


def _piece_table(w: torch.Tensor, bounds: torch.Tensor, unit_bits: int) -> torch.Tensor:
    """The packed entries of positions 0..len(w)-1 whose runs have boundaries `bounds` (0 .. len(w))."""
    dev, n, unit = w.device, w.numel(), 1 << unit_bits
    run = torch.searchsorted(bounds, torch.arange(n, device=dev), right=True) - 1
    run_start = torch.index_select(bounds, 0, run)
    mass, dead = _masses(w, bounds, run, unit)
    light = mass < unit
    deficit = torch.where(light, unit - mass, 0)
    excess = torch.where(light, 0, mass - unit)
    deficit_end, excess_end = torch.cumsum(deficit, 0), torch.cumsum(excess, 0)  # the two lines (see the module)
    lights, heavies = torch.nonzero(light).reshape(-1), torch.nonzero(~light).reshape(-1)
    light_end, heavy_end = torch.index_select(deficit_end, 0, lights), torch.index_select(excess_end, 0, heavies)
    own = mass.clone()
    alias = torch.arange(n, device=dev)
    # a light: the heavy whose excess interval holds its deficit's start serves the whole deficit
    light_start = light_end - torch.index_select(deficit, 0, lights)
    alias[lights] = torch.index_select(heavies, 0, torch.clamp(torch.searchsorted(heavy_end, light_start, right=True),
                                                               max=max(heavies.numel() - 1, 0)))
    # a heavy: the light deficit its interval's end falls inside spills o onto the next heavy
    inside = torch.clamp(torch.searchsorted(light_end, heavy_end, right=True), max=max(lights.numel() - 1, 0))
    spill = torch.zeros_like(heavy_end)
    if lights.numel():
        over = torch.index_select(light_end, 0, inside) - heavy_end
        straddles = (torch.index_select(light_start, 0, inside) < heavy_end) & (over > 0)
        spill = torch.where(straddles, over, 0)
    own[heavies] = unit - spill
    following = torch.clamp(torch.arange(1, heavies.numel() + 1, device=dev), max=max(heavies.numel() - 1, 0))
    alias[heavies] = torch.where(spill > 0, torch.index_select(heavies, 0, following), heavies)
    full = own >= unit  # a slot that is all its own: threshold C - 1 and itself as alias (the same draw)
    own = torch.where(full, unit - 1, own)
    alias = torch.where(full, torch.arange(n, device=dev), alias)
    # a run of total 0: threshold 0 and the run's end as alias, so every draw gives one past the run
    alias = torch.where(dead, torch.index_select(bounds, 0, run + 1), alias)
    own = torch.where(dead, 0, own)
    return torch.bitwise_left_shift(alias - run_start, OWN_BITS) | own


def _masses(w: torch.Tensor, bounds: torch.Tensor, run: torch.Tensor, unit: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(integer masses summing to d * unit within each run of d positions: floor(w / total * d * unit), the remainder
    on the run's heaviest position; whether each position's run has total 0), a run of total 0 getting `unit` each."""
    runs = bounds.numel() - 1
    size = (bounds[1:] - bounds[:-1])
    heaviest = torch.full((runs,), -1.0, dtype=torch.float64, device=w.device).scatter_reduce(0, run, w, reduce="amax")
    # each weight over its run's heaviest first: the shares then neither overflow (weights near 1e308 summed) nor
    # lose their scale (weights near 1e-300, whose d * unit / total would overflow)
    top_of = torch.index_select(heaviest, 0, run)
    relative = torch.where(top_of > 0, w / torch.where(top_of > 0, top_of, 1.0), 0.0)
    total = torch.zeros(runs, dtype=torch.float64, device=w.device).index_add_(0, run, relative)
    share = relative / torch.index_select(torch.where(total > 0, total, 1.0), 0, run)
    mass = torch.floor(share * torch.index_select(size.to(torch.float64) * unit, 0, run)).to(torch.int64)
    dead = torch.index_select(total, 0, run) <= 0
    mass = torch.where(dead, unit, mass)
    short = size * unit - torch.zeros(runs, dtype=torch.int64, device=w.device).index_add_(0, run, mass)
    top = torch.nonzero(w == top_of).reshape(-1)
    first_top = torch.full((runs,), w.numel(), dtype=torch.int64, device=w.device).scatter_reduce(
        0, torch.index_select(run, 0, top), top, reduce="amin")
    has = size > 0
    mass.index_add_(0, first_top[has], short[has])
    return mass, dead
