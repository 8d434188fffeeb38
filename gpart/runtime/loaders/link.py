"""Mini-batches of seed edges for link prediction, with negatives, in PyG's LinkNeighborLoader convention.

    train_edges = gr.edge_split(part, "train_mask")          # this rank's share of the seed edges
    loader = gr.DistLinkNeighborLoader(part, train_edges, fanouts=[15, 10], batch_size=1024,
                                       neg_sampling="binary", neg_ratio=1, exclude_seed_edges=True)
    for batch in loader:
        h = model(batch.x, batch.edge_index)
        score = (h[batch.edge_label_index[0]] * h[batch.edge_label_index[1]]).sum(-1)
        loss = F.binary_cross_entropy_with_logits(score, batch.edge_label)

Built on the node loader (gpart.runtime.loaders.node.NeighborLoader): a batch's
node seeds are the distinct endpoints of its positive edges and of its
negatives, and they go through `NeighborLoader.sample` as one seed set, so
the negatives' neighbourhoods travel in the same hop exchanges as the
positives' (negatives are drawn locally: gpart.runtime.sampling.negatives).
Seed edges are excluded from message passing (exclude_seed_edges=True) by
dropping, after sampling, every sampled edge that joins the endpoints of one
of the batch's positive edges in the same direction and edge type, and, when
the result was partitioned with --add-reverse, in the reverse direction
(the reverse edge type `(d, rev_r, s)` for a relation between two node
types): so parallel copies of a seed pair go too. A node then keeps fewer
than `fanout` in-edges where one was dropped (DGL's exclude after sampling).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence, Union

import torch

from gpart.collectives.agreement import agree_or_raise
from gpart.collectives.all_to_all import all_to_all_rows, exchange_counts
from gpart.collectives.process_group import world
from gpart.runtime.loaders.node import DEFAULT_NODE_DATA, Batch, NeighborLoader, Sampled, epoch_generator, present_defaults
from gpart.runtime.loaders.typed_batch import HeteroBatch
from gpart.runtime.sampling.negatives import MODES, NegativeSampler

EdgeType = tuple[str, str, str]


@dataclass
class _SeedEdgeFields:
    """The seed-edge fields that a LinkBatch and a HeteroLinkBatch share (PyG's LinkNeighborLoader names)."""

    edge_label_index: Optional[torch.Tensor] = None
    edge_label: Optional[torch.Tensor] = None
    src_index: Optional[torch.Tensor] = None
    dst_pos_index: Optional[torch.Tensor] = None
    dst_neg_index: Optional[torch.Tensor] = None
    input_id: Optional[torch.Tensor] = None

    def _put_seed_edges(self, store: Any) -> None:
        """Set the seed-edge fields that are present on a PyG store (Data, or one edge type of HeteroData)."""
        for f in dataclasses.fields(_SeedEdgeFields):
            if getattr(self, f.name) is not None:
                store[f.name] = getattr(self, f.name)


@dataclass
class LinkBatch(_SeedEdgeFields, Batch):
    """A Batch (see there) with the seed edges of PyG's LinkNeighborLoader: `edge_label_index` [2, B'] positions in
    n_id (the positives, then the binary negatives), `edge_label` (1 positive, 0 negative; None without
    negatives), and for triplet negatives `src_index`, `dst_pos_index` [B] and `dst_neg_index` [B, ratio] (squeezed
    to [B] when ratio is 1). `input_id`: the seed edges' ids when they were given as edge ids (else None)."""

    def to_pyg(self) -> Any:
        data = Batch.to_pyg(self)
        self._put_seed_edges(data)
        return data


@dataclass
class HeteroLinkBatch(_SeedEdgeFields, HeteroBatch):
    """A HeteroBatch with the seed edges of `input_edge_type`: the LinkBatch fields, positions into
    n_id[src type] (row 0 / src_index) and n_id[dst type] (row 1 / dst_*_index). `batch_size` counts the seed
    nodes of every type; n_id[t] starts with the seed nodes of type t (num_sampled_nodes[t][0] of them)."""

    input_edge_type: Optional[EdgeType] = None

    def to_pyg(self) -> Any:
        data = HeteroBatch.to_pyg(self)
        self._put_seed_edges(data[self.input_edge_type])
        return data


def DistLinkNeighborLoader(
    part: Any,
    seed_edges: Any,
    fanouts: Any = (15, 10),
    batch_size: int = 1024,
    neg_sampling: Optional[str] = None,
    neg_ratio: float = 1,
    strict_negatives: bool = False,
    exclude_seed_edges: bool = False,
    shuffle: bool = True,
    seed: int = 0,
    node_data: Union[str, Sequence[str], None] = DEFAULT_NODE_DATA,
    replace: bool = False,
    drop_last: bool = False,
    timeout_s: Optional[float] = None,
    pyg: bool = False,
    disjoint: bool = False,
) -> "LinkNeighborLoader":
    """Mini-batches of this rank's seed edges, their endpoints' (and negatives') neighbourhoods sampled across
    all partitions, in PyG's LinkNeighborLoader convention (an iterable loader yielding LinkBatch / HeteroLinkBatch).

    part: the partition this rank trains on (gr.load_partition). seed_edges:
    this rank's seed edges: edge ids of the partitioned graph (1-D, e.g. from
    gr.edge_split) or a [2, B] tensor of (source, destination) global node
    ids; for a typed partition `((src, rel, dst), ids)` with typed edge ids of
    that type or a [2, B] tensor of typed node ids. fanouts: as
    DistNeighborLoader (a dict per edge type when typed). batch_size: seed
    edges per batch ON THIS RANK (one step over W ranks covers up to W x
    batch_size). neg_sampling: None, "binary" (round(neg_ratio x B) random
    pairs, edge_label 0) or "triplet" (neg_ratio random destinations per
    positive source; neg_ratio a positive integer). strict_negatives: no
    negative is an edge of the partitioned graph (destinations then come from
    this partition's nodes; gpart.runtime.sampling.negatives says exactly what
    holds). exclude_seed_edges: drop the batch's seed edges (and their
    --add-reverse copies) from the sampled sub-graph. node_data: names whose
    rows make x / node_data (the default "feat" only when the partition has
    it). shuffle, seed, replace, drop_last, timeout_s, pyg: as
    DistNeighborLoader. disjoint: as PyG's, every endpoint of every positive
    and negative is a seed with its own sub-graph (n_id starts with them, not
    de-duplicated; edge_label_index / the triplet indices point at them) and
    `batch` gives each node's seed edge: the index of the pair (positive or
    negative) it was sampled for, modulo the number of positives (PyG's
    `batch % num_pos`; a triplet's negatives take its positive's index).

    Collectives (every rank makes the same calls, each bounded by timeout_s):
    building the loader (settings checked equal, edge ids held by other
    partitions resolved once, the batch count agreed) and every batch (every
    rank yields len(loader) batches, empty ones when out of seed edges).
    """
    return LinkNeighborLoader(part, seed_edges, fanouts, batch_size, neg_sampling, neg_ratio, strict_negatives,
                              exclude_seed_edges, shuffle, seed, node_data, replace, drop_last, timeout_s, pyg, disjoint)


class LinkNeighborLoader:
    """The loader DistLinkNeighborLoader builds (see there for the arguments): a NeighborLoader (`nodes`) that
    samples the batches' seed nodes, a NegativeSampler and the seed edges' endpoints."""

    def __init__(self, part: Any, seed_edges: Any, fanouts: Any = (15, 10), batch_size: int = 1024,
                 neg_sampling: Optional[str] = None, neg_ratio: float = 1, strict_negatives: bool = False,
                 exclude_seed_edges: bool = False, shuffle: bool = True, seed: int = 0,
                 node_data: Union[str, Sequence[str], None] = DEFAULT_NODE_DATA, replace: bool = False, drop_last: bool = False,
                 timeout_s: Optional[float] = None, pyg: bool = False, disjoint: bool = False):
        self.part, self.typed = part, bool(getattr(part, "is_hetero", False))
        self.batch_size, self.shuffle, self.seed, self.pyg = int(batch_size), bool(shuffle), int(seed), bool(pyg)
        self.drop_last, self.exclude = bool(drop_last), bool(exclude_seed_edges)
        self.mode, self.ratio = neg_sampling, float(neg_ratio)
        wait = float(timeout_s if timeout_s is not None else part.timeout_s)
        seeds = _SeedEdges.parse(part, seed_edges)
        problem = seeds.problem or self._problem()
        self.edge_type = seeds.edge_type
        self.negatives = NegativeSampler(part, max(seeds.edge_type, 0), neg_sampling or "binary", self.ratio,
                                         strict_negatives) if neg_sampling in MODES and problem is None else None
        problem = problem or (self.negatives.problem() if self.negatives else None)
        settings = (f"link etype={seeds.edge_type} neg={neg_sampling} ratio={self.ratio} strict={bool(strict_negatives)} "
                    f"exclude={self.exclude} batch_size={self.batch_size}")
        agree_or_raise(problem, settings, "the DistLinkNeighborLoader settings", wait, path=part.directory)
        self.src, self.dst, self.input_id = seeds.resolve(part, wait)
        names, _ = present_defaults(part, node_data, None)
        none = torch.zeros(0, dtype=torch.int64)
        empty = {self._src_type(): none} if self.typed else none
        self.nodes = NeighborLoader(part, empty, fanouts, 1, False, seed, names, None, replace, False, wait, True, False,
                                    disjoint)
        self.rank = self.nodes.rank
        counts = exchange_counts([self.src.numel()] * self.nodes.world_size, timeout_s=wait)
        self.num_batches = max(self._batches_for(c) for c in counts)
        self.reverse_type = _reverse_type(part, self.edge_type) if self.exclude else None
        self.stats = self.nodes.stats
        self.epoch = 0

    def _problem(self) -> Optional[str]:
        if self.batch_size < 1:
            return f"batch_size must be >= 1, got {self.batch_size}"
        if self.mode is not None and self.mode not in MODES:
            return f"neg_sampling must be None, 'binary' or 'triplet', got {self.mode!r}"
        if self.mode == "triplet" and (self.ratio < 1 or self.ratio != int(self.ratio)):
            return f"triplet negatives need a positive integer neg_ratio, got {self.ratio:g}"
        if self.mode == "binary" and self.ratio < 0:
            return f"neg_ratio must be >= 0, got {self.ratio:g}"
        return None

    def _src_type(self) -> str:
        return self.part.edge_types[self.edge_type][0]

    def _batches_for(self, count: int) -> int:
        return count // self.batch_size if self.drop_last else math.ceil(count / self.batch_size)

    def __len__(self) -> int:
        return self.num_batches

    def set_epoch(self, epoch: int) -> None:
        """Use `epoch` for the next iteration's shuffle, negatives and sampling (iterating advances it by one)."""
        self.epoch = int(epoch)

    def _generator(self, salt: int) -> torch.Generator:
        return epoch_generator(self.seed, self.epoch, self.rank, salt, self.part.device)

    def __iter__(self) -> Iterator[Any]:
        self.nodes.set_epoch(self.epoch)
        order = torch.arange(self.src.numel(), device=self.part.device)
        if self.shuffle and order.numel():
            order = torch.randperm(order.numel(), generator=self._generator(2), device=self.part.device)
        gen = self._generator(3)
        self.epoch += 1
        for i in range(self.num_batches):
            start = time.perf_counter()
            take = order[i * self.batch_size:(i + 1) * self.batch_size]
            batch = self.batch(take, gen)
            self.stats["total_s"] += time.perf_counter() - start
            self.stats["batches"] += 1
            self.stats["seeds"] += int(take.numel())
            yield batch.to_pyg() if self.pyg else batch

    def batch(self, take: torch.Tensor, gen: torch.Generator) -> Union[LinkBatch, HeteroLinkBatch]:
        """The batch of the seed edges at positions `take` of this rank's list: a collective (every rank calls it
        as often)."""
        src, dst = torch.index_select(self.src, 0, take), torch.index_select(self.dst, 0, take)
        if self.mode == "binary":
            neg_src, neg_dst = self.negatives.binary(src.numel(), gen)
            ends = [src, neg_src, dst, neg_dst]
        elif self.mode == "triplet":
            neg_dst = self.negatives.triplet(src, gen)
            ends = [src, dst, neg_dst.reshape(-1)]
        else:
            ends = [src, dst]
        src_side = sum(int(e.numel()) for e in ends[:2 if self.mode == "binary" else 1])  # seeds ahead of the destinations
        if self.nodes.disjoint:  # every endpoint its own seed (PyG): positions are the seeds' order
            seeds, seed_batch = torch.cat(ends), _seed_edge_of(self.mode, src.numel(), ends)
            inverse = torch.arange(seeds.numel(), device=seeds.device)
        else:
            (seeds, inverse), seed_batch = torch.unique(torch.cat(ends), return_inverse=True), None
        sampled = self.nodes.sample(seeds, gen, seed_batch)
        if self.exclude:
            _drop_seed_pairs(sampled, src, dst, self._etype_of, self.edge_type, self.reverse_type, self.part.num_nodes)
        self.stats["sampled_edges"] += sampled.batch.num_edges
        presented = self.nodes.present(sampled)
        s_t, _, d_t = self.part.edge_types[self.edge_type] if self.typed else ("", "", "")
        if self.typed and self.nodes.disjoint:  # source-side seeds first, then the destination side's
            shift = [0, src_side if s_t != d_t else 0]
        elif self.typed:  # positions within each node type: seeds are sorted, so a type's seeds are contiguous
            starts = torch.searchsorted(seeds, self.part.node_offsets)
            shift = [int(starts[self.part.node_types.index(t)]) for t in (s_t, d_t)]
        else:
            shift = [0, 0]
        fields = _link_fields(self.mode, inverse, src.numel(), shift, int(self.ratio))
        fields["input_id"] = None if self.input_id is None else torch.index_select(self.input_id, 0, take)
        if self.typed:
            return HeteroLinkBatch(**_as_dict(presented), input_edge_type=self.part.edge_types[self.edge_type], **fields)
        return LinkBatch(**_as_dict(presented), **fields)

    def _etype_of(self, e_id: torch.Tensor) -> Optional[torch.Tensor]:
        if not self.typed:
            return None
        return torch.searchsorted(self.part.edge_offsets, e_id, right=True) - 1


def _as_dict(batch: Any) -> dict[str, Any]:
    return {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}


def _seed_edge_of(mode: Optional[str], num_pos: int, ends: list[torch.Tensor]) -> torch.Tensor:
    """Disjoint `batch` of each seed (the endpoints `ends` concatenated): its pair's index (positives, then binary
    negatives) modulo `num_pos`, a triplet negative its positive's index."""
    dev = ends[0].device
    if mode == "triplet":
        pos = torch.arange(num_pos, device=dev)
        return torch.cat([pos, pos, torch.repeat_interleave(pos, ends[2].numel() // max(num_pos, 1))])
    pairs = torch.arange(sum(int(e.numel()) for e in ends) // 2, device=dev) % max(num_pos, 1)
    return torch.cat([pairs, pairs])


def _link_fields(mode: Optional[str], inverse: torch.Tensor, num_pos: int, shift: list[int], ratio: int) -> dict:
    """edge_label_index / edge_label (None, binary) or src_index / dst_pos_index / dst_neg_index (triplet), from
    the positions of the concatenated endpoints in the unique seeds."""
    out: dict[str, Any] = {}
    if mode == "triplet":
        src_i, dst_i = inverse[:num_pos] - shift[0], inverse[num_pos:2 * num_pos] - shift[1]
        neg = (inverse[2 * num_pos:] - shift[1]).reshape(num_pos, ratio)
        out.update(src_index=src_i, dst_pos_index=dst_i, dst_neg_index=neg.squeeze(-1) if ratio == 1 else neg)
        out["edge_label_index"] = torch.stack([src_i, dst_i])
        return out
    half = inverse.numel() // 2
    out["edge_label_index"] = torch.stack([inverse[:half] - shift[0], inverse[half:] - shift[1]])
    if mode == "binary":
        label = torch.zeros(half, device=inverse.device)
        label[:num_pos] = 1
        out["edge_label"] = label
    return out


def _drop_seed_pairs(sampled: Sampled, src: torch.Tensor, dst: torch.Tensor, etype_of, edge_type: int,
                     reverse_type: Optional[int], num_nodes: int) -> None:
    """Remove, in place, the sampled edges joining a seed edge's endpoints (src -> dst, of its edge type) and,
    with `reverse_type`, dst -> src of that type; the per-hop edge counts follow."""
    b = sampled.batch
    if b.num_edges == 0 or src.numel() == 0:
        return
    s, d = torch.index_select(b.n_id, 0, b.edge_index[0]), torch.index_select(b.n_id, 0, b.edge_index[1])
    seed_keys = torch.unique(src * num_nodes + dst)
    kinds = etype_of(b.e_id)
    drop = torch.isin(s * num_nodes + d, seed_keys)
    if kinds is not None:
        drop &= kinds == edge_type
    if reverse_type is not None:
        back = torch.isin(d * num_nodes + s, seed_keys)
        drop |= back if kinds is None else back & (kinds == reverse_type)
    keep = torch.nonzero(~drop).reshape(-1)
    hop = torch.repeat_interleave(torch.arange(len(b.num_sampled_edges), device=keep.device),
                                  torch.tensor(b.num_sampled_edges, device=keep.device))
    b.num_sampled_edges = torch.bincount(hop[keep], minlength=len(b.num_sampled_edges)).tolist()
    b.edge_index = torch.index_select(b.edge_index, 1, keep)
    b.e_id = torch.index_select(b.e_id, 0, keep)


def _reverse_type(part: Any, edge_type: int) -> Optional[int]:
    """The edge type holding the seed type's reverse copies when the result was made with --add-reverse (None:
    it was not)."""
    reverse = part.manifest.get("reverse")
    if not reverse:
        return None
    if not getattr(part, "is_hetero", False):
        return 0
    seed_type = list(part.edge_types[edge_type])
    for entry in reverse.get("edge_types", []):
        if entry.get("reverses") == seed_type:
            return part.edge_types.index(tuple(entry["edge_type"]))
    return None


@dataclass
class _SeedEdges:
    """This rank's seed edges as given: endpoints (erased global ids), or edge ids whose endpoints are looked up."""

    edge_type: int
    src: Optional[torch.Tensor]
    dst: Optional[torch.Tensor]
    eids: Optional[torch.Tensor]  # erased edge ids when given as ids
    problem: Optional[str]

    @classmethod
    def parse(cls, part: Any, given: Any) -> "_SeedEdges":
        dev, typed = part.device, bool(getattr(part, "is_hetero", False))
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
        return cls(r, None, None, ids + edge_offset, None)

    def resolve(self, part: Any, timeout_s: float) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
        """(sources, destinations, edge ids or None): ids held by other partitions are looked up in one
        exchange with every rank (a collective whenever torch.distributed is on, ids given or not)."""
        eids = self.eids if self.eids is not None else torch.zeros(0, dtype=torch.int64, device=part.device)
        ends = _local_endpoints(part, eids)
        _, world_size = world()
        if world_size > 1:
            ends = _remote_endpoints(part, eids, ends, world_size, timeout_s)
        if self.eids is None:
            return self.src, self.dst, None
        typed_ids = self.eids - int(part.edge_offsets[self.edge_type]) if getattr(part, "is_hetero", False) else self.eids
        return ends[:, 0].contiguous(), ends[:, 1].contiguous(), typed_ids


def _range_problem(part: Any, pairs: torch.Tensor, r: int, typed: bool) -> Optional[str]:
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


def _local_endpoints(part: Any, eids: torch.Tensor) -> torch.Tensor:
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


def _remote_endpoints(part: Any, eids: torch.Tensor, ends: torch.Tensor, world_size: int, timeout_s: float) -> torch.Tensor:
    """Ask every rank for the endpoints of the edges not stored here (3 collectives); every edge is stored once."""
    missing = torch.nonzero(ends[:, 0] < 0).reshape(-1)
    ask = torch.index_select(eids, 0, missing)
    counts = exchange_counts([ask.numel()] * world_size, timeout_s=timeout_s)
    asked = all_to_all_rows(ask.repeat(world_size), [ask.numel()] * world_size, counts, timeout_s=timeout_s)
    answers = all_to_all_rows(_local_endpoints(part, asked), counts, [ask.numel()] * world_size, timeout_s=timeout_s)
    ends[missing] = answers.reshape(world_size, ask.numel(), 2).amax(0)
    return ends
