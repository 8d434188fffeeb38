"""The runtime's collectives between partitions, in one place: requests grouped by the partition that owns
them, the bounded all_to_alls that carry them, and their statistics (the loaders' sampling and feature
rounds, and every partition's gather, gpart.runtime.partition.serving).

    exchange = Exchange(layout, timeout_s=60)
    sent, counts, order = exchange.group_by_partition(cols, owner)  # by owning partition, request order within one
    recv = exchange.counts(counts)                         # one collective
    rows = exchange.rows(sent, counts, recv)               # one collective, any dtype and row shape

    sent, owner_sorted, order = exchange.sort_by_partition(cols, owner)   # no host read
    mine, theirs = exchange.count_table(table)             # [peer][column] both ways: one collective, one host read

Peers are partitions: the exchange talks to one serving rank per partition
(`layout.group`: with one trainer per partition the default group, rank r
serving partition r; with L trainers per partition the group of the trainers
with this rank's local index, one per partition, so the L trainers of a
partition spread the requests for it). In a world of one partition nothing
travels and nothing is counted. `stats` counts the collectives, the
seconds spent waiting in them and the host reads of sizes ("host_syncs":
every read of a count computed by torch goes through `host`, so on CUDA each
is one synchronisation with the device); every wait is bounded by
`timeout_s`.

A count table sends each peer a row of counts (how many requests, how many
of them flagged per node kind, how many draws) in one collective: the owner
learns from it every size of the round it serves, so neither side
recomputes sizes from the payload. The counts travel on the collective's
device (NCCL: CUDA) and both sides' tables come to the host in one read.
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

import torch

from gpart.collectives.all_to_all import all_to_all_rows, exchange_counts, exchange_table, group_by_owner, narrow_keys
from gpart.runtime.partition.trainers import TrainerLayout, own_groups


class Exchange:
    """Bounded all_to_alls between the serving ranks of the partitions (one per partition), with statistics."""

    def __init__(self, layout: TrainerLayout, timeout_s: float, stats: Optional[dict] = None):
        self.layout = layout
        self.group = layout.group
        self.num_peers = layout.num_parts if layout.world_size > 1 else 1
        self.timeout_s = float(timeout_s)
        self.stats = stats if stats is not None else {}  # "collectives", "collective_s" are added to it
        self.stats.setdefault("collectives", 0)
        self.stats.setdefault("collective_s", 0.0)
        self.stats.setdefault("host_syncs", 0)

    def on_own_groups(self) -> "Exchange":
        """This exchange on serving groups of its own (trainers.own_groups: a collective), sharing its statistics."""
        return Exchange(own_groups(self.layout, self.timeout_s), self.timeout_s, self.stats)

    @property
    def active(self) -> bool:
        """Whether requests travel (more than one partition)."""
        return self.num_peers > 1

    def group_by_partition(self, ids: torch.Tensor, owner: torch.Tensor) -> tuple[torch.Tensor, list[int], torch.Tensor]:
        """(ids sorted by owning partition, how many go to each, order): `ids[order]` is the sorted list."""
        sent, counts, order = group_by_owner(ids, owner, self.num_peers)
        return sent, counts.tolist(), order

    def sort_by_partition(self, ids: torch.Tensor, owner: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(ids sorted by owning partition, their owners, order): `ids[order]` is the sorted list; no host read."""
        order = torch.argsort(narrow_keys(owner.reshape(-1), self.num_peers), stable=True)
        return torch.index_select(ids.reshape(-1), 0, order), torch.index_select(owner.reshape(-1), 0, order), order

    def host(self, values: torch.Tensor) -> list:
        """`values` as Python numbers: one host read (a device synchronisation on CUDA), counted."""
        self.stats["host_syncs"] += 1
        return values.tolist()

    def count_table(self, table: torch.Tensor) -> tuple[list[list[int]], list[list[int]]]:
        """(this rank's rows, the rows each peer sent here) of an int64 [peers, width] table whose row p goes to peer p:
        one collective (on the collective's device), both tables read to the host at once."""
        table = table.to(torch.int64).reshape(self.num_peers, -1)
        if not self.active:
            mine = self.host(table)
            return mine, mine
        start = time.perf_counter()
        got = exchange_table(table, group=self.group, timeout_s=self.timeout_s)
        self._count(start)
        both = self.host(torch.stack([table.to(got.device), got]))
        return both[0], both[1]

    def counts(self, send_counts: Sequence[int]) -> list[int]:
        """How many items each peer sends here, for `send_counts[p]` sent to peer p (one collective)."""
        if not self.active:
            return [int(c) for c in send_counts]
        start = time.perf_counter()
        recv = exchange_counts(list(send_counts), group=self.group, timeout_s=self.timeout_s)
        self._count(start)
        return recv

    def rows(self, send: torch.Tensor, send_counts: Sequence[int], recv_counts: Sequence[int],
             out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Blocks of rows: `send_counts[p]` rows of `send` to peer p, `recv_counts[p]` back from it (one collective),
        received into `out` where given (the received bytes, uint8, contiguous: see all_to_all_rows)."""
        if not self.active:
            return send
        start = time.perf_counter()
        got = all_to_all_rows(send, send_counts, recv_counts, group=self.group, timeout_s=self.timeout_s, out=out)
        self._count(start)
        return got

    def _count(self, start: float) -> None:
        self.stats["collectives"] += 1
        self.stats["collective_s"] += time.perf_counter() - start
