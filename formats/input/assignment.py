"""Assignment files (SPEC.md 3.6): one partition number per node, as `.npy`, `FILE.npz:KEY`
or text with one integer per line (ParMETIS / KaHIP / gpmetis output, Walshaw .ptn)."""

from __future__ import annotations

import os

import numpy as np

from gpart.base.errors import InputError
from gpart.formats.input.npz import open_array_input


def read_assignment_file(path: str) -> np.ndarray:
    """The owner array an assignment file holds (not yet checked against the graph)."""
    lower = path.lower()
    if lower.endswith(".npy") or ".npz" in lower:
        # file.npy or file.npz:KEY, memory-mapped and validated, never unpickled.
        return open_array_input(path)[0]
    if not os.path.isfile(path):
        raise InputError(path, "assignment file not found")
    try:
        return read_assignment_text(path)
    except OSError as exc:
        raise InputError(path, f"cannot read assignment: {exc}") from None


def read_assignment_text(path: str) -> np.ndarray:
    # ParMETIS / KaHIP / gpmetis write one partition number per line; the
    # Walshaw archive's .ptn files may start with '%' comment lines.
    try:
        values = np.loadtxt(path, dtype=np.float64, comments=("%", "#"), ndmin=1)
    except ValueError as exc:
        raise InputError(path, f"assignment text must hold one integer per line: {exc}") from None
    if values.ndim != 1:
        raise InputError(path, f"assignment text must hold one integer per line, got {values.shape[1]} columns")
    if not np.all(np.isfinite(values)):
        raise InputError(path, f"assignment line {int(np.flatnonzero(~np.isfinite(values))[0]) + 1} is not a number")
    as_int = values.astype(np.int64)
    if not np.array_equal(as_int, values):
        raise InputError(path, f"assignment line {int(np.flatnonzero(as_int != values)[0]) + 1} is not an integer")
    return as_int
