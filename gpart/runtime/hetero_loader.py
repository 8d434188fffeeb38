"""Distributed neighbour sampling on typed graphs with per-edge-type fanouts, batches in PyG's HeteroData convention.

    loader = gr.DistNeighborLoader(part, {"paper": train_ids},
                                   fanouts={("paper", "cites", "paper"): [15, 10],
                                            ("word", "in", "paper"): [10, 5]}, batch_size=256)
    for batch in loader:            # a HeteroBatch (or a HeteroData with pyg=True)
        batch.x["paper"], batch.edge_index[("word", "in", "paper")], batch.batch_size

The hops run on the erased graph with DistNeighborLoader's exchanges (the
same collectives, the same bounded waits); only the serving side differs:
an owner samples, for each requested column of node type d and each edge
type (s, r, d) with a fanout, up to `fanouts[(s, r, d)][hop]` of that
column's type-r in-edges, which are one contiguous slice of its CSC column
(SPEC.md 8.2). Edge types without a fanout are not sampled. The erased
batch is then split by type: per node type the typed ids (seeds first), per
edge type the edge_index in per-type positions and the typed edge ids.
Typed node data rows and the seeds' labels travel inside the sampling
answers (fuse=True: gpart.runtime.fused with a TypedRows source, one row
layout per node type); fuse=False gathers them per node type and array
after sampling. The batches are the same either way.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

import torch

from gpart.collectives.agreement import agree_or_raise
from gpart.collectives.all_to_all import exchange_counts
from gpart.runtime.fused import fused_sample
from gpart.runtime.loader import Batch, DistNeighborLoader
from gpart.runtime.carried_rows import TypedRows
from gpart.runtime.sampling import sample_segments

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
    type, per hop.
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
        data[self.input_type].batch_size = self.batch_size
        if self.y is not None:
            data[self.input_type].y = self.y
        for etype, ei in self.edge_index.items():
            data[etype].edge_index = ei
            data[etype].e_id = self.e_id[etype]
            data[etype].num_sampled_edges = self.num_sampled_edges[etype]
        return data


class HeteroNeighborLoader(DistNeighborLoader, loads_typed=True):
    """DistNeighborLoader for a HeteroPartition (DistNeighborLoader(part, ...) builds one for a typed part).

    seeds: {ntype: typed ids} (one seed type, as PyG's NeighborLoader);
    fanouts: {(s, r, d): [f_1, ..., f_H]} (-1: all; every list H long);
    node_data: array names loaded as `x` (the first) and `node_data` for every
    type that has them; labels: the seed type's array for `y`; pyg: yield
    HeteroData instead of HeteroBatch; fuse: typed rows and labels in the sampling
    answers (False: a typed gather per node type and array after sampling). The rest
    as DistNeighborLoader.
    """

    def __init__(self, part: Any, seeds: Any, fanouts: Any = None, batch_size: int = 1024, shuffle: bool = True,
                 seed: int = 0, node_data: Union[str, Sequence[str], None] = ("feat",), labels: Optional[str] = "label",
                 replace: bool = False, drop_last: bool = False, timeout_s: Optional[float] = None, pyg: bool = False,
                 fuse: bool = True):
        self.part = part
        self.batch_size, self.shuffle, self.seed = int(batch_size), bool(shuffle), int(seed)
        self.typed_names = [node_data] if isinstance(node_data, str) else list(node_data or [])
        self.label_name, self.replace, self.drop_last, self.pyg = labels, bool(replace), bool(drop_last), bool(pyg)
        # The erased hops below run with the base loader's code; they pass the hop index to serve.
        self.node_data_names, self.labels = [], None
        self._init_run(part, timeout_s, fuse)
        problem = self._parse_fanouts(fanouts)
        self.seeds, seed_problem = self._typed_seeds(seeds)
        problem = problem or seed_problem or self._check_world()
        # typed rows by node type (a layout each); the layouts size the fused answers, so every rank must agree on them
        self.row_source = TypedRows(part, self.typed_names, labels, self.input_type) if not seed_problem else None
        layouts = self.row_source.describe() if self.row_source is not None else ""
        config = (f"typed fanouts={sorted(self.typed_fanouts.items())} input_type={self.input_type} replace={self.replace} "
                  f"node_data={self.typed_names} labels={labels} fuse={self.fuse} rows={layouts} manifest={part.digest}")
        agree_or_raise(problem, config, "the DistNeighborLoader settings", self.timeout_s, path=part.directory)
        counts = exchange_counts([self.seeds.numel()] * self.world_size, timeout_s=self.timeout_s)
        self.num_batches = max(self._batches_for(c) for c in counts)
        self._relabel = None

    # -- set-up

    def _parse_fanouts(self, fanouts: Any) -> Optional[str]:
        self.typed_fanouts: dict[int, list[int]] = {}
        self.fanouts = [0]
        if not isinstance(fanouts, dict) or not fanouts:
            return "fanouts of a typed graph are a dict {(src, relation, dst): [fanout per hop]}"
        lengths = set()
        for etype, values in fanouts.items():
            if not isinstance(etype, (tuple, list)) or len(etype) != 3:
                return f"edge type {etype!r} is not a (src, relation, dst) triplet"
            key = tuple(str(x) for x in etype)
            if key not in self.part.edge_types:
                return f"unknown edge type {key} (edge types: {', '.join(':'.join(e) for e in self.part.edge_types)})"
            values = [int(v) for v in values]
            if not values or any(v == 0 or v < -1 for v in values):
                return f"fanouts of {key} must be positive integers or -1, got {values}"
            self.typed_fanouts[self.part.edge_types.index(key)] = values
            lengths.add(len(values))
        if len(lengths) != 1:
            return f"every edge type needs the same number of hops, got lists of lengths {sorted(lengths)}"
        self.fanouts = list(range(lengths.pop()))  # hop indices: the base's _sample hands them to serve
        return None

    def _typed_seeds(self, seeds: Any) -> tuple[torch.Tensor, Optional[str]]:
        none = torch.zeros(0, dtype=torch.int64, device=self.device)
        self.input_type = ""
        if not isinstance(seeds, dict) or len(seeds) != 1:
            return none, "seeds of a typed graph are {node type: typed ids} with one node type"
        (ntype, ids), = seeds.items()
        self.input_type = str(ntype)
        if ntype not in self.part.node_types:
            return none, f"unknown seed node type {ntype!r} (node types: {', '.join(self.part.node_types)})"
        ids = torch.as_tensor(ids)
        if ids.dtype == torch.bool or ids.dtype.is_floating_point or ids.dtype.is_complex:
            return none, f"seeds must be integer typed ids, got dtype {ids.dtype}"
        ids = ids.reshape(-1).to(device=self.device, dtype=torch.int64)
        n = self.part.num_nodes_of(ntype)
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
            return none, f"seeds hold ids outside 0..{n - 1} of node type {ntype!r}"
        wanted = self.typed_names + ([self.label_name] if self.label_name else [])
        missing = [name for name in wanted if not any(k[1] == name for k in self.part.node_data)]
        if missing:
            return none, f"no typed node data named {', '.join(map(repr, missing))} loaded"
        if self.label_name is not None and (ntype, self.label_name) not in self.part.node_data:
            return none, f"no labels {self.label_name!r} of the seed node type {ntype!r} loaded"
        return ids + self.part.node_offsets[self.part.node_types.index(ntype)], None

    def _check_world(self) -> Optional[str]:
        if self.world_size > 1 and (self.world_size != self.part.num_parts or self.rank != self.part.rank):
            return f"rank {self.rank} of {self.world_size} loaded partition {self.part.rank} of {self.part.num_parts}: one rank per partition"
        if self.world_size == 1 and self.part.num_parts > 1:
            return f"has {self.part.num_parts} partitions: initialise torch.distributed with one rank per partition"
        return None

    # -- sampling

    def _tables(self) -> tuple[torch.Tensor, torch.Tensor, list[list[int]]]:
        """[T, K] sampled edge types per destination node type (-1 pads; type order), [R, H] fanouts and,
        per hop, the distinct fanouts of the sampled edge types (known here, so serving needs no unique())."""
        if getattr(self, "_etypes_of", None) is None:
            part = self.part
            by_dst = [[r for r in sorted(self.typed_fanouts) if part.edge_types[r][2] == ntype] for ntype in part.node_types]
            table = torch.full((len(by_dst), max(1, max(map(len, by_dst)))), -1, dtype=torch.int64)
            for t, rs in enumerate(by_dst):
                table[t, :len(rs)] = torch.tensor(rs, dtype=torch.int64)
            fan = torch.zeros((len(part.edge_types), len(self.fanouts)), dtype=torch.int64)
            for r, values in self.typed_fanouts.items():
                fan[r] = torch.tensor(values, dtype=torch.int64)
            self._hop_fanouts = [sorted({v[h] for v in self.typed_fanouts.values()}) for h in range(len(self.fanouts))]
            self._etypes_of, self._fanout_of = table.to(self.device), fan.to(self.device)
            # one flat [R * num_owned] table each: one index_select per lookup instead of 2-D advanced indexing
            self._flat_start, self._flat_deg = part.type_start.reshape(-1), part.type_deg.reshape(-1)
        return self._etypes_of, self._fanout_of, self._hop_fanouts

    def serve(self, cols: torch.Tensor, hop: int, gen: torch.Generator):
        """Sample owned columns `cols` per edge type: (counts, erased source ids, erased edge ids), grouped by column.

        Every (column, sampled edge type of its node type) pair is one segment, its type-r slice of the
        column; pairs are listed column by column, types in type order, and sampled with one kernel call
        per distinct fanout of the hop, so the edges come out grouped by column without a sort."""
        part = self.part
        etypes_of, fanout_of, hop_fanouts = self._tables()
        cols = cols.to(torch.int64)
        width = etypes_of.shape[1]
        cand = torch.index_select(etypes_of, 0, torch.index_select(part.local_ntype, 0, cols)).reshape(-1)
        keep = torch.nonzero(cand >= 0).reshape(-1)
        req = keep if width == 1 else torch.div(keep, width, rounding_mode="floor")
        etype = torch.index_select(cand, 0, keep)
        flat = etype * part.num_owned + torch.index_select(cols, 0, req)
        start, deg = torch.index_select(self._flat_start, 0, flat), torch.index_select(self._flat_deg, 0, flat)
        values = hop_fanouts[hop]
        if len(values) == 1:
            picks = sample_segments(start, deg, values[0], self.replace, gen)
            pair_counts, positions = picks.counts, picks.positions
        else:
            pair_counts, positions = self._mixed(start, deg, torch.index_select(fanout_of[:, hop], 0, etype), values, gen)
        counts = torch.zeros(cols.numel(), dtype=torch.int64, device=cols.device).index_add_(0, req, pair_counts)
        src = torch.index_select(part.indices, 0, positions)
        if part.num_parts > 1:
            src = torch.index_select(part.node_ids, 0, src)
        return counts, src, torch.index_select(part.edge_ids, 0, positions)

    def _mixed(self, start, deg, fan, values, gen) -> tuple[torch.Tensor, torch.Tensor]:
        """Segments with different fanouts: one call per fanout, positions put back in segment order."""
        results = []
        pair_counts = torch.zeros_like(deg)
        for f in values:
            sub = torch.nonzero(fan == f).reshape(-1)
            picks = sample_segments(torch.index_select(start, 0, sub), torch.index_select(deg, 0, sub), int(f), self.replace, gen)
            pair_counts[sub] = picks.counts
            results.append((sub, picks))
        offsets = torch.cumsum(pair_counts, 0) - pair_counts
        positions = torch.empty(int(pair_counts.sum()), dtype=torch.int64, device=deg.device)
        for sub, picks in results:
            total = picks.positions.numel()
            first = torch.cumsum(picks.counts, 0) - picks.counts
            dest = torch.repeat_interleave(torch.index_select(offsets, 0, sub) - first, picks.counts, output_size=total)
            positions.index_copy_(0, dest + torch.arange(total, device=deg.device), picks.positions)
        return pair_counts, positions

    def __iter__(self):
        for batch in super().__iter__():
            yield batch.to_pyg() if self.pyg else batch

    def _sample(self, seeds: torch.Tensor, gen: torch.Generator) -> HeteroBatch:
        if self.fuse:  # typed rows and labels inside the sampling answers (gpart.runtime.fused)
            sampled = fused_sample(self, self._relabel, seeds, gen)
            typed = self._split(Batch(n_id=sampled.n_id, batch_size=int(seeds.numel()), edge_index=sampled.edge_index,
                                      e_id=sampled.e_id, num_sampled_nodes=sampled.num_nodes, num_sampled_edges=sampled.num_edges))
            for (ntype, name), rows in sampled.node_data.items():  # keys in type order, then name order: as below
                typed.node_data.setdefault(ntype, {})[name] = rows
            typed.y = sampled.y
        else:
            typed = self._gathered(self._split(super()._sample(seeds, gen)))
        for ntype, arrays in typed.node_data.items():
            if self.typed_names and self.typed_names[0] in arrays:
                typed.x[ntype] = arrays[self.typed_names[0]]
        return typed

    def _gathered(self, typed: HeteroBatch) -> HeteroBatch:
        """`typed` with its rows and labels gathered after sampling (fuse off): a typed gather per node type and array."""
        part, wait = self.part, self.timeout_s
        for ntype in part.node_types:
            for name in self.typed_names:
                if (ntype, name) in part.node_data:  # the same keys on every rank: the same collectives
                    typed.node_data.setdefault(ntype, {})[name] = self._timed(part.gather, (ntype, name), typed.n_id[ntype], timeout_s=wait)
        if self.label_name is not None:
            seed_ids = typed.n_id[self.input_type][: typed.batch_size]
            typed.y = self._timed(part.gather, (self.input_type, self.label_name), seed_ids, timeout_s=wait)
        return typed

    def _split(self, b: Batch) -> HeteroBatch:
        """The erased batch split by node and edge type (typed ids, per-type positions, per-hop counts).

        A counting sort by type (no comparison sort, no pass per type), batch order kept within a type."""
        part = self.part
        node_types, keys = part.node_types, part.edge_types
        nodes = _by_type(b.n_id, part.node_offsets, b.num_sampled_nodes)
        edges = _by_type(b.e_id, part.edge_offsets, b.num_sampled_edges)
        ei = torch.index_select(nodes.within, 0, b.edge_index.reshape(-1)).reshape(2, -1)  # positions within the node's type
        ei = torch.empty_like(ei).index_copy_(1, edges.dest, ei)  # columns grouped by edge type
        sampled, bounds = sorted(self.typed_fanouts), edges.bounds
        return HeteroBatch(self.input_type, b.batch_size, dict(zip(node_types, nodes.split())),
                           {keys[r]: ei[:, bounds[r]:bounds[r + 1]] for r in sampled},
                           {keys[r]: edges.typed[bounds[r]:bounds[r + 1]] for r in sampled},
                           dict(zip(node_types, nodes.per_hop)), {keys[r]: edges.per_hop[r] for r in sampled})


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

    def split(self) -> list[torch.Tensor]:
        return [self.typed[a:b] for a, b in zip(self.bounds[:-1], self.bounds[1:])]


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
