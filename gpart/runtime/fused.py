"""Sampling across ranks with the batch's node data carried in the sampling answers.

The loader's plain path samples every hop (per hop: counts and column ids
out, then counts and sampled edges back: four all_to_alls) and afterwards
gathers the rows of the final node set and the seeds' labels through
LoadedPartition.gather (three all_to_alls each). Here the answers carry the
rows instead (gpart.runtime.rowpack packs them beside the counts and edges):

- hop h's requested nodes are exactly the nodes hop h-1 added (the seeds
  for hop 0), and each goes to its owner, so the owner answers each request
  with the node's rows (features, labels) next to its sampled in-edge count;
  the seeds' labels make `y`;
- the last hop's added nodes are never requested. When the partitions store
  halo node data, every sampled source is owned or a halo node at the rank
  that sampled it, so that rank sends the source's rows with each edge and
  the requester keeps the row of each new node's first edge: no gather at
  all. Without halo data those nodes come through one distributed gather.

Per batch of H hops: 4H collectives (plus 3 per node-data name without halo
data), against 4H + 3 per name + 3 for labels unfused. Every rank makes the
same calls in the same order (the layout of the packed rows is the same on
every rank: same manifest, same settings).
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
        last = hop == len(loader.fanouts) - 1
        node_names = loader.node_data_names + ([loader.labels] if hop == 0 and loader.labels not in loader.node_data_names
                                                and loader.labels is not None else [])  # labels: of the seeds only
        edge_names = loader.node_data_names if last and loader.fuse_last else []
        answer = _exchange_hop(loader, frontier, fanout, gen, node_names, edge_names)
        dst = torch.repeat_interleave(answer.order + first, answer.counts, output_size=int(answer.src.numel()))
        pos, added, firsts = relabel.add_unique(answer.src, final=last, return_first=True)
        for name, got in answer.node_rows.items():  # rows of frontier[order] -> rows of frontier
            rows[name].append(torch.empty_like(got).index_copy_(0, answer.order, got))
        for name, got in answer.edge_rows.items():  # the row of each new node's first edge
            rows[name].append(torch.index_select(got, 0, firsts))
        first += int(frontier.numel())
        srcs.append(pos), dsts.append(dst), eids.append(answer.eid), n_ids.append(added)
        num_nodes.append(int(added.numel())), num_edges.append(int(answer.src.numel()))
        frontier = added
    relabel.reset()
    node_data = {}
    for name in loader.node_data_names:
        if not loader.fuse_last:
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
    node_rows: dict[str, torch.Tensor]  # rows of the requested nodes, in order frontier[order]
    edge_rows: dict[str, torch.Tensor]  # rows of each edge's source (last hop with halo data)


def _exchange_hop(loader: Any, frontier: torch.Tensor, fanout: int, gen: torch.Generator,
                  node_names: list[str], edge_names: list[str]) -> _Answer:
    part, world_size, wait = loader.part, loader.world_size, loader.timeout_s
    owner, cols = part.book.owner_and_local(frontier)
    send_cols, send_counts, order = _dist.group_by_owner(cols, owner, world_size)
    send_counts = send_counts.tolist()
    start = time.perf_counter()
    recv_counts = _dist.exchange_counts(send_counts, timeout_s=wait)
    cols = _dist.all_to_all_rows(send_cols, send_counts, recv_counts, timeout_s=wait)
    spent = time.perf_counter() - start
    picks = sample_columns(part.indptr, cols, fanout, loader.replace, gen)
    local_src = torch.index_select(part.indices, 0, picks.positions)
    src = torch.index_select(part.node_ids, 0, local_src)
    eid = torch.index_select(part.edge_ids, 0, picks.positions)
    node_layout, node_parts = _layout([picks.counts] + [_rows(loader, name, cols) for name in node_names])
    edge_layout, edge_parts = _layout([src, eid] + [_rows(loader, name, local_src) for name in edge_names])
    start = time.perf_counter()
    got = node_layout.unpack(_dist.all_to_all_rows(node_layout.pack(node_parts), recv_counts, send_counts, timeout_s=wait))
    answer_rows = [int(c.sum()) for c in picks.counts.split(recv_counts)]
    got_rows = [int(c.sum()) for c in got[0].split(send_counts)]
    edges = edge_layout.unpack(_dist.all_to_all_rows(edge_layout.pack(edge_parts), answer_rows, got_rows, timeout_s=wait))
    loader.stats["collective_s"] += spent + time.perf_counter() - start
    loader.stats["collectives"] += 4
    return _Answer(got[0], edges[0], edges[1], order, dict(zip(node_names, got[1:])), dict(zip(edge_names, edges[2:])))


def _layout(parts: list[torch.Tensor]) -> tuple[RowLayout, list[torch.Tensor]]:
    return RowLayout.of(parts), parts


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
