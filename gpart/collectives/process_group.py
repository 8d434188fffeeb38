"""This process in its torch.distributed job: rank, world size, the backend's device, and the
bounded wait every collective of gpart goes through."""

from __future__ import annotations

import datetime
import socket
from typing import Optional

import torch
import torch.distributed as dist

from gpart.base.errors import RankMismatchError
from gpart.collectives.peers import lost_hosts, register


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def world(group=None) -> tuple[int, int]:
    """(rank, world_size) of this process; (0, 1) when torch.distributed is not initialised."""
    if not is_initialized():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def comm_device(group=None) -> torch.device:
    """The device collectives of `group` take tensors on: CUDA for NCCL, CPU otherwise (gloo)."""
    if is_initialized() and dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text (whitespace folded, at most 300 characters), for one-line errors."""
    text = str(exc).strip()
    return " ".join(text.splitlines()[0].split())[:300] if text else type(exc).__name__


def wait(work, timeout_s: Optional[float], what: str) -> None:
    """Wait for an async collective; past `timeout_s` (None: the process group's own timeout) raise
    RankMismatchError instead of blocking."""
    if timeout_s is None:
        work.wait()
        return
    rank, world_size = world()
    register(rank)  # so that a failure can name the host it lost (gpart.collectives.peers)
    try:
        ok = work.wait(datetime.timedelta(seconds=timeout_s))
    except RuntimeError as exc:
        raise RankMismatchError(None, f"rank {rank} on {socket.gethostname()}: {what} with the other {world_size - 1} "
                                      f"ranks failed or did not complete within {timeout_s:g} s ({first_line(exc)})"
                                      f"{lost_hosts(rank, world_size, timeout_s)}") from None
    if ok is False:
        raise RankMismatchError(None, f"rank {rank} on {socket.gethostname()}: {what} did not complete within "
                                      f"{timeout_s:g} s{lost_hosts(rank, world_size, timeout_s)}")


def barrier(timeout_s: Optional[float] = None, group=None) -> None:
    """A barrier that is bounded in time on gloo (monitored_barrier) and a no-op in a world of one."""
    if world(group)[1] == 1:
        return
    if timeout_s is not None and dist.get_backend(group) == "gloo":
        dist.monitored_barrier(group=group, timeout=datetime.timedelta(seconds=timeout_s), wait_all_ranks=True)
    else:
        dist.barrier(group=group)
