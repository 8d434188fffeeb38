"""Array work split into contiguous spans, one thread each.

numpy's sorts, gathers, ufuncs and os.pwrite run without the GIL, so a pass
split into spans takes about 1/threads of its time on free cores. Callers
make each span's result independent of how the work was split, so the
output is the same for any thread count (tests hold them to that).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

import numpy as np

# Threads of the parent's array passes around KaMinPar (symmetrise, order, ParHiP write, in-degrees, edge cut):
# the two cores of the machine these passes were measured on (docs/partitioning.md); not measured beyond two.
ARRAY_THREADS = 2

T = TypeVar("T")


def even_spans(total: int, parts: int) -> list[tuple[int, int]]:
    """[0, total) in `parts` contiguous spans of (nearly) equal length; empty spans are left out."""
    bounds = [(total * p) // parts for p in range(parts + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def weighted_spans(ends: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Spans of items 0..len(ends)-1 holding about equal shares of the work, `ends` being each item's
    cumulative work (non-decreasing); empty spans are left out."""
    n = int(ends.shape[0])
    total = int(ends[-1]) if n else 0
    bounds = [0] + [int(np.searchsorted(ends, (total * p) // parts, side="right")) for p in range(1, parts)] + [n]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def run_spans(work: Callable[[int, int], T], spans: Sequence[tuple[int, int]]) -> list[T]:
    """`work(start, stop)` for every span, one thread each, at once; results in span order. A single span
    runs in the calling thread."""
    if len(spans) <= 1:
        return [work(a, b) for a, b in spans]
    with ThreadPoolExecutor(len(spans), thread_name_prefix="gpart-span") as pool:
        return list(pool.map(lambda span: work(*span), spans))
