"""Mini-batches of multi-hop sampled neighbourhoods across partitions, with collectives only.

    loader = gr.DistNeighborLoader(part, train_ids, fanouts=[15, 10], batch_size=1024)
    for batch in loader:          # every rank yields len(loader) batches
        out = model(batch.x, batch.edge_index)[: batch.batch_size]

One loader, composed of three pieces (as PyG's NodeLoader and its sampler):

- the sampler (gpart.runtime.sampling.neighbor_sampler.LocalSampler): the owner's
  side of a hop, in-edges of owned columns per edge type, on the partition's
  device (a homogeneous graph is the one-type case);
- the exchange (gpart.runtime.sampling.exchange.Exchange): every collective of the
  loader and their statistics, routed to one serving rank per partition
  (gpart.runtime.partition.trainers: several trainers may share a partition);
- the row fetcher (gpart.runtime.sampling.row_fetcher): which node data rows and
  labels travel, where they are held, and how an owner packs them.

Per hop the frontier (the nodes the previous hop added; the seeds first) is
grouped by owning partition; a request round sends every owner its
requests (local column ids, a flag each: whether the requester needs the
node's rows: it does not when it owns the node or holds it as a halo node
with data), the owner samples the columns and answers with the sampled
counts and the flagged nodes' rows (the first hop's also with the seeds'
labels), then with the sampled edges: 4 collectives per hop. The last hop's
added nodes are never requested for sampling, so their rows take one more
round of flagged requests and rows (3 collectives, every array at once).
fuse=False fetches the rows after sampling instead, through the same round,
one array at a time over the whole node list (and the labels over the
seeds): 3 collectives per array and node type + 3; the batches are the
same. A round trip per hop is the minimum and rows never travel twice;
carrying the rows in the sampling answers saves the separate gathers
(benchmarks/bench_sampler.py measures both).

Every rank runs the same number of batches (agreed when the loader is
built) and the same collectives per batch, so a rank out of seeds serves its
peers with empty batches. Each collective waits at most `timeout_s`. With
one partition nothing travels: the hops sample locally and rows are read.
Batches come out typed (HeteroBatch, gpart.runtime.loaders.typed_batch) for a
typed partition.

disjoint=True (PyG's disjoint): every seed gets its own sub-graph. A batch
node is a key seed index * num_nodes + global id, so the relabelling
(gpart.runtime.sampling.kernels.KeyRelabeller) keeps a node once per seed that
reaches it and `batch` gives each node's seed. A hop asks each distinct
node once, with its multiplicity (how many seeds reached it); the owner
samples it that many times, independently, and the answers spread back to
the keys; a node's rows travel once per batch whatever its multiplicity.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterator, Optional, Sequence, Union

import torch

from gpart.collectives.agreement import agree_or_raise
from gpart.collectives.all_to_all import exchange_counts
from gpart.runtime.loaders.typed_batch import HeteroBatch, typed_batch
from gpart.runtime.partition.trainers import trainer_layout, wrong_partition
from gpart.runtime.sampling.exchange import Exchange
from gpart.runtime.sampling.kernels import KeyRelabeller, Relabeller
from gpart.runtime.sampling.neighbor_sampler import LocalSampler
from gpart.runtime.sampling.packed_rows import RowLayout
from gpart.runtime.sampling.plan import plan_for
from gpart.runtime.sampling.row_fetcher import Requests


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
    batch: with disjoint sampling, the seed (its position among the batch's
    seeds) each node was sampled for; n_id then repeats a node once per seed
    that reached it (None when not disjoint).
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
    batch: Optional[torch.Tensor] = None

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
                    num_sampled_nodes=self.num_sampled_nodes, num_sampled_edges=self.num_sampled_edges, batch=self.batch)


@dataclass
class Sampled:
    """One batch on erased ids, before it is presented (Batch, or split by type): rows keyed as part.node_data."""

    batch: Batch
    node_data: dict[Hashable, torch.Tensor]
    y: Optional[torch.Tensor]


@dataclass
class _Answer:
    counts: torch.Tensor  # sampled in-edges per requested node (per draw, when drawn several times), order frontier[order]
    src: torch.Tensor
    eid: torch.Tensor
    order: torch.Tensor
    node_rows: dict[Hashable, torch.Tensor]  # per key: rows of the requested nodes of its kind, in frontier order


DEFAULT_NODE_DATA = ("feat",)


def present_defaults(part: Any, node_data: Union[str, Sequence[str], None], labels: Optional[str]) -> tuple[list[str], Optional[str]]:
    """(node data names, labels): the defaults ("feat", "label") kept only when the partition has them, so a
    graph without them loads with the defaults (named explicitly in node_data, a missing array is an error)."""
    have = {k[1] if isinstance(k, tuple) else k for k in part.node_data}
    if node_data is DEFAULT_NODE_DATA:
        node_data = [n for n in DEFAULT_NODE_DATA if n in have]
    if labels == "label" and "label" not in have:
        labels = None
    return ([node_data] if isinstance(node_data, str) else list(node_data or [])), labels


def epoch_generator(seed: int, epoch: int, rank: int, salt: int, device: Any) -> torch.Generator:
    """The generator a loader draws one epoch's `salt`-th random stream from on `rank` (salts 0 and 1: the
    NeighborLoader's shuffle and sampling; the link loader uses 2 and 3): the same (seed, epoch, rank) give the
    same batches."""
    gen = torch.Generator(device=device)
    gen.manual_seed(hash((seed, epoch, rank, salt)) & 0x7FFF_FFFF_FFFF_FFFF)
    return gen


def DistNeighborLoader(
    part: Any,
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
    fuse: bool = True,
    pyg: bool = False,
    disjoint: bool = False,
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
    (seed, epoch, rank): the same run gives the same batches for a fixed world
    size. node_data: names whose rows of the batch's nodes make `x` (the
    first) and `node_data`; labels: the name whose seed rows make `y` (None:
    no y); the defaults "feat" and "label" are taken only when the partition
    has them. replace: draw with replacement. drop_last: drop each rank's last
    partial batch. timeout_s: bound of every wait on a peer (None: the
    partition's). fuse: rows travel in the sampling answers (False: fetched
    after sampling, one array at a time; the same batches). pyg: yield
    torch_geometric Data / HeteroData instead of Batch / HeteroBatch.
    disjoint: every seed gets its own sub-graph (PyG's disjoint): a node
    reached from two seeds appears twice, sampled independently for each, and
    the batch's `batch` gives every node's seed (its position in the batch).

    Collectives (every rank must make the same calls, each bounded by
    timeout_s): building the loader (it checks every rank's settings agree
    and agrees on the batch count) and every batch of the iteration (every
    rank yields len(loader) batches, empty ones when out of seeds, and serves
    its peers' requests meanwhile). Without torch.distributed the result must
    have one partition and nothing travels. Yields gpart.runtime.Batch, or
    gpart.runtime.HeteroBatch for a typed partition (a HeteroNeighborLoader).
    """
    kind = HeteroNeighborLoader if getattr(part, "is_hetero", False) else NeighborLoader
    return kind(part, seeds, fanouts, batch_size, shuffle, seed, node_data, labels, replace, drop_last, timeout_s, fuse, pyg,
                disjoint)


class NeighborLoader:
    """The loader DistNeighborLoader builds (see there for the arguments): a sampler, an exchange and a row
    fetcher composed. `stats` counts batches, seeds, sampled edges, collectives and the seconds spent."""

    def __init__(self, part: Any, seeds: Any, fanouts: Any = (15, 10), batch_size: int = 1024, shuffle: bool = True,
                 seed: int = 0, node_data: Union[str, Sequence[str], None] = DEFAULT_NODE_DATA, labels: Optional[str] = "label",
                 replace: bool = False, drop_last: bool = False, timeout_s: Optional[float] = None, fuse: bool = True,
                 pyg: bool = False, disjoint: bool = False):
        self.part, self.device = part, part.device
        self.disjoint = bool(disjoint)
        self.batch_size, self.shuffle, self.seed = int(batch_size), bool(shuffle), int(seed)
        self.replace, self.drop_last, self.pyg = bool(replace), bool(drop_last), bool(pyg)
        self.node_data_names, self.labels = present_defaults(part, node_data, labels)
        self.timeout_s = float(timeout_s if timeout_s is not None else part.timeout_s)
        self.layout = trainer_layout(part.num_parts, self.timeout_s, path=part.directory)
        self.rank, self.world_size = self.layout.rank, self.layout.world_size
        self.stats = {"batches": 0, "sampled_edges": 0, "seeds": 0, "collective_s": 0.0, "total_s": 0.0, "collectives": 0}
        self.exchange = Exchange(self.layout, self.timeout_s, self.stats)
        self.fuse = bool(fuse) and self.exchange.active
        self.plan = plan_for(part, seeds, fanouts, self.node_data_names, self.labels)
        self.seeds, self.rows = self.plan.seeds, self.plan.rows
        self.num_batches = self._agree(self._problem())
        self.sampler = LocalSampler(part, self.plan.hop_fanouts, self.replace)
        self.num_hops = len(self.plan.hop_fanouts)
        # one partition on a GPU: hops as [columns, fanout] tables, one host synchronisation each (the sizes);
        # settable, e.g. to run that path on the CPU; not disjoint (its keys have no scratch map)
        self.table_hops = self.device.type == "cuda" and not self.exchange.active
        self.epoch = 0
        self._relabel: Optional[Union[Relabeller, KeyRelabeller]] = None

    # -- set-up

    def _problem(self) -> Optional[str]:
        """What is wrong with this rank's arguments or its place in the job (None: nothing)."""
        if self.plan.problem:
            return self.plan.problem
        if self.batch_size < 1:
            return f"batch_size must be >= 1, got {self.batch_size}"
        part, layout = self.part, self.layout
        if self.world_size > 1 and layout.partition != part.rank:
            return wrong_partition(self.rank, self.world_size, part.num_parts, part.rank, "the loader")
        if self.world_size == 1 and part.num_parts > 1:
            return f"has {part.num_parts} partitions: initialise torch.distributed with one rank per partition (or several)"
        return None

    def _batches_for(self, count: int) -> int:
        return count // self.batch_size if self.drop_last else math.ceil(count / self.batch_size)

    def _agree(self, problem: Optional[str]) -> int:
        """Check the settings agree on every rank (raising on all of them otherwise); the common batch count."""
        # batch_size and drop_last too: every rank counts the batches of every rank's seeds with its own
        settings = (f"{self.plan.settings} replace={self.replace} fuse={self.fuse} disjoint={self.disjoint} "
                    f"batch_size={self.batch_size} "
                    f"drop_last={self.drop_last} manifest={self.part.digest}")
        agree_or_raise(problem, settings, "the DistNeighborLoader settings", self.timeout_s, path=self.part.directory)
        counts = exchange_counts([self.seeds.numel()] * self.world_size, timeout_s=self.timeout_s)
        return max(self._batches_for(c) for c in counts)

    # -- iteration

    def __len__(self) -> int:
        return self.num_batches

    def set_epoch(self, epoch: int) -> None:
        """Use `epoch` for the next iteration's shuffle and sampling (iterating advances it by one)."""
        self.epoch = int(epoch)

    def _generator(self, salt: int) -> torch.Generator:
        return epoch_generator(self.seed, self.epoch, self.rank, salt, self.device)

    def __iter__(self) -> Iterator[Any]:
        seeds = self.seeds
        if self.shuffle and seeds.numel():
            perm = torch.randperm(seeds.numel(), generator=self._generator(0), device=self.device)
            seeds = seeds[perm]
        gen = self._generator(1)
        self.epoch += 1
        for i in range(self.num_batches):
            start = time.perf_counter()
            sampled = self.sample(seeds[i * self.batch_size : (i + 1) * self.batch_size], gen)
            batch = self.present(sampled)
            self.stats["total_s"] += time.perf_counter() - start
            self.stats["batches"] += 1
            self.stats["sampled_edges"] += sampled.batch.num_edges
            self.stats["seeds"] += sampled.batch.batch_size
            yield batch.to_pyg() if self.pyg else batch

    def present(self, sampled: Sampled) -> Union[Batch, HeteroBatch]:
        """The batch as the user sees it: a Batch with x / node_data / y (homogeneous) or split by type."""
        b, first = sampled.batch, self.node_data_names[0] if self.node_data_names else None
        if self.plan.input_type is not None:
            return typed_batch(b, self.part, self.sampler.sampled_types, self.plan.input_type, sampled.node_data, sampled.y, first)
        b.node_data, b.y = dict(sampled.node_data), sampled.y
        b.x = b.node_data[first] if first is not None else None
        return b

    # -- one batch

    def sample(self, seeds: torch.Tensor, gen: torch.Generator, seed_batch: Optional[torch.Tensor] = None) -> Sampled:
        """One batch for this rank's `seeds` (erased global ids on the device, distinct unless disjoint; any number,
        none too): the hops, then the rows. With disjoint sampling `seed_batch` is each seed's `batch` value (None:
        its position). A collective: every rank calls it as often, in the same order (a link loader or layer-wise
        inference reuses the loader through it and `present`)."""
        if self._relabel is None:  # the global-size map, made once, on first use (disjoint keys: sorted instead)
            self._relabel = KeyRelabeller() if self.disjoint else Relabeller(self.part.num_nodes, self.device)
        relabel, rows, carry = self._relabel, self.rows, self.fuse
        if self.disjoint:  # a node of seed i is the key i * num_nodes + node: the seeds' keys are distinct
            seeds = torch.arange(seeds.numel(), device=self.device).mul_(self.part.num_nodes).add_(seeds)
        relabel.start(seeds)
        n_ids, srcs, dsts, eids = [seeds], [], [], []
        got: dict[Hashable, list[torch.Tensor]] = {key: [] for key in rows.data_keys + [rows.label_key]}  # per n_id segment
        frontier, first = seeds, 0
        num_nodes, num_edges = [int(seeds.numel())], []
        nothing = [[] for _ in rows.kind_keys]
        for hop in range(self.num_hops):
            final = hop == self.num_hops - 1
            if self.table_hops and not self.disjoint and self.sampler.table_fanout(hop):
                pos, dst, eid, added = self._table_hop(frontier, hop, gen, first, final)
            else:
                answer = self._keyed_round(frontier, rows.keys(hop == 0) if carry else nothing, (hop, gen))
                dst = torch.repeat_interleave(answer.order + first, answer.counts, output_size=int(answer.src.numel()))
                (pos, added), eid = relabel.add_unique(answer.src, final=final), answer.eid
                for key, part_rows in answer.node_rows.items():
                    got[key].append(part_rows)
            first += int(frontier.numel())
            srcs.append(pos), dsts.append(dst), eids.append(eid), n_ids.append(added)
            num_nodes.append(int(added.numel())), num_edges.append(int(pos.numel()))
            frontier = added
        relabel.reset()
        n_id = torch.cat(n_ids)
        if carry and rows.data_keys:  # the last hop's nodes: one round of requests and rows for every array
            for key, part_rows in self._keyed_round(frontier, rows.keys(False), None).node_rows.items():
                got[key].append(part_rows)
        node_data = {key: torch.cat(got[key]) for key in rows.data_keys} if carry else self._fetch_after(n_id)
        y = None
        if rows.label_key is not None:
            y = got[rows.label_key][0] if carry else \
                self._keyed_round(seeds, rows.only(rows.label_key, rows.seed_kind), None).node_rows[rows.label_key]
        edge_index = torch.empty((2, sum(num_edges)), dtype=torch.int64, device=self.device)
        torch.cat(srcs, out=edge_index[0])
        torch.cat(dsts, out=edge_index[1])
        batch = Batch(n_id=n_id, batch_size=int(seeds.numel()), edge_index=edge_index, e_id=torch.cat(eids),
                      num_sampled_nodes=num_nodes, num_sampled_edges=num_edges)
        if self.disjoint:  # keys back to global ids, and each node's seed
            seed_of = torch.div(n_id, self.part.num_nodes, rounding_mode="floor")
            batch.batch = seed_of if seed_batch is None else torch.index_select(seed_batch.to(self.device), 0, seed_of)
            batch.n_id = torch.remainder(n_id, self.part.num_nodes)
        return Sampled(batch, node_data, y)

    def _table_hop(self, frontier: torch.Tensor, hop: int, gen: torch.Generator, first: int, final: bool):
        """One hop with one partition as a [columns, fanout] table: (positions of the sources, destinations, edge
        ids, nodes added), with one host synchronisation (Relabeller.add_masked); local ids are the global ids."""
        part = self.part
        table = self.sampler.sample_table(frontier, hop, gen)
        positions = table.clamp(min=0).reshape(-1)
        src = torch.index_select(part.indices, 0, positions)
        pos, added, keep = self._relabel.add_masked(src, (table >= 0).reshape(-1), final=final)
        eid = torch.index_select(part.edge_ids, 0, torch.index_select(positions, 0, keep))
        dst = torch.div(keep, table.shape[1], rounding_mode="floor").add_(first)
        return pos, dst, eid, added

    def _fetch_after(self, n_id: torch.Tensor) -> dict[Hashable, torch.Tensor]:
        """Rows of every array for the whole node list, after sampling: one round per array (and kind)."""
        rows = self.rows
        out = {}
        for kind, keys in enumerate(rows.kind_keys):
            for key in keys:
                out[key] = self._keyed_round(n_id, rows.only(key, kind), None).node_rows[key]
        return out

    def _keyed_round(self, frontier: torch.Tensor, keys: list[list[Hashable]],
                     sample: Optional[tuple[int, torch.Generator]]) -> _Answer:
        """_round for a frontier of keys (node ids, or disjoint keys seed * num_nodes + node): across partitions each
        distinct node is asked once, drawn once per key when sampling, and the answers (edges, sources as keys,
        rows) spread back to the keys; with one partition nothing travels and the keys' nodes are sampled as they are."""
        if not self.disjoint:
            return self._round(frontier, keys, sample)
        n = self.part.num_nodes
        nodes = torch.remainder(frontier, n)
        if not self.exchange.active:
            answer = self._round(nodes, keys, sample)
            order, node_rows = answer.order, answer.node_rows
        else:
            nodes, inverse, mult = torch.unique(nodes, return_inverse=True, return_counts=True)
            answer = self._round(nodes, keys, sample, mult if sample is not None else None)
            node_rows, order = self._spread_rows(answer.node_rows, keys, nodes, inverse), answer.order
            if sample is not None:  # the draws of node u answer, in group order, the keys of u in frontier order
                rank = torch.empty_like(order).index_copy_(0, order, torch.arange(nodes.numel(), device=self.device))
                order = torch.sort(torch.index_select(rank, 0, inverse), stable=True).indices
        src = answer.src
        if sample is not None:  # sources as keys of the seed of the key they were drawn for
            seed_base = torch.index_select(frontier, 0, order).div_(n, rounding_mode="floor").mul_(n)
            src = src + torch.repeat_interleave(seed_base, answer.counts, output_size=int(src.numel()))
        return _Answer(answer.counts, src, answer.eid, order, node_rows)

    def _spread_rows(self, node_rows: dict[Hashable, torch.Tensor], keys: list[list[Hashable]], nodes: torch.Tensor,
                     inverse: torch.Tensor) -> dict[Hashable, torch.Tensor]:
        """Rows of the sorted distinct `nodes` (per array, the rows of the nodes of its kind) for the keys
        nodes[inverse], in key order among the keys of that kind."""
        if len(keys) == 1:
            return {key: torch.index_select(rows, 0, inverse) for key, rows in node_rows.items()}
        # typed: a node type's erased ids are one range, so its nodes are one block of the sorted nodes
        starts = torch.searchsorted(nodes, self.part.node_offsets)
        kind = torch.searchsorted(starts, torch.arange(nodes.numel(), device=nodes.device), right=True) - 1
        within = torch.arange(nodes.numel(), device=nodes.device) - torch.index_select(starts, 0, kind)
        key_kind, key_within = torch.index_select(kind, 0, inverse), torch.index_select(within, 0, inverse)
        out = {}
        for t, names in enumerate(keys):  # a loop over node types
            at = torch.masked_select(key_within, key_kind == t)
            out.update((name, torch.index_select(node_rows[name], 0, at)) for name in names if name in node_rows)
        return out

    def _round(self, frontier: torch.Tensor, keys: list[list[Hashable]], sample: Optional[tuple[int, torch.Generator]],
               draws: Optional[torch.Tensor] = None) -> _Answer:
        """Requests for `frontier` to their owners; answers: the sampled in-edges (when `sample` = (hop, generator);
        `draws[i]` independent samples of frontier[i], one when None, the counts then per draw) and the rows of
        `keys` of the flagged requests. 4 collectives with sampling, 3 for rows alone, none in a world of one
        partition."""
        rows, exchange = self.rows, self.exchange
        layouts = rows.layouts(keys)
        widths = [layout.row_bytes for layout in layouts]
        located = rows.located(frontier, widths)
        if not exchange.active:
            return self._local_round(frontier, keys, layouts, located, sample, draws)
        asked = None
        if sample is None:  # rows alone: only the nodes whose rows are not held here are asked for
            asked = torch.nonzero(rows.needs(*located, widths)).reshape(-1)
        owner, cols = self.part.book.owner_and_local(frontier if asked is None else torch.index_select(frontier, 0, asked))
        send_cols, send_counts, order = exchange.group_by_partition(cols, owner)
        order = order if asked is None else torch.index_select(asked, 0, order)
        req = rows.requests(located, order, send_counts, widths)
        recv_counts = exchange.counts(send_counts)
        flagged = send_cols * 2 + req.need
        if draws is not None:  # each request with its number of draws
            draws = torch.index_select(draws, 0, order)
            flagged = exchange.rows(torch.stack([flagged, draws], 1), send_counts, recv_counts)
            flagged, recv_draws = flagged[:, 0], flagged[:, 1]
        else:
            flagged = exchange.rows(flagged, send_counts, recv_counts)
        cols, wanted = torch.div(flagged, 2, rounding_mode="floor"), torch.remainder(flagged, 2).bool()
        src = eid = counts = cols[:0]
        peers = exchange.num_peers
        count_split = got_counts = [0] * peers  # rows alone: no counts ahead of them
        if sample is not None:
            drawn, count_split, got_counts = cols, recv_counts, send_counts
            if draws is not None:  # a column per draw; counts per draw both ways
                drawn = torch.repeat_interleave(cols, recv_draws, output_size=int(recv_draws.sum()))
                count_split = [int(d.sum()) for d in recv_draws.split(recv_counts)]
                got_counts = [int(d.sum()) for d in draws.split(send_counts)]
            counts, src, eid = self.sampler.sample(drawn, *sample)
        packed, per_kind = rows.pack_owned(keys, layouts, cols, wanted, recv_counts)
        message, sizes = _answer_message(packed, per_kind, counts, count_split)
        got_sizes = [8 * c + sum(n * layout.row_bytes for n, layout in zip(kinds, layouts)) for c, kinds in zip(got_counts, req.per_kind)]
        got = exchange.rows(message, sizes, got_sizes)
        got_counts_t, row_bytes = _split_answers(got, got_counts, got_sizes, req.per_kind, layouts)
        if sample is not None:  # the sampled edges, sized by the counts both sides now know
            answer_rows = [int(c.sum()) for c in counts.split(count_split)]
            got_rows = [int(c.sum()) for c in got_counts_t.split(got_counts)]
            edges = exchange.rows(torch.stack([src, eid], 1), answer_rows, got_rows)
            src, eid = edges[:, 0], edges[:, 1]
        return _Answer(got_counts_t, src, eid, order, rows.frontier_rows(keys, layouts, row_bytes, req))

    def _local_round(self, frontier, keys, layouts, located, sample, draws) -> _Answer:
        """A round with one partition: every node is owned here (local ids are the global ids, SPEC.md 4.1)."""
        order = torch.arange(frontier.numel(), device=self.device)
        src = eid = counts = frontier[:0]
        if sample is not None:
            cols = frontier if draws is None else torch.repeat_interleave(frontier, draws, output_size=int(draws.sum()))
            counts, src, eid = self.sampler.sample(cols, *sample)
        req = Requests(located[0], located[1], order, torch.zeros_like(frontier, dtype=torch.bool), [])
        return _Answer(counts, src, eid, order, self.rows.frontier_rows(keys, layouts, [None] * len(layouts), req))


class HeteroNeighborLoader(NeighborLoader):
    """The loader of a typed partition (what DistNeighborLoader builds for one): the same loader, whose
    batches are HeteroBatch (HeteroData with pyg=True); seeds {ntype: ids}, fanouts {(s, r, d): [per hop]}."""


def _answer_message(packed: list[Optional[torch.Tensor]], per_kind: list[list[int]], counts: torch.Tensor,
                    count_split: list[int]) -> tuple[torch.Tensor, list[int]]:
    """Per requester, in peer order: the counts of its columns (int64 bytes), then the rows it flagged, kind after
    kind (`packed[kind]`: [n, row_bytes] in peer order, `per_kind[peer][kind]` rows each); the byte sizes."""
    blocks = [p for p in packed if p is not None]
    if len(packed) == 1 and blocks and not counts.numel():  # rows of one kind alone, already in peer order: no copy
        return blocks[0].reshape(-1), [n[0] * blocks[0].shape[1] for n in per_kind]
    split = [p.split([n[t] for n in per_kind]) if p is not None else None for t, p in enumerate(packed)]
    pieces, sizes = [], []
    for b, c_counts in enumerate(counts.split(count_split)):
        block = [c_counts.contiguous().view(torch.uint8)] + [p[b].reshape(-1) for p in split if p is not None]
        pieces += block
        sizes.append(sum(int(p.numel()) for p in block))
    return torch.cat(pieces), sizes


def _split_answers(got: torch.Tensor, got_counts: list[int], got_sizes: list[int], per_kind: list[list[int]],
                   layouts: list[RowLayout]) -> tuple[torch.Tensor, list[Optional[torch.Tensor]]]:
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
