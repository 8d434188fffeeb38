"""The one gather of both partition classes: ids answered here, or by the serving rank of their owning
partition through the loader's Exchange, in every trainer layout (P partitions x L trainers).

    serving = ServingRanks(directory, digest, rank, num_parts, device)   # one per loaded partition
    rows = gather_rows(serving, parse, locate, read, not_local, timeout_s)

`locate(ids)` gives (owner, row) of each id: the partition that answers it and the row of its node data
there (ids held here as halo rows are answered here). In a world of one every id must be answered here
(`not_local` builds the error otherwise). Under torch.distributed the gather is a collective: the ids go
out grouped by owning partition, to the rank of that partition in this rank's serving group
(gpart.runtime.partition.trainers: rank p * L + i, for local index i), which reads its rows and sends
them back. Before the first exchange every rank checks, in bounded time, that the job serves one result
(manifest digest) and that rank r loaded partition r // L; a problem raises on every rank.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import torch

from gpart.base.errors import InputError
from gpart.collectives.agreement import check_same_across_ranks
from gpart.collectives.all_to_all import exchange_counts
from gpart.collectives.process_group import world
from gpart.runtime.partition.exchange import Exchange
from gpart.runtime.partition.trainers import TrainerLayout, layout_problem, trainer_layout

Locate = Callable[[torch.Tensor], "tuple[torch.Tensor, torch.Tensor]"]


class ServingRanks:
    """The serving ranks of one loaded partition's result: checked once, then an Exchange per gather."""

    def __init__(self, directory: Path, digest: str, rank: int, num_parts: int, device: torch.device):
        self.directory, self.digest, self.rank, self.num_parts = directory, digest, int(rank), int(num_parts)
        self.device = device  # where the partition's ids live
        self._layout: Optional[TrainerLayout] = None

    def exchange(self, timeout_s: float) -> Exchange:
        """The Exchange of this rank's serving group (checks first: a collective on the first call)."""
        rank, world_size = world()
        problem = layout_problem(self.num_parts, world_size)
        if problem:  # the same on every rank that loaded this result: raised before any collective
            raise InputError(self.directory, f"has {self.num_parts} partitions but torch.distributed has world size "
                                             f"{world_size}: a distributed gather needs {self.num_parts} x L ranks, "
                                             f"L trainers per partition")
        if self._layout is None:
            check_same_across_ranks(f"manifest {self.digest} ({self.num_parts} parts)",
                                    "the partition result (manifest.json digest)", timeout_s=timeout_s, path=self.directory)
            loaded = exchange_counts([self.rank] * world_size, timeout_s=timeout_s)  # the partition of every rank
            problem = misplaced_partitions(loaded, self.num_parts)
            if problem:
                raise InputError(self.directory, problem)
            self._layout = trainer_layout(self.num_parts, timeout_s, self.directory)
        return Exchange(self._layout, timeout_s)


def misplaced_partitions(loaded: list[int], num_parts: int) -> Optional[str]:
    """None when rank r loaded partition r // L for all ranks (`loaded[r]`), else the one-line problem."""
    world_size = len(loaded)
    per_part = max(1, world_size // num_parts)
    wrong = [r for r, p in enumerate(loaded) if p != r // per_part]
    if not wrong:
        return None
    first = wrong[0]
    return (f"has {num_parts} partitions but torch.distributed has world size {world_size} and rank {first} loaded "
            f"partition {loaded[first]}: with {per_part} trainer{'s' if per_part > 1 else ''} per partition rank r "
            f"serves partition r // {per_part} ({len(wrong)} of {world_size} ranks loaded another partition; load the "
            f"job's partition with gr.load_partition(path), rank left out)")


def gather_rows(serving: ServingRanks, parse: Callable[[], torch.Tensor], locate: Locate,
                read: Callable[[torch.Tensor], torch.Tensor],
                not_local: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Exception], timeout_s: float) -> torch.Tensor:
    """The rows of the flat ids `parse()` returns, in request order (see the module's docstring).

    A rank whose ids are bad (parse raises TypeError or IndexError) still serves its peers, with an empty
    request of its own, before it raises: they finish this gather instead of waiting for the timeout.
    """
    world_size = world()[1]
    try:
        ids = parse()
    except (TypeError, IndexError):
        if world_size > 1:
            empty = torch.zeros(0, dtype=torch.int64, device=serving.device)
            exchange_rows(serving.exchange(timeout_s), empty, locate, read)
        raise
    if world_size == 1:
        owner, rows = locate(ids)
        away = owner != serving.rank
        if bool(away.any()):
            raise not_local(ids, owner, away)
        return read(rows)
    return exchange_rows(serving.exchange(timeout_s), ids, locate, read)


def read_rows(table: torch.Tensor, rows: torch.Tensor, device: torch.device) -> torch.Tensor:
    """table[rows] read where the table lives, returned on `device` (a partition's node data may stay in
    pinned host memory while its ids are on a GPU: the rows go through a pinned buffer, without blocking)."""
    if table.device == device:
        return torch.index_select(table, 0, rows.to(device))
    rows = rows.to(table.device)
    if device.type == "cuda":
        out = torch.empty((rows.shape[0], *table.shape[1:]), dtype=table.dtype, pin_memory=True)
        torch.index_select(table, 0, rows, out=out)
        return out.to(device, non_blocking=True)
    return torch.index_select(table, 0, rows).to(device)


def exchange_rows(exchange: Exchange, ids: torch.Tensor, locate: Locate,
                  read: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Rows of `ids` from the partitions that answer them (this one included), in request order: two
    collectives of counts and two of rows."""
    owner, rows = locate(ids)
    sent, send_counts, order = exchange.group_by_partition(rows, owner)
    recv_counts = exchange.counts(send_counts)
    wanted = exchange.rows(sent, send_counts, recv_counts)
    got = exchange.rows(read(wanted), recv_counts, send_counts)
    return torch.empty_like(got).index_copy_(0, order.to(got.device), got)
