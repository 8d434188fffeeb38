"""The owner's answer to one request round as one byte message per requester, and its split on the other side.

Per requester, in peer order: the sampled in-edge counts of its columns
(int64 bytes), then the rows it flagged, kind after kind (each kind's rows
packed by gpart.runtime.sampling.packed_rows). One all_to_all carries it.
"""

from __future__ import annotations

from typing import Optional

import torch

from gpart.runtime.sampling.packed_rows import RowLayout


def answer_message(packed: list[Optional[torch.Tensor]], per_kind: list[list[int]], counts: torch.Tensor,
                   count_split: list[int]) -> tuple[torch.Tensor, list[int]]:
    """Per requester, in peer order: the counts of its columns (int64 bytes), then the rows it flagged, kind after
    kind (`packed[kind]`: [n, row_bytes] in peer order, `per_kind[peer][kind]` rows each); the byte sizes."""
    blocks = [p for p in packed if p is not None]
    if len(packed) == 1 and blocks and not counts.numel():  # rows of one kind alone, already in peer order: no copy
        return blocks[0].reshape(-1), [n[0] * blocks[0].shape[1] for n in per_kind]
    split = [p.split([n[t] for n in per_kind]) if p is not None else None for t, p in enumerate(packed)]
    pieces, sizes = [], []
    for b, c_counts in enumerate(counts.split(count_split)):
        block = [c_counts.contiguous().view(torch.uint8)] + [p[b].reshape(-1) for p in split if p is not None]
        pieces += block
        sizes.append(sum(int(p.numel()) for p in block))
    return torch.cat(pieces), sizes


def split_answers(got: torch.Tensor, got_counts: list[int], got_sizes: list[int], per_kind: list[list[int]],
                  layouts: list[RowLayout]) -> tuple[torch.Tensor, list[Optional[torch.Tensor]]]:
    """(counts of every requested column, in group order; per kind, the flagged rows' bytes [n, row_bytes], group order)."""
    if len(layouts) == 1 and layouts[0].row_bytes and not any(got_counts):  # rows of one kind alone: the message as it is
        return got[:0].view(torch.int64), [got.reshape(-1, layouts[0].row_bytes)]
    counts: list[torch.Tensor] = []
    rows: list[list[torch.Tensor]] = [[] for _ in layouts]
    for block, c, kinds in zip(got.reshape(-1).split(got_sizes), got_counts, per_kind):
        counts.append(block[: 8 * c])
        at = 8 * c
        for t, (n, layout) in enumerate(zip(kinds, layouts)):
            rows[t].append(block[at:at + n * layout.row_bytes])
            at += n * layout.row_bytes
    kinds = [torch.cat(r).reshape(-1, layout.row_bytes) if layout.row_bytes else None for r, layout in zip(rows, layouts)]
    return torch.cat(counts).view(torch.int64), kinds
