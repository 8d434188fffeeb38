"""The distributed sampling protocol: one batch's hops and rows across partitions, with collectives only.

    protocol = DistSampler(part, sampler, exchange, rows, disjoint=False)
    sampled = protocol.sample(seeds, generator)      # a collective: every rank calls it as often, seeds or none

The node loader, the link loader and layer-wise inference compose it
(gpart.runtime.loaders); its pieces are passed in: the owner's sampler
(gpart.runtime.sampling.neighbor_sampler.LocalSampler, or one with its
interface), the exchange (gpart.runtime.partition.exchange: the collectives,
routed to one serving rank per partition) and the row fetcher
(gpart.runtime.sampling.row_fetcher, reading a row source).

Per hop the frontier (the nodes the previous hop added; the seeds first) is
grouped by owning partition; a request round sends every owner its
requests (local column ids, a flag each: whether the requester needs the
node's rows: it does not when it holds them, owned or a halo node whose
rows the source holds), the owner samples the columns and answers with the
sampled counts, the flagged nodes' rows (the first hop's also with the
seeds' labels) and the sampled edges: 3 collectives per hop. The first is
a count table (gpart.runtime.partition.exchange: per owner, the requests,
the flagged ones per node kind, the draws), from which both sides know
every size of the round; the edges travel in the answer in slots sized by
the hop's bound on edges per column (the fanout; gpart.runtime.sampling.
answer_message), so no round waits for the counts to size the edges. A hop
without such a bound (fanout -1, a sampler that states none, or a fanout
past round_sizes.MAX_EDGE_SLOTS) sends its edges in a fourth collective, sized by the
counts. Sources and edge ids travel as int32 when every id fits. The
answers are relabelled into the batch's node list; a homogeneous
partition's hops list the nodes they add with those whose rows the
partition stores first, then the others by owner
(gpart.runtime.sampling.grouped_rows), so every later round's rows are
one gather here and one contiguous copy of the answers, with no scatter
(the last round's answers land in the batch's tensor as received). The
rounds' byte messages are reused buffers (CPU). The last hop's added
nodes are never requested for sampling, so their rows take one more round
of flagged requests and rows (3 collectives, every array at once). A rank
without seeds (an empty batch) makes the same calls, so it keeps serving
its peers' requests until every rank is done. With one partition nothing
travels: the hops sample locally and rows are read; when the sampler takes
every hop as a table (table_batches()), the batch runs at fixed capacities
with one host synchronisation (gpart.runtime.sampling.table_hops), or none
as a padded batch (sample_padded), replayed from CUDA graphs with `replay`.
Across partitions, every size a round reads to the host goes through
Exchange.host (counted as "host_syncs"): 3 per sampling round (the count
table, the owner's edges per requester, the requester's edges per owner)
and 1 per round of rows alone.

With carry_rows=False (for benchmarks and equivalence tests, not the public
loaders) the rows are fetched after sampling instead, through the same
round, one array at a time over the whole node list (and the labels over
the seeds): 3 collectives per array and node type + 3; the batches are the
same.

The loaders may run this protocol on a background thread (prefetch, gpart.runtime.loaders.prefetch); it is then
the only caller of the exchange's collectives until the iteration ends.

disjoint=True (PyG's disjoint): every seed gets its own sub-graph, its nodes
keys seed index * num_nodes + global id; the rounds over keys are
gpart.runtime.sampling.disjoint_round's. With `seed_time` (temporal draws,
disjoint only) every key draws at its seed's time, on one partition or
across several (the requests then carry each (node, time) pair's time in
the same round).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Hashable, Optional, Union

import torch

from gpart.base.errors import InputError
from gpart.runtime.partition.exchange import Exchange
from gpart.runtime.partition.interface import Partition
from gpart.runtime.sampling import round_sizes
from gpart.runtime.sampling.answer_message import EdgeSection, answer_message, answer_sizes, split_answers, used_edges
from gpart.runtime.sampling.batch_rows import rows_of
from gpart.runtime.sampling.disjoint_round import keyed_round
from gpart.runtime.sampling.grouped_rows import (
    RoundBuffers,
    Segment,
    grouped_answer,
    held_count,
    held_first_order,
    lists_rows_held_first,
    received_in_place,
    rows_into,
)
from gpart.runtime.sampling.kernels import KeyRelabeller, Relabeller
from gpart.runtime.sampling.neighbor_sampler import LocalSampler
from gpart.runtime.sampling.padded_batches import PaddedBatches
from gpart.runtime.sampling.round_answer import Draw, GroupedRows, Keys, RoundAnswer
from gpart.runtime.sampling.round_sizes import RoundSizes, count_table, edge_bound
from gpart.runtime.sampling.row_fetcher import Requests, RowFetcher
from gpart.runtime.sampling.sampled import Sampled
from gpart.runtime.sampling.table_hops import PaddedSampled


@dataclass
class _Hops:
    """The hops of one batch as they accumulate: per hop the edges (source positions, destinations, edge ids) and
    the nodes added; per key the rows of each n_id segment."""

    n_ids: list[torch.Tensor]
    got: dict[Hashable, list[Segment]]
    srcs: list[torch.Tensor]
    dsts: list[torch.Tensor]
    eids: list[torch.Tensor]
    num_nodes: list[int]
    num_edges: list[int]


class DistSampler:
    """The protocol over one partition's pieces (see the module); `sample` gives one batch."""

    def __init__(self, part: Partition, sampler: LocalSampler, exchange: Exchange, rows: RowFetcher, disjoint: bool = False,
                 carry_rows: bool = True):
        self.part, self.device = part, part.device
        self.sampler, self.exchange, self.rows = sampler, exchange, rows
        self.disjoint = bool(disjoint)
        self.carry_rows = bool(carry_rows) and exchange.active  # one partition: rows are read, nothing to carry
        self.num_hops = sampler.num_hops
        self._relabel: Optional[Union[Relabeller, KeyRelabeller]] = None
        self._padded: Optional[PaddedBatches] = None
        self.replay = False  # padded batches replayed from CUDA graphs (gpart.runtime.sampling.batch_graphs)
        # buffer sets per batch size that padded batches rotate through: a padded batch's tensors hold until this
        # many later batches of its size (a loader preparing batches ahead must keep prefetch + 2); set before use
        self.padded_keep = 2
        # False: table hops one at a time with a host synchronisation each (the path before fixed capacities, which
        # benchmarks run beside this one); exact and uniform too, from other draws
        self.fixed_capacity = True
        self._bounds: Optional[list[Optional[int]]] = None
        self.seed_time: Optional[torch.Tensor] = None  # the batch's seed times while it samples (temporal draws)
        # ids travel as int32 pairs when every global node and edge id fits
        self._edge_dtype = torch.int32 if max(part.num_nodes, part.num_edges) < 2**31 else torch.int64
        # across partitions, one kind: every hop lists its new nodes held-first (gpart.runtime.sampling.grouped_rows),
        # whether rows travel or not (the batches are the same), and the rounds that carry rows take them so
        self.lists_held_first = exchange.active and not self.disjoint and not part.typed
        self.held_first = self.lists_held_first and self.carry_rows and bool(rows.data_keys) and lists_rows_held_first(rows)
        self._buffers = RoundBuffers(self.device)

    def sample(self, seeds: torch.Tensor, gen: torch.Generator, seed_batch: Optional[torch.Tensor] = None,
               seed_time: Optional[torch.Tensor] = None) -> Sampled:
        """One batch for this rank's `seeds` (erased global ids on the device, distinct unless disjoint; any number,
        none too): the hops, then the rows. With disjoint sampling `seed_batch` is each seed's `batch` value (None:
        its position), `seed_time` each seed's time for temporal draws (sampler.temporal set). A
        collective: every rank calls it as often, in the same order."""
        if seed_time is not None and (not self.disjoint or getattr(self.sampler, "temporal", None) is None):
            raise InputError(None, "seed_time needs disjoint and sampler.temporal set")
        self.seed_time = None if seed_time is None else seed_time.to(self.device)
        if self.disjoint and self.exchange.active and getattr(self.sampler, "temporal", None) is not None:
            # every rank's requests carry times alike (a rank without seeds too), so the rounds' messages agree
            if seed_time is None and seeds.numel():
                raise InputError(None, "seed_time is needed: sampler.temporal is set and the draws ask other partitions")
            self.seed_time = seeds.new_zeros(0, dtype=torch.float64) if seed_time is None else self.seed_time
        if self.seed_time is not None and self.seed_time.numel() != seeds.numel():
            raise InputError(None, f"seed_time has {self.seed_time.numel()} entries for {seeds.numel()} seeds")
        if seeds.numel() and self.table_batches():  # one partition, table hops: fixed capacities, one synchronisation
            sampled = self._padded_batches().sample(seeds, gen)
            rows = self.rows
            sampled.node_data = {key: rows.read(key, sampled.n_id) for key in rows.data_keys}
            sampled.y = rows.read(rows.label_key, seeds) if rows.label_key is not None else None
            return sampled
        if self._relabel is None:  # the global-size map, made once, on first use (disjoint keys: sorted instead)
            self._relabel = KeyRelabeller() if self.disjoint else Relabeller(self.part.num_nodes, self.device)
        if self.disjoint:  # a node of seed i is the key i * num_nodes + node: the seeds' keys are distinct
            seeds = torch.arange(seeds.numel(), device=self.device).mul_(self.part.num_nodes).add_(seeds)
        hops, frontier = self._hops(seeds, gen)
        n_id = torch.cat(hops.n_ids)
        node_data, y = rows_of(self, hops.got, frontier, seeds, n_id)
        hops.got.clear()  # the answers' pieces point into reused buffers
        edge_index = torch.empty((2, sum(hops.num_edges)), dtype=torch.int64, device=self.device)
        torch.cat(hops.srcs, out=edge_index[0])
        torch.cat(hops.dsts, out=edge_index[1])
        sampled = Sampled(n_id, int(seeds.numel()), edge_index, torch.cat(hops.eids), hops.num_nodes, hops.num_edges,
                          node_data=node_data, y=y)
        if self.disjoint:  # keys back to global ids, and each node's seed
            seed_of = torch.div(n_id, self.part.num_nodes, rounding_mode="floor")
            sampled.batch = seed_of if seed_batch is None else torch.index_select(seed_batch.to(self.device), 0, seed_of)
            sampled.n_id = torch.remainder(n_id, self.part.num_nodes)
        return sampled

    def table_batches(self) -> bool:
        """Whether a batch's hops are all taken as fixed-capacity tables (gpart.runtime.sampling.table_hops): one
        partition, not disjoint, the sampler's table hops on for every hop, without replacement, edges to draw."""
        sampler = self.sampler
        return (self.fixed_capacity and not self.disjoint and not self.exchange.active and not getattr(sampler, "replace", False)
                and self.part.num_edges > 0 and all(sampler.table_fanout(hop) for hop in range(self.num_hops)))

    def sample_padded(self, seeds: torch.Tensor, gen: Optional[torch.Generator], rows: bool = True) -> PaddedSampled:
        """One batch at fixed capacities with no host synchronisation (table_batches() must hold), with the rows of
        its nodes and the seeds' labels (`rows`), replayed from a CUDA graph when `replay` is set and it can be
        (gpart.runtime.sampling.padded_batches). Its tensors are reused `padded_keep` batches of its size later."""
        return self._padded_batches().run(seeds, gen, rows, self.replay)

    def _padded_batches(self) -> PaddedBatches:
        if self._padded is None:
            self._padded = PaddedBatches(self.part, self.sampler, self.rows, self.padded_keep)
        return self._padded

    def _hops(self, seeds: torch.Tensor, gen: torch.Generator) -> tuple[_Hops, torch.Tensor]:
        """Every hop from `seeds` (rows carried in the answers when carry_rows); the last hop's added nodes."""
        relabel, rows = self._relabel, self.rows
        relabel.start(seeds)
        hops = _Hops([seeds], {key: [] for key in rows.data_keys + [rows.label_key]}, [], [], [], [int(seeds.numel())], [])
        frontier, first = seeds, 0
        nothing: Keys = [[] for _ in rows.kind_keys]
        for hop in range(self.num_hops):
            final = hop == self.num_hops - 1
            if not self.disjoint and self.sampler.table_fanout(hop):
                pos, dst, eid, added = self._table_hop(frontier, hop, gen, first, final)
            else:
                keys = rows.keys(hop == 0) if self.carry_rows else nothing
                answer = self.round(frontier, keys, (hop, gen), held_first=True) if self.held_first and hop \
                    else keyed_round(self, frontier, keys, (hop, gen))
                dst = torch.repeat_interleave(answer.order + first, answer.counts, output_size=int(answer.src.numel()))
                (pos, added), eid = relabel.add_unique(answer.src, final=final), answer.eid
                if self.lists_held_first and added.numel():
                    pos, added = relabel.reorder_added(pos, held_first_order(self.part, added), final)
                for key, part_rows in answer.node_rows.items():
                    hops.got[key].append(part_rows)
                if answer.grouped is not None:
                    for key in rows.data_keys:
                        hops.got[key].append(answer.grouped)
            first += int(frontier.numel())
            hops.srcs.append(pos), hops.dsts.append(dst), hops.eids.append(eid), hops.n_ids.append(added)
            hops.num_nodes.append(int(added.numel())), hops.num_edges.append(int(pos.numel()))
            frontier = added
        relabel.reset()
        return hops, frontier

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

    def round(self, frontier: torch.Tensor, keys: Keys, sample: Draw, draws: Optional[torch.Tensor] = None,
              into: Optional[dict[Hashable, torch.Tensor]] = None, rowless: Optional[torch.Tensor] = None,
              held_first: bool = False) -> RoundAnswer:
        """Requests for `frontier` to their owners; answers: the sampled in-edges (when `sample` = (hop, generator[,
        time per frontier node: temporal draws]); `draws[i]` independent samples of frontier[i], one when None, the
        counts then per draw) and the rows of `keys` of the flagged requests (none of the `rowless` ones, whose rows
        another request brings). 3 collectives (a count table, the requests, the answers with their edges; 4 when the
        hop has no edge bound, see the module), none in a world of one partition. held_first: the frontier lists its
        held nodes first (gpart.runtime.sampling.grouped_rows): the rows come as pieces, or written into `into`."""
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
        send_cols, sent_owner, order = exchange.sort_by_partition(cols, owner)
        order = order if asked is None else torch.index_select(asked, 0, order)
        req = rows.requests(located, order, widths)
        if rowless is not None:
            req.need &= ~torch.index_select(rowless, 0, order)
        if draws is not None:
            draws = torch.index_select(draws, 0, order)
        table = RoundSizes(*exchange.count_table(count_table(sent_owner, req, len(layouts), draws, exchange.num_peers)),
                       draws is not None)
        req.per_kind = table.kinds(table.mine)
        time = None if sample is None or len(sample) < 3 else torch.index_select(sample[2], 0, order)
        cols, wanted, recv_draws, recv_time = self._requests(send_cols * 2 + req.need, draws, time, table)
        if sample is None:
            landing = received_in_place(into, keys, layouts[0].row_bytes, held_count(req)) if held_first else None
            answer = self._answer(keys, layouts, cols, wanted, table, None, landing)
            return RoundAnswer(answer[0], cols[:0], cols[:0], order, *self._rows(keys, layouts, answer[1], req, into, held_first))
        total = sum(table.draws(table.theirs))
        drawn = cols if draws is None else torch.repeat_interleave(cols, recv_draws, output_size=total)
        if recv_time is None:
            counts, src, eid = self.sampler.sample(drawn, *sample)
        else:  # each draw at the time its request carried
            col_time = recv_time if draws is None else torch.repeat_interleave(recv_time, recv_draws, output_size=total)
            counts, src, eid = self.sampler.sample(drawn, sample[0], sample[1], col_time)
        got_counts, row_bytes, (src, eid) = self._answer(keys, layouts, cols, wanted, table, (sample[0], counts, src, eid))
        return RoundAnswer(got_counts, src, eid, order, *self._rows(keys, layouts, row_bytes, req, into, held_first))

    def _rows(self, keys, layouts, row_bytes, req, into, held_first) -> tuple[dict, Optional[GroupedRows]]:
        """The frontier's rows a round brought: scattered into frontier order, or as held-first pieces (or written into
        `into`)."""
        if not held_first:
            return self.rows.frontier_rows(keys, layouts, row_bytes, req, into), None
        if into is not None:
            return rows_into(self.rows, keys, layouts, row_bytes, req, into), None
        return {}, grouped_answer(keys, layouts, row_bytes, req)

    def _requests(self, flagged: torch.Tensor, draws: Optional[torch.Tensor], time: Optional[torch.Tensor],
                  table: RoundSizes) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor]]:
        """The requests (column * 2 + rows flag, in group order) to their owners, each with its number of draws and
        its time where given (float64 bits as int64): one collective. The owner's side: (columns, rows wanted,
        draws, times) of the requests it received."""
        exchange = self.exchange
        columns = [flagged] + ([] if draws is None else [draws])
        if time is not None:
            columns.append(time.to(torch.float64).view(torch.int64))
        send = flagged if len(columns) == 1 else torch.stack(columns, 1)
        got = exchange.rows(send, table.requests(table.mine), table.requests(table.theirs))
        flagged = got if len(columns) == 1 else got[:, 0]
        recv_draws = None if draws is None else got[:, 1]
        recv_time = None if time is None else got[:, -1].contiguous().view(torch.float64)
        return torch.div(flagged, 2, rounding_mode="floor"), torch.remainder(flagged, 2).bool(), recv_draws, recv_time

    def _answer(self, keys: Keys, layouts: list, cols: torch.Tensor, wanted: torch.Tensor, table: RoundSizes,
                drawn: Optional[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]],
                landing: Optional[torch.Tensor] = None):
        """The owner answers the requests it received (`cols`, `wanted` flags; `drawn` = (hop, counts, sources, edge
        ids) of its draws when sampling) and this rank receives its own answers: (sampled counts per request or draw,
        per kind the flagged rows' bytes, and when sampling (sources, edge ids)). One collective, or two when the
        hop has no edge bound (the edges then follow, sized by the counts). The rows alone are received into
        `landing` where given; the messages both ways go through reused buffers."""
        exchange, rows, reuse = self.exchange, self.rows, self._buffers.get
        packed = rows.pack_owned(keys, layouts, cols, wanted, lambda nbytes: reuse("rows", nbytes))
        if drawn is None:  # rows alone: no counts ahead of them
            none = [0] * exchange.num_peers
            message, sizes = answer_message(packed, table.kinds(table.theirs), cols[:0], none)
            got_sizes = answer_sizes(none, table.kinds(table.mine), layouts)
            got = exchange.rows(message, sizes, got_sizes, out=landing if landing is not None else reuse("got rows", sum(got_sizes)))
            return split_answers(got, none, got_sizes, table.kinds(table.mine), layouts)[:2]
        hop, counts, src, eid = drawn
        count_split, got_split = table.draws(table.theirs), table.draws(table.mine)
        edges = torch.stack([src, eid], 1).to(self._edge_dtype)
        edge_split = self._block_sums(counts, count_split)
        bound = self._edge_bound(hop)
        mine = theirs = None
        if bound is not None:  # the edges travel in the answers, in slots sized by what was asked
            mine = EdgeSection([bound * n for n in got_split], self._edge_dtype)
            theirs = EdgeSection([bound * n for n in count_split], self._edge_dtype)
        message, sizes = answer_message(packed, table.kinds(table.theirs), counts, count_split, edges, edge_split, theirs,
                                        lambda nbytes: reuse("message", nbytes))
        got_sizes = answer_sizes(got_split, table.kinds(table.mine), layouts, mine)
        got = exchange.rows(message, sizes, got_sizes, out=reuse(f"got hop {hop}", sum(got_sizes)))
        got_counts, row_bytes, sections = split_answers(got, got_split, got_sizes, table.kinds(table.mine), layouts, mine)
        used = self._block_sums(got_counts, got_split)
        if mine is not None:
            got_edges = used_edges(sections, used, mine)
        else:  # the sampled edges, sized by the counts both sides now know
            got_edges = exchange.rows(edges, edge_split, used).to(torch.int64)
        return got_counts, row_bytes, (got_edges[:, 0], got_edges[:, 1])

    def _block_sums(self, values: torch.Tensor, split: list[int]) -> list[int]:
        """The sums of `values` over consecutive blocks of `split` items: one host read."""
        ends = torch.tensor(list(itertools.accumulate(split, initial=0)), dtype=torch.int64, device=values.device)
        total = torch.cat([values.new_zeros(1), torch.cumsum(values, 0)])
        return self.exchange.host(torch.index_select(total, 0, ends[1:]) - torch.index_select(total, 0, ends[:-1]))

    def _edge_bound(self, hop: int) -> Optional[int]:
        """The most edges one draw of hop `hop` can give (None: no bound known, or too large to pad to)."""
        if self._bounds is None:
            self._bounds = [edge_bound(self.sampler, h) for h in range(self.num_hops)]
        bound = self._bounds[hop]
        return bound if bound is not None and 0 < bound <= round_sizes.MAX_EDGE_SLOTS else None

    def _local_round(self, frontier, keys, layouts, located, sample, draws) -> RoundAnswer:
        """A round with one partition: every node is owned here (local ids are the global ids, SPEC.md 4.1)."""
        order = torch.arange(frontier.numel(), device=self.device)
        src = eid = counts = frontier[:0]
        if sample is not None:
            cols = frontier if draws is None else torch.repeat_interleave(frontier, draws, output_size=int(draws.sum()))
            counts, src, eid = self.sampler.sample(cols, *sample)
        req = Requests(located[0], located[1], order, torch.zeros_like(frontier, dtype=torch.bool), [])
        return RoundAnswer(counts, src, eid, order, self.rows.frontier_rows(keys, layouts, [None] * len(layouts), req))

