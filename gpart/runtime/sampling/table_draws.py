"""One fixed-capacity hop's draws with torch operations (gpart.runtime.sampling.table_hops), and their numbers.

    draw = TorchFloyd(part, TableConstants(part.num_nodes, part.device), hops)
    draw(cols, hop, k, generator, table)      # table: HopTable, written; generator None: this batch's seeds as drawn

A hop's output is a HopTable: [C, k] tables of CSC positions, source ids and
valid slots for its C columns (floyd_columns: Floyd's rounds over every
column at once, no host synchronisation, no value-dependent shape). The
Triton kernel of gpart.runtime.sampling.fused_floyd writes the same table in
one launch. The numbers: on the CPU, RoundStreams (per hop and round, so a
column's draws do not depend on how many columns the hop has: table_hops
may run batches at learned capacities); elsewhere torch's generator, whose
numbers follow the table's shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

ROUND_STRIDE = 1 << 40  # RoundStreams: round i of a hop draws from position i * ROUND_STRIDE of the hop's stream


@dataclass
class HopTable:
    """One fixed-capacity hop's output: [C, k] tables of CSC positions, source ids and valid slots, each flat
    (row-major, [C * k]) and as a [k, C] view of the same memory (the draws are made round by round)."""

    pos: torch.Tensor
    src: torch.Tensor
    valid: torch.Tensor
    pos_t: torch.Tensor
    src_t: torch.Tensor
    valid_t: torch.Tensor
    # [k, C] float64 for draws made on the host (RoundStreams), with its numpy view: made on first use
    uniforms: Optional[tuple[torch.Tensor, np.ndarray]] = None

    @classmethod
    def of(cls, pos: torch.Tensor, src: torch.Tensor, valid: torch.Tensor, cap: int, k: int) -> "HopTable":
        return cls(pos, src, valid, pos.view(cap, k).t(), src.view(cap, k).t(), valid.view(cap, k).t())


def floyd_columns(indptr: torch.Tensor, deg: torch.Tensor, indices: torch.Tensor, cols: torch.Tensor, k: int,
                  generator: Optional[torch.Generator], consts: "TableConstants", out: HopTable,
                  uniforms: Optional[torch.Tensor] = None) -> None:
    """The torch-op form of one fixed-capacity hop (gpart.runtime.sampling.table_hops): for each of the C columns
    `cols` (local ids; padding ids have no in-edges: deg 0) a uniform min(k, in-degree)-subset of its in-edges,
    written into `out`: CSC positions (0 in the unused slots), source ids (num_nodes in the unused slots) and
    which slots are used. No host synchronisation, no shape that depends on values.

    Every column runs Floyd's rounds over max(in-degree, k) offsets: over exactly k offsets round i can only
    take i (every smaller one is taken), so a column with in-degree <= k takes 0..k-1 in order, the first
    in-degree of them valid: all its in-edges, as sample_columns takes them; one with more draws a uniform
    k-subset. Rounds run as rows of a [k, C] table (numpy on the CPU, as floyd_offsets; torch ops elsewhere).
    `uniforms` ([k, C] float64 in [0, 1), RoundStreams'): round i's draws; None: drawn from
    `generator`.
    """
    start, degree = torch.index_select(indptr, 0, cols), torch.index_select(deg, 0, cols)
    # round i draws t in [0, top_i], top_i = max(deg, k) - k + i: floor(u * (top_i + 1)) with a float64 u < 1 is at
    # most top_i (u <= 1 - 2**-53, top_i + 1 < 2**53: the product rounds below top_i + 1), so nothing is clamped
    tops1 = torch.add(torch.clamp(degree, min=k), consts.round_offsets(k))  # float64: exact below 2**53, no cast to multiply
    if uniforms is None:
        uniforms = torch.rand(tops1.shape, dtype=torch.float64, device=cols.device, generator=generator)
    chosen = uniforms.mul_(tops1).to(torch.int64)
    _floyd_rounds(chosen, tops1)
    torch.lt(chosen, degree, out=out.valid_t)
    torch.where(out.valid_t, chosen.add_(start), consts.zero, out=out.pos_t)
    torch.index_select(indices, 0, out.pos, out=out.src)
    torch.where(out.valid, out.src, consts.pad, out=out.src)


def _floyd_rounds(chosen: torch.Tensor, tops1: torch.Tensor) -> None:
    """Floyd's rounds in place on [k, C] draws (row i drawn in [0, tops1[i] - 1]): a draw already taken by an
    earlier round of its column becomes top_i = tops1[i] - 1, which no earlier round can hold."""
    k = chosen.shape[0]
    if chosen.device.type == "cpu":
        c, t = chosen.numpy(), tops1.numpy()
        for i in range(1, k):
            np.copyto(c[i], t[i] - 1, casting="unsafe", where=(c[:i] == c[i]).any(0))
        return
    for i in range(1, k):
        seen = (chosen[:i] == chosen[i]).any(0)
        chosen[i] = torch.where(seen, (tops1[i] - 1).to(torch.int64), chosen[i])


class TableConstants:
    """Small device tensors a fixed-capacity hop reuses (cached: no per-batch allocation or scalar copy)."""

    def __init__(self, num_nodes: int, device: torch.device):
        self.device = device
        self.zero = torch.zeros((), dtype=torch.int64, device=device)
        self.pad = torch.full((), num_nodes, dtype=torch.int64, device=device)  # the sentinel id
        self._offsets: dict[int, torch.Tensor] = {}

    def round_offsets(self, k: int) -> torch.Tensor:
        """[k, 1]: i - k + 1 for round i (top_i + 1 = max(deg, k) + i - k + 1)."""
        if k not in self._offsets:
            self._offsets[k] = torch.arange(1 - k, 1, dtype=torch.float64, device=self.device).unsqueeze(1)
        return self._offsets[k]



class TorchFloyd:
    """The torch-op draw (floyd_columns) over `part`'s CSC; padding ids num_nodes and num_nodes + 1 have no
    in-edges. On the CPU its numbers come from RoundStreams (capacity_free); elsewhere from the generator itself,
    whose numbers follow the table's shape, so batches run at the guaranteed capacities there."""

    def __init__(self, part: Any, consts: TableConstants, hops: int):
        self.deg = torch.zeros(part.num_nodes + 2, dtype=torch.int32, device=part.device)
        self.deg[:part.num_nodes] = part.indptr[1:] - part.indptr[:-1]
        self.indptr = torch.cat([part.indptr, part.indptr[-1:]])  # num_nodes + 1 starts where num_nodes does
        self.indices, self.consts = part.indices, consts
        self.streams = RoundStreams(hops) if part.device.type == "cpu" else None
        self.capacity_free = self.streams is not None

    def __call__(self, cols: torch.Tensor, hop: int, k: int, gen: Optional[torch.Generator], out: HopTable) -> None:
        uniforms = None
        if self.streams is not None:
            if hop == 0 and gen is not None:
                self.streams.reseed(gen)
            if out.uniforms is None:  # once per buffer set
                held = torch.empty((k, int(cols.numel())), dtype=torch.float64)
                out.uniforms = (held, held.numpy())
            uniforms = out.uniforms[0]
            self.streams.fill(hop, out.uniforms[1])
        floyd_columns(self.indptr, self.deg, self.indices, cols, k, gen, self.consts, out, uniforms)


class RoundStreams:
    """A CPU batch's uniform numbers, per hop and round, that do not depend on the hop's capacity: the batch draws
    one seed per hop from the loader's generator (one op; read on the host, which on the CPU waits for nothing),
    and round i of hop h takes its columns' numbers from position i * ROUND_STRIDE of a PCG64 stream seeded with
    hop h's seed, column c's at c, so the first columns' numbers are the same whatever the count of columns."""

    def __init__(self, hops: int):
        self.seeds = np.zeros(hops, dtype=np.int64)

    def reseed(self, gen: torch.Generator) -> None:
        self.seeds = torch.randint(0, 2**62, (self.seeds.shape[0],), generator=gen).numpy()  # CPU: no wait

    def fill(self, hop: int, out: np.ndarray) -> None:
        """Hop `hop`'s numbers into `out` ([k, columns] float64, in [0, 1)): round i's in row i."""
        bits = np.random.PCG64(int(self.seeds[hop]))
        stream = np.random.Generator(bits)
        for i in range(out.shape[0]):
            if i:
                bits.advance(ROUND_STRIDE - out.shape[1])
            stream.random(out=out[i])
