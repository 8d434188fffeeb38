"""The owner's side of a hop: sample in-edges of owned columns, per edge type, on the partition's device.

    sampler = LocalSampler(part, hop_fanouts=[[15], [10]])          # homogeneous: one edge type
    sampler = LocalSampler(typed_part, hop_fanouts=[[4, 0, 3], ...])  # typed: [hop][edge type], 0 = not sampled
    counts, src, eid = sampler.sample(cols, hop, generator)

A typed graph is the general case: a column of node type d is sampled once
per edge type (s, r, d) with a fanout at that hop, and its type-r in-edges
are one contiguous slice of the column (SPEC.md 8.2). A homogeneous graph is
the case of one node type and one edge type, where the slice is the whole
column (no type tables are looked up). Every (column, edge type) pair is a
segment; the segments are listed column by column, types in type order, and
drawn with gpart.runtime.sampling.kernels.sample_segments once per distinct fanout of
the hop, so the edges come out grouped by column without a sort.

Two hop strategies (`table_hops`): compact hops (sample, the default on the
CPU) and table hops (the default on CUDA with one partition): the
static-shape form for one edge type and a positive fanout, whose draws
differ from the compact hops' (gpart.runtime.loaders.node states what
reproduces). Without replacement a batch's table hops run at fixed
capacities with no host synchronisation (gpart.runtime.sampling.table_hops;
`table_draw` gives their draw: the fused kernel of
gpart.runtime.sampling.fused_floyd when `fused`, default on CUDA with
triton); with replacement each hop is a sample_table ([columns, fanout]
positions, -1 padded) with one synchronisation;
hops it cannot take (a typed graph, fanout -1, several partitions, weights) are
compact whatever the strategy. Tensor
operations only (no loop per node), on CPU or CUDA alike: the partition's
tensors and the generator decide the device.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from gpart.base.errors import InputError
from gpart.runtime.partition.interface import Partition
from gpart.runtime.sampling import fused_floyd
from gpart.runtime.sampling.kernels import merge_grouped, sample_segments, sample_table
from gpart.runtime.sampling.temporal import draw_temporal, draw_temporal_weighted
from gpart.runtime.sampling.weighted import SegmentWeights


class LocalSampler:
    """Samples owned columns of `part` with `hop_fanouts[hop][edge type]` (-1: all, 0: that type not sampled).

    table_hops: take the hops that allow it as tables (None: on CUDA with one partition); settable.
    weight: edge data name whose values are the sampling weights (None: uniform draws; weighted hops are compact)."""

    def __init__(self, part: Partition, hop_fanouts: list[list[int]], replace: bool = False, table_hops: Optional[bool] = None,
                 weight: Any = None):
        self.part, self.replace = part, bool(replace)
        # weighted draws (gpart.runtime.sampling.weighted): edge data `weight`, checked first with weight_problem
        self.weights = SegmentWeights.of(part, weight) if weight is not None else None
        self.typed = part.typed
        self.num_hops = len(hop_fanouts)
        # per hop the distinct fanouts of the sampled types: one kernel call each, known here (no unique() per batch)
        self.hop_values = [sorted({f for f in fans if f}) for fans in hop_fanouts]
        self.sampled_types = [r for r in range(len(hop_fanouts[0]) if hop_fanouts else 0) if any(fans[r] for fans in hop_fanouts)]
        self.remote_ids = part.num_parts > 1  # with one partition local ids are the global ids (SPEC.md 4.1)
        # tables need one partition: a table's positions are relabelled as global ids, which local ids then are
        self.table_hops = part.device.type == "cuda" and not self.remote_ids if table_hops is None else bool(table_hops)
        self.fused: Optional[bool] = None  # the fused sampling kernel for table hops (None: on CUDA with triton)
        # (TemporalIndex, strategy) for temporal draws (gpart.runtime.sampling.temporal.temporal_index); None: no time
        self.temporal: Optional[tuple[torch.Tensor, str]] = None
        if self.typed:
            self._typed_tables(hop_fanouts)

    def _typed_tables(self, hop_fanouts: list[list[int]]) -> None:
        """[T, K] sampled edge types per destination node type (-1 pads), [R, H] fanouts, flat slice tables."""
        part, dev = self.part, self.part.device
        by_dst = [[r for r in self.sampled_types if part.edge_types[r][2] == ntype] for ntype in part.node_types]
        table = torch.full((len(by_dst), max(1, max(map(len, by_dst)))), -1, dtype=torch.int64)
        for t, rs in enumerate(by_dst):
            table[t, :len(rs)] = torch.tensor(rs, dtype=torch.int64)
        self.etypes_of = table.to(dev)
        self.fanout_of = torch.tensor(hop_fanouts, dtype=torch.int64).t().contiguous().to(dev)  # [R, H]
        # one flat [R * num_owned] table each: one index_select per lookup instead of 2-D advanced indexing
        self.flat_start, self.flat_deg = part.type_start.reshape(-1), part.type_deg.reshape(-1)

    def sample(self, cols: torch.Tensor, hop: int, gen: torch.Generator,
               col_time: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(in-edges taken per column, global source ids, global edge ids) for owned local columns `cols`,
        the edges grouped by column in `cols` order; with `col_time` (the seed time each column carries) and
        `temporal` set, only in-edges with time <= the column's time."""
        part = self.part
        cols = cols.to(torch.int64)
        start, deg, pair_of, fanout = self._segments(cols, hop)
        values = self.hop_values[hop]
        if col_time is not None and self.temporal is not None:
            if len(values) != 1:
                raise InputError(None, "temporal sampling takes one fanout per hop: the typed fanouts of this hop differ")
            seg_time = col_time if pair_of is None else torch.index_select(col_time, 0, pair_of)
            index = self.temporal[0]
            if self.weights is not None:  # weighted among the allowed ("uniform" only: the loaders check it)
                picks = draw_temporal_weighted(start, deg, seg_time, index, self._sorted_weights(), values[0], gen,
                                               self.replace)
            else:
                picks = draw_temporal(start, deg, seg_time, index, values[0], self.temporal[1], gen, self.replace)
            pair_counts = picks.counts  # positions in the index's sorted order
            src, eid = index.topology_at(picks.positions, part.indices, part.edge_ids)
        else:  # weighted draws (typed too: the weights are per CSC position) or uniform ones
            draw = self.weights.sample_segments if self.weights is not None else sample_segments
            if len(values) == 1:
                picks = draw(start, deg, values[0], self.replace, gen)
                pair_counts, positions = picks.counts, picks.positions
            else:
                pair_counts, positions = self._mixed(start, deg, fanout, values, gen, draw)
            src, eid = torch.index_select(part.indices, 0, positions), torch.index_select(part.edge_ids, 0, positions)
        counts = pair_counts if pair_of is None else \
            torch.zeros(cols.numel(), dtype=torch.int64, device=cols.device).index_add_(0, pair_of, pair_counts)
        if self.remote_ids:
            src = torch.index_select(part.node_ids, 0, src)
        return counts, src, eid

    def _sorted_weights(self) -> SegmentWeights:
        """The weights in the temporal index's sorted order, made once per index."""
        index = self.temporal[0] if self.temporal is not None else None
        if getattr(self, "_sorted", (None, None))[0] is not index:
            self._sorted = (index, index.weights_in_order(self.weights.weights).placed(self.part.place_edge_array))
        return self._sorted[1]

    def table_fanout(self, hop: int) -> int:
        """The fanout F of hop `hop` when it is taken as a [columns, F] table (sample_table): table hops on, one
        partition, one edge type, a positive fanout; 0 when not (compact hops, a typed graph, or -1: every in-edge)."""
        if not self.table_hops or self.remote_ids or self.weights is not None:
            return 0
        values = self.hop_values[hop]
        return values[0] if not self.typed and len(values) == 1 and values[0] > 0 else 0

    def table_draw(self) -> Optional[Callable]:
        """The draw of fixed-capacity hops (gpart.runtime.sampling.table_hops): the fused Triton kernel
        (gpart.runtime.sampling.fused_floyd) when `fused` (None: on CUDA when triton imports), else None (the
        torch-op draw)."""
        fused = self.part.device.type == "cuda" and fused_floyd.available() if self.fused is None else self.fused
        return fused_floyd.FusedFloyd(self.part, self.num_hops) if fused else None

    def sample_table(self, cols: torch.Tensor, hop: int, gen: torch.Generator) -> torch.Tensor:
        """[len(cols), F] CSC positions sampled per owned column, -1 padded (table_fanout(hop) = F > 0), with no host
        synchronisation."""
        start, deg, _, _ = self._segments(cols.to(torch.int64), hop)
        return sample_table(start, deg, self.table_fanout(hop), self.replace, gen)

    def _segments(self, cols: torch.Tensor, hop: int):
        """(start, length, column of each segment or None when segments are the columns, fanout of each or None)."""
        if not self.typed:  # one edge type: the segment is the whole column
            start = torch.index_select(self.part.indptr, 0, cols)
            return start, torch.index_select(self.part.indptr, 0, cols + 1).sub_(start), None, None
        part, width = self.part, self.etypes_of.shape[1]
        cand = torch.index_select(self.etypes_of, 0, torch.index_select(part.local_ntype, 0, cols)).reshape(-1)
        keep = torch.nonzero(cand >= 0).reshape(-1)
        pair_of = keep if width == 1 else torch.div(keep, width, rounding_mode="floor")
        etype = torch.index_select(cand, 0, keep)
        flat = etype * part.num_owned + torch.index_select(cols, 0, pair_of)
        start, deg = torch.index_select(self.flat_start, 0, flat), torch.index_select(self.flat_deg, 0, flat)
        fanout = torch.index_select(self.fanout_of[:, hop], 0, etype) if len(self.hop_values[hop]) > 1 else None
        return start, deg, pair_of, fanout

    def _mixed(self, start, deg, fan, values, gen, draw: Callable = sample_segments) -> tuple[torch.Tensor, torch.Tensor]:
        """Segments with different fanouts: one `draw` per fanout, positions put back in segment order."""
        results = []
        pair_counts = torch.zeros_like(deg)
        for f in values:
            sub = torch.nonzero(fan == f).reshape(-1)
            picks = draw(torch.index_select(start, 0, sub), torch.index_select(deg, 0, sub), int(f), self.replace, gen)
            pair_counts.index_copy_(0, sub, picks.counts)
            results.append((sub, picks))
        positions = merge_grouped(pair_counts, results)
        return pair_counts, positions
