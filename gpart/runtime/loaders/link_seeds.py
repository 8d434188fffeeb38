"""A link loader's seed edges: parsed from what the caller gives (edge ids or node pairs, typed or not), their
endpoints looked up across partitions once, and the edge type holding their --add-reverse copies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from gpart.collectives.all_to_all import all_to_all_rows, exchange_counts
from gpart.collectives.process_group import world
from gpart.runtime.partition.interface import Partition


def reverse_type(part: Partition, edge_type: int) -> Optional[int]:
    """The edge type holding the seed type's reverse copies when the result was made with --add-reverse (None:
    it was not)."""
    reverse = part.manifest.get("reverse")
    if not reverse:
        return None
    if not part.typed:
        return 0
    seed_type = list(part.edge_types[edge_type])
    for entry in reverse.get("edge_types", []):
        if entry.get("reverses") == seed_type:
            return part.edge_types.index(tuple(entry["edge_type"]))
    return None


@dataclass
class SeedEdges:
    """This rank's seed edges as given: endpoints (erased global ids), or edge ids whose endpoints are looked up."""

    edge_type: int
    src: Optional[torch.Tensor]
    dst: Optional[torch.Tensor]
    eids: Optional[torch.Tensor]  # erased edge ids when given as ids
    problem: Optional[str]
    edge_offset: int = 0  # the seed edge type's first erased edge id (0 when homogeneous)
    typed: bool = False

    def count(self) -> int:
        """How many seed edges were given (0 when they were refused)."""
        given = self.eids if self.eids is not None else self.src
        return 0 if given is None else int(given.numel())

    @classmethod
    def parse(cls, part: Partition, given: Any) -> "SeedEdges":
        """The seed edges `given` for `part` (typed or not), or no edges and the problem with them."""
        typed = part.typed
        seeds = cls._parse(part, given, typed)
        seeds.typed = typed
        return seeds

    @classmethod
    def _parse(cls, part: Partition, given: Any, typed: bool) -> "SeedEdges":
        dev = part.device
        none = torch.zeros(0, dtype=torch.int64, device=dev)
        r, edge_offset, src_off, dst_off = 0, 0, 0, 0
        if typed:
            if not (isinstance(given, (tuple, list)) and len(given) == 2 and isinstance(given[0], (tuple, list))):
                return cls(-1, none, none, None, "seed edges of a typed graph are ((src, rel, dst), ids or [2, B] node ids)")
            etype, given = tuple(str(x) for x in given[0]), given[1]
            if etype not in part.edge_types:
                return cls(-1, none, none, None, f"unknown seed edge type {etype}")
            r = part.edge_types.index(etype)
            edge_offset = int(part.edge_offsets[r])
            src_off = int(part.node_offsets[part.node_types.index(etype[0])])
            dst_off = int(part.node_offsets[part.node_types.index(etype[2])])
        ids = torch.as_tensor(given)
        if ids.dtype == torch.bool or ids.dtype.is_floating_point or ids.dtype.is_complex:
            return cls(r, none, none, None, f"seed edges must be integer ids, got dtype {ids.dtype}")
        ids = ids.to(device=dev, dtype=torch.int64)
        if ids.dim() == 2 and ids.shape[0] == 2:
            return cls(r, ids[0] + src_off, ids[1] + dst_off, None, _range_problem(part, ids, r, typed))
        if ids.dim() != 1:
            return cls(r, none, none, None, f"seed edges are 1-D edge ids or [2, B] node ids, got shape {list(ids.shape)}")
        limit = int(part.edge_offsets[r + 1] - part.edge_offsets[r]) if typed else int(part.num_edges)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= limit):
            return cls(r, none, none, None, f"seed edge ids outside 0..{limit - 1}")
        return cls(r, None, None, ids + edge_offset, None, edge_offset)

    def resolve(self, part: Partition, timeout_s: float) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
        """(sources, destinations, edge ids or None): ids held by other partitions are looked up in one
        exchange with every rank (a collective whenever torch.distributed is on, ids given or not)."""
        eids = self.eids if self.eids is not None else torch.zeros(0, dtype=torch.int64, device=part.device)
        ends = _local_endpoints(part, eids)
        _, world_size = world()
        if world_size > 1:
            ends = _remote_endpoints(part, eids, ends, world_size, timeout_s)
        if self.eids is None:
            return self.src, self.dst, None
        return ends[:, 0].contiguous(), ends[:, 1].contiguous(), self.eids - self.edge_offset


def _range_problem(part: Partition, pairs: torch.Tensor, r: int, typed: bool) -> Optional[str]:
    if not pairs.numel():
        return None
    if typed:
        s_t, _, d_t = part.edge_types[r]
        limits = [part.num_nodes_of(s_t), part.num_nodes_of(d_t)]
    else:
        limits = [part.num_nodes, part.num_nodes]
    for row, limit in zip(pairs, limits):
        if int(row.min()) < 0 or int(row.max()) >= limit:
            return f"seed edges hold node ids outside 0..{limit - 1}"
    return None


def _local_endpoints(part: Partition, eids: torch.Tensor) -> torch.Tensor:
    """[n, 2] (source, destination) global ids of the edges this partition stores, -1 rows for the others."""
    out = torch.full((eids.numel(), 2), -1, dtype=torch.int64, device=part.device)
    stored = part.edge_ids
    if not eids.numel() or not stored.numel():
        return out
    sorted_ids, order = torch.sort(stored)
    at = torch.searchsorted(sorted_ids, eids).clamp_(max=sorted_ids.numel() - 1)
    found = torch.nonzero(torch.index_select(sorted_ids, 0, at) == eids).reshape(-1)
    pos = torch.index_select(order, 0, at[found])
    col = torch.searchsorted(part.indptr, pos, right=True) - 1
    src = torch.index_select(part.indices, 0, pos)
    if part.num_parts > 1:
        src = torch.index_select(part.node_ids, 0, src)
    out[found] = torch.stack([src, torch.index_select(part.node_ids, 0, col)], 1)
    return out


def _remote_endpoints(part: Partition, eids: torch.Tensor, ends: torch.Tensor, world_size: int, timeout_s: float) -> torch.Tensor:
    """Ask every rank for the endpoints of the edges not stored here (3 collectives); every edge is stored once."""
    missing = torch.nonzero(ends[:, 0] < 0).reshape(-1)
    ask = torch.index_select(eids, 0, missing)
    counts = exchange_counts([ask.numel()] * world_size, timeout_s=timeout_s)
    asked = all_to_all_rows(ask.repeat(world_size), [ask.numel()] * world_size, counts, timeout_s=timeout_s)
    answers = all_to_all_rows(_local_endpoints(part, asked), counts, [ask.numel()] * world_size, timeout_s=timeout_s)
    ends[missing] = answers.reshape(world_size, ask.numel(), 2).amax(0)
    return ends
