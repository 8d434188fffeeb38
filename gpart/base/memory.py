"""Memory sizes and the default memory budget (`--max-memory`): shared by every command that bounds its memory."""

from __future__ import annotations

import os
import re
from typing import Optional, Union

import numpy as np

from gpart.base.errors import InputError

DEFAULT_FRACTION = 0.75  # of the available memory, when --max-memory is not given
FIXED_BYTES = 256 << 20  # interpreter, numpy, chunk buffers: every pass's floor

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
          "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}


def parse_memory_size(value: Union[str, int, None], where: Optional[str] = "--max-memory") -> Optional[int]:
    """Bytes for '2GB', '512MiB', '1.5g' or an integer; None stays None."""
    if value is None or (isinstance(value, (int, np.integer)) and not isinstance(value, bool)):
        if value is not None and value <= 0:
            raise InputError(where, f"memory size must be positive, got {value}")
        return None if value is None else int(value)
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(value))
    if not match or match.group(2).lower() not in _UNITS:
        raise InputError(where, f"memory size {value!r} is not a number with an optional unit (e.g. 2GB, 512MiB)")
    size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if size <= 0:
        raise InputError(where, f"memory size must be positive, got {value!r}")
    return size


def default_max_memory() -> int:
    """DEFAULT_FRACTION of the memory available now (MemAvailable, or physical memory)."""
    available = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if available is None:
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(available * DEFAULT_FRACTION)


def format_size(count: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:,.1f} {unit}"
    return f"{count} B"


