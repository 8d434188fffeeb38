"""Memory sizes and the default memory budget (`--max-memory`): shared by every command that bounds its memory."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import socket
from pathlib import Path
from typing import Optional, Union

import numpy as np

from gpart.base.errors import InputError

DEFAULT_FRACTION = 0.75  # of the available memory, when --max-memory is not given
FIXED_BYTES = 256 << 20  # interpreter, numpy, chunk buffers: every pass's floor
CGROUP_ROOT = "/sys/fs/cgroup"  # where the cgroup hierarchies are mounted
SELF_CGROUP = "/proc/self/cgroup"  # this process's group in each hierarchy
NO_LIMIT = 1 << 60  # a group limit at or past this is "unlimited" (v1 writes 2^63 rounded down to a page)

PathLike = Union[str, "os.PathLike[str]"]

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


def default_max_memory(cgroup_root: PathLike = CGROUP_ROOT, self_cgroup: PathLike = SELF_CGROUP) -> int:
    """DEFAULT_FRACTION of the memory available now: MemAvailable (or physical memory), and no more
    than this process's cgroup memory limit where one applies (cgroup_memory_limit)."""
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
    limit = cgroup_memory_limit(cgroup_root, self_cgroup)
    if limit is not None:
        available = min(available, limit)
    return int(available * DEFAULT_FRACTION)


BOOT_ID = "/proc/sys/kernel/random/boot_id"  # one value per running kernel: processes that share its memory


def memory_pool(self_cgroup: PathLike = SELF_CGROUP, boot_id: PathLike = BOOT_ID) -> str:
    """What this process's default budget is a share of: its kernel (boot id; else the host name) and its memory cgroup
    (the v1 memory line or the v2 line of /proc/self/cgroup). Processes with the same pool take their defaults
    from the same memory (ranks torchrun starts on one machine); each of them should take its part of it."""
    try:
        kernel = Path(boot_id).read_text().strip()
    except OSError:
        kernel = socket.gethostname()
    return "|".join([kernel, *(f"{controllers}:{path}" for controllers, path in _memory_groups(self_cgroup))])


def _memory_groups(self_cgroup: PathLike) -> list[tuple[str, str]]:
    """(controllers, group path) of the lines of `self_cgroup` that name this process's memory group: v1's line with
    the memory controller, v2's line with none ("" : the unified hierarchy); none where the file cannot be read."""
    try:
        lines = Path(self_cgroup).read_text().splitlines()
    except OSError:
        return []
    groups = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and ("memory" in parts[1].split(",") or parts[1] == ""):
            groups.append((parts[1], parts[2]))
    return groups


def cgroup_memory_limit(cgroup_root: PathLike = CGROUP_ROOT, self_cgroup: PathLike = SELF_CGROUP) -> Optional[int]:
    """The memory limit of this process's cgroup in bytes, or None where none applies.

    `self_cgroup` (/proc/self/cgroup) names the process's group in each hierarchy: a v1 line
    `ID:...,memory,...:/PATH` reads `<root>/memory/PATH/memory.limit_in_bytes`, the v2 line
    `0::/PATH` reads `<root>/PATH/memory.max` (or `<root>/unified/PATH/memory.max` on a hybrid
    host). A group is held by its ancestors' limits too, so the least over the path up to the
    mount's top counts (inside a container the top is the container's own group). "max" and
    values of 2^60 or more (v1's "unlimited" is 2^63 rounded down to a page) are no limit.
    """
    root, limits = Path(cgroup_root), []
    for controllers, path in _memory_groups(self_cgroup):
        if controllers:  # v1: the memory controller's hierarchy
            limits += _limits_up_the_path(root / "memory", path, "memory.limit_in_bytes")
        else:
            for top in (root, root / "unified"):
                limits += _limits_up_the_path(top, path, "memory.max")
    return min(limits) if limits else None


def _limits_up_the_path(top: Path, path: str, name: str) -> list[int]:
    """The limits in file `name` of group `path` under the mount `top` and of each of its ancestors."""
    group = top / path.strip("/")
    found = []
    while True:
        limit = _read_limit(group / name)
        if limit is not None:
            found.append(limit)
        if group == top or top not in group.parents:
            return found
        group = group.parent


def _read_limit(path: Path) -> Optional[int]:
    """A limit file's bytes; None when absent, unreadable, "max" or too large to be a limit."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit() or int(text) >= NO_LIMIT:
        return None
    return int(text)


def format_size(count: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:,.1f} {unit}"
    return f"{count} B"




LARGE_ALLOCATION = 1 << 20  # bytes from which malloc maps each allocation on its own (see return_large_frees)
RETAINED_HEAP = 32 << 20  # free heap kept by malloc (see return_large_frees)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter


def return_large_frees() -> None:
    """Make every allocation of LARGE_ALLOCATION bytes or more a mapping of its own, handed back to the system when
    freed (glibc's mallopt M_MMAP_THRESHOLD; elsewhere nothing). glibc otherwise raises that threshold up to 32 MiB
    after the first large free, and the node-sized temporaries of a partition (a few MiB to a few GiB, half of them
    made by worker threads in arenas of their own) then stay in malloc's heaps after use: on geometric 1M/10M the
    process held 169 MiB of anonymous memory where KaMinPar starts, 59 MiB with this set. Called by the partition
    entry points (for the rest of the process: it only changes where malloc takes large blocks from)."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to set
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, LARGE_ALLOCATION)
        # Setting the mmap threshold also pins the trim threshold at glibc's 128 KiB, and every free at the heap's
        # top then went back to the system, to be faulted in again zeroed by the next allocation: the on-disk
        # coarsening's ranges (temporaries under 1 MiB) spent a third of their time in the kernel (R-MAT 1M/10M,
        # 19 of 56 s). Up to RETAINED_HEAP of free heap stays.
        libc.mallopt(_M_TRIM_THRESHOLD, RETAINED_HEAP)


def release_freed_memory() -> None:
    """Hand the allocator's freed but retained memory back to the system (glibc's malloc_trim; elsewhere nothing):
    numpy's temporaries of a few MiB come from malloc's heaps, which keep what is freed, and a process about to wait
    on a memory-hungry child (KaMinPar) should not be charged for them (R-MAT 1M/10M: 177 -> 144 MiB anonymous)."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)
