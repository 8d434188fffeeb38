"""The sizes of one request round of the sampling protocol (gpart.runtime.sampling.protocol): the count table each
requester sends its owners, and the most edges one draw of a hop can give (which sizes the edge slots of the answers).

    table = count_table(owner, requests, num_kinds, draws, num_peers)    # [peer, 1 + kinds (+ 1)] on the device
    sizes = RoundSizes(*exchange.count_table(table), draws is not None)  # both sides' rows, on the host
    bound = edge_bound(sampler, hop)                                     # None: the edges take a round of their own
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from gpart.runtime.sampling.neighbor_sampler import LocalSampler
from gpart.runtime.sampling.row_fetcher import Requests

MAX_EDGE_SLOTS = 128  # past this many edges per draw the padded slots would outweigh the round they save


def edge_bound(sampler: object, hop: int) -> Optional[int]:
    """The most in-edges `sampler` takes for one column at `hop`: its own `edge_bound(hop)` when it has one; for a
    LocalSampler the hop's fanout (typed: the largest sum of the fanouts of the edge types into one node type);
    None when unbounded (a fanout of -1) or unknown."""
    own = getattr(sampler, "edge_bound", None)
    if callable(own):
        return own(hop)
    if not isinstance(sampler, LocalSampler):
        return None
    if not sampler.typed:
        values = sampler.hop_values[hop]
        return values[0] if len(values) == 1 and values[0] > 0 else None
    fans = sampler.fanout_of[:, hop].tolist()  # once per loader, not per batch
    if any(f < 0 for f in fans):
        return None
    part = sampler.part
    return max(sum(fans[r] for r, (_, _, dst) in enumerate(part.edge_types) if dst == ntype) for ntype in part.node_types)


def count_table(owner: torch.Tensor, req: Requests, num_kinds: int, draws: Optional[torch.Tensor],
                 num_peers: int) -> torch.Tensor:
    """[peer, 1 + kinds (+ 1)]: per owning peer the requests, the flagged ones per kind (and the draws), on the device."""
    owner = owner.to(torch.int64)
    columns = [torch.bincount(owner, minlength=num_peers)]
    cell = owner * num_kinds + req.sent_kind.to(torch.int64)  # index_add, not a masked select: no data-dependent shape
    flagged = torch.zeros(num_peers * num_kinds, dtype=torch.int64, device=owner.device).index_add_(0, cell, req.need.to(torch.int64))
    columns.append(flagged)
    if draws is not None:
        columns.append(torch.zeros(num_peers, dtype=torch.int64, device=owner.device).index_add_(0, owner, draws))
    return torch.cat([c.reshape(num_peers, -1) for c in columns], 1)


@dataclass
class RoundSizes:
    """A round's count table: this rank's rows (`mine`, to each owner) and the rows each requester sent (`theirs`)."""

    mine: list[list[int]]
    theirs: list[list[int]]
    with_draws: bool  # the last column: draws per peer

    @staticmethod
    def requests(rows: list[list[int]]) -> list[int]:
        return [r[0] for r in rows]

    def kinds(self, rows: list[list[int]]) -> list[list[int]]:
        return [r[1:len(r) - self.with_draws] for r in rows]

    def draws(self, rows: list[list[int]]) -> list[int]:
        """Draws per peer (the requests when each is drawn once)."""
        return [r[-1] for r in rows] if self.with_draws else self.requests(rows)
