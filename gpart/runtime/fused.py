"""Sampling across ranks with node data carried in the sampling answers.

The loader's plain path samples every hop (per hop: counts and column ids
out, then counts and sampled edges back: four all_to_alls) and afterwards
gathers the rows of the whole node set and the seeds' labels through
LoadedPartition.gather (three all_to_alls each). Here:

- hop h's requested nodes are exactly the nodes hop h-1 added (the seeds for
  hop 0), and each request already goes to the node's owner. A request
  carries one more bit: whether the requester needs the node's rows (it
  does not when it owns the node or holds it as a halo node with data). The
  owner answers each flagged request with the node's rows (features; for
  hop 0 also labels, which make `y`) after the sampled counts, in the same
  all_to_all: the requester knows how many rows each owner sends, since it
  flagged them;
- the last hop's added nodes are never requested, so their rows come
  through one distributed gather (which also reads owned and halo rows
  locally). Sending the rows with the last hop's edges instead would save
  that round trip but ship a row per sampled edge, including the rows the
  requester holds and repeated sources: measured slower over gloo
  (benchmarks/bench_sampler.py), so it is not done.

Per batch of H hops with node data and labels: 4H + 3 collectives, against
4H + 3 + 3 unfused, and no row travels that the plain path would not send.
Every rank makes the same calls in the same order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

import torch

from gpart.runtime import dist as _dist
from gpart.runtime.rowpack import RowLayout
from gpart.runtime.sampling import Relabeller, sample_columns


@dataclass
class Sampled:
    n_id: torch.Tensor
    edge_index: torch.Tensor
    e_id: torch.Tensor
    num_nodes: list[int]
    num_edges: list[int]
    node_data: dict[str, torch.Tensor]
    y: Optional[torch.Tensor]


def fused_sample(loader: Any, relabel: Relabeller, seeds: torch.Tensor, gen: torch.Generator) -> Sampled:
    """One batch of `loader` (a DistNeighborLoader with fuse on) for this rank's `seeds`."""
    relabel.start(seeds)
    n_ids, srcs, dsts, eids = [seeds], [], [], []
    rows: dict[str, list[torch.Tensor]] = {name: [] for name in loader.fused_names}  # per n_id segment
    frontier, first = seeds, 0
    num_nodes, num_edges = [int(seeds.numel())], []
    for hop, fanout in enumerate(loader.fanouts):
        names = list(loader.node_data_names)
        if hop == 0 and loader.labels is not None and loader.labels not in names:
            names.append(loader.labels)  # labels: of the seeds only
        answer = _exchange_hop(loader, frontier, fanout, gen, names)
        dst = torch.repeat_interleave(answer.order + first, answer.counts, output_size=int(answer.src.numel()))
        pos, added = relabel.add_unique(answer.src, final=hop == len(loader.fanouts) - 1)
        for name, got in answer.node_rows.items():
            rows[name].append(got)
        first += int(frontier.numel())
        srcs.append(pos), dsts.append(dst), eids.append(answer.eid), n_ids.append(added)
        num_nodes.append(int(added.numel())), num_edges.append(int(answer.src.numel()))
        frontier = added
    relabel.reset()
    node_data = {}
    for name in loader.node_data_names:
        rows[name].append(_gather(loader, name, frontier))
        node_data[name] = torch.cat(rows[name])
    edge_index = torch.empty((2, sum(num_edges)), dtype=torch.int64, device=loader.device)
    torch.cat(srcs, out=edge_index[0])
    torch.cat(dsts, out=edge_index[1])
    y = rows[loader.labels][0] if loader.labels is not None else None
    return Sampled(torch.cat(n_ids), edge_index, torch.cat(eids), num_nodes, num_edges, node_data, y)


@dataclass
class _Answer:
    counts: torch.Tensor  # sampled in-edges per requested node, in order frontier[order]
    src: torch.Tensor
    eid: torch.Tensor
    order: torch.Tensor
    node_rows: dict[str, torch.Tensor]  # rows of the requested nodes, in frontier order


def _exchange_hop(loader: Any, frontier: torch.Tensor, fanout: int, gen: torch.Generator, names: list[str]) -> _Answer:
    part, world_size, wait = loader.part, loader.world_size, loader.timeout_s
    owner, cols = part.book.owner_and_local(frontier)
    held = part.local_rows(frontier) if names else None  # -1: the owner must send the rows
    send_cols, send_counts, order = _dist.group_by_owner(cols, owner, world_size)
    need = (torch.index_select(held, 0, order) < 0) if names else torch.zeros_like(send_cols, dtype=torch.bool)
    send_counts = send_counts.tolist()
    start = time.perf_counter()
    recv_counts = _dist.exchange_counts(send_counts, timeout_s=wait)
    flagged = _dist.all_to_all_rows(send_cols * 2 + need, send_counts, recv_counts, timeout_s=wait)
    spent = time.perf_counter() - start
    cols, wanted = torch.div(flagged, 2, rounding_mode="floor"), torch.remainder(flagged, 2).bool()
    picks = sample_columns(part.indptr, cols, fanout, loader.replace, gen)
    src = torch.index_select(part.node_ids, 0, torch.index_select(part.indices, 0, picks.positions))
    eid = torch.index_select(part.edge_ids, 0, picks.positions)
    layout = RowLayout.of([_rows(loader, name, cols[:0]) for name in names])
    message, sizes = _answer_message(picks.counts, cols, wanted, recv_counts, layout, loader, names)
    got_sizes = [8 * c + layout.row_bytes * n for c, n in zip(send_counts, _per_rank(need, send_counts))]
    start = time.perf_counter()
    got = _dist.all_to_all_rows(message, sizes, got_sizes, timeout_s=wait)
    counts, row_bytes = _split_answers(got, send_counts, got_sizes)
    answer_rows = [int(c.sum()) for c in picks.counts.split(recv_counts)]
    got_rows = [int(c.sum()) for c in counts.split(send_counts)]
    edges = _dist.all_to_all_rows(torch.stack([src, eid], 1), answer_rows, got_rows, timeout_s=wait)
    loader.stats["collective_s"] += spent + time.perf_counter() - start
    loader.stats["collectives"] += 4
    node_rows = _frontier_rows(loader, names, layout, row_bytes, held, order, need, frontier.numel())
    return _Answer(counts, edges[:, 0], edges[:, 1], order, node_rows)


def _answer_message(counts, cols, wanted, recv_counts, layout, loader, names) -> tuple[torch.Tensor, list[int]]:
    """Per requester, in rank order: the counts of its columns (int64 bytes), then the rows it flagged; the byte sizes."""
    if names:
        rows = layout.pack([_rows(loader, name, cols[wanted]) for name in names])
    else:
        rows = torch.zeros((0, 0), dtype=torch.uint8, device=counts.device)
    pieces, sizes = [], []
    for c_counts, c_rows in zip(counts.split(recv_counts), rows.split(_per_rank(wanted, recv_counts))):
        pieces += [c_counts.contiguous().view(torch.uint8), c_rows.reshape(-1)]
        sizes.append(int(pieces[-2].numel() + pieces[-1].numel()))
    return torch.cat(pieces), sizes


def _per_rank(mask: torch.Tensor, counts: list[int]) -> list[int]:
    return [int(m.sum()) for m in mask.split(counts)]


def _split_answers(got: torch.Tensor, send_counts: list[int], got_sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(counts of every requested column, in group order; the flagged rows' bytes, in group order)."""
    counts, rows = [], []
    for block, c in zip(got.reshape(-1).split(got_sizes), send_counts):
        counts.append(block[: 8 * c])
        rows.append(block[8 * c:])
    return torch.cat(counts).view(torch.int64), torch.cat(rows)


def _frontier_rows(loader, names, layout, row_bytes, held, order, need, count) -> dict[str, torch.Tensor]:
    """Rows of every frontier node, in frontier order: held ones read here, the others from the answers."""
    if not names:
        return {}
    received = layout.unpack(row_bytes.reshape(-1, layout.row_bytes))
    remote = torch.index_select(order, 0, torch.nonzero(need).reshape(-1))  # frontier positions of flagged requests
    local = torch.nonzero(held >= 0).reshape(-1)
    out = {}
    for name, got in zip(names, received):
        table = loader.part.node_data[name]
        rows = torch.empty((count, *table.shape[1:]), dtype=table.dtype, device=loader.device)
        rows.index_copy_(0, remote, got)
        rows.index_copy_(0, local, _rows(loader, name, torch.index_select(held, 0, local)))
        out[name] = rows
    return out


def _rows(loader: Any, name: str, local: torch.Tensor) -> torch.Tensor:
    """Rows `local` (owned first, then halo) of this partition's node data `name`, on the loader's device."""
    table = loader.part.node_data[name]
    return torch.index_select(table, 0, local.to(table.device)).to(loader.device)


def _gather(loader: Any, name: str, ids: torch.Tensor) -> torch.Tensor:
    start = time.perf_counter()
    try:
        return loader.part.gather(name, ids, timeout_s=loader.timeout_s)
    finally:
        loader.stats["collective_s"] += time.perf_counter() - start
        loader.stats["collectives"] += 3
