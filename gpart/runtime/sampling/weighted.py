"""Weighted (biased) neighbour draws: in-edges taken with probability proportional to an edge data array.

    weights = SegmentWeights.of(part, "w")            # or weight_problem(part, "w") -> one line / None
    picks = weights.sample_segments(start, deg, fanout, replace, generator)

The owner draws: the partition holds its owned columns' in-edges and their
edge data (SPEC.md 4), so the weights never travel. The array is read once,
in CSC order (`edge_data` rows are in the order of `indices`), and one
per-partition table is built from it:

- with replacement, inverse CDF: `prefix` is the exclusive cumulative sum
  over all CSC positions; a draw for segment [s, s + d) is the first
  position j with prefix[j + 1] > prefix[s] + u * (prefix[s + d] - prefix[s]),
  found with one torch.searchsorted for all draws at once. A zero-weight
  edge spans an empty interval (adding 0.0 is exact), so it is never found;
  a target that rounding pushes to the segment's end is moved just below
  it. Segments whose weights sum to 0 take nothing. Memory: 8 bytes per
  stored edge for `prefix`, beside the weights as stored.
- without replacement, exact weighted sampling without replacement
  (Efraimidis-Spirakis): a segment with no more positive-weight edges than
  the fanout takes them all (no draw); in the others every positive-weight
  edge gets the key -log(U) / w and the segment keeps its `fanout`
  smallest: a segmented top-k by one float64 sort on segment * 2 +
  (1 - exp(-key)). Zero-weight edges are never kept. This reads every
  in-edge of a crowded segment (O(degree) per node, as PyG's weighted
  sampler), where uniform draws cost O(fanout): see docs/runtime.md.

Tensor operations only, no loop per node; the picks are grouped by segment,
as gpart.runtime.sampling.kernels.sample_segments gives them.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from gpart.runtime.sampling.kernels import Picks, sample_segments


def weight_problem(part: Any, name: Any) -> Optional[str]:
    """The one-line problem with `part`'s edge data `name` as sampling weights (None: none)."""
    where = f"{part.directory}: sampling weight {name!r}"
    if part.typed:
        return f"{where}: weighted sampling takes a homogeneous partition (typed graphs are not supported yet)"
    if name not in part.edge_data:
        have = ", ".join(sorted(map(str, part.edge_data))) or "none"
        return f"{where}: no such edge data (the partition has: {have})"
    w = part.edge_data[name]
    if w.dim() != 1 and not (w.dim() == 2 and w.shape[1] == 1):
        return f"{where}: must be one value per edge, got shape {tuple(w.shape)}"
    if w.shape[0] != part.indices.numel():
        return f"{where}: has {w.shape[0]} rows, the partition stores {part.indices.numel()} in-edges"
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


class SegmentWeights:
    """A partition's sampling weights in CSC order with the tables of both draws (see the module)."""

    def __init__(self, weights: torch.Tensor):
        self.weights = weights.reshape(-1)  # as stored (float32: 4 B per edge); keys are computed in float64
        w64 = self.weights.to(torch.float64)
        self.prefix = torch.cat([torch.zeros(1, dtype=torch.float64, device=w64.device), torch.cumsum(w64, 0)])

    @classmethod
    def of(cls, part: Any, name: Any) -> "SegmentWeights":
        """The weights of edge data `name` of `part` (checked first with weight_problem)."""
        return cls(part.edge_data[name].to(part.device))

    def sample_segments(self, start: torch.Tensor, deg: torch.Tensor, fanout: int, replace: bool,
                        generator: Optional[torch.Generator]) -> Picks:
        """Up to `fanout` positions of each segment [start[i], start[i] + deg[i]) drawn by weight (-1: every
        positive-weight edge), grouped by segment."""
        if fanout < 0 or not replace:
            return self._without_replacement(start, deg, fanout, generator)
        return self._with_replacement(start, deg, fanout, generator)

    def _with_replacement(self, start, deg, fanout, generator) -> Picks:
        base = torch.index_select(self.prefix, 0, start)
        total = torch.index_select(self.prefix, 0, start + deg) - base
        counts = torch.where(total > 0, fanout, 0)
        n = int(counts.sum()) if counts.numel() else 0
        u = torch.rand(n, dtype=torch.float64, device=start.device, generator=generator)
        target = torch.repeat_interleave(base, counts, output_size=n) + u * torch.repeat_interleave(total, counts, output_size=n)
        # below the segment's end even when rounding pushed it there: the search then stays in the segment
        end = torch.repeat_interleave(torch.index_select(self.prefix, 0, start + deg), counts, output_size=n)
        target = torch.minimum(target, torch.nextafter(end, torch.zeros_like(end)))
        return Picks(counts, torch.searchsorted(self.prefix[1:], target, right=True))

    def _without_replacement(self, start, deg, fanout, generator) -> Picks:
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
        """Keep in `chosen` the `counts` smallest exponential keys of each crowded segment's positive edges: one sort
        by segment * 2 + (1 - exp(-key)) (in [0, 1], so segments never interleave; float64)."""
        edges = torch.nonzero(torch.index_select(crowded, 0, segment) & chosen).reshape(-1)
        seg = torch.index_select(segment, 0, edges)
        rank_of = torch.cumsum(crowded.to(torch.int64), 0) - 1  # a crowded segment's index among the crowded
        u = torch.rand(edges.numel(), dtype=torch.float64, device=w.device, generator=generator)
        keys = -torch.log1p(-u) / torch.index_select(w, 0, edges).to(torch.float64)  # u in [0, 1): finite, w > 0
        order = torch.argsort(torch.index_select(rank_of, 0, seg).to(torch.float64) * 2 - torch.expm1(-keys))
        sizes = torch.zeros_like(crowded, dtype=torch.int64).index_add_(0, seg, torch.ones_like(seg))[crowded]
        first = torch.repeat_interleave(torch.cumsum(sizes, 0) - sizes, sizes, output_size=edges.numel())
        rank = torch.arange(edges.numel(), device=w.device) - first
        limit = torch.repeat_interleave(counts[crowded], sizes, output_size=edges.numel())
        chosen.index_fill_(0, edges, False)
        chosen.index_fill_(0, torch.index_select(edges, 0, torch.masked_select(order, rank < limit)), True)
