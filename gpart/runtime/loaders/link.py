"""Mini-batches of seed edges for link prediction, with negatives, in PyG's LinkNeighborLoader convention.

    train_edges = gr.edge_split(part, "train_mask")          # this rank's share of the seed edges
    loader = gr.DistLinkNeighborLoader(part, train_edges, fanouts=[15, 10], batch_size=1024,
                                       neg_sampling="binary", neg_ratio=1, exclude_seed_edges=True)
    for batch in loader:
        h = model(batch.x, batch.edge_index)
        score = (h[batch.edge_label_index[0]] * h[batch.edge_label_index[1]]).sum(-1)
        loss = F.binary_cross_entropy_with_logits(score, batch.edge_label)

Built on the distributed sampling protocol (gpart.runtime.sampling.protocol), as
the node loader is: a batch's node seeds are the distinct endpoints of its
positive edges and of its negatives, and they go through the protocol as one seed set, so
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
import time
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence, Union

import torch

from gpart.collectives.agreement import agree_or_raise
from gpart.runtime.loaders.batch import Batch, present
from gpart.runtime.loaders.link_seeds import SeedEdges, reverse_type
from gpart.runtime.loaders.node import present_defaults
from gpart.runtime.loaders.pieces import DEFAULT_NODE_DATA, LoaderOptions, SamplingRequest, compose, prefetch_ahead, prefetch_problem
from gpart.runtime.loaders.prefetch import prefetched
from gpart.runtime.loaders.temporal_options import attach_temporal, seed_time_problem, seed_times
from gpart.runtime.loaders.typed_batch import HeteroBatch
from gpart.runtime.partition.interface import Partition
from gpart.runtime.sampling.epochs import LINK_SALTS, EpochStreams, agreed_batch_count
from gpart.runtime.sampling.negatives import MODES, NegativeSampler
from gpart.runtime.sampling.row_source import RowSource
from gpart.runtime.sampling.sampled import Sampled

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


@dataclass
class LinkLoaderOptions(LoaderOptions):
    """DistLinkNeighborLoader's settings (see there): every loader's, and the negatives'."""

    neg_sampling: Optional[str] = None
    neg_ratio: float = 1
    strict_negatives: bool = False
    exclude_seed_edges: bool = False
    edge_label_time: Any = None  # one time per seed edge (PyG's edge_label_time)


def DistLinkNeighborLoader(
    part: Partition,
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
    sampler: Any = None,
    row_source: Optional[RowSource] = None,
    prefetch: int = 0,
    weight: Any = None,
    time: Optional[str] = None,
    edge_label_time: Any = None,
    temporal_strategy: str = "uniform",
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
    rows make x / node_data (the default "feat" only when the row source has
    it). shuffle, seed, replace, drop_last, timeout_s, pyg, sampler,
    row_source, prefetch, weight: as DistNeighborLoader (what reproduces too: the same
    (seed, epoch, rank) give the same seed edges, negatives and batches).
    disjoint: as PyG's, every endpoint of every positive
    and negative is a seed with its own sub-graph (n_id starts with them, not
    de-duplicated; edge_label_index / the triplet indices point at them) and
    `batch` gives each node's seed edge: the index of the pair (positive or
    negative) it was sampled for, modulo the number of positives (PyG's
    `batch % num_pos`; a triplet's negatives take its positive's index).
    time / temporal_strategy: as DistNeighborLoader (disjoint=True needed);
    edge_label_time: one time per seed edge, in seed order (PyG's
    edge_label_time; required with time): both endpoints of a link, and of
    each negative pair drawn for it (a binary negative takes the time of the
    positive at its index modulo the positives, as its `batch`), sample at it.

    Collectives (every rank makes the same calls, each bounded by timeout_s):
    building the loader (settings checked equal, edge ids held by other
    partitions resolved once, the batch count agreed) and every batch (every
    rank yields len(loader) batches, empty ones when out of seed edges).
    """
    options = LinkLoaderOptions(fanouts=fanouts, batch_size=batch_size, shuffle=shuffle, seed=seed, node_data=node_data,
                                replace=replace, drop_last=drop_last, timeout_s=timeout_s, pyg=pyg, disjoint=disjoint,
                                neg_sampling=neg_sampling, neg_ratio=neg_ratio, strict_negatives=strict_negatives,
                                exclude_seed_edges=exclude_seed_edges, prefetch=prefetch, weight=weight, time=time,
                                edge_label_time=edge_label_time, temporal_strategy=temporal_strategy)
    return LinkNeighborLoader(part, seed_edges, options, sampler=sampler, row_source=row_source)


class LinkNeighborLoader:
    """The loader DistLinkNeighborLoader builds (see there): epochs of this rank's seed edges over the sampling
    protocol (`protocol`), whose seeds are the batch's endpoints and negatives, drawn by a NegativeSampler."""

    def __init__(self, part: Partition, seed_edges: Any, options: LinkLoaderOptions, sampler: Any = None,
                 row_source: Optional[RowSource] = None):
        self.part, self.options = part, options
        self.batch_size, self.exclude = int(options.batch_size), bool(options.exclude_seed_edges)
        self.mode, self.ratio, self.disjoint = options.neg_sampling, float(options.neg_ratio), bool(options.disjoint)
        wait = float(options.timeout_s if options.timeout_s is not None else part.timeout_s)
        seeds = SeedEdges.parse(part, seed_edges)
        self.edge_type, self.typed = seeds.edge_type, seeds.typed
        names, _ = present_defaults(row_source.keys() if row_source is not None else part.node_data, options.node_data, None)
        self.node_data_names = names
        none = torch.zeros(0, dtype=torch.int64)
        self.time = options.time_options()
        request = SamplingRequest(options.fanouts, names, None, bool(options.replace), self.disjoint, wait, options.weight,
                                  self.time)
        pieces = compose(part, {self._src_type(): none} if self.typed and seeds.problem is None else none, request, sampler,
                         row_source)
        problem = seeds.problem or self._problem() or pieces.problem or prefetch_problem(options.prefetch) \
            or self._time_problem(options.edge_label_time, seeds.count())
        self.negatives = NegativeSampler(part, max(seeds.edge_type, 0), self.mode or "binary", self.ratio,
                                         bool(options.strict_negatives)) if self.mode in MODES and problem is None else None
        problem = problem or (self.negatives.problem() if self.negatives else None)
        settings = (f"link etype={seeds.edge_type} neg={self.mode} ratio={self.ratio} strict={bool(options.strict_negatives)} "
                    f"exclude={self.exclude} batch_size={self.batch_size} drop_last={bool(options.drop_last)} prefetch={options.prefetch!r} "
                    f"{pieces.plan.settings} replace={bool(options.replace)} weight={options.weight!r} disjoint={self.disjoint} {self.time.describe()} manifest={part.digest}")
        agree_or_raise(problem, settings, "the DistLinkNeighborLoader settings", wait, path=part.directory)
        self.plan, self.sampler, self.protocol, self.stats = pieces.plan, pieces.sampler, pieces.protocol, pieces.stats
        self.src, self.dst, self.input_id = seeds.resolve(part, wait)
        self.rank = pieces.layout.rank
        self.num_batches = agreed_batch_count(self.src.numel(), self.batch_size, bool(options.drop_last),
                                              pieces.layout.world_size, wait)
        attach_temporal(part, self.sampler, self.time, wait)
        self.link_time = seed_times(part, self.time, self.src[:0], options.edge_label_time, wait)
        prefetch_ahead(self.protocol, options.prefetch)
        self.reverse_type = reverse_type(part, self.edge_type) if self.exclude else None
        self.epochs = EpochStreams(options.seed, self.rank, part.device, LINK_SALTS)

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

    def _time_problem(self, given: Any, count: int) -> Optional[str]:
        if self.time.name is None:
            return None if given is None else "edge_label_time needs time= (the time array's name)"
        if given is None:
            return "edge_label_time is needed with edge times and with node times (one time per seed edge)"
        return seed_time_problem(given, count, "edge_label_time", None)

    def _src_type(self) -> str:
        return self.part.edge_types[self.edge_type][0]

    def __len__(self) -> int:
        return self.num_batches

    def set_epoch(self, epoch: int) -> None:
        """Use `epoch` for the next iteration's shuffle, negatives and sampling (iterating advances it by one)."""
        self.epochs.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        order, gen = self.epochs.begin(self.src.numel(), self.options.shuffle)

        def make(i: int) -> Union[LinkBatch, HeteroLinkBatch]:
            start = time.perf_counter()
            take = order[i * self.batch_size:(i + 1) * self.batch_size]
            batch = self.batch(take, gen)
            self.stats["total_s"] += time.perf_counter() - start
            self.stats["batches"] += 1
            self.stats["seeds"] += int(take.numel())
            return batch

        depth = self.options.prefetch
        batches = prefetched(make, self.num_batches, depth, self.part.device) if depth else map(make, range(self.num_batches))
        for batch in batches:
            yield batch.to_pyg() if self.options.pyg else batch

    def batch(self, take: torch.Tensor, gen: torch.Generator) -> Union[LinkBatch, HeteroLinkBatch]:
        """The batch of the seed edges at positions `take` of this rank's list: a collective (every rank calls it
        as often)."""
        src, dst = torch.index_select(self.src, 0, take), torch.index_select(self.dst, 0, take)
        ends = self._endpoints(src, dst, gen)
        src_side = sum(int(e.numel()) for e in ends[:2 if self.mode == "binary" else 1])  # seeds ahead of the destinations
        if self.disjoint:  # every endpoint its own seed (PyG): positions are the seeds' order
            seeds, seed_batch = torch.cat(ends), _seed_edge_of(self.mode, src.numel(), ends)
            inverse = torch.arange(seeds.numel(), device=seeds.device)
        else:
            (seeds, inverse), seed_batch = torch.unique(torch.cat(ends), return_inverse=True), None
        seed_time = None
        if self.link_time is not None:  # each seed at its link's time (seed_batch: the positive it was drawn for)
            seed_time = torch.index_select(torch.index_select(self.link_time, 0, take), 0, seed_batch)
        sampled = self.protocol.sample(seeds, gen, seed_batch, seed_time)
        if self.exclude:
            _drop_seed_pairs(sampled, src, dst, self._etype_of, self.edge_type, self.reverse_type, self.part.num_nodes)
        self.stats["sampled_edges"] += sampled.num_edges
        first = self.node_data_names[0] if self.node_data_names else None
        presented = present(sampled, self.part, self.plan.input_type, self.sampler.sampled_types, first)
        fields = _link_fields(self.mode, inverse, src.numel(), self._shifts(seeds, src_side), int(self.ratio))
        fields["input_id"] = None if self.input_id is None else torch.index_select(self.input_id, 0, take)
        if self.typed:
            return HeteroLinkBatch(**_as_dict(presented), input_edge_type=self.part.edge_types[self.edge_type], **fields)
        return LinkBatch(**_as_dict(presented), **fields)

    def _endpoints(self, src: torch.Tensor, dst: torch.Tensor, gen: torch.Generator) -> list[torch.Tensor]:
        """The batch's seed nodes in order: sources (and binary negatives' sources), then destinations and negatives."""
        if self.mode == "binary":
            neg_src, neg_dst = self.negatives.binary(src.numel(), gen)
            return [src, neg_src, dst, neg_dst]
        if self.mode == "triplet":
            return [src, dst, self.negatives.triplet(src, gen).reshape(-1)]
        return [src, dst]

    def _shifts(self, seeds: torch.Tensor, src_side: int) -> list[int]:
        """What to subtract from a source / destination endpoint's seed position to get its position within its
        node type's n_id."""
        if not self.typed:
            return [0, 0]
        s_t, _, d_t = self.part.edge_types[self.edge_type]
        if self.disjoint:  # source-side seeds first, then the destination side's
            return [0, src_side if s_t != d_t else 0]
        # positions within each node type: seeds are sorted, so a type's seeds are contiguous
        starts = torch.searchsorted(seeds, self.part.node_offsets)
        return [int(starts[self.part.node_types.index(t)]) for t in (s_t, d_t)]

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


def _drop_seed_pairs(b: Sampled, src: torch.Tensor, dst: torch.Tensor, etype_of, edge_type: int,
                     reverse_type: Optional[int], num_nodes: int) -> None:
    """Remove, in place, the sampled edges joining a seed edge's endpoints (src -> dst, of its edge type) and,
    with `reverse_type`, dst -> src of that type; the per-hop edge counts follow."""
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
