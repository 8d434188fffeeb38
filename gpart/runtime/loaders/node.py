"""Mini-batches of multi-hop sampled neighbourhoods across partitions, with collectives only.

    loader = gr.DistNeighborLoader(part, train_ids, fanouts=[15, 10], batch_size=1024)
    for batch in loader:          # every rank yields len(loader) batches
        out = model(batch.x, batch.edge_index)[: batch.batch_size]

The loader cuts this rank's seeds into batches, epoch by epoch, and hands
each to the distributed sampling protocol (gpart.runtime.sampling.protocol:
the hops across partitions, the rows in the answers), composed of pieces
the caller may pass in, as PyG's NodeLoader takes a sampler and a feature
store:

- the sampler (`sampler=`; default gpart.runtime.sampling.neighbor_sampler.
  LocalSampler): the owner's side of a hop, in-edges of owned columns per
  edge type (a homogeneous graph is the one-type case);
- the row source (`row_source=`; gpart.runtime.sampling.row_source.RowSource,
  default the partition's node data): the rows an owner reads for its nodes;
- the exchange (gpart.runtime.partition.exchange.Exchange): every collective,
  routed to one serving rank per partition (several trainers may share a
  partition: gpart.runtime.partition.trainers).

Every rank runs the same number of batches (agreed when the loader is
built) and the same collectives per batch, so a rank out of seeds serves its
peers with empty batches. Each collective waits at most `timeout_s`. With
one partition nothing travels: the hops sample locally and rows are read.
Batches come out typed (HeteroBatch, gpart.runtime.loaders.typed_batch) for a
typed partition.

What reproduces. The seeds' order and every draw of an epoch come from
generators seeded by (seed, epoch, rank) (gpart.runtime.sampling.epochs).
Building the same loader again (same partitions, world size and trainer
layout, this rank's seeds, settings, device and hop strategy) and running
the same epoch gives identical batches: n_id, edge_index, e_id, x,
node_data, y and batch. Whether rows travel in the sampling answers or are
fetched after sampling (benchmarks and tests: unfused_loader) does not
change the batches, nor does a row source (only the rows). Across
partitions (homogeneous) each hop lists the nodes it adds with those the
partition stores (owned, halo) first, then the others by owner, each group
in first-appearance order: n_id depends on the partitions and this rank. The hop strategy does: table hops (the GPU form of a
hop, the default with one partition on CUDA; `loader.sampler.table_hops`)
draw each hop's neighbours from other random numbers than compact hops (the
CPU default). For the same (seed, epoch, rank) both give the same seeds in
the same order and, per seed, the same number of first-hop in-edges
(min(fanout, in-degree); with replace=True fanout for a node with
in-edges), each neighbour set uniform; past that, the neighbours differ, except where no hop draws: when
every fanout is at least the in-degree of every node it samples, the two
give identical batches. Table hops draw with torch operations (their
numbers on the CPU from per-hop PCG64 streams seeded by the generator,
elsewhere from the generator itself), or on CUDA with the fused kernel
(`loader.sampler.fused`; gpart.runtime.sampling.fused_floyd), whose
SplitMix64 numbers are others again: each reproduces, and across them the
same holds as across table and compact hops. The capacities a batch runs
at (learned ones, gpart.runtime.sampling.table_hops) never change it. Padded batches
(padded=True) trimmed (`batch.trim()`) are the compact batches of the same
loader without padded, field by field. Disjoint and non-disjoint sampling
give different batches.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence, Union

import torch

from gpart.collectives.agreement import agree_or_raise
from gpart.runtime.loaders.batch import Batch, present
from gpart.runtime.loaders.pieces import DEFAULT_NODE_DATA, LoaderOptions, SamplingRequest, compose, prefetch_ahead, prefetch_problem
from gpart.runtime.loaders.prefetch import prefetched
from gpart.runtime.loaders.temporal_options import attach_temporal, seed_time_problem, seed_times, time_kind
from gpart.runtime.loaders.typed_batch import HeteroBatch
from gpart.runtime.partition.interface import Partition
from gpart.runtime.sampling.epochs import NODE_SALTS, EpochStreams, agreed_batch_count
from gpart.runtime.sampling.row_source import RowSource
from gpart.runtime.sampling.sampled import Sampled
from gpart.runtime.sampling.table_hops import PaddedSampled


def present_defaults(have_keys: Sequence[Any], node_data: Union[str, Sequence[str], None],
                     labels: Optional[str]) -> tuple[list[str], Optional[str]]:
    """(node data names, labels): the defaults ("feat", "label") kept only when the row source's keys `have_keys`
    hold them, so a graph without them loads with the defaults (named explicitly, a missing array is an error)."""
    have = {k[1] if isinstance(k, tuple) else k for k in have_keys}
    if node_data is DEFAULT_NODE_DATA:
        node_data = [n for n in DEFAULT_NODE_DATA if n in have]
    if labels == "label" and "label" not in have:
        labels = None
    return ([node_data] if isinstance(node_data, str) else list(node_data or [])), labels


@dataclass
class NodeLoaderOptions(LoaderOptions):
    """DistNeighborLoader's settings (see there): every loader's, and the seeds' labels."""

    labels: Optional[str] = "label"
    padded: bool = False
    seed_time: Any = None  # one time per seed (PyG's input_time; None: the seed node's time)


def DistNeighborLoader(
    part: Partition,
    seeds: Any,
    fanouts: Any = (15, 10),
    batch_size: int = 1024,
    shuffle: bool = True,
    seed: int = 0,
    node_data: Union[str, Sequence[str], None] = DEFAULT_NODE_DATA,
    labels: Optional[str] = "label",
    replace: bool = False,
    drop_last: bool = False,
    timeout_s: Optional[float] = None,
    pyg: bool = False,
    disjoint: bool = False,
    sampler: Any = None,
    row_source: Optional[RowSource] = None,
    padded: bool = False,
    prefetch: int = 0,
    weight: Any = None,
    time: Optional[str] = None,
    seed_time: Any = None,
    temporal_strategy: str = "uniform",
) -> "NeighborLoader":
    """Mini-batches of this rank's `seeds` with neighbours sampled across all partitions (an iterable loader).

    part: the partition this rank trains on (gr.load_partition; with P
    partitions the job runs P x L ranks, L trainers per partition, rank r on
    partition r // L). seeds: this rank's seeds, global node ids (e.g. from
    gr.node_split); for a typed partition {node type: typed ids}.
    fanouts: in-neighbours per node and hop (-1: all); for a typed partition
    {(src, relation, dst): [per hop]} (edge types without one are not sampled).
    batch_size: seeds per batch ON THIS RANK: each rank cuts its own seeds, so
    one step over W ranks covers up to W x batch_size seeds.
    shuffle / seed: seeds are permuted per epoch and sampling is seeded by
    (seed, epoch, rank); the module says exactly what reproduces.
    node_data: names whose rows of the batch's nodes make `x` (the first) and
    `node_data`; labels: the name whose seed rows make `y` (None: no y); the
    defaults "feat" and "label" are taken only when the row source has them.
    replace: draw with replacement. drop_last: drop each rank's last partial
    batch. timeout_s: bound of every wait on a peer (None: the partition's).
    pyg: yield torch_geometric Data / HeteroData instead of Batch /
    HeteroBatch. disjoint: every seed gets its own sub-graph (PyG's
    disjoint): a node reached from two seeds appears twice, sampled
    independently for each, and the batch's `batch` gives every node's seed
    (its position in the batch). sampler: the owner's sampler (None: a
    LocalSampler of `part` for these fanouts and `replace`; one of your own,
    e.g. LocalSampler(part, hop_fanouts, replace, table_hops), must take as
    many hops, and draws as it was built). row_source: where owners read rows
    (gpart.runtime.sampling.row_source.RowSource; None: the partition's node
    data); node_data and labels name its keys. padded: yield each batch at
    fixed capacities with no host synchronisation (gpart.runtime.sampling.
    table_hops.PaddedSampled: sizes as a device tensor, `trim()` gives the
    compact batch, the same as padded=False gives); needs one partition, a
    homogeneous graph, positive fanouts, replace=False and disjoint=False, and
    takes the hops as tables; its tensors are reused two batches later, and
    `stats` counts no sampled edges for it (that would synchronise).
    prefetch: prepare up to that
    many batches ahead on a background thread (on CUDA on a side stream)
    while the caller works on the current one: the same batches as without
    (gpart.runtime.loaders.prefetch states the rule for the caller's own
    collectives and how errors surface); 0: none. weight: the name of an edge
    data array of the partition (PyG's weight_attr, DGL's prob) whose values
    are the sampling weights: in-edges are drawn with probability
    proportional to them, with or without replacement, by the owner (weights
    never travel); zero-weight edges are never drawn; a typed partition needs
    the array for every edge type (gpart.runtime.sampling.weighted). None:
    uniform draws.
    time: the name of a node data array (node times: an in-edge's time is its
    source's) or an edge data array (edge times) of the partition (PyG's
    time_attr): a seed with time t draws only in-edges with time <= t, in every
    hop (each sampled node carries its seed's time), so disjoint=True is
    required, as in PyG (typed: the name per node or edge type; with weight:
    weighted among the allowed, "uniform" only).
    seed_time: one time per seed, in `seeds` order (PyG's input_time; None:
    each seed node's own time, node times only). temporal_strategy: "uniform"
    (uniform among the allowed in-edges) or "last" (the latest `fanout` by
    time). gpart.runtime.loaders.temporal_options says what is read when.

    Collectives (every rank must make the same calls, each bounded by
    timeout_s): building the loader (it checks every rank's settings agree
    and agrees on the batch count) and every batch of the iteration (every
    rank yields len(loader) batches, empty ones when out of seeds, and serves
    its peers' requests meanwhile). Without torch.distributed the result must
    have one partition and nothing travels. Yields gpart.runtime.Batch, or
    gpart.runtime.HeteroBatch for a typed partition (a HeteroNeighborLoader).
    """
    options = NodeLoaderOptions(fanouts=fanouts, batch_size=batch_size, shuffle=shuffle, seed=seed, node_data=node_data,
                                labels=labels, replace=replace, drop_last=drop_last, timeout_s=timeout_s, pyg=pyg,
                                disjoint=disjoint, padded=padded, prefetch=prefetch, weight=weight, time=time,
                                seed_time=seed_time, temporal_strategy=temporal_strategy)
    return _loader_class(part)(part, seeds, options, sampler=sampler, row_source=row_source)


def unfused_loader(part: Partition, seeds: Any, **settings: Any) -> "NeighborLoader":
    """DistNeighborLoader(part, seeds, **settings) whose rows are fetched after sampling, one array at a time, instead
    of travelling in the sampling answers: the same batches, more collectives (for benchmarks and equivalence
    tests; gpart.runtime does not export it)."""
    extra = {k: settings.pop(k) for k in ("sampler", "row_source") if k in settings}
    return _loader_class(part)(part, seeds, NodeLoaderOptions(**settings), carry_rows=False, **extra)


class NeighborLoader:
    """The loader DistNeighborLoader builds (see there): epochs of this rank's seeds over the sampling protocol.
    `stats` counts batches, seeds, sampled edges, collectives and the seconds spent; `sampler` is the owner's
    sampler (its `table_hops` chooses the hop strategy)."""

    def __init__(self, part: Partition, seeds: Any, options: NodeLoaderOptions, sampler: Any = None,
                 row_source: Optional[RowSource] = None, carry_rows: bool = True):
        self.part, self.device, self.options = part, part.device, options
        self.batch_size, self.drop_last = int(options.batch_size), bool(options.drop_last)
        source_keys = row_source.keys() if row_source is not None else part.node_data
        self.node_data_names, labels = present_defaults(source_keys, options.node_data, options.labels)
        self.timeout_s = float(options.timeout_s if options.timeout_s is not None else part.timeout_s)
        self.time = options.time_options()
        request = SamplingRequest(options.fanouts, self.node_data_names, labels, bool(options.replace), bool(options.disjoint),
                                  self.timeout_s, options.weight, self.time)
        pieces = compose(part, seeds, request, sampler, row_source, carry_rows)
        self.plan, self.sampler, self.protocol, self.stats = pieces.plan, pieces.sampler, pieces.protocol, pieces.stats
        self.rank, self.world_size = pieces.layout.rank, pieces.layout.world_size
        self.seeds = self.plan.seeds
        problem = self.plan.problem or (f"batch_size must be >= 1, got {self.batch_size}" if self.batch_size < 1 else None) \
            or prefetch_problem(options.prefetch) or self._seed_time_problem(options.seed_time)
        self.padded = bool(options.padded)
        if self.padded and problem is None and pieces.protocol is not None:
            problem = _padded_problem(self.sampler, pieces.protocol)
            # a padded batch's buffers are reused `padded_keep` batches later: batches prepared ahead must not see that
            pieces.protocol.padded_keep = max(pieces.protocol.padded_keep, options.prefetch + 2)
        # batch_size and drop_last too: every rank counts the batches of every rank's seeds with its own
        settings = (f"{self.plan.settings} replace={bool(options.replace)} weight={options.weight!r} carry_rows={pieces.exchange.active and carry_rows} "
                    f"disjoint={bool(options.disjoint)} batch_size={self.batch_size} drop_last={self.drop_last} "
                    f"prefetch={options.prefetch!r} {self.time.describe()} manifest={part.digest}")
        agree_or_raise(problem or pieces.problem, settings, "the DistNeighborLoader settings", self.timeout_s,
                       path=part.directory)
        self.num_batches = agreed_batch_count(self.seeds.numel(), self.batch_size, self.drop_last, self.world_size,
                                              self.timeout_s)
        attach_temporal(part, self.sampler, self.time, self.timeout_s)
        self.seed_time = seed_times(part, self.time, self.seeds, options.seed_time, self.timeout_s)
        prefetch_ahead(self.protocol, options.prefetch)
        self.epochs = EpochStreams(options.seed, self.rank, self.device, NODE_SALTS)

    def _seed_time_problem(self, given: Any) -> Optional[str]:
        if self.time.name is None:
            return None if given is None else "seed_time needs time= (the time array's name)"
        return seed_time_problem(given, self.seeds.numel(), "seed_time", time_kind(self.part, self.time.name))

    def __len__(self) -> int:
        return self.num_batches

    def set_epoch(self, epoch: int) -> None:
        """Use `epoch` for the next iteration's shuffle and sampling (iterating advances it by one)."""
        self.epochs.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        order, gen = self.epochs.begin(self.seeds.numel(), self.options.shuffle)
        seeds = self.seeds[order]
        times = None if self.seed_time is None else self.seed_time[order]

        def make(i: int) -> Any:
            part_seeds = seeds[i * self.batch_size : (i + 1) * self.batch_size]
            if self.padded:  # no synchronisation: nothing to count or present on the host
                self.stats["batches"] += 1
                return self.sample_padded(part_seeds, gen)
            start = time.perf_counter()
            sampled = self.sample(part_seeds, gen, seed_time=None if times is None else
                                  times[i * self.batch_size : (i + 1) * self.batch_size])
            batch = self.present(sampled)
            self.stats["total_s"] += time.perf_counter() - start
            self.stats["batches"] += 1
            self.stats["sampled_edges"] += sampled.num_edges
            self.stats["seeds"] += sampled.batch_size
            return batch.to_pyg() if self.options.pyg else batch

        depth = self.options.prefetch
        yield from prefetched(make, self.num_batches, depth, self.device) if depth else map(make, range(self.num_batches))

    def sample(self, seeds: torch.Tensor, gen: torch.Generator, seed_batch: Optional[torch.Tensor] = None,
               seed_time: Optional[torch.Tensor] = None) -> Sampled:
        """One batch of the protocol for `seeds` (erased global ids; with time, each seed's time; see
        DistSampler.sample): a collective."""
        return self.protocol.sample(seeds, gen, seed_batch, seed_time)

    def sample_padded(self, seeds: torch.Tensor, gen: torch.Generator) -> PaddedSampled:
        """One padded batch for `seeds` (padded=True; gpart.runtime.sampling.table_hops), x its first node data."""
        padded = self.protocol.sample_padded(seeds, gen)
        if self.node_data_names:
            padded.x = padded.node_data[self.node_data_names[0]]
        return padded

    def present(self, sampled: Sampled) -> Union[Batch, HeteroBatch]:
        """The batch as the user sees it: a Batch with x / node_data / y (homogeneous) or split by type."""
        first = self.node_data_names[0] if self.node_data_names else None
        return present(sampled, self.part, self.plan.input_type, self.sampler.sampled_types, first)


class HeteroNeighborLoader(NeighborLoader):
    """The loader of a typed partition (what DistNeighborLoader builds for one): the same loader, whose
    batches are HeteroBatch (HeteroData with pyg=True); seeds {ntype: ids}, fanouts {(s, r, d): [per hop]}."""


def _padded_problem(sampler: Any, protocol: Any) -> Optional[str]:
    """Why padded batches cannot be taken (None: they can); turns the sampler's table hops on."""
    if hasattr(sampler, "table_hops"):
        sampler.table_hops = True
    if not protocol.table_batches():
        return ("padded batches need one partition, a homogeneous graph, positive fanouts, replace=False, no weight and "
                "disjoint=False")
    return None


def _loader_class(part: Partition) -> type:
    """The class a partition's loader is (the same loader; the typed one's name says its batches are typed)."""
    return HeteroNeighborLoader if part.typed else NeighborLoader
