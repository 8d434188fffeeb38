"""A batch's hops as fixed-capacity tables with no host synchronisation: the device path with one partition.

    hops = TableHops(part, fanouts=[15, 10, 5], draw=draw_for(part))   # per batch shape: buffers, capacities
    padded = hops.run(seeds, generator)     # no host synchronisation: sizes stay on the device
    sampled = trim(padded)                  # the compact batch: one synchronisation (the final sizes)

Capacities are known before the batch runs: hop h samples a frontier of
at most C_h columns (C_0 the seeds) into a [C_h, F_h] table, its unused
slots padded. Every array a hop touches is sized by these capacities, so
nothing waits on the device's counts. Padded batches take the capacities
the batch shape guarantees, C_{h+1} = min(C_h x F_h, num_nodes). Compact
batches (`sample`) take learned ones where the draw allows (below):

- sampling: one [C_h, F_h] table of CSC positions and source ids per hop
  (gpart.runtime.sampling.table_draws.floyd_columns, or the fused kernel of
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

Learned capacities. The guaranteed ones are far above what batches reach
(hop 2 of [15, 10, 5] at batch 1024: 153,600 columns, or every node, for
44,000-68,000 new nodes on products-like graphs), and a CPU computes every
padded column in turn. Where a column's draws do not depend on the
capacity (`capacity_free`: the fused kernel's counter-based numbers, and
the CPU's RoundStreams), `sample` runs a batch shape at the most new nodes
each hop has added so far, plus 1/8, rounded up to 256: the sizes it reads
anyway say whether a frontier outgrew its capacity, and then the batch runs
again at the guaranteed capacities with the same draws. Codes and the node
list are sized for any count of new nodes (a frontier past its capacity
leaves its extra nodes unsampled, writes nothing out of bounds and clears
every map entry it set), so both runs give the batch the guaranteed
capacities give: batches do not depend on the capacities or on the
batches before them.

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

from gpart.runtime.sampling.sampled import Sampled
from gpart.runtime.sampling.table_draws import HopTable, TableConstants, TorchFloyd

_UNSET = torch.iinfo(torch.int32).max
# learned capacities: the most new nodes a hop has added, plus 1/CAP_MARGIN of it, rounded up to CAP_GRAIN
CAP_MARGIN, CAP_GRAIN = 8, 256
# draw(cols [C], hop, k, generator, out): one hop's table into `out` (table_draws.floyd_columns' contract); generator
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

    def __init__(self, caps: list[int], fanouts: list[int], num_nodes: int, device: torch.device):
        seeds, hops = caps[0], len(fanouts)
        edge_caps = [c * f for c, f in zip(caps, fanouts)]
        self.caps, self.edge_caps, self.fanouts = list(caps), edge_caps, list(fanouts)
        i32 = dict(dtype=torch.int32, device=device)
        # every code listed before hop h is at most bases[h] (distinct nodes; each hop adds at most its table's
        # entries), whether or not an earlier frontier outgrew its capacity; the node list holds every code and
        # each frontier read from it (S_h + 1 .. S_h + C_{h+1})
        bases = [min(num_nodes, seeds + sum(edge_caps[:h])) for h in range(hops)]
        total_nodes = max([min(num_nodes, seeds + sum(edge_caps))] + [bases[h] + caps[h + 1] for h in range(hops - 1)])
        total_edges = sum(edge_caps)
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
            draw = TorchFloyd(part, self.consts, len(self.fanouts))
        self.draw = draw
        self.learns = bool(getattr(draw, "capacity_free", False))  # batches may run at learned capacities
        self.keep = max(1, int(keep))
        self._shapes: dict[int, list] = {}
        self._seen: dict[int, list[int]] = {}  # batch size -> the most new nodes each hop but the last has added
        self._learned: dict[int, tuple[list[int], list]] = {}  # batch size -> (learned capacities, their buffer ring)

    def guaranteed_caps(self, seeds: int) -> list[int]:
        """C_0 .. C_H for `seeds` seeds: the seeds, then the most nodes each hop can add."""
        caps = [seeds]
        for f in self.fanouts:
            caps.append(min(caps[-1] * f, self.num_nodes))
        return caps

    def new_buffers(self, seeds: int, caps: Optional[list[int]] = None) -> _Buffers:
        """A buffer set of its own for `seeds` seeds at `caps` (None: the guaranteed ones; a CUDA graph keeps one)."""
        return _Buffers(self.guaranteed_caps(seeds) if caps is None else caps, self.fanouts, self.num_nodes, self.device)

    def buffers(self, seeds: int) -> _Buffers:
        """The next buffer set for `seeds` seeds at the guaranteed capacities (round robin over `keep` sets)."""
        return self._next(self._shapes.setdefault(seeds, [0]), lambda: self.new_buffers(seeds))

    def _next(self, ring: list, make: Callable[[], _Buffers]) -> _Buffers:
        if len(ring) <= self.keep:
            ring.append(make())
        ring[0] = ring[0] % (len(ring) - 1) + 1
        return ring[ring[0]]

    def sample(self, seeds: torch.Tensor, gen: torch.Generator) -> Sampled:
        """The compact batch of `seeds` (what trim(run(seeds, gen)) gives) at learned capacities where the draw is
        capacity_free (see the module): one host synchronisation, two where a frontier outgrew its capacity."""
        n = int(seeds.numel())
        caps = self._learned_caps(n)
        padded = self.run(seeds, gen) if caps is None else self.run_into(self._learned_buffers(n, caps), seeds, gen)
        sizes = padded.sizes.tolist()
        if caps is not None and self._outgrown(sizes, caps):
            padded = self.run_into(self.buffers(n), seeds, None)  # the draws seeded above, guaranteed capacities
            sizes = padded.sizes.tolist()
        if self.learns:
            listed = [n] + sizes[:len(self.fanouts)]
            added = [b - a for a, b in zip(listed[:-2], listed[1:-1])]
            seen = self._seen.setdefault(n, added)
            seen[:] = [max(a, b) for a, b in zip(seen, added)]
        return trim(padded, sizes)

    def _learned_caps(self, seeds: int) -> Optional[list[int]]:
        """The learned capacities for `seeds` seeds (None: none learned yet, or not below the guaranteed ones)."""
        seen = self._seen.get(seeds)
        if seen is None:
            return None
        held = self._learned.get(seeds)
        if held is not None and all(s + s // (2 * CAP_MARGIN) <= c for s, c in zip(seen, held[0][1:-1])):
            return held[0]  # still 1/16 above what was seen: kept, so a batch shape's buffers settle
        guaranteed = self.guaranteed_caps(seeds)
        caps = [seeds] + [min(g, -(-(s + s // CAP_MARGIN + 1) // CAP_GRAIN) * CAP_GRAIN) for g, s in zip(guaranteed[1:], seen)]
        caps.append(min(caps[-1] * self.fanouts[-1], self.num_nodes))
        return None if caps == guaranteed else caps

    def _learned_buffers(self, seeds: int, caps: list[int]) -> _Buffers:
        """The next buffer set at learned `caps` (a new ring when they change; the old one is let go)."""
        held = self._learned.get(seeds)
        if held is None or held[0] != caps:
            held = self._learned[seeds] = (caps, [0])
        return self._next(held[1], lambda: self.new_buffers(seeds, caps))

    def _outgrown(self, sizes: list[int], caps: list[int]) -> bool:
        """Whether a hop but the last added more new nodes than the next frontier's capacity (`sizes`: trim's)."""
        listed = [caps[0]] + sizes[:len(self.fanouts)]
        return any(listed[h + 1] - listed[h] > caps[h + 1] for h in range(len(self.fanouts) - 1))

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


def trim(padded: PaddedSampled, sizes: Optional[list[int]] = None) -> Sampled:
    """The compact batch of a padded one (its padding removed): one host synchronisation, the sizes (none when
    `sizes`, padded.sizes read, are given)."""
    hops = len(padded.fanouts)
    if sizes is None:
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
