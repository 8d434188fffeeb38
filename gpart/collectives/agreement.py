"""Checks that every rank of a job agrees on something (settings, the input's digest), in bounded
time, raising on every rank when they do not: the runtime's guard against ranks that would
otherwise wait for each other in different collectives.

Every check carries a header: the name of the collective it opens (`what`) and its sequence
number within the job (per process group). Every public collective of gpart.runtime opens with
such a check, so ranks that entered different collectives (rank 0 in layerwise_inference, rank 1
in gr.barrier or in another loader), or the same one a different number of times, raise at once,
naming both, instead of waiting for the timeout in mismatched exchanges.

Each check also records, in the job's store, that this rank entered it (gpart.collectives.presence),
and waits in slices (gpart.collectives.waiting): a rank that makes the call alone fails as soon as a
peer that cannot come has ended (exited, destroy_process_group), and otherwise logs once which ranks
have not entered the collective and their last one, as soon as one is known to be stuck (in another
collective) or when half the limit has passed (a peer that is only late may be computing: no line),
then raises at the limit saying the same.
"""

from __future__ import annotations

import datetime
import hashlib
from typing import Optional

import torch
import torch.distributed as dist

from gpart.base.errors import InputError, RankMismatchError
from gpart.collectives import presence
from gpart.collectives.peers import lost_hosts
from gpart.collectives.process_group import first_line, global_ranks, world
from gpart.collectives.waiting import Outcome, watch

# Bytes of a value's text shipped beside its digest, so a disagreement names
# both values in the error (long values are cut); the collective's name likewise.
_TEXT_BYTES = 200
_NAME_BYTES = 80
_DIGEST_BYTES = 32
_sequence: dict[int, int] = {}  # checks made so far, per control group


def _encode(value: str, what: str, seq: int) -> torch.Tensor:
    raw = value.encode("utf-8")
    text, name = raw[:_TEXT_BYTES], what.encode("utf-8")[:_NAME_BYTES]
    buf = (bytearray(hashlib.sha256(raw).digest()) + seq.to_bytes(8, "little") + len(name).to_bytes(2, "little")
           + name.ljust(_NAME_BYTES, b"\0") + len(text).to_bytes(2, "little") + text.ljust(_TEXT_BYTES, b"\0"))
    return torch.frombuffer(buf, dtype=torch.uint8).clone()


def _decode(buf: torch.Tensor) -> tuple[bytes, int, str, str]:
    """(digest of the value, sequence number, collective name, the value's first bytes)."""
    data = bytes(buf.tolist())
    at = _DIGEST_BYTES
    seq = int.from_bytes(data[at:at + 8], "little")
    n = int.from_bytes(data[at + 8:at + 10], "little")
    name = data[at + 10:at + 10 + n].decode("utf-8", errors="replace")
    at += 10 + _NAME_BYTES
    n = int.from_bytes(data[at:at + 2], "little")
    return data[:_DIGEST_BYTES], seq, name, data[at + 2:at + 2 + n].decode("utf-8", errors="replace")


_control_groups: dict[float, object] = {}


def _control_group(group, timeout_s: float):
    """A gloo group for checks: gloo's timed wait on a work can be taken in slices (NCCL's does not block)."""
    if dist.get_backend(group) == "gloo":
        return group
    if group is not None:
        raise ValueError("check_same_across_ranks needs the default group or a gloo group")
    key = float(timeout_s)
    if key not in _control_groups:
        # Collective: every rank creates it at the same point (the first check).
        _control_groups[key] = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
    return _control_groups[key]


def check_same_across_ranks(value: str, what: str, timeout_s: float = 60.0, group=None, path=None) -> None:
    """Raise RankMismatchError (on every rank) unless all ranks pass the same `value`.

    A no-op in a world of one. A rank that does not arrive within `timeout_s`
    seconds gives an error naming the missing ranks and their last gpart
    collective instead of a hang; one that has ended (exited, destroyed its
    process group) an error at once. Values travel as a SHA-256 digest plus
    their first bytes as text (no pickling).
    """
    rank, world_size = world(group)
    if world_size == 1:
        return
    control = _control_group(group, timeout_s)
    seq = _sequence.get(id(control), 0) + 1
    _sequence[id(control)] = seq
    me = world()[0]
    presence.register(me)
    presence.enter(seq, what)
    mine = _encode(value, what, seq)
    gathered = [torch.empty_like(mine) for _ in range(world_size)]
    work = dist.all_gather(gathered, mine, group=control, async_op=True)
    peers = [r for r in global_ranks(group) if r != me]
    outcome = watch(work, timeout_s, peers, lambda waited, late: _warning(me, seq, what, peers, timeout_s, late))
    if outcome.status != "done":
        raise RankMismatchError(path, _not_reached(outcome, me, seq, what, peers, world_size, timeout_s))
    _raise_on_difference([_decode(t) for t in gathered], rank, world_size, what, path)


def _warning(rank: int, seq: int, what: str, peers: list[int], timeout_s: float, late: bool) -> Optional[str]:
    """The line a long wait logs: the peers known to be stuck or gone, or, once half the limit has passed
    (`late`), every missing peer; None while the missing peers may be computing (normal work)."""
    known = presence.stuck(peers, seq, what)
    if not known and not late:
        return None
    return f"gpart: {_waits(rank, seq, what, peers, known or None)} (waiting {timeout_s:g} s at most)"


def _waits(rank: int, seq: int, what: str, peers: list[int], missing: Optional[str] = None) -> str:
    """'rank 0 waits in collective #5 'x' for rank 1, which ...: every rank must call it' (the store's records)."""
    missing = presence.describe(peers, seq, what) if missing is None else missing
    return f"rank {rank} waits in collective #{seq} {what!r} for {missing or f'the other {len(peers)} ranks'}: every rank must call it"


def _not_reached(outcome: Outcome, rank: int, seq: int, what: str, peers: list[int], world_size: int, timeout_s: float) -> str:
    """The one line of a check that did not complete: who is missing and what they do, as far as we know."""
    missing = presence.describe(peers, seq, what)
    waits = _waits(rank, seq, what, peers, missing)
    if outcome.status == "timeout":
        return f"{waits} (not all {world_size} ranks reached the check of {what} within {timeout_s:g} s)"
    if outcome.ended:
        return (f"{waits} (not all {world_size} ranks reached the check of {what}: gave up after "
                f"{outcome.waited_s:.1f} s, as a rank has ended)")
    failed = f"not all {world_size} ranks reached the check of {what} within {timeout_s:g} s ({first_line(outcome.error)})"
    if missing:  # a rank is known to be elsewhere: that is the cause, not the link
        return f"{waits} ({failed})"
    return f"rank {rank}: {failed}{lost_hosts(rank, world_size, timeout_s)}"


def _raise_on_difference(decoded: list[tuple[bytes, int, str, str]], rank: int, world_size: int, what: str, path) -> None:
    """RankMismatchError naming both sides when another rank is in another collective, or has another value."""
    _, seq, _, text = decoded[rank]
    elsewhere = [r for r, (_, s, name, _) in enumerate(decoded) if (s, name) != (seq, what)]
    if elsewhere:
        other = elsewhere[0]
        _, o_seq, o_name, _ = decoded[other]
        raise RankMismatchError(path, f"rank {rank} is in collective #{seq} {what!r} but rank {other} is in #{o_seq} "
                                      f"{o_name!r}: every rank must make the same collective calls in the same order "
                                      f"({len(elsewhere)} of {world_size} ranks elsewhere)")
    differing = [r for r, (digest, _, _, _) in enumerate(decoded) if digest != decoded[rank][0]]
    if differing:
        other = differing[0]
        raise RankMismatchError(
            path,
            f"ranks disagree about {what}: rank {rank} has {text!r}, rank {other} has {decoded[other][3]!r}"
            f" ({len(differing)} of {world_size} ranks differ from rank {rank})",
        )


def named_barrier(what: str = "barrier", timeout_s: float = 60.0) -> None:
    """A barrier that is a named collective: every rank waits for the others (bounded by timeout_s); a rank that is
    in another gpart collective meanwhile makes both raise at once, naming both. A no-op in a world of one."""
    check_same_across_ranks("", what, timeout_s)


def agree_or_raise(problem: Optional[str], value: str, what: str, timeout_s: float = 60.0, path=None) -> None:
    """Every rank passes `value` (its settings) and `problem` (None, or what is wrong with its input).

    When all agree and none has a problem this returns on every rank; otherwise
    every rank raises in bounded time: the rank with the problem an InputError
    naming it, the others a RankMismatchError that quotes it, so no rank is
    left waiting in a later collective.
    """
    mine = f"error on rank {world()[0]}: {problem}" if problem else value
    try:
        check_same_across_ranks(mine, what, timeout_s, path=path)
    except RankMismatchError:
        if problem:
            raise InputError(path, problem) from None
        raise
    if problem:  # a world of one
        raise InputError(path, problem)

