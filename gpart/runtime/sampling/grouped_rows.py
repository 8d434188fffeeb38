"""A batch's node rows put together without scatters: nodes listed held-first, then by owner, across partitions.

    order = held_first_order(part, added)              # added[order]: rows stored here first, then by owner
    pieces = GroupedRows(held, sent)                   # one n_id segment's rows: read here, then as received
    place_rows(rows, key, segments, out)               # every segment's rows into the batch's tensor, in order
    buffers = RoundBuffers(device)                     # byte buffers reused batch after batch (CPU)

Across partitions the rows of a batch's nodes are read here (owned nodes,
and halo nodes whose rows the partition stores) or come in the owners'
answers, grouped by owner. Scattering both into the node list costs two
copies per row and a scatter (index_copy_) runs at half a gather's speed on
the CPU. So the nodes each hop adds are listed in that order (the nodes
whose rows are held here first, then the others by owning partition, each
group in first-appearance order: `held_first_order`): the answers' rows then
arrive in node-list order, and each segment of the node list is one gather
from the local table and one contiguous copy (or no copy: the last hop's
rows are received straight into the batch's tensor). The order is part of
the batch (n_id) and reproduces as every other choice of the loader.

Fresh buffers of hundreds of megabytes fault their pages in on first touch,
which costs as much as the copy; the byte buffers of the rounds (the
owner's message, the answers received) are reused (`RoundBuffers`), and
every buffer handed to the caller is fresh.
"""

from __future__ import annotations

from typing import Hashable, Optional, Sequence, Union

import torch

from gpart.bytes.huge_pages import empty_huge
from gpart.collectives.all_to_all import narrow_keys
from gpart.runtime.partition.interface import Partition
from gpart.runtime.sampling.packed_rows import RowLayout
from gpart.runtime.sampling.round_answer import GroupedRows
from gpart.runtime.sampling.row_fetcher import PlainRows, Requests, RowFetcher, halo_rows, stores_halo

Segment = Union[torch.Tensor, GroupedRows]  # a segment's rows as one tensor (the seeds'), or held-first pieces


def held_first_order(part: Partition, added: torch.Tensor) -> torch.Tensor:
    """The order that lists `added` (global ids of a homogeneous partition) with the nodes whose rows the partition
    stores first (owned, or halo), then the others by owning partition, each group keeping the given order (stable).
    The partition decides, not the row source, so that a source changes the rows of a batch, never its nodes."""
    owner, _ = part.book.owner_and_local(added)
    mine = owner == part.rank
    here = mine | (halo_rows(part, added, mine) >= 0) if stores_halo(part) else mine
    return torch.argsort(narrow_keys(torch.where(here, 0, owner.to(torch.int64) + 1), part.num_parts + 1), stable=True)


def lists_rows_held_first(rows: RowFetcher) -> bool:
    """Whether the rows `rows` holds are those the partition stores (held_first_order's), so that a held-first
    frontier's held rows are its first ones."""
    return isinstance(rows, PlainRows) and (rows.source.holds_halo or not stores_halo(rows.part))


def held_count(req: Requests) -> int:
    """How many frontier nodes of a held-first round (one kind) are held here: those not flagged (the count table's)."""
    return int(req.kind.numel()) - sum(kinds[0] for kinds in req.per_kind)


def grouped_answer(keys: list[list[Hashable]], layouts: list[RowLayout], row_bytes: list[Optional[torch.Tensor]],
                   req: Requests) -> GroupedRows:
    """A held-first frontier's rows as pieces (one kind): its held nodes' rows here, the answers' rows as received."""
    (kind_keys,), (layout,) = keys, layouts
    sent = dict(zip(kind_keys, layout.unpack(row_bytes[0]))) if kind_keys else {}
    return GroupedRows(req.held[:held_count(req)], sent)


def rows_into(rows: RowFetcher, keys: list[list[Hashable]], layouts: list[RowLayout],
              row_bytes: list[Optional[torch.Tensor]], req: Requests, into: dict[Hashable, torch.Tensor]
              ) -> dict[Hashable, torch.Tensor]:
    """A held-first frontier's rows written into `into` (one kind): the held ones read straight in, the answers'
    copied after them (not at all where they were received in place, `received_in_place`)."""
    pieces = grouped_answer(keys, layouts, row_bytes, req)
    for key in pieces.sent:
        _write_pieces(rows, key, pieces, into[key])
    return {key: into[key] for key in pieces.sent}


def place_rows(rows: RowFetcher, key: Hashable, segments: Sequence[Segment], out: torch.Tensor) -> None:
    """`key`'s rows of the node list's segments, one after the other, written into `out` (its first rows)."""
    at = 0
    for segment in segments:  # a loop over the batch's hops
        if isinstance(segment, GroupedRows):
            size = int(segment.held.numel()) + int(segment.sent[key].shape[0])
            _write_pieces(rows, key, segment, out[at:at + size])
        else:
            size = int(segment.shape[0])
            out[at:at + size].copy_(segment)
        at += size


def _write_pieces(rows: RowFetcher, key: Hashable, pieces: GroupedRows, out: torch.Tensor) -> None:
    """`key`'s rows of one held-first segment into `out`: the held ones read straight in, the received ones copied
    after them (not at all where they were received in place, `received_in_place`)."""
    held = int(pieces.held.numel())
    rows.read_into(key, pieces.held, out[:held])
    sent = pieces.sent[key]
    if sent.numel() and sent.data_ptr() != out[held:].data_ptr():
        out[held:].copy_(sent)


def received_in_place(into: Optional[dict[Hashable, torch.Tensor]], keys: list[list[Hashable]], row_bytes: int,
                      held: int) -> Optional[torch.Tensor]:
    """Where the answers of a held-first round of rows can land as they are: the bytes of `into`'s rows after the
    first `held`, when the round carries one array of one kind (its packed rows are the array's own bytes)."""
    if into is None or len(keys) != 1 or len(keys[0]) != 1 or keys[0][0] not in into:
        return None
    target = into[keys[0][0]][held:]
    if not target.is_contiguous() or target[:1].numel() * target.element_size() != row_bytes:
        return None
    return target.reshape(-1).view(torch.uint8)


def batch_rows(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A fresh tensor for a batch's rows (the caller keeps it): on the CPU through empty_huge (huge pages when large)."""
    if torch.device(device).type == "cpu":
        return empty_huge(shape, dtype)
    return torch.empty(shape, dtype=dtype, device=device)


class RoundBuffers:
    """Byte buffers by name, reused batch after batch on the CPU (None elsewhere: CUDA's allocator caches already). A
    buffer grows by a quarter past the largest size asked, so that sizes that vary batch to batch settle. What a
    buffer holds is valid until its name is asked for again: the rounds of one batch use distinct names."""

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self._held: dict[str, torch.Tensor] = {}

    def get(self, name: str, nbytes: int) -> Optional[torch.Tensor]:
        if self.device.type != "cpu":
            return None
        buf = self._held.get(name)
        if buf is None or buf.numel() < nbytes:
            buf = self._held[name] = torch.empty(nbytes + nbytes // 4, dtype=torch.uint8)
        return buf[:nbytes]
