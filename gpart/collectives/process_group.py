"""This process in its torch.distributed job: rank, world size, the backend's device, and the
bounded wait every collective of gpart goes through (on gloo in slices: gpart.collectives.waiting)."""

from __future__ import annotations

import datetime
import socket
from typing import Optional

import torch
import torch.distributed as dist

from gpart.base.errors import RankMismatchError
from gpart.collectives import presence
from gpart.collectives.one_line import first_line
from gpart.collectives.peers import lost_hosts, register
from gpart.collectives.waiting import Outcome, watch

__all__ = ["is_initialized", "world", "global_ranks", "comm_device", "first_line", "wait", "barrier"]


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


def global_ranks(group=None) -> list[int]:
    """The global ranks of `group` (None: the default group), in group-rank order."""
    return dist.get_process_group_ranks(group) if group is not None else list(range(world()[1]))


PROBE_LIMIT_S = 10.0  # after a failure under the process group's own timeout: how long to ask which host is gone


def wait(work, timeout_s: Optional[float], what: str, group=None) -> None:
    """Wait for an async collective of `group`; past `timeout_s` (None: the process group's own timeout) raise
    RankMismatchError instead of blocking. On gloo a rank of the group that has ended makes it raise at
    once, and a wait logs one warning line when a peer is known to be stuck or half the limit has passed
    (gpart.collectives.waiting)."""
    if timeout_s is None:  # the process group's own timeout bounds it; its failure is still one line
        try:
            work.wait()
        except RuntimeError as exc:
            rank, world_size = world()
            raise RankMismatchError(None, f"rank {rank} on {socket.gethostname()}: {what} with the other {world_size - 1} "
                                          f"ranks failed ({first_line(exc)}){lost_hosts(rank, world_size, PROBE_LIMIT_S)}") from None
        return
    rank, world_size = world()
    register(rank)  # so that a failure can name the host it lost (gpart.collectives.peers)
    presence.register(rank)
    if dist.get_backend(group) != "gloo":
        _wait_whole(work, timeout_s, what, rank, world_size)
        return
    peers = [r for r in global_ranks(group) if r != rank]
    outcome = watch(work, timeout_s, peers, lambda waited, late: _still_waiting(rank, what, peers, timeout_s, waited, late))
    if outcome.status != "done":
        raise RankMismatchError(None, _wait_error(outcome, rank, world_size, what, timeout_s, peers))


def _wait_whole(work, timeout_s: float, what: str, rank: int, world_size: int) -> None:
    """The work's own timed wait (NCCL: it returns once the stream waits for the work; the watchdog bounds it)."""
    try:
        ok = work.wait(datetime.timedelta(seconds=timeout_s))
    except RuntimeError as exc:
        raise RankMismatchError(None, f"rank {rank} on {socket.gethostname()}: {what} with the other {world_size - 1} "
                                      f"ranks failed or did not complete within {timeout_s:g} s ({first_line(exc)})"
                                      f"{lost_hosts(rank, world_size, timeout_s)}") from None
    if ok is False:
        raise RankMismatchError(None, f"rank {rank} on {socket.gethostname()}: {what} did not complete within "
                                      f"{timeout_s:g} s{lost_hosts(rank, world_size, timeout_s)}")


def _after_last() -> str:
    last = presence.last()
    return f" (after this rank's collective #{last[0]} {last[1]!r})" if last else ""


def _elsewhere(peers: list[int]) -> str:
    """The peers whose last named collective is not this rank's, described; '' when all match (or this rank
    entered none: the preparation commands name no collective)."""
    last = presence.last()
    return presence.describe(peers, *last) if last else ""


def _still_waiting(rank: int, what: str, peers: list[int], timeout_s: float, waited_s: float, late: bool) -> Optional[str]:
    """The warning of a long wait: the peers known to be stuck or gone; when `late` (half the limit passed) a
    line in any case; otherwise None (a peer that is late may be computing: normal work, no warning)."""
    last = presence.last()
    known = presence.stuck(peers, *last) if last else ""
    if not known and not late:
        return None
    others = known or _elsewhere(peers) or "none is known to be elsewhere: one may be computing, or in a collective outside gpart"
    return (f"gpart: rank {rank} has waited {waited_s:.0f} s of its {timeout_s:g} s limit in {what}{_after_last()} for the "
            f"other {len(peers)} ranks; {others}; every rank must make the same collective calls")


def _wait_error(outcome: Outcome, rank: int, world_size: int, what: str, timeout_s: float, peers: list[int]) -> str:
    me = f"rank {rank} on {socket.gethostname()}: {what}{_after_last()}"
    if outcome.ended:  # what the peer did says more than gloo's closed connection
        return (f"{me} waits for {presence.describe(sorted(outcome.ended), None, None)}: every rank must make the "
                f"same collective calls; gave up after {outcome.waited_s:.1f} s")
    if outcome.status == "failed":
        return (f"{me} with the other {world_size - 1} ranks failed or did not complete within {timeout_s:g} s "
                f"({first_line(outcome.error)}){lost_hosts(rank, world_size, timeout_s)}")
    others = _elsewhere(peers)
    return f"{me} did not complete within {timeout_s:g} s{'; ' + others if others else ''}{lost_hosts(rank, world_size, timeout_s)}"


def barrier(timeout_s: Optional[float] = None, group=None) -> None:
    """A barrier that is bounded in time on gloo (monitored_barrier) and a no-op in a world of one."""
    if world(group)[1] == 1:
        return
    if timeout_s is not None and dist.get_backend(group) == "gloo":
        dist.monitored_barrier(group=group, timeout=datetime.timedelta(seconds=timeout_s), wait_all_ranks=True)
    else:
        dist.barrier(group=group)
