"""The benchmark harness: child processes (under a memory cap where asked), timing, peak RSS.

Benchmarks run as scripts (`python benchmarks/X.py`), so they import this module as
`harness`, from their own folder. Importing it puts the repository root on sys.path (at the
end, so that the gpart a script measures is still the one PYTHONPATH or the installation
gives): what the benchmarks share with the tests, `tests.support` (synthetic graphs, memory
caps, gloo process groups), is not installed with gpart. Nothing but the standard library is
imported here (tests.support.memcap needs no more): a child running in another interpreter
(DGL's, in bench_dgl_cut.py) imports this module too.

Children report their figures as one JSON object on the last line of stdout
(`ChildRun.result`, `child_result`); a child's peak RSS is its own (`peak_rss_mib`, or
`wait_peak_rss` from the parent).
"""

from __future__ import annotations

import filecmp
import json
import os
import resource
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence, TypeVar

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))

from tests.support.memcap import run_capped  # noqa: E402 (needs the repository root on sys.path, above)

CAPPED_TIMEOUT_S = 3600.0  # a capped child still running after an hour is killed (and reported as failed)

T = TypeVar("T")


# --------------------------------------------------------------------------- child processes


@dataclass
class ChildRun:
    """What a child process did: exit status, output, wall seconds (start-up included)."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    oom_killed: bool = False  # killed by the kernel at its memory cap

    def result(self) -> dict:
        """The JSON object the child printed on the last line of its stdout."""
        return json.loads(self.stdout.strip().splitlines()[-1])

    def last_error_line(self) -> str:
        """The last line of the child's stderr ('' when it wrote none): usually what went wrong."""
        lines = self.stderr.strip().splitlines()
        return lines[-1] if lines else ""


def run_child(cmd: Sequence[str], *, cap: int | None = None, timeout: float | None = None,
              env: dict[str, str] | None = None, cwd: str | Path | None = None) -> ChildRun:
    """Run `cmd` with its output captured.

    cap: bytes; the child runs in a cgroup v1 memory group of that size (tests.support.memcap,
    root only), so going past it is an OOM kill (`oom_killed`), whatever the child thinks of the
    machine. timeout: seconds; an uncapped child past it raises subprocess.TimeoutExpired, a
    capped one is killed and comes back failed (CAPPED_TIMEOUT_S when not given).
    """
    if cap is not None:
        run = run_capped(cmd, cap, timeout=CAPPED_TIMEOUT_S if timeout is None else timeout, env=env, cwd=cwd)
        return ChildRun(run.returncode, run.stdout, run.stderr, run.seconds, run.oom_killed)
    start = time.perf_counter()
    done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    return ChildRun(done.returncode, done.stdout, done.stderr, time.perf_counter() - start)


def child_result(cmd: Sequence[str], **kwargs) -> dict:
    """`run_child(cmd, **kwargs)`'s JSON result; subprocess.CalledProcessError (stderr attached) when the child fails."""
    run = run_child(cmd, **kwargs)
    if run.returncode != 0:
        raise subprocess.CalledProcessError(run.returncode, list(cmd), run.stdout, run.stderr)
    return run.result()


def script_child(script: str | Path, *args: str, python: str = sys.executable) -> list[str]:
    """The command that runs a benchmark script (its `__file__`) in its child mode: `python SCRIPT --child ARGS`."""
    return [python, str(script), "--child", *args]


def wait_peak_rss(proc: subprocess.Popen) -> tuple[int, int]:
    """(exit status, peak RSS in bytes) of a started child, from wait4's rusage of that child alone."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss * 1024


def torchrun_env(rank: int, world_size: int, port: int, **extra: str) -> dict[str, str]:
    """This process's environment plus what torchrun gives rank `rank` of `world_size` on 127.0.0.1:`port`."""
    return {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
            "WORLD_SIZE": str(world_size), **extra}


# --------------------------------------------------------------------------- peak RSS


def peak_rss_mib(since_exec: bool = False) -> float:
    """This process's peak resident set size so far, in MiB.

    since_exec: the peak of this process image alone (/proc's VmHWM). Linux carries ru_maxrss
    over fork and exec, so a child of a larger parent would otherwise report the parent's peak.
    """
    if since_exec:
        try:
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# The most of one core the sampler may take. Reading smaps_rollup walks the process's page tables under its
# memory-map lock: 278 ms for one read of a 10 GB process here, so sampling the default's three processes
# (2.8 + 2 x 4.5 GB) every 0.25 s took more than a core of this 2-core machine away from the job it measured
# (the same 5.6M/70M job: 275 s under it, 224-226 s alone).
SAMPLER_SHARE = 0.05


class TreeMemory:
    """The peak, over a process's life, of the memory it and its descendants hold together: their PSS
    (proportional set size, so pages a forked child shares with its parent count once) summed, sampled
    from /proc every `interval` seconds or, where one sample takes longer than SAMPLER_SHARE of that, at
    the interval that keeps the sampler to that share of one core (seconds apart for processes of several
    GB: a peak shorter than that can be missed, the RSS column's peak cannot). Where a job forks workers
    that run side by side, the largest single process (ru_maxrss) understates what the machine must hold."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        self.pid, self.interval, self.peak = pid, interval, 0
        self.samples = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop_mib(self) -> float:
        self._done.set()
        self._thread.join()
        return self.peak / 2**20

    def _sample(self) -> None:
        wait = self.interval
        while not self._done.wait(wait):
            start = time.perf_counter()
            self.peak = max(self.peak, sum(_pss_bytes(pid) for pid in _tree(self.pid)))
            self.samples += 1
            wait = max(self.interval, (time.perf_counter() - start) / SAMPLER_SHARE)


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def _pss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            return next((int(line.split()[1]) * 1024 for line in fh if line.startswith("Pss:")), 0)
    except OSError:  # gone, or not ours to read
        return 0


# --------------------------------------------------------------------------- timing


def timed(fn: Callable[[], T]) -> tuple[T, float, float]:
    """fn's value, its wall seconds and the CPU seconds this process spent meanwhile (all threads)."""
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return value, time.perf_counter() - wall, time.process_time() - cpu


def best_times(*fns: Callable[[], object], repeat: int) -> list[float]:
    """The best wall seconds of each function over `repeat` rounds; the functions take turns, so all see the same machine load."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, runs in zip(fns, times, strict=True):
            start = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - start)
    return [min(runs) for runs in times]


def fastest(runs: list[dict], key: str = "wall") -> dict:
    """The run with the least `key` (seconds): on a shared machine the least disturbed one."""
    return min(runs, key=lambda r: r[key])


# --------------------------------------------------------------------------- the machine


def machine_line() -> str:
    """The machine a benchmark ran on, in one line: CPU model and family/model numbers, cores this process
    may use, last-level cache, memory, whether the CPU has AVX-512 (numpy sorts int64 keys with it).
    Walls depend on them: the same commit's 5.6M/70M job took 242.8 s on one machine of this project's
    2-core kind and 87.9 s on another (docs/partitioning.md), so a figure says which one it came from."""
    facts = _first_cpu_facts()
    cache = _last_level_cache()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    avx512 = "AVX-512" if "avx512f" in facts.get("flags", "").split() else "no AVX-512"
    return (f"machine: {facts.get('model name', 'unknown CPU')} (family {facts.get('cpu family', '?')} model "
            f"{facts.get('model', '?')}), {cores} cores, last-level cache {cache}, {memory:.1f} GiB, {avx512}")


def _first_cpu_facts() -> dict[str, str]:
    """/proc/cpuinfo's fields of the first CPU, up to its flags ({} where there is no /proc/cpuinfo)."""
    facts: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                facts.setdefault(key.strip(), value.strip())
                if key.strip() == "flags":
                    return facts
    except OSError:  # not Linux: the line says "unknown CPU"
        return {}
    return facts


def _last_level_cache() -> str:
    """The size of cpu0's highest cache level, as sysfs writes it ('307200K'), or 'unknown'."""
    levels = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            levels.append((int((index / "level").read_text()), (index / "size").read_text().strip()))
        except (OSError, ValueError):
            continue
    return max(levels, key=lambda level: level[0])[1] if levels else "unknown"


# --------------------------------------------------------------------------- files


def drop_cache(path: Path) -> None:
    """Evict a file's pages from the page cache (written out first: only clean pages go), so the next read comes from the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def dir_bytes(path: Path) -> int:
    """Bytes of every file under `path`."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def dir_disk_bytes(path: Path) -> int:
    """Disk blocks held by every file under `path`, in bytes: what scratch costs (a file's length overstates it where
    ranges already read were given back: gpart.bytes.sink.release). Files removed while it walks count 0."""
    total = 0
    for f in Path(path).rglob("*"):
        try:
            total += f.stat().st_blocks * 512 if f.is_file() else 0
        except FileNotFoundError:
            pass
    return total


def same_files(a: Path, b: Path) -> bool:
    """Whether directories `a` and `b` hold the same files (at every depth) with the same bytes, but the measured
    seconds of each try in a partition manifest (SPEC 4.5: params.tried[].seconds), which no two runs share."""
    files = sorted(str(p.relative_to(a)) for p in a.rglob("*") if p.is_file())
    _, mismatch, errors = filecmp.cmpfiles(a, b, files, shallow=False)
    timed = [f for f in mismatch if Path(f).name == "manifest.json" and _untimed(a / f) == _untimed(b / f)]
    return not errors and set(mismatch) == set(timed) and len(files) == sum(1 for p in b.rglob("*") if p.is_file())


def _untimed(manifest: Path) -> dict:
    data = json.loads(manifest.read_text())
    for tried in (data.get("params") or {}).get("tried") or []:
        tried.pop("seconds", None)
    return data


if TYPE_CHECKING:
    import numpy

RMAT_PROBABILITIES = (0.45, 0.22, 0.22, 0.11)  # the quadrant probabilities of every R-MAT generator here


def rmat_block(rng: "numpy.random.Generator", size: int, num_nodes: int) -> "tuple[numpy.ndarray, numpy.ndarray]":
    """`size` R-MAT (src, dst) pairs in [0, num_nodes), self-loops included: one quadrant choice per level of
    the id bits, for every edge at once (`rng.random(size)` once per level, so a seed gives the same edges)."""
    import numpy as np  # here: the harness itself imports only the standard library (see above)

    scale = max(1, int(np.ceil(np.log2(num_nodes))))
    cumulative = np.cumsum(RMAT_PROBABILITIES)
    src = np.zeros(size, dtype=np.int64)
    dst = np.zeros(size, dtype=np.int64)
    for _ in range(scale):
        quadrant = np.searchsorted(cumulative, rng.random(size), side="right")
        src = (src << 1) | (quadrant >= 2)
        dst = (dst << 1) | (quadrant % 2)
    return src % num_nodes, dst % num_nodes


def run_in_group(command: list, group, sample=None, timeout: Optional[float] = None):
    """`command` run inside memory group `group` (tests.support.memcap.MemoryGroup, entered) while the group's memory,
    and `sample()` where given, are sampled every 0.5 s: (the finished child, its wall seconds, its CPU seconds)."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.5):
            if sample is not None:
                sample()
            group.sample()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        child = subprocess.run(command, capture_output=True, text=True, preexec_fn=group.join, timeout=timeout)
    finally:
        done.set()
        watcher.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return child, time.perf_counter() - start, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
