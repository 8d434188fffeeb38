"""Rows to the ranks that own them: group ids by owner, exchange counts, then blocks of rows in one
all_to_all_single (bytes of any dtype and row shape), on CPU (gloo) or CUDA (NCCL) tensors."""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.distributed as dist

from gpart.collectives.process_group import comm_device, wait, world


def narrow_keys(keys: torch.Tensor, bound: int) -> torch.Tensor:
    """Non-negative `keys` below `bound` in the narrowest integer dtype that holds them: a stable sort of owner ranks
    (a handful of values) runs several times faster on uint8 than on int64."""
    if bound <= 256:
        return keys.to(torch.uint8)
    return keys.to(torch.int16 if bound <= 2**15 else torch.int32 if bound <= 2**31 else torch.int64)


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
    order = torch.argsort(narrow_keys(owner, world_size), stable=True)
    counts = torch.bincount(owner.to(torch.int64), minlength=world_size)
    if counts.numel() != world_size:
        raise ValueError(f"owner ranks must be in [0, {world_size}), got up to {counts.numel() - 1}")
    return ids[order], counts.cpu(), order


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
    wait(dist.all_to_all_single(recv, send, group=group, async_op=True), timeout_s, "exchanging counts", group)
    return [int(x) for x in recv.cpu().tolist()]


def exchange_table(table: torch.Tensor, group=None, timeout_s: Optional[float] = None) -> torch.Tensor:
    """Row r of the int64 [world_size, width] `table` to rank r; the rows every rank sent here, [world_size, width], on
    the collective's device (NCCL: CUDA, no host read here). timeout_s bounds the wait as in exchange_counts."""
    _, world_size = world(group)
    if table.dim() != 2 or table.shape[0] != world_size:
        raise ValueError(f"need one row per rank ({world_size}), got a table of shape {tuple(table.shape)}")
    if world_size == 1:
        return table.clone()
    send = table.to(comm_device(group), torch.int64).contiguous()
    recv = torch.empty_like(send)
    wait(dist.all_to_all_single(recv, send, group=group, async_op=True), timeout_s, "exchanging counts", group)
    return recv


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
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Exchange blocks of rows when both sides' counts are known.

    `send` holds `send_counts[r]` rows for rank r, in rank order; the result
    holds `recv_counts[r]` rows from rank r, in rank order, on `send`'s device.
    timeout_s bounds the wait as in exchange_counts. `out`: a contiguous uint8
    tensor of exactly the received bytes to receive into (a reused buffer, or
    the caller's destination), used where it is on the collective's device
    (a CUDA tensor on gloo is not: a fresh buffer then, as without it).
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
    size = sum(recv_counts) * row_bytes
    if out is not None and out.device.type != torch.device(device).type:
        out = None
    if out is None:
        out = torch.empty(size, dtype=torch.uint8, device=device)
    elif out.dtype != torch.uint8 or out.numel() != size or not out.is_contiguous():
        raise ValueError(f"out must be {size} contiguous bytes, got {out.dtype} x {out.numel()}")
    work = dist.all_to_all_single(
        out,
        payload,
        [int(c) * row_bytes for c in recv_counts],
        [int(c) * row_bytes for c in send_counts],
        group=group,
        async_op=True,
    )
    wait(work, timeout_s, "exchanging rows", group)
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
