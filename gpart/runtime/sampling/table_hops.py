"""A batch's hops as fixed-capacity tables with no host synchronisation: the device path with one partition.

    hops = TableHops(part, fanouts=[15, 10, 5], draw=draw_for(part))   # per batch shape: buffers, capacities
    padded = hops.run(seeds, generator)     # no host synchronisation: sizes stay on the device
    sampled = trim(padded)                  # the compact batch: one synchronisation (the final sizes)

Capacities are known from the batch shape alone: hop h samples a frontier of
at most C_h columns (C_0 the seeds, C_{h+1} = min(C_h x F_h, num_nodes)) into
a [C_h, F_h] table, its unused slots padded. Every array a hop touches is
sized by these capacities, so nothing waits on the device's counts:

- sampling: one [C_h, F_h] table of CSC positions and source ids per hop
  (gpart.runtime.sampling.kernels.floyd_columns, or the fused kernel of
  gpart.runtime.sampling.fused_floyd on CUDA); padding columns are the
  sentinel id num_nodes, whose in-degree is 0;
- relabelling: through a global-size map of int32 codes (code = position in
  the batch's node list + 1; 0 is the sentinel, which no claim beats). Every
  table entry claims base + 1 + its index (base: the node list's capacity so
  far, above every listed code) with one scatter "amin"; an entry whose claim
  won is a new node's first occurrence, and its code is the count of
  positions taken so far (a device scalar) + its rank among the winners.
  A per-hop lookup table (identity below base, the new codes above) turns
  every entry's map value into its code in one gather, so the positions are
  compact from the start: n_id is the seeds, then each hop's new nodes in
  first-appearance order, then padding; the next frontier is written the
  same way into its own capacity-sized buffer;
- sizes: nodes and edges per hop are counted on the device.

`run` gives a PaddedSampled: n_id (padding: num_nodes + 1), edge_index as
tables flattened hop after hop (the source -1 in unused slots), e_id, the
valid-slot mask, and the sizes as a device tensor. `trim` reads the sizes
(the one host synchronisation of a batch) and compacts: its batch is the
padded batch without its padding. Buffers are reused: a padded batch's
tensors hold until `keep` later batches of the same shape (clone to keep
one longer); a trimmed batch owns its tensors.

The draws are exact and uniform per column (min(in-degree, fanout) distinct
in-edges, each subset equally likely) and reproduce for the same generator
state; they differ from the compact hops' draws (gpart.runtime.loaders.node
says what reproduces across paths). Homogeneous, non-disjoint, one
partition, positive fanouts (the protocol checks: gpart.runtime.sampling.protocol).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Hashable, Optional

import torch

from gpart.runtime.sampling.kernels import HopTable, TableConstants, floyd_columns
from gpart.runtime.sampling.sampled import Sampled

_UNSET = torch.iinfo(torch.int32).max
# draw(cols [C], hop, k, generator, out): one hop's table into `out` (kernels.floyd_columns' contract); generator
# None: the draws' seeds were written beforehand (a CUDA graph's replay)
Draw = Callable[[torch.Tensor, int, int, Optional[torch.Generator], HopTable], None]


@dataclass
class PaddedSampled:
    """One batch at fixed capacities (see the module). n_id: [node capacity], the valid nodes first (seeds, then
    each hop's), padding num_nodes + 1; edge_index: [2, edge capacity], hop h's [C_h, F_h] table flattened after
    hop h - 1's, source -1 in unused slots; e_id: unspecified where `valid` is False; sizes: int32 device tensor
    [2 H]: the nodes listed after each hop (cumulative), then the valid slots up to the end of each hop
    (cumulative)."""

    n_id: torch.Tensor
    batch_size: int
    edge_index: torch.Tensor
    e_id: torch.Tensor
    valid: torch.Tensor
    sizes: torch.Tensor
    fanouts: list[int]
    node_caps: list[int]  # C_0 .. C_H: seeds, then the nodes each hop may add
    edge_caps: list[int]  # C_h x F_h per hop
    edge_rows: tuple[torch.Tensor, ...] = ()  # edge_index's two rows (views: trim gathers each, faster than both at once)
    node_data: dict[Hashable, torch.Tensor] = field(default_factory=dict)  # rows of n_id (unspecified at padding)
    y: Optional[torch.Tensor] = None
    x: Optional[torch.Tensor] = None  # the first node data's rows, as a loader presents them

    def trim(self) -> Sampled:
        """The compact batch (see trim)."""
        return trim(self)


class _Buffers:
    """The device arrays of one batch shape (see TableHops.run); views are made once, here.

    `counts` holds, per hop h, [S_h, first occurrence flags of its E_h entries]: S_h (where hop h's new nodes
    start in n_id) prefixes the flags, so their running sum is each new node's code directly. Its cumulative
    sums land in `lookups`: per hop [identity 0..base, S_h, S_h + rank of each entry]; S_{h+1}, the last
    of them, is also the first element of hop h + 1's counts (the same memory), so no copy carries it over.
    """

    def __init__(self, seeds: int, fanouts: list[int], num_nodes: int, device: torch.device):
        caps = [seeds]
        for f in fanouts:
            caps.append(min(caps[-1] * f, num_nodes))
        edge_caps = [c * f for c, f in zip(caps, fanouts)]
        self.caps, self.edge_caps, self.fanouts = caps, edge_caps, list(fanouts)
        i32 = dict(dtype=torch.int32, device=device)
        total_nodes, total_edges = sum(caps), sum(edge_caps)
        self.nid = torch.empty(1 + total_nodes, dtype=torch.int64, device=device)  # index 0: where losers write
        self.nid_body = self.nid[1:]
        self.seed_slot = self.nid[1:1 + seeds]
        self.seed_codes = torch.arange(1, seeds + 1, **i32)
        self.edges = torch.empty((3, total_edges), dtype=torch.int64, device=device)  # source, destination, e_id
        self.src_row, self.dst_row, self.eid_row, self.edge_index = self.edges[0], self.edges[1], self.edges[2], self.edges[:2]
        self.codes = torch.empty(total_edges, **i32)
        self.valid = torch.empty(total_edges, dtype=torch.bool, device=device)
        self.counted = torch.empty(total_edges, **i32)
        self.pos = torch.empty(total_edges, dtype=torch.int64, device=device)
        self.sizes = torch.empty(2 * len(fanouts), **i32)
        self.node_sizes, self.edge_sizes = self.sizes[:len(fanouts)], self.sizes[len(fanouts):]
        bases = [sum(caps[:h + 1]) for h in range(len(fanouts))]  # every code listed before hop h is at most bases[h]
        lookup_len = [b + 2 + e for b, e in zip(bases, edge_caps)]
        # lookups and counts in one buffer: [counts_0 [n0, flags_0]] [lookup_0] [flags_1] [lookup_1] [flags_2] ...
        self.table = torch.empty(sum(lookup_len) + sum(edge_caps) + 1, **i32)
        self.table[0] = seeds  # S_0: hop 0's new nodes start after the seeds
        self.hops: list[_Hop] = []
        at, edge_at, ends, lookup_ends = 0, 0, [], []
        for h in range(len(fanouts)):
            counts = self.table[at:at + 1 + edge_caps[h]]
            lookup = self.table[at + 1 + edge_caps[h]:at + 1 + edge_caps[h] + lookup_len[h]]
            lookup[:bases[h] + 1] = torch.arange(bases[h] + 1, **i32)  # listed codes (and the sentinel 0) map to themselves
            self.hops.append(_Hop(self, h, counts, lookup, bases[h], edge_at, device))
            at += 1 + edge_caps[h] + lookup_len[h] - 1  # the lookup's last element is the next hop's S
            ends.append(edge_at + edge_caps[h] - 1)
            lookup_ends.append(self.hops[-1].lookup_end)
            edge_at += edge_caps[h]
        self.ends = torch.tensor(ends, dtype=torch.int64, device=device)
        self.lookup_ends = torch.tensor(lookup_ends, dtype=torch.int64, device=device)
        self.hops[0].dst.copy_(self.hops[0].rows)  # hop 0's frontier is the seeds, at positions 0..n0-1


class _Hop:
    """Hop h's views into the shape's buffers, and its constants."""

    def __init__(self, buf: _Buffers, h: int, counts: torch.Tensor, lookup: torch.Tensor, base: int, at: int,
                 device: torch.device):
        cap, fanout, edges = buf.caps[h], buf.fanouts[h], buf.edge_caps[h]
        self.fanout = fanout
        self.counts, self.start, self.first = counts, counts[:1], counts[1:]  # [S_h, first occurrence flags]
        self.claims = torch.arange(base + 2, base + 2 + edges, dtype=torch.int32, device=device)
        self.lookup, self.sums = lookup, lookup[base + 1:]
        self.lookup_end = int(lookup.storage_offset() - buf.table.storage_offset()) + lookup.numel() - 1
        self.table = HopTable.of(buf.pos[at:at + edges], torch.empty(edges, dtype=torch.int64, device=device),
                                 torch.empty(edges, dtype=torch.bool, device=device), cap, fanout)
        self.codes = buf.codes[at:at + edges]
        self.dst = buf.dst_row[at:at + edges]
        self.rows = torch.arange(cap, dtype=torch.int64, device=device).repeat_interleave(fanout)  # + the frontier's start
        next_cap = buf.caps[h + 1]
        self.next_at = torch.arange(1, next_cap + 1, dtype=torch.int64, device=device)
        self.next_index = torch.empty_like(self.next_at)  # nid indices of the next frontier: S_h + 1 + r
        self.next_frontier = torch.empty_like(self.next_at)


class TableHops:
    """The fixed-capacity hop loop over one partition (see the module); buffers per batch shape, `keep` sets each."""

    def __init__(self, part, fanouts: list[int], draw: Optional[Draw] = None, keep: int = 2):
        self.num_nodes, self.device, self.fanouts = int(part.num_nodes), part.device, [int(f) for f in fanouts]
        self.edge_ids = part.edge_ids
        self.consts = TableConstants(self.num_nodes, self.device)
        # codes per node, plus the sentinel num_nodes (code 0: never beaten) and num_nodes + 1 (n_id's padding)
        self.slot = torch.full((self.num_nodes + 2,), _UNSET, dtype=torch.int32, device=self.device)
        self.slot[self.num_nodes] = 0
        if draw is None:
            draw = torch_draw(part, self.consts)
        self.draw = draw
        self.keep = max(1, int(keep))
        self._shapes: dict[int, list] = {}

    def new_buffers(self, seeds: int) -> _Buffers:
        """A buffer set of its own for `seeds` seeds (a CUDA graph keeps one)."""
        return _Buffers(seeds, self.fanouts, self.num_nodes, self.device)

    def buffers(self, seeds: int) -> _Buffers:
        """The next buffer set for `seeds` seeds (round robin over `keep` sets)."""
        ring = self._shapes.setdefault(seeds, [0])
        if len(ring) <= self.keep:
            ring.append(self.new_buffers(seeds))
        ring[0] = ring[0] % (len(ring) - 1) + 1
        return ring[ring[0]]

    def run(self, seeds: torch.Tensor, gen: Optional[torch.Generator]) -> PaddedSampled:
        """The padded batch of `seeds` (distinct global ids on the device), without a host synchronisation."""
        return self.run_into(self.buffers(int(seeds.numel())), seeds, gen)

    def run_into(self, buf: _Buffers, seeds: torch.Tensor, gen: Optional[torch.Generator]) -> PaddedSampled:
        """run() on a given buffer set (a CUDA graph captures this with its buffers)."""
        slot, last = self.slot, len(buf.hops) - 1
        buf.nid.fill_(self.num_nodes + 1)
        buf.seed_slot.copy_(seeds)
        slot.index_copy_(0, seeds, buf.seed_codes)
        frontier = seeds
        for h, hop in enumerate(buf.hops):
            self.draw(frontier, h, hop.fanout, gen, hop.table)
            src = hop.table.src
            slot.scatter_reduce_(0, src, hop.claims, reduce="amin")
            got = torch.index_select(slot, 0, src)
            torch.eq(got, hop.claims, out=hop.first)  # an entry whose claim won: a new node's first occurrence
            torch.cumsum(hop.counts, 0, dtype=torch.int32, out=hop.sums)  # S_h + rank: the new nodes' codes
            torch.index_select(hop.lookup, 0, got, out=hop.codes)
            buf.nid.index_put_((torch.mul(hop.codes, hop.first),), src)  # losers write to index 0
            if h == last:
                break
            slot.index_copy_(0, src, hop.codes)
            nxt = buf.hops[h + 1]
            torch.add(hop.next_at, hop.start, out=hop.next_index)  # the new nodes, then padding (num_nodes + 1)
            frontier = torch.index_select(buf.nid, 0, hop.next_index, out=hop.next_frontier)
            torch.add(nxt.rows, hop.start, out=nxt.dst)  # the next frontier's rows sit at S_h + row
        slot.index_fill_(0, buf.nid_body, _UNSET)
        return self._finish(buf, int(seeds.numel()))

    def _finish(self, buf: _Buffers, batch_size: int) -> PaddedSampled:
        torch.ne(buf.codes, 0, out=buf.valid)
        torch.cumsum(buf.valid, 0, dtype=torch.int32, out=buf.counted)
        torch.index_select(buf.counted, 0, buf.ends, out=buf.edge_sizes)
        torch.index_select(buf.table, 0, buf.lookup_ends, out=buf.node_sizes)
        torch.sub(buf.codes, 1, out=buf.src_row)
        torch.index_select(self.edge_ids, 0, buf.pos, out=buf.eid_row)
        return PaddedSampled(buf.nid_body, batch_size, buf.edge_index, buf.eid_row, buf.valid, buf.sizes, buf.fanouts,
                             buf.caps, buf.edge_caps, (buf.src_row, buf.dst_row))


def torch_draw(part, consts: TableConstants) -> Draw:
    """The torch-op draw (kernels.floyd_columns) over `part`'s CSC; padding ids num_nodes and num_nodes + 1 have no
    in-edges."""
    deg = torch.zeros(part.num_nodes + 2, dtype=torch.int32, device=part.device)
    deg[:part.num_nodes] = part.indptr[1:] - part.indptr[:-1]
    indptr = torch.cat([part.indptr, part.indptr[-1:]])  # num_nodes + 1 starts where num_nodes does

    def draw(cols, hop, k, gen, out):
        floyd_columns(indptr, deg, part.indices, cols, k, gen, consts, out)

    return draw


def trim(padded: PaddedSampled) -> Sampled:
    """The compact batch of a padded one (its padding removed): one host synchronisation, the sizes."""
    hops = len(padded.fanouts)
    sizes = padded.sizes.tolist()  # the batch's one synchronisation
    listed, slots = [padded.batch_size] + sizes[:hops], sizes[hops:]
    keep = torch.nonzero_static(padded.valid, size=slots[-1]).view(-1)
    rows = padded.edge_rows or tuple(padded.edge_index)
    edge_index = torch.stack([torch.index_select(row, 0, keep) for row in rows])
    e_id = torch.index_select(padded.e_id, 0, keep)
    nodes = [b - a for a, b in zip([0] + listed[:-1], listed)]
    edges = [b - a for a, b in zip([0] + slots[:-1], slots)]
    node_rows = {key: value[:listed[-1]].clone() for key, value in padded.node_data.items()}
    return Sampled(torch.narrow_copy(padded.n_id, 0, 0, listed[-1]), padded.batch_size, edge_index, e_id, nodes, edges,
                   node_data=node_rows, y=padded.y)
