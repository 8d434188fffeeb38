"""Run a command under a memory cap (a cgroup v1 memory group), for benchmarks and tests.

The cap is what proves bounded memory: a process that exceeds it is killed
by the kernel's OOM killer inside the group, whatever it believes about
the machine. Needs a writable /sys/fs/cgroup/memory (root on a cgroup v1
host); `available()` says whether this host allows it. The group is
removed after the command, on every exit path.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

CGROUP_MEMORY = Path("/sys/fs/cgroup/memory")


@dataclass
class CappedRun:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    group_peak: int  # bytes, the group's peak charge (RSS + page cache), memory.max_usage_in_bytes
    oom_killed: bool


def available() -> Optional[str]:
    """None when capped runs are possible here, else the reason they are not."""
    if not CGROUP_MEMORY.is_dir():
        return f"{CGROUP_MEMORY} does not exist (no cgroup v1 memory controller)"
    probe = CGROUP_MEMORY / f"gpart-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError as exc:
        return f"cannot create a memory cgroup under {CGROUP_MEMORY}: {exc.strerror or exc}"
    _remove(probe)
    return None


class MemoryGroup:
    """A fresh memory group limited to `limit_bytes`, removed when the with-block ends; `join` (a Popen preexec_fn)
    puts the starting child in it, so every byte the child allocates is charged there."""

    def __init__(self, limit_bytes: int, name: str = "gpart-cap"):
        self.path = CGROUP_MEMORY / f"{name}-{uuid.uuid4().hex[:8]}"
        self.limit = int(limit_bytes)
        self.anon_peak = 0  # the largest anonymous memory seen by sample()

    def __enter__(self) -> "MemoryGroup":
        self.path.mkdir()
        (self.path / "memory.limit_in_bytes").write_text(str(self.limit))
        return self

    def __exit__(self, *exc: object) -> None:
        _remove(self.path)

    def join(self) -> None:
        with open(self.path / "cgroup.procs", "w") as fh:
            fh.write(str(os.getpid()))

    def sample(self) -> None:
        """Note the group's anonymous memory now (memory.stat total_rss) toward anon_peak."""
        self.anon_peak = max(self.anon_peak, group_counter(self.path, "memory.stat", "total_rss"))

    @property
    def peak(self) -> int:
        """The group's peak charge (RSS + page cache), memory.max_usage_in_bytes."""
        return int((self.path / "memory.max_usage_in_bytes").read_text())

    @property
    def oom_killed(self) -> bool:
        return _oom_kills(self.path) > 0


def run_capped(command: Sequence[str], limit_bytes: int, timeout: float = 600.0,
               env: Optional[dict[str, str]] = None, cwd: Optional[str] = None) -> CappedRun:
    """Run `command` in a fresh memory group limited to `limit_bytes`; return what happened."""
    with MemoryGroup(limit_bytes) as group:
        start = time.perf_counter()
        child = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=group.join, env=env, cwd=cwd)
        try:
            stdout, stderr = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            stdout, stderr = child.communicate()
        seconds = time.perf_counter() - start
        return CappedRun(child.returncode, stdout, stderr, seconds, group.peak, group.oom_killed)


def gpart_capped(args: Sequence[str], limit_bytes: int, timeout: float = 600.0) -> CappedRun:
    """`gpart ARGS` (the gpart installed beside this interpreter) under a memory cap of `limit_bytes`, asserted to end
    well, not killed at the cap (call `available()` first)."""
    run = run_capped([str(Path(sys.executable).with_name("gpart")), *args], limit_bytes, timeout)
    assert run.returncode == 0 and not run.oom_killed, (run.returncode, run.stderr[-2000:])
    return run


def _oom_kills(group: Path) -> int:
    return group_counter(group, "memory.oom_control", "oom_kill")


def group_counter(group: Path, file: str, key: str) -> int:
    """The `key` row of a memory group's `file` (memory.stat, memory.oom_control); 0 when the group is gone."""
    try:
        for line in (group / file).read_text().splitlines():
            if line.startswith(key + " "):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _remove(group: Path) -> None:
    for _ in range(50):  # the group can be removed once the kernel has detached the exited tasks
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
