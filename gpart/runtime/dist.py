"""torch.distributed primitives the runtime builds on: who am I, group ids by
owner, exchange variable-sized blocks of rows with all_to_all, and check that
all ranks agree on something in bounded time.

Everything works when torch.distributed is not initialised (a world of one)
and with the gloo (CPU tensors) and NCCL (CUDA tensors) backends. Tensors are
moved to the backend's device for the exchange and come back on the device
they were sent from.
"""

from __future__ import annotations

import datetime
import hashlib
from typing import Optional, Sequence

import torch

from gpart.base.errors import GpartError

# Bytes of a value's text shipped beside its digest, so a disagreement names
# both values in the error (long values are cut).
_TEXT_BYTES = 200
_DIGEST_BYTES = 32


class RankMismatchError(GpartError):
    """Ranks of a torch.distributed job disagree (or one of them did not answer in time)."""


def _dist():
    import torch.distributed as dist

    return dist


def is_initialized() -> bool:
    dist = _dist()
    return dist.is_available() and dist.is_initialized()


def world(group=None) -> tuple[int, int]:
    """(rank, world_size) of this process; (0, 1) when torch.distributed is not initialised."""
    if not is_initialized():
        return 0, 1
    dist = _dist()
    return dist.get_rank(group), dist.get_world_size(group)


def comm_device(group=None) -> torch.device:
    """The device collectives of `group` take tensors on: CUDA for NCCL, CPU otherwise (gloo)."""
    if is_initialized() and _dist().get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def group_by_owner(ids: torch.Tensor, owner: torch.Tensor, world_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sort `ids` by owner rank, keeping request order within each owner.

    Returns (sorted_ids, counts, order): `sorted_ids = ids[order]`, `counts[r]`
    ids go to rank r (a CPU int64 tensor of length `world_size`), and a reply
    `rows` in sorted order goes back to request order with `out[order] = rows`.
    """
    ids = ids.reshape(-1)
    owner = owner.reshape(-1)
    if owner.numel() != ids.numel():
        raise ValueError(f"ids ({ids.numel()}) and owner ({owner.numel()}) differ in length")
    if owner.numel() == 0:
        return ids, torch.zeros(world_size, dtype=torch.int64), torch.zeros(0, dtype=torch.int64, device=ids.device)
    order = torch.argsort(owner, stable=True)
    counts = torch.bincount(owner.to(torch.int64), minlength=world_size)
    if counts.numel() != world_size:
        raise ValueError(f"owner ranks must be in [0, {world_size}), got up to {counts.numel() - 1}")
    return ids[order], counts.cpu(), order


def _wait(work, timeout_s: Optional[float], what: str) -> None:
    """Wait for an async collective; past `timeout_s` raise RankMismatchError instead of blocking."""
    if timeout_s is None:
        work.wait()
        return
    try:
        work.wait(datetime.timedelta(seconds=timeout_s))
    except RuntimeError as exc:
        rank, world_size = world()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RankMismatchError(None, f"rank {rank}: {what} with the other {world_size - 1} ranks did not complete within {timeout_s:g} s ({first})") from None


def exchange_counts(send_counts: Sequence[int] | torch.Tensor, group=None, timeout_s: Optional[float] = None) -> list[int]:
    """Tell every rank how many items this rank sends it; return how many each rank sends here.

    timeout_s: raise RankMismatchError when the exchange does not complete in
    that time (a peer that failed or left) instead of waiting for the process
    group's own timeout.
    """
    send = torch.as_tensor(send_counts, dtype=torch.int64).reshape(-1)
    _, world_size = world(group)
    if world_size == 1:
        return [int(x) for x in send.tolist()]
    if send.numel() != world_size:
        raise ValueError(f"need one count per rank ({world_size}), got {send.numel()}")
    device = comm_device(group)
    send = send.to(device)
    recv = torch.empty_like(send)
    _wait(_dist().all_to_all_single(recv, send, group=group, async_op=True), timeout_s, "exchanging counts")
    return [int(x) for x in recv.cpu().tolist()]


def _as_bytes(flat: torch.Tensor) -> torch.Tensor:
    # Byte views let one code path carry every dtype (bool, bfloat16, ...)
    # whatever the backend supports natively; the bytes are not copied.
    flat = flat.contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.dtype != torch.uint8 else flat


def all_to_all_rows(
    send: torch.Tensor,
    send_counts: Sequence[int],
    recv_counts: Sequence[int],
    group=None,
    timeout_s: Optional[float] = None,
) -> torch.Tensor:
    """Exchange blocks of rows when both sides' counts are known.

    `send` holds `send_counts[r]` rows for rank r, in rank order; the result
    holds `recv_counts[r]` rows from rank r, in rank order, on `send`'s device.
    timeout_s bounds the wait as in exchange_counts.
    """
    row_shape = tuple(send.shape[1:])
    _, world_size = world(group)
    if world_size == 1:
        return send.clone() if send.numel() else send.reshape(0, *row_shape)
    row_bytes = send.element_size() * int(torch.Size(row_shape).numel())
    if row_bytes == 0:  # rows of zero elements (same row shape on every rank): nothing to move
        return torch.empty((sum(recv_counts), *row_shape), dtype=send.dtype, device=send.device)
    device = comm_device(group)
    payload = _as_bytes(send.to(device))
    out = torch.empty(sum(recv_counts) * row_bytes, dtype=torch.uint8, device=device)
    work = _dist().all_to_all_single(
        out,
        payload,
        [int(c) * row_bytes for c in recv_counts],
        [int(c) * row_bytes for c in send_counts],
        group=group,
        async_op=True,
    )
    _wait(work, timeout_s, "exchanging rows")
    rows = out.view(send.dtype).reshape(-1, *row_shape)
    return rows.to(send.device, non_blocking=True)


def all_to_all_variable(send_tensors: list[torch.Tensor], group=None) -> list[torch.Tensor]:
    """Send `send_tensors[r]` (any number of rows, incl. 0) to rank r; return what each rank sent here.

    All tensors must share dtype and row shape (across ranks too). Split sizes
    are exchanged first, then the rows move in one all_to_all_single on a flat
    buffer. The results are views of one buffer on the first tensor's device.
    """
    _, world_size = world(group)
    if len(send_tensors) != world_size:
        raise ValueError(f"need one tensor per rank ({world_size}), got {len(send_tensors)}")
    first = send_tensors[0]
    for t in send_tensors[1:]:
        if t.dtype != first.dtype or t.shape[1:] != first.shape[1:]:
            raise ValueError(f"tensors differ in dtype or row shape: {first.dtype} {tuple(first.shape[1:])} vs {t.dtype} {tuple(t.shape[1:])}")
    send_counts = [int(t.shape[0]) if t.dim() else 1 for t in send_tensors]
    recv_counts = exchange_counts(send_counts, group)
    flat = torch.cat([t.reshape(-1, *first.shape[1:]).to(first.device) for t in send_tensors])
    rows = all_to_all_rows(flat, send_counts, recv_counts, group)
    return list(rows.split(recv_counts))


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
    dist = _dist()
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
    dist = _dist()
    control = _control_group(group, timeout_s)
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        dist.monitored_barrier(group=control, timeout=timeout, wait_all_ranks=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RankMismatchError(path, f"rank {rank}: not all {world_size} ranks reached the check of {what} within {timeout_s:g} s ({first})") from None
    mine = _encode(value)
    gathered = [torch.empty_like(mine) for _ in range(world_size)]
    work = dist.all_gather(gathered, mine, group=control, async_op=True)
    try:
        work.wait(timeout)
    except RuntimeError as exc:
        raise RankMismatchError(path, f"rank {rank}: exchanging {what} failed: {str(exc).strip().splitlines()[0]}") from None
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
    from gpart.base.errors import InputError

    mine = f"error on rank {world()[0]}: {problem}" if problem else value
    try:
        check_same_across_ranks(mine, what, timeout_s, path=path)
    except RankMismatchError:
        if problem:
            raise InputError(path, problem) from None
        raise
    if problem:  # a world of one
        raise InputError(path, problem)


def value_digest(data: bytes) -> str:
    """A short hex digest for values passed to check_same_across_ranks."""
    return hashlib.sha256(data).hexdigest()[:16]


def barrier(timeout_s: Optional[float] = None, group=None) -> None:
    """A barrier that is bounded in time on gloo (monitored_barrier) and a no-op in a world of one."""
    if world(group)[1] == 1:
        return
    dist = _dist()
    if timeout_s is not None and dist.get_backend(group) == "gloo":
        dist.monitored_barrier(group=group, timeout=datetime.timedelta(seconds=timeout_s), wait_all_ranks=True)
    else:
        dist.barrier(group=group)
