"""One fixed-capacity hop's draws as one Triton kernel: Floyd's rounds fused (gpart.runtime.sampling.table_hops).

    draw = FusedFloyd(part)                 # on CUDA when triton imports (available()); the torch-op draw otherwise
    draw(cols, hop, k, generator, table)     # table: table_draws.HopTable, written

The kernel does what gpart.runtime.sampling.table_draws.floyd_columns does with
torch operations (the same contract: [C] columns in, the [C, k] position and
source tables out, padding ids without in-edges; the valid-slot table is not
written: a source is num_nodes where a slot is unused), in one
launch: each program takes BLOCK columns, reads their CSC bounds, runs the k
rounds of Floyd's algorithm (round i draws t in [0, top_i] with top_i =
max(deg, k) - k + i, and takes top_i instead when t is already taken: the
row's earlier draws are read back from its own output slots, by the thread
that wrote them), and writes positions and source ids. Only triton's
builtins are used: library jit functions (tl.sum, tl.randint4x) cannot be
called by the interpreter when triton was imported before TRITON_INTERPRET
was set, as entering a TorchDispatchMode does. Every k-subset of a column's
in-edges is equally likely, min(deg, k) are taken, none twice.

Random numbers: SplitMix64 of a per-hop seed drawn from the loader's
generator (one small torch op per batch, or none when a CUDA graph replays
with seeds written beforehand) and the (column, round) counter, computed in
the kernel; each draw is a 53-bit
uniform, as torch's float64 draws, so bounds up to 2**53 stay unbiased (a
32-bit multiply-shift would be biased by up to deg / 2**32). Positions and
sources are int64 because they index torch tensors.

The draws are not the torch-op path's: both are exact and uniform, and each
reproduces for the same generator state. Under TRITON_INTERPRET=1 the kernel
runs on CPU tensors (the tests check it there).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import Any, Optional

import torch

from gpart.runtime.sampling.op_count import launch
from gpart.runtime.sampling.table_draws import HopTable

BLOCK = 64
INTERPRETED_BLOCK = 1024  # the interpreter runs a program at a time: fewer, larger ones


def available() -> bool:
    """Whether triton is installed (CUDA builds of torch ship it); nothing is imported."""
    return importlib.util.find_spec("triton") is not None


@functools.lru_cache(maxsize=2)
def _kernel(interpret: bool) -> Any:
    """The jitted kernel (built on first use: TRITON_INTERPRET is read when it is built)."""
    import triton
    import triton.language as tl

    @triton.jit
    def floyd_kernel(cols_ptr, indptr_ptr, indices_ptr, seed_ptr, pos_ptr, src_ptr, C, num_nodes,
                     K: tl.constexpr, BLOCK: tl.constexpr):
        rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        live = rows < C
        col = tl.load(cols_ptr + rows, mask=live, other=num_nodes)
        real = live & (col < num_nodes)
        start = tl.load(indptr_ptr + col, mask=real, other=0)
        deg = tl.load(indptr_ptr + col + 1, mask=real, other=0) - start
        spread = tl.maximum(deg, K) - K  # top_i = spread + i
        seed = tl.load(seed_ptr).to(tl.uint64)
        out = pos_ptr + rows.to(tl.int64) * K  # each row's k slots hold its draws, then its positions
        for i in tl.static_range(K):
            top = spread + i
            # SplitMix64 of (seed, column, round): a 64-bit word, its top 53 bits a uniform u in [0, 1 - 2**-53]
            z = seed + (rows.to(tl.int64) * K + i).to(tl.uint64) * 0x9E3779B97F4A7C15
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
            z = (z ^ (z >> 27)) * 0x94D049BB133111EB
            z = z ^ (z >> 31)
            u = (z >> 11).to(tl.float64) * (1.0 / 9007199254740992.0)
            t = (u * (top + 1).to(tl.float64)).to(tl.int64)  # at most top (table_draws.floyd_columns says why)
            taken = t < 0
            for j in tl.static_range(i):  # the row's earlier draws, read back from its own slots
                taken = taken | (tl.load(out + j, mask=live, other=-1) == t)
            tl.store(out + i, tl.where(taken, top, t), mask=live)
        for j in tl.static_range(K):
            chosen = tl.load(out + j, mask=live, other=0)
            valid = real & (chosen < deg)
            pos = tl.where(valid, start + chosen, 0)
            tl.store(out + j, pos, mask=live)
            tl.store(src_ptr + rows.to(tl.int64) * K + j, tl.load(indices_ptr + pos, mask=valid, other=num_nodes), mask=live)

    return floyd_kernel


class FusedFloyd:
    """The fused draw over one partition's CSC (see the module); `seeds` [hops] is what a replay writes first."""

    # a column's numbers are those of its (seed, column, round) counter, whatever the count of columns: batches may
    # run at learned capacities (gpart.runtime.sampling.table_hops)
    capacity_free = True

    def __init__(self, part: Any, hops: int):
        self.indptr, self.indices, self.num_nodes = part.indptr, part.indices, int(part.num_nodes)
        self.seeds = torch.zeros(hops, dtype=torch.int64, device=part.device)

    def reseed(self, gen: torch.Generator) -> None:
        """Draw this batch's seeds from `gen` (one op, no host synchronisation)."""
        torch.randint(0, 2**62, (self.seeds.numel(),), generator=gen, device=self.seeds.device, out=self.seeds)

    def __call__(self, cols: torch.Tensor, hop: int, k: int, gen: Optional[torch.Generator], out: HopTable) -> None:
        if hop == 0 and gen is not None:
            self.reseed(gen)
        count = cols.numel()
        interpret = os.environ.get("TRITON_INTERPRET") == "1"
        block = INTERPRETED_BLOCK if interpret else BLOCK
        kernel = _kernel(interpret)
        with launch("fused_floyd"):
            kernel[(-(-count // block),)](cols, self.indptr, self.indices, self.seeds[hop:], out.pos, out.src, count,
                                          self.num_nodes,
                                          K=k, BLOCK=block)
