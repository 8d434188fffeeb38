"""One fixed-capacity hop's draws as one Triton kernel: Floyd's rounds fused (gpart.runtime.sampling.table_hops).

    draw = FusedFloyd(part)                 # on CUDA when triton imports (available()); the torch-op draw otherwise
    draw(cols, hop, k, generator, pos_t, src_t)

The kernel does what gpart.runtime.sampling.kernels.floyd_columns does with
torch operations (the same contract: [1, C] columns in, [k, C] views of the
[C, k] position and source tables out, padding ids without in-edges), in one
launch: each program takes BLOCK columns, reads their CSC bounds, runs the k
rounds of Floyd's algorithm in registers (round i draws t in [0, top_i] with
top_i = max(deg, k) - k + i, and takes top_i instead when t is already
taken), and writes positions and source ids. Every k-subset of a column's
in-edges is equally likely, min(deg, k) are taken, none twice.

Random numbers: SplitMix64 of a per-hop seed drawn from the loader's
generator (one small torch op per batch, or none when a CUDA graph replays
with seeds written beforehand) and the (column, round) counter, computed in
the kernel (not tl.randint4x, a jitted library function the interpreter
cannot call when triton was imported without it); each draw is a 53-bit
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
                     K: tl.constexpr, KP: tl.constexpr, BLOCK: tl.constexpr):
        rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        live = rows < C
        col = tl.load(cols_ptr + rows, mask=live, other=num_nodes)
        real = live & (col < num_nodes)
        start = tl.load(indptr_ptr + col, mask=real, other=0)
        deg = tl.load(indptr_ptr + col + 1, mask=real, other=0) - start
        spread = tl.maximum(deg, K) - K  # top_i = spread + i
        slots = tl.arange(0, KP)
        chosen = tl.full((BLOCK, KP), -1, dtype=tl.int64)
        seed = tl.load(seed_ptr).to(tl.uint64)
        for i in tl.static_range(K):
            top = spread + i
            # SplitMix64 of (seed, column, round): a 64-bit word, its top 53 bits a uniform u in [0, 1 - 2**-53]
            z = seed + (rows * K + i).to(tl.uint64) * 0x9E3779B97F4A7C15
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
            z = (z ^ (z >> 27)) * 0x94D049BB133111EB
            z = z ^ (z >> 31)
            u = (z >> 11).to(tl.float64) * (1.0 / 9007199254740992.0)
            t = (u * (top + 1).to(tl.float64)).to(tl.int64)  # at most top (kernels.floyd_columns says why)
            taken = tl.sum(((chosen == t[:, None]) & (slots[None, :] < i)).to(tl.int32), axis=1) > 0
            chosen = tl.where(slots[None, :] == i, tl.where(taken, top, t)[:, None], chosen)
        inside = live[:, None] & (slots[None, :] < K)
        valid = inside & (chosen < deg[:, None])
        pos = tl.where(valid, start[:, None] + chosen, 0)
        src = tl.load(indices_ptr + pos, mask=valid, other=num_nodes)
        out = rows[:, None] * K + slots[None, :]
        tl.store(pos_ptr + out, pos, mask=inside)
        tl.store(src_ptr + out, src, mask=inside)

    return floyd_kernel


class FusedFloyd:
    """The fused draw over one partition's CSC (see the module); `seeds` [hops] is what a replay writes first."""

    def __init__(self, part: Any, hops: int):
        self.indptr, self.indices, self.num_nodes = part.indptr, part.indices, int(part.num_nodes)
        self.seeds = torch.zeros(hops, dtype=torch.int64, device=part.device)

    def reseed(self, gen: torch.Generator) -> None:
        """Draw this batch's seeds from `gen` (one op, no host synchronisation)."""
        torch.randint(0, 2**62, (self.seeds.numel(),), generator=gen, device=self.seeds.device, out=self.seeds)

    def __call__(self, cols: torch.Tensor, hop: int, k: int, gen: Optional[torch.Generator], pos_t: torch.Tensor,
                 src_t: torch.Tensor) -> None:
        if hop == 0 and gen is not None:
            self.reseed(gen)
        count = cols.numel()
        interpret = os.environ.get("TRITON_INTERPRET") == "1"
        block = INTERPRETED_BLOCK if interpret else BLOCK
        kernel = _kernel(interpret)
        with launch("fused_floyd"):
            pos, src = pos_t.t(), src_t.t()  # the [C, k] row-major tables the views come from
            kernel[(-(-count // block),)](cols, self.indptr, self.indices, self.seeds[hop:], pos, src, count, self.num_nodes,
                                          K=k, KP=max(2, 1 << (k - 1).bit_length()), BLOCK=block)
