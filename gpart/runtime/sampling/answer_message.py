"""The owner's answer to one request round as one byte message per requester, and its split on the other side.

Per requester, in peer order: the sampled in-edge counts of its columns
(int64 bytes), then the rows it flagged, kind after kind (each kind's rows
packed by gpart.runtime.sampling.packed_rows), then, when the round's edges
travel with it, an edge section of a fixed number of slots: the sampled
edges (source, edge id; int32 pairs when every id fits, else int64) from
its start, the rest of the slots unused. The requester sizes the section
from what it asked (slots = the hop's most edges per draw x its draws), so
one all_to_all carries counts, rows and edges: no second round sized by the
counts. The unused slots travel as they are (not zeroed: nobody reads them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from gpart.runtime.sampling.packed_rows import RowLayout


@dataclass(frozen=True)
class EdgeSection:
    """The edge section of every requester's answer: `slots[p]` edges of `dtype` pairs for peer p."""

    slots: list[int]
    dtype: torch.dtype

    @property
    def edge_bytes(self) -> int:
        return 2 * torch.empty(0, dtype=self.dtype).element_size()


def answer_message(packed: list[Optional[torch.Tensor]], per_kind: list[list[int]], counts: torch.Tensor,
                   count_split: list[int], edges: Optional[torch.Tensor] = None, edge_split: Optional[list[int]] = None,
                   section: Optional[EdgeSection] = None, buffer: Optional[Callable[[int], Optional[torch.Tensor]]] = None
                   ) -> tuple[torch.Tensor, list[int]]:
    """Per requester, in peer order: the counts of its columns (int64 bytes), then the rows it flagged, kind after
    kind (`packed[kind]`: [n, row_bytes] in peer order, `per_kind[peer][kind]` rows each), then (with `section`) its
    `edge_split[peer]` rows of `edges` ([E, 2] of section.dtype) in section.slots[peer] slots; the byte sizes. The
    message is written into `buffer(nbytes)` where that gives a (reused) byte buffer."""
    blocks = [p for p in packed if p is not None]
    if len(packed) == 1 and blocks and not counts.numel() and section is None:  # rows of one kind alone: no copy
        return blocks[0].reshape(-1), [n[0] * blocks[0].shape[1] for n in per_kind]
    split = [p.split([n[t] for n in per_kind]) if p is not None else None for t, p in enumerate(packed)]
    edge_blocks = edges.contiguous().view(torch.uint8).reshape(-1).split(
        [e * section.edge_bytes for e in edge_split]) if section is not None else None
    pieces, sizes = [], []
    for b, c_counts in enumerate(counts.split(count_split)):
        block = [c_counts.contiguous().view(torch.uint8)] + [p[b].reshape(-1) for p in split if p is not None]
        if section is not None:
            unused = (section.slots[b] - edge_split[b]) * section.edge_bytes
            if unused < 0:
                raise ValueError(f"a sampler drew {edge_split[b]} edges for {section.slots[b]} slots: more in-edges per "
                                 f"column than the hop's fanout")
            block += [edge_blocks[b], torch.empty(unused, dtype=torch.uint8, device=counts.device)]
        pieces += block
        sizes.append(sum(int(p.numel()) for p in block))
    out = buffer(sum(sizes)) if buffer is not None else None
    return (torch.cat(pieces) if out is None else torch.cat(pieces, out=out)), sizes


def answer_sizes(got_counts: list[int], per_kind: list[list[int]], layouts: list[RowLayout],
                 section: Optional[EdgeSection] = None) -> list[int]:
    """The byte size of each peer's answer: `got_counts[p]` counts, the flagged rows `per_kind[p]`, the edge slots."""
    return [8 * c + sum(n * layout.row_bytes for n, layout in zip(kinds, layouts))
            + (section.slots[p] * section.edge_bytes if section is not None else 0)
            for p, (c, kinds) in enumerate(zip(got_counts, per_kind))]


def split_answers(got: torch.Tensor, got_counts: list[int], got_sizes: list[int], per_kind: list[list[int]],
                  layouts: list[RowLayout], section: Optional[EdgeSection] = None
                  ) -> tuple[torch.Tensor, list[Optional[torch.Tensor]], list[torch.Tensor]]:
    """(counts of every requested column, in group order; per kind, the flagged rows' bytes [n, row_bytes], group order;
    per peer, its edge section's bytes (empty without `section`))."""
    if len(layouts) == 1 and layouts[0].row_bytes and not any(got_counts) and section is None:  # rows of one kind alone
        return torch.empty(0, dtype=torch.int64, device=got.device), [got.reshape(-1, layouts[0].row_bytes)], []
    counts: list[torch.Tensor] = []
    rows: list[list[torch.Tensor]] = [[] for _ in layouts]
    edge_bytes: list[torch.Tensor] = []
    for block, c, kinds in zip(got.reshape(-1).split(got_sizes), got_counts, per_kind):
        counts.append(block[: 8 * c])
        at = 8 * c
        for t, (n, layout) in enumerate(zip(kinds, layouts)):
            rows[t].append(block[at:at + n * layout.row_bytes])
            at += n * layout.row_bytes
        edge_bytes.append(block[at:])
    kinds = [_joined(r).reshape(-1, layout.row_bytes) if layout.row_bytes else None for r, layout in zip(rows, layouts)]
    return torch.cat(counts).view(torch.int64), kinds, edge_bytes


def used_edges(sections: list[torch.Tensor], used: list[int], section: EdgeSection) -> torch.Tensor:
    """The [sum(used), 2] int64 edges (source, edge id) at the start of each peer's section (`used[p]` of them)."""
    width = section.edge_bytes
    edges = torch.cat([s[: n * width] for s, n in zip(sections, used)]) if sections else torch.empty(0, dtype=torch.uint8)
    return edges.view(section.dtype).reshape(-1, 2).to(torch.int64)


def _joined(blocks: list[torch.Tensor]) -> torch.Tensor:
    """The blocks one after the other; the one block that holds anything as it is (rows from one peer: no copy)."""
    full = [b for b in blocks if b.numel()]
    return full[0] if len(full) == 1 else torch.cat(blocks)
