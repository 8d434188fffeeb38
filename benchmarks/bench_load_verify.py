"""What gr.load_partition's checksums (verify=True, the default) cost per GB, beside a plain read of the same bytes.

    python benchmarks/bench_load_verify.py [--rows 1000000] [--dim 64] [--repeats 3] [--cold]

Writes a 2-part random partition of a random graph with an N x D float32
feature table under /tmp/gpart-bench-load-verify/ (deleted at the end) and
times, on partition 0's files and the book (what a load reads), taking turns
so that all see the same machine load, the best of --repeats of:

- plain read: every file read once into a 16 MiB buffer, nothing computed
  (the baseline: what any consumer of the bytes pays at least);
- CRC-32 mapped, 1 thread / N threads: gpart.bytes.crc.mapped_file_crc32;
- load verify=False / load (default, checked): gr.load_partition on the CPU.

Warm: the files are in the page cache (just written), so the figures are the
CPU cost. --cold also drops the files' pages before every run
(posix_fadvise DONTNEED on these files only), so each run reads the disk.
Figures are seconds per GB (1e9 bytes); compare the rows, not absolute times,
on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np
from harness import best_times  # first: puts the repository root on sys.path

ROOT = Path("/tmp/gpart-bench-load-verify")


def make_result(rows: int, dim: int) -> Path:
    from gpart.base.graph import Graph
    from gpart.pipeline.partition import partition_graph

    rng = np.random.default_rng(0)
    edges = 4 * rows
    graph = Graph.from_arrays(rng.integers(0, rows, edges), rng.integers(0, rows, edges), rows,
                              feat=rng.standard_normal((rows, dim), dtype=np.float32),
                              label=rng.integers(0, 10, rows))
    partition_graph(graph, ROOT / "parts", 2, method="random")
    return ROOT / "parts"


def loaded_files(directory: Path) -> list[Path]:
    """The files load_partition(directory, 0) reads: partition 0's arrays and the book."""
    return sorted(p for sub in ("part_0", "book") for p in (directory / sub).rglob("*.bin"))


def drop_cache(files: list[Path]) -> None:
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def plain_read(files: list[Path]) -> None:
    buf = memoryview(bytearray(16 << 20))
    for path in files:
        with open(path, "rb", buffering=0) as fh:
            while fh.readinto(buf):
                pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cold", action="store_true", help="also time with the files' pages dropped before every run")
    args = parser.parse_args()

    import gpart.runtime as gr
    from gpart.bytes.crc import checksum_threads, mapped_file_crc32

    shutil.rmtree(ROOT, ignore_errors=True)
    try:
        directory = make_result(args.rows, args.dim)
        files = loaded_files(directory)
        nbytes = sum(p.stat().st_size for p in files)
        threads = checksum_threads()
        cases: dict[str, Callable[[], object]] = {
            "plain read (baseline)": lambda: plain_read(files),
            "CRC-32 mapped, 1 thread": lambda: [mapped_file_crc32(p, p.stat().st_size, threads=1) for p in files],
            f"CRC-32 mapped, {threads} threads": lambda: [mapped_file_crc32(p, p.stat().st_size) for p in files],
            "load_partition verify=False": lambda: gr.load_partition(directory, 0, device="cpu", verify=False),
            "load_partition (checked, default)": lambda: gr.load_partition(directory, 0, device="cpu"),
        }
        print(f"partition 0 of a {args.rows:,} x {args.dim} float32 result: {len(files)} files, {nbytes / 1e9:.3f} GB; "
              f"best of {args.repeats}; load average {os.getloadavg()[0]:.2f}; {threads} checksum threads")
        modes = [("warm", False)] + ([("cold", True)] if args.cold else [])
        for mode, cold in modes:
            def run(fn: Callable[[], object], cold: bool = cold) -> Callable[[], object]:
                return (lambda: (drop_cache(files), fn())) if cold else fn
            times = best_times(*(run(fn) for fn in cases.values()), repeat=args.repeats)
            base = times[0]
            print(f"{mode} page cache{' (pages dropped before each run, dropping included)' if cold else ''}:")
            for label, seconds in zip(cases, times):
                print(f"  {label:36s} {seconds * 1e3:8.1f} ms  {seconds / nbytes * 1e9:6.3f} s/GB  {seconds / base:5.2f} x read")
        print(f"load average {os.getloadavg()[0]:.2f} at {time.strftime('%H:%M:%S')}")
    finally:
        shutil.rmtree(ROOT, ignore_errors=True)


if __name__ == "__main__":
    main()
