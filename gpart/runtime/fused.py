"""Sampling across ranks with node data carried in the sampling answers.

The loader's plain path samples every hop (per hop: counts and column ids
out, then counts and sampled edges back: four all_to_alls) and afterwards
gathers the rows of the whole node set and the seeds' labels through
the partition's gather (three all_to_alls per array; for a typed partition
per node type and array). Here:

- hop h's requested nodes are exactly the nodes hop h-1 added (the seeds for
  hop 0), and each request already goes to the node's owner. A request
  carries one more bit: whether the requester needs the node's rows (it
  does not when it owns the node or holds it as a halo node with data, or
  when the node's kind carries no arrays). The owner answers each flagged
  request with the node's rows (every requested array; for hop 0 also
  labels, which make `y`) after the sampled counts, in the same all_to_all:
  the requester knows how many rows of each kind each owner sends, since it
  flagged them. Kinds (gpart.runtime.carried_rows: one for a homogeneous
  partition, the node types of a typed one) have their own arrays, so their
  own row layout; an owner's answer holds its rows kind after kind;
- the last hop's added nodes are never requested for sampling, so their
  rows come through one more exchange of flagged requests and rows (three
  all_to_alls for every array and kind together; owned and halo rows are
  read locally). Sending the rows with the last hop's edges instead would
  save that round trip but ship a row per sampled edge, including the rows
  the requester holds and repeated sources: measured slower over gloo
  (benchmarks/bench_sampler.py), so it is not done.

Per batch of H hops with node data and labels: 4H + 3 collectives whatever
the number of arrays and node types, against 4H + 3 per array (and node
type) + 3 unfused, and no row travels that the plain path would not send.
Every rank makes the same calls in the same order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Hashable, Optional

import torch

from gpart.collectives.all_to_all import all_to_all_rows, exchange_counts, group_by_owner
from gpart.runtime.sampling import Relabeller


@dataclass
class Sampled:
    n_id: torch.Tensor
    edge_index: torch.Tensor
    e_id: torch.Tensor
    num_nodes: list[int]
    num_edges: list[int]
    node_data: dict[Hashable, torch.Tensor]  # per key of the row source's data_keys
    y: Optional[torch.Tensor]


def fused_sample(loader: Any, relabel: Relabeller, seeds: torch.Tensor, gen: torch.Generator) -> Sampled:
    """One batch of `loader` (fuse on; its `row_source` says which rows travel) for this rank's `seeds`."""
    source = loader.row_source
    relabel.start(seeds)
    n_ids, srcs, dsts, eids = [seeds], [], [], []
    rows: dict[Hashable, list[torch.Tensor]] = {key: [] for key in source.data_keys + [source.label_key]}  # per n_id segment
    frontier, first = seeds, 0
    num_nodes, num_edges = [int(seeds.numel())], []
    for hop, fanout in enumerate(loader.fanouts):
        answer = _exchange(loader, frontier, source.keys(hop == 0), (fanout, gen))
        dst = torch.repeat_interleave(answer.order + first, answer.counts, output_size=int(answer.src.numel()))
        pos, added = relabel.add_unique(answer.src, final=hop == len(loader.fanouts) - 1)
        for key, got in answer.node_rows.items():
            rows[key].append(got)
        first += int(frontier.numel())
        srcs.append(pos), dsts.append(dst), eids.append(answer.eid), n_ids.append(added)
        num_nodes.append(int(added.numel())), num_edges.append(int(answer.src.numel()))
        frontier = added
    relabel.reset()
    if source.data_keys:  # the last hop's nodes: one exchange of requests and rows for every array
        for key, got in _exchange(loader, frontier, source.keys(False), None).node_rows.items():
            rows[key].append(got)
    edge_index = torch.empty((2, sum(num_edges)), dtype=torch.int64, device=loader.device)
    torch.cat(srcs, out=edge_index[0])
    torch.cat(dsts, out=edge_index[1])
    y = rows[source.label_key][0] if source.label_key is not None else None
    node_data = {key: torch.cat(rows[key]) for key in source.data_keys}
    return Sampled(torch.cat(n_ids), edge_index, torch.cat(eids), num_nodes, num_edges, node_data, y)


@dataclass
class _Answer:
    counts: torch.Tensor  # sampled in-edges per requested node, in order frontier[order]
    src: torch.Tensor
    eid: torch.Tensor
    order: torch.Tensor
    node_rows: dict[Hashable, torch.Tensor]  # per key: rows of the requested nodes of its kind, in frontier order


@dataclass
class _Requests:
    """The requester's side of one exchange: what it sent, in group (owner) order."""

    kind: torch.Tensor  # kind of each frontier node (frontier order)
    held: torch.Tensor  # its row here, -1 where the owner sends it (frontier order)
    order: torch.Tensor  # frontier positions in group order
    need: torch.Tensor  # flagged requests (group order)
    per_kind: list[list[int]]  # [owner][kind]: flagged requests


def _exchange(loader: Any, frontier: torch.Tensor, keys: list[list[Hashable]], sample: Optional[tuple[int, torch.Generator]]) -> _Answer:
    """Requests for `frontier` to the owners; answers: the sampled in-edges (when `sample` = (fanout, generator))
    and the rows of `keys` of the requests flagged. 4 collectives with sampling, 3 for rows alone."""
    part, world_size, wait = loader.part, loader.world_size, loader.timeout_s
    layouts = loader.row_source.layouts(keys)
    widths = [layout.row_bytes for layout in layouts]
    located = _locate(loader, frontier, widths)
    asked = None
    if sample is None:  # rows alone: only the nodes whose rows are not held here are asked for
        kind, held = located
        asked = torch.nonzero(_needs(kind, held, widths)).reshape(-1)
    owner, cols = part.book.owner_and_local(frontier if asked is None else torch.index_select(frontier, 0, asked))
    send_cols, send_counts, order = group_by_owner(cols, owner, world_size)
    order = order if asked is None else torch.index_select(asked, 0, order)
    req = _requests(located, order, send_counts, widths, world_size)
    send_counts = send_counts.tolist()
    start = time.perf_counter()
    recv_counts = exchange_counts(send_counts, timeout_s=wait)
    flagged = all_to_all_rows(send_cols * 2 + req.need, send_counts, recv_counts, timeout_s=wait)
    spent = time.perf_counter() - start
    cols, wanted = torch.div(flagged, 2, rounding_mode="floor"), torch.remainder(flagged, 2).bool()
    src = eid = counts = cols[:0]
    if sample is not None:
        counts, src, eid = loader.serve(cols, *sample)
    count_split = recv_counts if sample is not None else [0] * world_size  # rows alone: no counts ahead of them
    got_counts = send_counts if sample is not None else [0] * world_size
    message, sizes = _answer_message(loader, keys, layouts, counts, count_split, cols, wanted, recv_counts)
    got_sizes = [8 * c + sum(n * layout.row_bytes for n, layout in zip(kinds, layouts)) for c, kinds in zip(got_counts, req.per_kind)]
    start = time.perf_counter()
    got = all_to_all_rows(message, sizes, got_sizes, timeout_s=wait)
    got_counts_t, row_bytes = _split_answers(got, got_counts, got_sizes, req.per_kind, layouts)
    if sample is not None:  # the sampled edges, sized by the counts both sides now know
        answer_rows = [int(c.sum()) for c in counts.split(recv_counts)]
        got_rows = [int(c.sum()) for c in got_counts_t.split(send_counts)]
        edges = all_to_all_rows(torch.stack([src, eid], 1), answer_rows, got_rows, timeout_s=wait)
        src, eid = edges[:, 0], edges[:, 1]
    loader.stats["collective_s"] += spent + time.perf_counter() - start
    loader.stats["collectives"] += 4 if sample is not None else 3
    node_rows = _frontier_rows(loader, keys, layouts, row_bytes, req)
    return _Answer(got_counts_t, src, eid, order, node_rows)


def _locate(loader: Any, frontier: torch.Tensor, widths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(kind, row here or -1) of every frontier node; with nothing to carry, every node counts as held."""
    if any(widths):
        return loader.row_source.locate(frontier)
    return torch.zeros_like(frontier), torch.zeros_like(frontier)


def _needs(kind: torch.Tensor, held: torch.Tensor, widths: list[int]) -> torch.Tensor:
    """Whether the owner must send each node's rows: not held here, of a kind that carries rows."""
    if len(widths) == 1:  # one kind: no per-kind lookup
        return held < 0 if widths[0] else torch.zeros_like(held, dtype=torch.bool)
    return (held < 0) & (torch.index_select(torch.tensor(widths, device=kind.device), 0, kind) > 0)


def _requests(located: tuple[torch.Tensor, torch.Tensor], order: torch.Tensor, send_counts: torch.Tensor, widths: list[int],
              world_size: int) -> _Requests:
    """The requests in group order, those flagged for rows, and how many of each kind go to each owner."""
    kind, held = located
    sent_kind = torch.index_select(kind, 0, order)
    need = _needs(sent_kind, torch.index_select(held, 0, order), widths)
    per_kind = _per_rank_and_kind(need, sent_kind, send_counts, len(widths), world_size)
    return _Requests(kind, held, order, need, per_kind)


def _per_rank_and_kind(mask: torch.Tensor, kind: torch.Tensor, counts: torch.Tensor, num_kinds: int, world_size: int) -> list[list[int]]:
    """[rank][kind]: the masked items of each kind in each rank's block (blocks of `counts` items, in rank order)."""
    if num_kinds == 1:  # one kind (homogeneous): a sum per block
        return [[int(m.sum())] for m in mask.split(counts.tolist())]
    block = torch.repeat_interleave(torch.arange(world_size, device=kind.device), counts.to(kind.device), output_size=kind.numel())
    cell = torch.masked_select(block * num_kinds + kind, mask)
    return torch.bincount(cell, minlength=world_size * num_kinds).reshape(world_size, num_kinds).tolist()


def _answer_message(loader, keys, layouts, counts, count_split, cols, wanted, recv_counts) -> tuple[torch.Tensor, list[int]]:
    """Per requester, in rank order: the counts of its columns (int64 bytes), then the rows it flagged, kind after
    kind (each kind packed with its layout, request order within a kind); the byte sizes."""
    world_size = loader.world_size
    kind, rows = loader.row_source.owned(cols)
    per_kind = _per_rank_and_kind(wanted, kind, torch.tensor(recv_counts, dtype=torch.int64), len(layouts), world_size)
    packed, blocks = [], []
    for t, (kind_keys, layout) in enumerate(zip(keys, layouts)):
        if not layout.row_bytes:
            packed.append([None] * world_size)
            continue
        at = torch.masked_select(rows, wanted if len(layouts) == 1 else wanted & (kind == t))
        blocks.append(layout.pack([_rows(loader, key, at) for key in kind_keys]))
        packed.append(blocks[-1].split([n[t] for n in per_kind]))
    if len(layouts) == 1 and blocks and not counts.numel():  # rows of one kind alone, already in rank order: no copy
        return blocks[0].reshape(-1), [int(p.numel()) for p in packed[0]]
    pieces, sizes = [], []
    for b, c_counts in enumerate(counts.split(count_split)):
        block = [c_counts.contiguous().view(torch.uint8)] + [p[b].reshape(-1) for p in packed if p[b] is not None]
        pieces += block
        sizes.append(sum(int(p.numel()) for p in block))
    return torch.cat(pieces), sizes


def _split_answers(got, got_counts, got_sizes, per_kind, layouts) -> tuple[torch.Tensor, list[torch.Tensor]]:
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


def _frontier_rows(loader, keys, layouts, row_bytes, req: _Requests) -> dict[Hashable, torch.Tensor]:
    """Per key, the rows of the frontier nodes of its kind, in frontier order: held ones read here, the others from the answers."""
    out = {}
    for t, (kind_keys, layout) in enumerate(zip(keys, layouts)):
        if not kind_keys:
            continue
        if len(keys) == 1:  # one kind: positions in the frontier are positions among its kind
            remote = torch.index_select(req.order, 0, torch.nonzero(req.need).reshape(-1))
            local_at = torch.nonzero(req.held >= 0).reshape(-1)
            local_rows, count = torch.index_select(req.held, 0, local_at), int(req.kind.numel())
        else:
            remote, local_at, local_rows, count = _kind_positions(req, t)
        for key, got in zip(kind_keys, layout.unpack(row_bytes[t])):
            table = loader.part.node_data[key]
            rows = torch.empty((count, *table.shape[1:]), dtype=table.dtype, device=loader.device)
            rows.index_copy_(0, remote, got)
            rows.index_copy_(0, local_at, _rows(loader, key, local_rows))
            out[key] = rows
    return out


def _kind_positions(req: _Requests, t: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Among the frontier nodes of kind t: positions of the flagged ones (in the answers' order), positions and rows
    here of the held ones, and their number."""
    mine = req.kind == t
    within = torch.cumsum(mine, 0) - 1  # each node's position among the frontier nodes of its kind
    sent = torch.nonzero(req.need & (torch.index_select(req.kind, 0, req.order) == t)).reshape(-1)
    remote = torch.index_select(within, 0, torch.index_select(req.order, 0, sent))
    local = torch.nonzero(mine & (req.held >= 0)).reshape(-1)
    return remote, torch.index_select(within, 0, local), torch.index_select(req.held, 0, local), int(mine.sum())


def _rows(loader: Any, key: Hashable, local: torch.Tensor) -> torch.Tensor:
    """Rows `local` of this partition's node data `key`, on the loader's device."""
    table = loader.part.node_data[key]
    return torch.index_select(table, 0, local.to(table.device)).to(loader.device)
