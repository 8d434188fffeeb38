"""The runs of a partition's CSC: the segments a draw takes whole (a column, or a typed column's edge-type slice)."""

from __future__ import annotations

from typing import Any

import torch


def csc_runs(part: Any) -> torch.Tensor:
    """The boundaries of partition `part`'s CSC runs: its columns, and for a typed partition each column's edge-type
    slices (SPEC.md 8.2)."""
    bounds = part.indptr.to(torch.int64)
    if part.typed:
        bounds = torch.unique(torch.cat([bounds, part.type_start.reshape(-1).to(torch.int64)]))
    return bounds
