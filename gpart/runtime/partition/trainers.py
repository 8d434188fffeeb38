"""Which partition each rank of a job trains on: P partitions and P x L ranks, L trainers per partition.

    layout = trainer_layout(num_parts=2)      # torchrun --nnodes 2 --nproc-per-node 4: world 8
    layout.partition, layout.local            # rank 5 -> partition 1, trainer 1 of 4
    layout.group                              # the ranks with local index 1, one per partition

Ranks r = p * L + i (as torchrun numbers them: machine p runs ranks
p*L .. p*L+L-1), so the L trainers of a machine share its partition, which
each loads through the same memory-mapped files (one copy in the page
cache). A collective that asks partitions for something goes through
`group`: the L groups of P ranks {p * L + i} (i = this rank's local index)
each hold one serving rank per partition, so requests for a partition are
spread over its L trainers. With L = 1 the group is the default one (rank r
on partition r, the special case). A world size that is no multiple of P
fits no layout: InputError naming the layouts that fit. Building a layout
with L > 1 creates the groups: a collective, every rank at the same point
(they are cached per (P, L)). `partition_group(layout)` gives the other
grouping, the L trainers of this rank's partition {p * L .. p * L + L - 1}
(e.g. to share work on the partition's own nodes).
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass
from typing import Any, Optional

import torch.distributed as dist

from gpart.base.errors import InputError
from gpart.collectives.process_group import world

_groups: dict[tuple[int, int], list[Any]] = {}
_partition_groups: dict[tuple[int, int], list[Any]] = {}


@dataclass(frozen=True)
class TrainerLayout:
    """rank / world_size of this process, num_parts P, trainers per partition L, its partition and local index."""

    rank: int
    world_size: int
    num_parts: int
    trainers_per_part: int
    group: Any = None  # the process group of one serving rank per partition (None: the default group)

    @property
    def partition(self) -> int:
        return self.rank // self.trainers_per_part

    @property
    def local(self) -> int:
        return self.rank % self.trainers_per_part


def layout_problem(num_parts: int, world_size: Optional[int] = None) -> Optional[str]:
    """None when `world_size` ranks (None: this job's) fit `num_parts` partitions, else the one-line reason."""
    world_size = world()[1] if world_size is None else world_size
    if world_size == 1 or world_size % num_parts == 0:
        return None
    fits = [p for p in range(1, world_size + 1) if world_size % p == 0]
    return (f"has {num_parts} partitions but the job has {world_size} ranks: ranks must be partitions x trainers per "
            f"partition, i.e. {num_parts} x L ranks ({', '.join(str(num_parts * k) for k in (1, 2, 3, 4))}, ...); "
            f"{world_size} ranks fit results of {', '.join(map(str, fits))} partitions. Fix: start {num_parts} x L "
            f"processes (torchrun --nnodes {num_parts} --nproc-per-node L, or --nproc-per-node {num_parts} on one "
            f"machine), or partition again with --parts one of {', '.join(map(str, fits))}")


def wrong_partition(rank: int, world_size: int, num_parts: int, loaded: int, what: str) -> str:
    """The one-line error of a rank that loaded another partition than its own (rank r trains on r // L)."""
    per = world_size // num_parts
    return (f"rank {rank} of {world_size} loaded partition {loaded} of {num_parts}, but with {num_parts} partitions x "
            f"{per} trainer{'s' if per > 1 else ''} rank r trains on partition r // {per}, so rank {rank} on partition "
            f"{rank // per}: {what} needs it; load the job's partition with gr.load_partition(path) (rank left out)")


def partition_of_rank(num_parts: int, rank: Optional[int] = None, path: Any = None) -> int:
    """The partition this job's rank trains on (rank // L); InputError when the world size fits no layout."""
    me, world_size = world()
    problem = layout_problem(num_parts, world_size)
    if problem:
        raise InputError(path, problem)
    rank = me if rank is None else rank
    return rank // max(1, world_size // num_parts)


def trainer_layout(num_parts: int, timeout_s: float = 60.0, path: Any = None) -> TrainerLayout:
    """This process's place in the job for a result of `num_parts` partitions (a collective when L > 1)."""
    rank, world_size = world()
    problem = layout_problem(num_parts, world_size)
    if problem:
        raise InputError(path, problem)
    per_part = max(1, world_size // num_parts) if world_size > 1 else 1
    if per_part == 1:
        return TrainerLayout(rank, world_size, num_parts, 1, None)
    return TrainerLayout(rank, world_size, num_parts, per_part, _serving_groups(num_parts, per_part, timeout_s)[rank % per_part])


def _serving_groups(num_parts: int, per_part: int, timeout_s: float) -> list[Any]:
    """The L groups {p * L + i}: every rank creates every group, in the same order (new_group is collective)."""
    key = (num_parts, per_part)
    if key not in _groups:
        timeout = datetime.timedelta(seconds=timeout_s)
        _groups[key] = [dist.new_group([p * per_part + i for p in range(num_parts)], timeout=timeout) for i in range(per_part)]
    return _groups[key]


def own_groups(layout: TrainerLayout, timeout_s: float = 60.0) -> TrainerLayout:
    """`layout` with serving groups of its own: the same ranks as layout.group, in new process groups (for a
    loader's background thread, gpart.runtime.loaders.prefetch). A collective: every rank creates every group, in
    the same order; never cached (each caller gets groups no one else uses)."""
    if layout.world_size == 1:
        return layout
    timeout = datetime.timedelta(seconds=timeout_s)
    per_part = layout.trainers_per_part
    groups = [dist.new_group([p * per_part + i for p in range(layout.num_parts)], timeout=timeout) for i in range(per_part)]
    return dataclasses.replace(layout, group=groups[layout.local])


def partition_group(layout: TrainerLayout, timeout_s: float = 60.0) -> Any:
    """The process group of the L trainers of this rank's partition (ranks p * L .. p * L + L - 1); None with
    L = 1. The first call for a (P, L) is a collective: every rank creates every group, in the same order."""
    num_parts, per_part = layout.num_parts, layout.trainers_per_part
    if per_part == 1:
        return None
    key = (num_parts, per_part)
    if key not in _partition_groups:
        timeout = datetime.timedelta(seconds=timeout_s)
        _partition_groups[key] = [dist.new_group(list(range(p * per_part, (p + 1) * per_part)), timeout=timeout)
                                  for p in range(num_parts)]
    return _partition_groups[key][layout.partition]
