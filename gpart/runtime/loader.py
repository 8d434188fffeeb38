"""Mini-batches of multi-hop sampled neighbourhoods across partitions, with collectives only.

    loader = DistNeighborLoader(part, train_ids, fanouts=[15, 10], batch_size=1024)
    for batch in loader:          # every rank yields len(loader) batches
        out = model(batch.x, batch.edge_index)[: batch.batch_size]

Per hop the frontier (the nodes added by the previous hop; the seeds first)
is grouped by owner; every rank sends its requests to the owners in one
all_to_all (local column ids, its own included), samples the columns it
received from its CSC of in-edges (gpart.runtime.sampling), and answers in
request order in a second all_to_all (counts, then source ids and edge ids).
Across ranks the counts' message also carries the node data rows of the
requested nodes the requester does not hold (gpart.runtime.fused), so only
the last hop's nodes' rows take one more exchange (fuse=False: all rows and
labels through LoadedPartition.gather, after sampling). Every rank
runs the same number of batches (agreed when the loader is built) and the
same collectives per batch, so a rank out of seeds serves its peers with
empty batches. Each collective waits at most `timeout_s`. With one partition
and no torch.distributed the exchanges are skipped.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence, Union

import torch

from gpart.collectives.agreement import agree_or_raise
from gpart.collectives.all_to_all import all_to_all_rows, exchange_counts, group_by_owner
from gpart.collectives.process_group import world
from gpart.runtime.fused import fused_sample
from gpart.runtime.carried_rows import PlainRows
from gpart.runtime.sampling import Relabeller, sample_columns


@dataclass
class Batch:
    """A sampled sub-graph in PyG's NeighborLoader convention, on the partition's device.

    n_id: global ids of the batch's nodes, the `batch_size` seeds first, then
    the nodes each hop added. edge_index: [2, E] positions in n_id, row 0 the
    sampled in-neighbour (source), row 1 the node it was sampled for
    (destination). e_id: the input's edge id of each column of edge_index.
    num_sampled_nodes: [seeds, added by hop 1, ...]; num_sampled_edges: per hop.
    x: rows of the first requested node data for n_id; node_data: every
    requested name -> rows of n_id; y: labels of the seeds (None without labels).
    """

    n_id: torch.Tensor
    batch_size: int
    edge_index: torch.Tensor
    e_id: torch.Tensor
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]
    x: Optional[torch.Tensor] = None
    y: Optional[torch.Tensor] = None
    node_data: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.n_id.numel())

    @property
    def num_edges(self) -> int:
        return int(self.e_id.numel())

    def to_pyg(self) -> Any:
        """This batch as a `torch_geometric.data.Data` (needs PyG, which gpart does not depend on)."""
        try:  # here, not at the top: torch_geometric is optional
            from torch_geometric.data import Data
        except ImportError:
            raise ImportError("Batch.to_pyg() needs torch_geometric (pip install torch_geometric); the Batch itself has the same fields") from None
        return Data(x=self.x, edge_index=self.edge_index, y=self.y, n_id=self.n_id, e_id=self.e_id, batch_size=self.batch_size,
                    num_sampled_nodes=self.num_sampled_nodes, num_sampled_edges=self.num_sampled_edges)


class DistNeighborLoader:
    """Iterate mini-batches of this rank's `seeds` with neighbours sampled across all partitions.

    part: a LoadedPartition (one rank per partition when torch.distributed is
    initialised). seeds: this rank's global node ids (e.g. from node_split).
    fanouts: in-neighbours per node and hop (-1: all). replace: draw with
    replacement. shuffle/seed: seeds are permuted per epoch and sampling is
    seeded by (seed, epoch, rank): the same run gives the same batches for a
    fixed world size. node_data: names whose rows of n_id make `x` (the first)
    and `node_data`; labels: name whose seed rows make `y` (None: no y).
    drop_last: drop each rank's last partial batch. timeout_s: bound of every
    wait on a peer (None: the partition's timeout_s). fuse: across ranks,
    carry the rows of every hop's requested nodes (and the seeds' labels) in
    the sampling answers (gpart.runtime.fused), so only the last hop's nodes'
    rows take one more exchange; False: gather all rows and labels after sampling.
    Building the loader is a collective when torch.distributed is initialised.
    A typed partition (gpart.runtime.hetero.HeteroPartition) gets a
    gpart.runtime.hetero_loader.HeteroNeighborLoader: seeds {ntype: ids},
    fanouts {(src, relation, dst): [per hop]}.
    """

    # The loader of typed partitions (gpart.runtime.hetero_loader.HeteroNeighborLoader) subclasses this
    # one and registers itself here when its module is imported (gpart.runtime imports it), so that
    # DistNeighborLoader(typed_part, ...) builds one without this module importing its own subclass.
    _typed_loader: Optional[type] = None

    def __init_subclass__(cls, loads_typed: bool = False, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if loads_typed:
            DistNeighborLoader._typed_loader = cls

    def __new__(cls, part: Any = None, *args: Any, **kwargs: Any):
        if cls is DistNeighborLoader and getattr(part, "is_hetero", False):
            if DistNeighborLoader._typed_loader is None:
                raise ImportError("a typed partition's loader is gpart.runtime.hetero_loader's: import gpart.runtime")
            return super().__new__(DistNeighborLoader._typed_loader)  # Python then runs its __init__
        return super().__new__(cls)

    def __init__(
        self,
        part: Any,
        seeds: Any,
        fanouts: Sequence[int] = (15, 10),
        batch_size: int = 1024,
        shuffle: bool = True,
        seed: int = 0,
        node_data: Union[str, Sequence[str], None] = ("feat",),
        labels: Optional[str] = "label",
        replace: bool = False,
        drop_last: bool = False,
        timeout_s: Optional[float] = None,
        fuse: bool = True,
    ):
        self.part = part
        self.fanouts = [int(f) for f in fanouts]
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.node_data_names = [node_data] if isinstance(node_data, str) else list(node_data or [])
        self.labels = labels
        self.replace = bool(replace)
        self.drop_last = bool(drop_last)
        self._init_run(part, timeout_s, fuse)
        self.row_source = PlainRows(part, self.node_data_names, labels)
        self.seeds, problem = self._seed_tensor(seeds)
        problem = self._check_arguments() or problem
        self.num_batches = self._agree(problem)
        self._relabel: Optional[Relabeller] = None

    # -- set-up

    def _init_run(self, part: Any, timeout_s: Optional[float], fuse: bool) -> None:
        """Run state both loaders share: timeout, device, world, epoch, stats and whether node data is
        fused into the sampling answers (part of the settings every rank must agree on)."""
        self.timeout_s = float(timeout_s if timeout_s is not None else part.timeout_s)
        self.device = part.device
        self.rank, self.world_size = world()
        self.epoch = 0
        self.stats = {"batches": 0, "sampled_edges": 0, "seeds": 0, "collective_s": 0.0, "total_s": 0.0, "collectives": 0}
        self.fuse = bool(fuse) and self.world_size > 1

    def _check_arguments(self) -> Optional[str]:
        if not self.fanouts or any(f == 0 or f < -1 for f in self.fanouts):
            return f"fanouts must be a non-empty list of positive integers or -1, got {self.fanouts}"
        if self.batch_size < 1:
            return f"batch_size must be >= 1, got {self.batch_size}"
        names = self.node_data_names + ([self.labels] if self.labels is not None else [])
        missing = [n for n in names if n not in self.part.node_data]
        if missing:
            have = ", ".join(self.part.node_data) or "none"
            return f"no node data {', '.join(map(repr, missing))} loaded (loaded: {have})"
        if self.world_size > 1 and (self.world_size != self.part.num_parts or self.rank != self.part.rank):
            return (f"rank {self.rank} of {self.world_size} loaded partition {self.part.rank} of {self.part.num_parts}: "
                    f"the loader needs one rank per partition, rank r on partition r")
        if self.world_size == 1 and self.part.num_parts > 1:
            return f"has {self.part.num_parts} partitions: initialise torch.distributed with one rank per partition"
        return None

    def _seed_tensor(self, seeds: Any) -> tuple[torch.Tensor, Optional[str]]:
        """(this rank's seeds on the device, or no seeds and the problem with them)."""
        none = torch.zeros(0, dtype=torch.int64, device=self.device)
        ids = torch.as_tensor(seeds)
        if ids.dtype == torch.bool or ids.dtype.is_floating_point or ids.dtype.is_complex:
            return none, f"seeds must be integer global node ids, got dtype {ids.dtype}"
        ids = ids.reshape(-1).to(device=self.device, dtype=torch.int64)
        if ids.numel():
            lo, hi = (int(v) for v in torch.aminmax(ids))
            if lo < 0 or hi >= self.part.num_nodes:
                return none, f"seeds hold ids outside 0..{self.part.num_nodes - 1} (min {lo}, max {hi})"
        return ids, None

    def _batches_for(self, count: int) -> int:
        return count // self.batch_size if self.drop_last else math.ceil(count / self.batch_size)

    def _agree(self, problem: Optional[str]) -> int:
        """Check the settings agree on every rank (raising on all of them otherwise); the common batch count."""
        config = f"fanouts={self.fanouts} replace={self.replace} node_data={self.node_data_names} labels={self.labels} " \
                 f"fuse={self.fuse} " \
                 f"manifest={self.part.digest}"
        agree_or_raise(problem, config, "the DistNeighborLoader settings", self.timeout_s, path=self.part.directory)
        counts = exchange_counts([self.seeds.numel()] * self.world_size, timeout_s=self.timeout_s)
        return max(self._batches_for(c) for c in counts)

    # -- iteration

    def __len__(self) -> int:
        return self.num_batches

    def set_epoch(self, epoch: int) -> None:
        """Use `epoch` for the next iteration's shuffle and sampling (iterating advances it by one)."""
        self.epoch = int(epoch)

    def _generator(self, salt: int) -> torch.Generator:
        gen = torch.Generator(device=self.device)
        gen.manual_seed(hash((self.seed, self.epoch, self.rank, salt)) & 0x7FFF_FFFF_FFFF_FFFF)
        return gen

    def __iter__(self) -> Iterator[Batch]:
        seeds = self.seeds
        if self.shuffle and seeds.numel():
            perm = torch.randperm(seeds.numel(), generator=self._generator(0), device=self.device)
            seeds = seeds[perm]
        gen = self._generator(1)
        if self._relabel is None:
            self._relabel = Relabeller(self.part.num_nodes, self.device)
        self.epoch += 1
        for i in range(self.num_batches):
            start = time.perf_counter()
            batch = self._sample(seeds[i * self.batch_size : (i + 1) * self.batch_size], gen)
            self.stats["total_s"] += time.perf_counter() - start
            self.stats["batches"] += 1
            self.stats["sampled_edges"] += batch.num_edges
            self.stats["seeds"] += batch.batch_size
            yield batch

    def _sample(self, seeds: torch.Tensor, gen: torch.Generator) -> Batch:
        if self.fuse:
            sampled = fused_sample(self, self._relabel, seeds, gen)
            batch = Batch(n_id=sampled.n_id, batch_size=int(seeds.numel()), edge_index=sampled.edge_index, e_id=sampled.e_id,
                          num_sampled_nodes=sampled.num_nodes, num_sampled_edges=sampled.num_edges, node_data=sampled.node_data)
            batch.x = batch.node_data[self.node_data_names[0]] if self.node_data_names else None
            batch.y = sampled.y
            return batch
        relabel = self._relabel
        relabel.start(seeds)
        n_ids, srcs, dsts, eids = [seeds], [], [], []
        frontier, first = seeds, 0
        num_nodes, num_edges = [int(seeds.numel())], []
        for hop, fanout in enumerate(self.fanouts):
            counts, src, eid, order = self._sample_hop(frontier, fanout, gen)
            dst = torch.repeat_interleave(order + first, counts, output_size=int(src.numel()))
            pos, added = relabel.add_unique(src, final=hop == len(self.fanouts) - 1)
            first += int(frontier.numel())
            srcs.append(pos), dsts.append(dst), eids.append(eid), n_ids.append(added)
            num_nodes.append(int(added.numel())), num_edges.append(int(src.numel()))
            frontier = added
        n_id = torch.cat(n_ids)
        relabel.reset()
        edge_index = torch.empty((2, sum(num_edges)), dtype=torch.int64, device=self.device)
        torch.cat(srcs, out=edge_index[0])
        torch.cat(dsts, out=edge_index[1])
        batch = Batch(n_id=n_id, batch_size=int(seeds.numel()), edge_index=edge_index, e_id=torch.cat(eids),
                      num_sampled_nodes=num_nodes, num_sampled_edges=num_edges)
        for name in self.node_data_names:
            batch.node_data[name] = self._timed(self.part.gather, name, n_id, timeout_s=self.timeout_s)
        if self.node_data_names:
            batch.x = batch.node_data[self.node_data_names[0]]
        if self.labels is not None:
            batch.y = self._timed(self.part.gather, self.labels, seeds, timeout_s=self.timeout_s)
        return batch

    def _timed(self, fn, *args, **kwargs):
        if self.world_size == 1:
            return fn(*args, **kwargs)
        self.stats["collectives"] += 3  # a distributed gather: counts, ids, rows
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.stats["collective_s"] += time.perf_counter() - start

    def _sample_hop(self, frontier: torch.Tensor, fanout: int, gen: torch.Generator):
        """(counts, source ids, edge ids, order): sampled in-edges of every frontier node.

        Edges come grouped by node, the nodes in the order `frontier[order]`,
        `counts[i]` edges for node `frontier[order[i]]`.
        """
        part = self.part
        if self.world_size == 1:
            counts, src, eid = self.serve(frontier, fanout, gen)
            return counts, src, eid, torch.arange(frontier.numel(), device=self.device)
        owner, cols = part.book.owner_and_local(frontier)
        send_cols, send_counts, order = group_by_owner(cols, owner, self.world_size)
        send_counts = send_counts.tolist()
        wait = self.timeout_s
        start = time.perf_counter()
        recv_counts = exchange_counts(send_counts, timeout_s=wait)
        cols = all_to_all_rows(send_cols, send_counts, recv_counts, timeout_s=wait)
        self.stats["collective_s"] += time.perf_counter() - start
        self.stats["collectives"] += 4
        counts, src, eid = self.serve(cols, fanout, gen)
        start = time.perf_counter()
        got_counts = all_to_all_rows(counts, recv_counts, send_counts, timeout_s=wait)
        answer_rows = [int(c.sum()) for c in counts.split(recv_counts)]
        got_rows = [int(c.sum()) for c in got_counts.split(send_counts)]
        got = all_to_all_rows(torch.stack([src, eid], 1), answer_rows, got_rows, timeout_s=wait)
        self.stats["collective_s"] += time.perf_counter() - start
        return got_counts, got[:, 0], got[:, 1], order

    def serve(self, cols: torch.Tensor, fanout: int, gen: torch.Generator):
        """Sample owned columns `cols`: (counts, global source ids, global edge ids), grouped by column (the owner's side
        of a hop; gpart.runtime.fused calls it too)."""
        part = self.part
        picks = sample_columns(part.indptr, cols, fanout, self.replace, gen)
        src = torch.index_select(part.indices, 0, picks.positions)
        if part.num_parts > 1:  # with one partition local ids are the global ids (SPEC.md 4.1)
            src = torch.index_select(part.node_ids, 0, src)
        eid = torch.index_select(part.edge_ids, 0, picks.positions)
        return picks.counts, src, eid
