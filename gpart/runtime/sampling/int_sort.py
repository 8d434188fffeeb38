"""Stable sorts of 1-D integer tensors through torch's radix sort where the CPU would otherwise compare.

    values, order = sort_ints(keys)     # what torch.sort(keys, stable=True) gives

On the CPU, torch sorts a 1-D integer tensor by radix (fbgemm's, in builds
with OpenMP) only from 32,768 elements (at::internal::GRAIN_SIZE); below
that it compares. Measured on the 2-core development machine: a comparison
sort costs 15-45 ns per element from 6k to 30k elements (more per element
the more there are), the radix 7 ns (int32) or 13 ns (int64) per element
of its at least 32,768. So sort_ints narrows int64 keys that fit to int32
(the radix runs one pass per byte: 56k keys 741 -> 428 us) and pads a
tensor of PAD_FROM .. 32,767 elements up to 32,768 with the dtype's largest
value (the radix is stable, so a real key equal to the pad still comes
before every pad). The batches' sorts are of that size: the disjoint
relabelling (7-60k keys a hop at 1024 seeds) and the weighted draws.
Keys of a handful of distinct values (owning partitions, node types) are
left to torch: its comparison sort is fast on long runs of ties (10k keys
of 2 values: 93 us against the padded radix's 258). Elsewhere (CUDA,
builds without the radix, fewer than PAD_FROM keys) it is torch.sort.

    ordered = sort_rows(values)         # each row of a 2-D int64 tensor ascending (values only)

sort_rows serves the weighted draws' small per-row sorts, whose values
carry their own column in the low bits (so they are distinct and need no
indices): torch's CPU sort along a row compares (267-629 us for
[1000-1400, 20-40] int64 on the development machine) where numpy 2's
vectorised sort (x86-simd-sort on AVX2/AVX-512, Highway on AArch64) takes
42-65 us. Distinct values have one sorted order, so both give the same.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

RADIX_FROM = 32768  # at::internal::GRAIN_SIZE: torch's CPU sort takes its radix path from this many elements
PAD_FROM = {torch.int32: 7168, torch.int64: 12288}  # below these, comparing beats the padded radix (measured)
_INT32 = torch.iinfo(torch.int32)


@functools.lru_cache(maxsize=1)
def radix_available() -> bool:
    """Whether this torch build sorts integers by radix on the CPU (fbgemm with OpenMP)."""
    return "fbgemm" in torch.backends.quantized.supported_engines and "OpenMP" in torch.__config__.parallel_info()


def sort_ints(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sorted values, their indices in `keys`) of a 1-D integer tensor, stable, as torch.sort(keys, stable=True)."""
    n = keys.numel()
    if keys.device.type != "cpu" or keys.dtype not in PAD_FROM or n < PAD_FROM[torch.int32] or not radix_available():
        return torch.sort(keys, stable=True)
    work = keys
    if keys.dtype == torch.int64:
        low, high = torch.aminmax(keys)
        if int(low) >= _INT32.min and int(high) <= _INT32.max:
            work = keys.to(torch.int32)
    if n >= RADIX_FROM:  # the radix already: narrowed, it runs half the passes
        if work is keys:
            return torch.sort(keys, stable=True)
        values, order = torch.sort(work, stable=True)
        return values.to(keys.dtype), order
    if n < PAD_FROM[work.dtype]:
        return torch.sort(keys, stable=True)
    padded = torch.cat([work, work.new_full((RADIX_FROM - n,), torch.iinfo(work.dtype).max)])
    values, order = torch.sort(padded, stable=True)
    return values[:n].to(keys.dtype), order[:n]


@functools.lru_cache(maxsize=1)
def vector_sort_available() -> bool:
    """Whether numpy sorts int64 with SIMD on this CPU (numpy >= 2: x86-simd-sort from AVX2, Highway's vqsort on
    AArch64); without it numpy's introsort is no faster than torch's."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features  # numpy 2's own CPU feature table
    except ImportError:
        return False
    return any(features.get(name, False) for name in ("AVX2", "AVX512_SKX", "ASIMD"))


def sort_rows(values: torch.Tensor) -> torch.Tensor:
    """Each row of a 2-D int64 tensor sorted ascending (values only; callers pack what they need into distinct
    values, so the order is the one any sort gives): numpy's SIMD sort on the CPU where it has one, else torch's."""
    if values.device.type == "cpu" and values.numel() and vector_sort_available():
        return torch.from_numpy(np.sort(values.contiguous().numpy(), axis=1))
    return torch.sort(values, dim=1).values
