"""The typed side of the loader's batches: HeteroBatch (PyG's HeteroData convention) and the split of an
erased batch by node and edge type.

    loader = gr.DistNeighborLoader(part, {"paper": train_ids},
                                   fanouts={("paper", "cites", "paper"): [15, 10],
                                            ("word", "in", "paper"): [10, 5]}, batch_size=256)
    for batch in loader:            # a HeteroBatch (or a HeteroData with pyg=True)
        batch.x["paper"], batch.edge_index[("word", "in", "paper")], batch.batch_size

The sampling protocol (gpart.runtime.sampling.protocol) samples typed graphs on erased ids, as it
does homogeneous ones; the erased batch is then split by type here: per node
type the typed ids (seeds first), per edge type the edge_index in per-type
positions and the typed edge ids, with a counting sort (no comparison sort,
no pass per type). Typed rows arrive from the row fetcher keyed (ntype, name).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Hashable, Optional

import torch

from gpart.runtime.partition.interface import Partition

EdgeType = tuple[str, str, str]


@dataclass
class HeteroBatch:
    """A sampled typed sub-graph in PyG's HeteroData convention, dicts keyed by node / edge type.

    n_id[ntype]: typed ids of the batch's nodes of that type (the seed type's
    first `batch_size` are the seeds); x[ntype]: rows of the first requested
    node array (types that have it); node_data[ntype][name]: every requested
    array; edge_index[etype]: [2, E] positions into n_id[src type] (row 0, the
    sampled in-neighbour) and n_id[dst type] (row 1); e_id[etype]: typed edge
    ids; y: labels of the seeds; num_sampled_nodes / num_sampled_edges: per
    type, per hop; batch[ntype]: with disjoint sampling, the seed of every
    node of n_id[ntype] (its position among the batch's seeds; None when not
    disjoint).
    """

    input_type: str
    batch_size: int
    n_id: dict[str, torch.Tensor]
    edge_index: dict[EdgeType, torch.Tensor]
    e_id: dict[EdgeType, torch.Tensor]
    num_sampled_nodes: dict[str, list[int]]
    num_sampled_edges: dict[EdgeType, list[int]]
    x: dict[str, torch.Tensor] = field(default_factory=dict)
    node_data: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    y: Optional[torch.Tensor] = None
    batch: Optional[dict[str, torch.Tensor]] = None

    @property
    def num_edges(self) -> int:
        return int(sum(e.numel() for e in self.e_id.values()))

    def to_pyg(self) -> Any:
        """This batch as a `torch_geometric.data.HeteroData` (needs PyG, which gpart does not depend on)."""
        try:  # here, not at the top: torch_geometric is optional
            from torch_geometric.data import HeteroData
        except ImportError:
            raise ImportError("HeteroBatch.to_pyg() needs torch_geometric; the HeteroBatch has the same fields") from None
        data = HeteroData()
        for ntype, ids in self.n_id.items():
            data[ntype].n_id = ids
            data[ntype].num_nodes = int(ids.numel())
            data[ntype].num_sampled_nodes = self.num_sampled_nodes[ntype]
            for name, rows in self.node_data.get(ntype, {}).items():
                data[ntype][name] = rows
            if ntype in self.x:
                data[ntype].x = self.x[ntype]
            if self.batch is not None:
                data[ntype].batch = self.batch[ntype]
        data[self.input_type].batch_size = self.batch_size
        if self.y is not None:
            data[self.input_type].y = self.y
        for etype, ei in self.edge_index.items():
            data[etype].edge_index = ei
            data[etype].e_id = self.e_id[etype]
            data[etype].num_sampled_edges = self.num_sampled_edges[etype]
        return data


def typed_batch(b: Any, part: Partition, sampled: list[int], input_type: str, node_data: dict[Hashable, torch.Tensor],
                y: Optional[torch.Tensor], first_name: Optional[str]) -> HeteroBatch:
    """The erased batch `b` (a gpart.runtime.sampling.sampled.Sampled) split by node and edge type; `sampled`: the edge type
    indices with a fanout; `node_data`: rows keyed (ntype, name), in type order then name order."""
    node_types, keys = part.node_types, part.edge_types
    nodes = _by_type(b.n_id, part.node_offsets, b.num_sampled_nodes)
    edges = _by_type(b.e_id, part.edge_offsets, b.num_sampled_edges)
    ei = torch.index_select(nodes.within, 0, b.edge_index.reshape(-1)).reshape(2, -1)  # positions within the node's type
    ei = torch.empty_like(ei).index_copy_(1, edges.dest, ei)  # columns grouped by edge type
    bounds = edges.bounds
    typed = HeteroBatch(input_type, b.batch_size, dict(zip(node_types, nodes.split())),
                        {keys[r]: ei[:, bounds[r]:bounds[r + 1]] for r in sampled},
                        {keys[r]: edges.typed[bounds[r]:bounds[r + 1]] for r in sampled},
                        dict(zip(node_types, nodes.per_hop)), {keys[r]: edges.per_hop[r] for r in sampled}, y=y)
    if b.batch is not None:  # disjoint: each node's seed, in the same per-type order as n_id
        typed.batch = dict(zip(node_types, nodes.split(torch.empty_like(b.batch).index_copy_(0, nodes.dest, b.batch))))
    for (ntype, name), rows in node_data.items():
        typed.node_data.setdefault(ntype, {})[name] = rows
    for ntype, arrays in typed.node_data.items():
        if first_name is not None and first_name in arrays:
            typed.x[ntype] = arrays[first_name]
    return typed


ONE_HOT_LIMIT = 1 << 22  # types x ids up to which the counting sort's [T, n] cumsum is used (32 MiB); a stable sort past it


@dataclass
class _Grouped:
    """Erased ids grouped by type: `typed` (typed ids, type after type, batch order within a type), `bounds`
    (type t is typed[bounds[t]:bounds[t+1]]), `within` (each id's position within its type), `dest` (each
    id's position in `typed`) and `per_hop` ([T][H] counts)."""

    typed: torch.Tensor
    bounds: list[int]
    within: torch.Tensor
    dest: torch.Tensor
    per_hop: list[list[int]]

    def split(self, grouped: Optional[torch.Tensor] = None) -> list[torch.Tensor]:
        """Per type, its slice of `typed` (or of `grouped`, values already in typed's order)."""
        values = self.typed if grouped is None else grouped
        return [values[a:b] for a, b in zip(self.bounds[:-1], self.bounds[1:])]


def _by_type(ids: torch.Tensor, offsets: torch.Tensor, per_hop: list[int]) -> _Grouped:
    """Group erased ids by type with a counting sort: each id's type, its rank within the type and the per-hop
    counts all from one [T, n + 1] running count (a stable sort past ONE_HOT_LIMIT)."""
    dev, n, num_types = ids.device, ids.numel(), offsets.numel() - 1
    ends = torch.tensor([0] + list(itertools.accumulate(per_hop)), device=dev)  # hop h is ids[ends[h]:ends[h+1]]
    if num_types * n <= ONE_HOT_LIMIT:
        kind = (ids.unsqueeze(0) >= offsets[1:-1].unsqueeze(1)).sum(0)  # T-1 comparisons beat a binary search here
        one_hot = kind.unsqueeze(0) == torch.arange(num_types, device=dev).unsqueeze(1)
        running = torch.nn.functional.pad(one_hot, (1, 0)).cumsum(1)  # [T, n + 1]: ids of each type before position i
        table = torch.diff(torch.index_select(running, 1, ends), dim=1)
        within = torch.index_select(running.reshape(-1), 0, kind * (n + 1) + torch.arange(n, device=dev))
        counts = running[:, n]
    else:
        kind = torch.searchsorted(offsets, ids, right=True) - 1
        hop = torch.repeat_interleave(torch.arange(len(per_hop), device=dev), torch.diff(ends), output_size=n)
        table = torch.bincount(kind * len(per_hop) + hop, minlength=num_types * len(per_hop)).reshape(num_types, len(per_hop))
        counts = table.sum(1)
        perm = torch.argsort(kind, stable=True)
        within = torch.empty_like(ids)
        within[perm] = torch.arange(n, device=dev) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts, output_size=n)
    first = torch.cumsum(counts, 0) - counts
    dest = torch.index_select(first, 0, kind) + within
    typed = torch.empty_like(ids).index_copy_(0, dest, ids - torch.index_select(offsets, 0, kind))
    bounds = [0] + torch.cumsum(counts, 0).tolist()
    return _Grouped(typed, bounds, within, dest, table.tolist())
