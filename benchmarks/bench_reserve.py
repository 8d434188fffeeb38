"""What reserving the space of memory-mapped files costs `gpart convert` (issue 26).

    python benchmarks/bench_reserve.py [--input G.npz] [--parts 4] [--targets pyg,glt] [--repeats 3] [--work DIR]

Every file gpart fills through a writable memory map is first given its disk
space (gpart.bytes.sink.preallocate: posix_fallocate), so a full disk is an
error instead of a SIGBUS. This times `convert --to T` of a partition result
(default: the 1M-node / 10M-edge / 128-dim power-law graph of
benchmarks/make_powerlaw.py, generated if missing, partitioned with
`--method remainder`) with the reservation and, in the same process and
alternating with it, without (the scratch files only sized with ftruncate,
sparse, as np.memmap(mode="w+") left them before). Best of --repeats each,
plus the time spent inside the reservation calls themselves.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import gpart.bytes.sink as sink
from gpart.convert import convert_partitions

ROOT = Path(__file__).resolve().parents[1]


def prepare(args: argparse.Namespace) -> Path:
    """The partition result to convert (the input generated and partitioned when missing)."""
    graph = args.input or args.work / "powerlaw-1m-10m.npz"
    if not graph.exists():
        subprocess.run([sys.executable, ROOT / "benchmarks" / "make_powerlaw.py", graph], check=True)
    parts = args.work / f"parts-{graph.stem}-{args.parts}"
    if not (parts / "manifest.json").exists():
        subprocess.run([sys.executable, "-m", "gpart.cli.main", "partition", graph, "-p", str(args.parts), "--method", "remainder",
                        "-o", parts, "--force", "-q"], check=True)
    return parts


def timed_convert(parts: Path, out: Path, target: str, reserve: bool) -> tuple[float, float]:
    """(seconds of the conversion, seconds inside the reservation calls) for one run."""
    spent = [0.0]
    real_reserve = sink._reserve

    def counted(fd: int, nbytes: int) -> None:
        started = time.perf_counter()
        real_reserve(fd, nbytes) if reserve else os.ftruncate(fd, nbytes)
        spent[0] += time.perf_counter() - started

    shutil.rmtree(out, ignore_errors=True)
    sink._reserve = counted
    try:
        started = time.perf_counter()
        convert_partitions(parts, out, to=target)
        return time.perf_counter() - started, spent[0]
    finally:
        sink._reserve = real_reserve
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, default=None, help="graph .npz (default: generate the 1M/10M power-law graph)")
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--targets", default="pyg,glt")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpart-bench-reserve"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    parts = prepare(args)
    best: dict[tuple[str, bool], tuple[float, float]] = {}
    for repeat in range(args.repeats):
        for target in args.targets.split(","):
            for reserve in ((True, False) if repeat % 2 == 0 else (False, True)):  # alternate which one goes first
                seconds, in_reserve = timed_convert(parts, args.work / "out", target, reserve)
                key = (target, reserve)
                best[key] = min(best.get(key, (seconds, in_reserve)), (seconds, in_reserve))
                print(f"  run {repeat + 1} {target:4s} {'reserved' if reserve else 'sparse':8s} {seconds:7.2f} s "
                      f"({in_reserve * 1000:.1f} ms in reservation calls)", flush=True)
    print(f"\nbest of {args.repeats}, {parts}:")
    for target in args.targets.split(","):
        (with_s, with_r), (without_s, _) = best[(target, True)], best[(target, False)]
        print(f"  convert --to {target}: reserved {with_s:.2f} s (of it {with_r * 1000:.1f} ms in posix_fallocate), "
              f"sparse {without_s:.2f} s, difference {with_s - without_s:+.2f} s ({(with_s / without_s - 1) * 100:+.1f} %)")


if __name__ == "__main__":
    main()
