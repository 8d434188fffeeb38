"""Negative edges for link prediction, drawn on this rank alone (no exchange): PyG's "binary" and "triplet".

    neg = NegativeSampler(part, edge_type=0, mode="binary", ratio=1, strict=False)
    src, dst = neg.binary(num_pos, generator)          # ratio x num_pos pairs
    dst = neg.triplet(pos_src, generator)              # [num_pos, ratio] destinations for each positive source

Not strict (the default, as PyG's and DGL's uniform negative samplers): a
source is uniform over the source node type's global ids, a destination
uniform over the destination type's global ids; a pair may be an edge of the
input (probability about edges / nodes^2).

Strict: no negative pair is an edge of the partitioned graph (of the seed
edge type; with --add-reverse the stored graph holds both directions, so in
neither direction). A node's in-edges are stored only by its owner, so to
check without an exchange strict negatives take their DESTINATION uniformly
from the nodes of the destination type this partition owns (the source stays
uniform over all of them); pairs that are edges are redrawn, up to
STRICT_ROUNDS rounds, and a pair still an edge after that raises. Over the
job every partition's nodes are destinations, each partition's share in
proportion to its trainers' batches, not to its size.
"""

from __future__ import annotations

from typing import Optional

import torch

from gpart.runtime.partition.interface import Partition

STRICT_ROUNDS = 32
MODES = ("binary", "triplet")


class NegativeSampler:
    """Draws negatives of edge type `edge_type` (index into part.edge_types; 0 for a homogeneous partition)."""

    def __init__(self, part: Partition, edge_type: int, mode: str, ratio: float, strict: bool = False):
        self.part, self.mode, self.ratio, self.strict = part, mode, ratio, bool(strict)
        dev, typed = part.device, part.typed
        if typed:
            src_t, _, dst_t = part.edge_types[edge_type]
            offsets = part.node_offsets.tolist()
            s, d = part.node_types.index(src_t), part.node_types.index(dst_t)
            self.src_range = (offsets[s], offsets[s + 1])
            self.dst_range = (offsets[d], offsets[d + 1])
        else:
            self.src_range = self.dst_range = (0, part.num_nodes)
        self.num_nodes = int(part.num_nodes)
        self.local_dst: Optional[torch.Tensor] = None
        self.edge_keys: Optional[torch.Tensor] = None
        if self.strict:
            owned = part.node_ids[: part.num_owned]
            lo, hi = self.dst_range
            self.local_dst = owned[(owned >= lo) & (owned < hi)].to(dev)
            self.edge_keys = stored_pair_keys(part, edge_type)

    def problem(self) -> Optional[str]:
        """What keeps this rank from drawing (None: nothing)."""
        if self.strict and self.local_dst is not None and self.local_dst.numel() == 0:
            return "strict negatives need destination nodes on every partition, this one owns none of the type"
        return None

    def count(self, num_pos: int) -> int:
        return int(round(self.ratio * num_pos))

    def binary(self, num_pos: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """ratio x num_pos (rounded) negative pairs (sources, destinations), global (erased) ids."""
        n = self.count(num_pos)
        src = self._uniform(self.src_range, n, gen)
        dst = self._dst(n, gen)
        return src, self._repair(src, dst, gen, redraw_src=True)

    def triplet(self, src: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """[len(src), ratio] negative destinations for each positive source (ratio a positive integer)."""
        per = int(self.ratio)
        rep = src.repeat_interleave(per)
        dst = self._repair(rep, self._dst(rep.numel(), gen), gen, redraw_src=False)
        return dst.reshape(-1, per)

    def _uniform(self, bounds: tuple[int, int], n: int, gen: torch.Generator) -> torch.Tensor:
        lo, hi = bounds
        return torch.randint(lo, hi, (n,), generator=gen, device=self.part.device, dtype=torch.int64)

    def _dst(self, n: int, gen: torch.Generator) -> torch.Tensor:
        if not self.strict:
            return self._uniform(self.dst_range, n, gen)
        pick = torch.randint(0, self.local_dst.numel(), (n,), generator=gen, device=self.part.device)
        return torch.index_select(self.local_dst, 0, pick)

    def _repair(self, src: torch.Tensor, dst: torch.Tensor, gen: torch.Generator, redraw_src: bool) -> torch.Tensor:
        """Strict: redraw the pairs that are edges (the source too when `redraw_src`, in place); the destinations."""
        if not self.strict:
            return dst
        for _ in range(STRICT_ROUNDS):
            bad = torch.nonzero(is_pair(self.edge_keys, src, dst, self.num_nodes)).reshape(-1)
            if bad.numel() == 0:
                return dst
            dst[bad] = self._dst(bad.numel(), gen)
            if redraw_src:
                src[bad] = self._uniform(self.src_range, bad.numel(), gen)
        raise RuntimeError(f"strict negative sampling: {bad.numel()} pairs still edges after {STRICT_ROUNDS} draws "
                           "(the graph is too dense near those nodes for strict negatives)")


def stored_pair_keys(part: Partition, edge_type: int) -> torch.Tensor:
    """Sorted keys dst * N + src (global / erased ids) of this partition's stored edges of `edge_type`."""
    counts = torch.diff(part.indptr)
    cols = torch.repeat_interleave(torch.arange(counts.numel(), device=part.device), counts)
    src = part.indices if part.num_parts == 1 else torch.index_select(part.node_ids, 0, part.indices)
    dst = torch.index_select(part.node_ids, 0, cols)
    if part.typed:
        same = part.edge_type.to(part.device) == edge_type
        src, dst = src[same], dst[same]
    return torch.sort(dst * part.num_nodes + src).values


def is_pair(sorted_keys: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Whether each (src, dst) is among `sorted_keys` (dst * N + src)."""
    if sorted_keys.numel() == 0:
        return torch.zeros_like(src, dtype=torch.bool)
    keys = dst * num_nodes + src
    at = torch.searchsorted(sorted_keys, keys).clamp_(max=sorted_keys.numel() - 1)
    return torch.index_select(sorted_keys, 0, at) == keys
