"""Checks that every rank of a job agrees on something (settings, the input's digest), in bounded
time, raising on every rank when they do not: the runtime's guard against ranks that would
otherwise wait for each other in different collectives."""

from __future__ import annotations

import datetime
import hashlib
from typing import Optional

import torch
import torch.distributed as dist

from gpart.base.errors import InputError, RankMismatchError
from gpart.collectives.process_group import first_line, world

# Bytes of a value's text shipped beside its digest, so a disagreement names
# both values in the error (long values are cut).
_TEXT_BYTES = 200
_DIGEST_BYTES = 32


def _encode(value: str) -> torch.Tensor:
    raw = value.encode("utf-8")
    text = raw[:_TEXT_BYTES]
    buf = bytearray(hashlib.sha256(raw).digest()) + len(text).to_bytes(2, "little") + text.ljust(_TEXT_BYTES, b"\0")
    return torch.frombuffer(buf, dtype=torch.uint8).clone()


def _decode(buf: torch.Tensor) -> tuple[bytes, str]:
    data = bytes(buf.tolist())
    n = int.from_bytes(data[_DIGEST_BYTES : _DIGEST_BYTES + 2], "little")
    text = data[_DIGEST_BYTES + 2 : _DIGEST_BYTES + 2 + n].decode("utf-8", errors="replace")
    return data[:_DIGEST_BYTES], text


_control_groups: dict[float, object] = {}


def _control_group(group, timeout_s: float):
    """A gloo group for checks: monitored_barrier (bounded time) exists only for gloo."""
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
    seconds gives an error naming the missing ranks instead of a hang. Values
    travel as a SHA-256 digest plus their first bytes as text (no pickling).
    """
    rank, world_size = world(group)
    if world_size == 1:
        return
    control = _control_group(group, timeout_s)
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        dist.monitored_barrier(group=control, timeout=timeout, wait_all_ranks=True)
    except RuntimeError as exc:
        raise RankMismatchError(path, f"rank {rank}: not all {world_size} ranks reached the check of {what} "
                                      f"within {timeout_s:g} s ({first_line(exc)})") from None
    mine = _encode(value)
    gathered = [torch.empty_like(mine) for _ in range(world_size)]
    work = dist.all_gather(gathered, mine, group=control, async_op=True)
    try:
        work.wait(timeout)
    except RuntimeError as exc:  # every rank arrived, then the exchange broke: a message of its own
        raise RankMismatchError(path, f"rank {rank}: exchanging {what} failed: {first_line(exc)}") from None
    decoded = [_decode(t) for t in gathered]
    differing = [r for r, (digest, _) in enumerate(decoded) if digest != decoded[rank][0]]
    if differing:
        other = differing[0]
        raise RankMismatchError(
            path,
            f"ranks disagree about {what}: rank {rank} has {decoded[rank][1]!r}, rank {other} has {decoded[other][1]!r}"
            f" ({len(differing)} of {world_size} ranks differ from rank {rank})",
        )


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

