"""Ids held in the narrowest unsigned dtype: gathers of a small array stay in the cache, and numpy
radix-sorts 8- and 16-bit keys."""

from __future__ import annotations

import numpy as np


def narrowest_unsigned(bound: int) -> np.dtype:
    """The narrowest unsigned dtype holding 0 .. bound-1 (bound <= 2**64)."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if bound <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    return np.dtype(np.uint64)
