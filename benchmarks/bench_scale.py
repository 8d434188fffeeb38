"""The default partition at scale: the compressed path (bounded memory) beside the in-memory default.

    python benchmarks/bench_scale.py --sizes 10M --parts 8 16 --workdir /work/scratch-x
    python benchmarks/bench_scale.py --sizes 120M --parts 8 16 --cap 3GB --baseline-cap 13GB
    python benchmarks/bench_scale.py --sizes 1B --families geometric --parts 8 --cap 16GB --no-baseline --workdir W

For each family (R-MAT and geometric, benchmarks/scale_graphs.py, generated
into --workdir when missing), size and part count, `gpart partition` runs
twice, each in its own cgroup v1 memory group: the default
as it runs with the memory it is given (--baseline-cap, no --max-memory: the
in-memory path where it fits), then the default under --cap with
--max-memory a share of it (the compressed path: the in-memory path would
not fit). Printed per run: wall, CPU seconds (the process tree's),
the group's peak charge (RSS and page cache, memory.max_usage_in_bytes) per
input edge, cut, the three balances, which adjacency ran, and the peak disk
used under --workdir beyond the input (scratch and output); then the
compressed run's ratios to the in-memory run of the same case (targets:
cut <= 1.05x, wall <= 2x, peak <= 24 bytes per input edge, balances <=
1.10). Outputs are removed after each run. Needs root (cgroups).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from harness import dir_disk_bytes, machine_line, run_in_group  # first: puts the repository root on sys.path
from scale_graphs import make

from gpart.base.memory import format_size, parse_memory_size
from tests.support.memcap import MemoryGroup, available

SIZES = {"10M": (1_000_000, 10_000_000), "120M": (8_000_000, 120_000_000),
         "1B": (67_000_000, 1_000_000_000)}  # R-MAT nodes (15 edges a node), edges; 1B: 16 GB of input
GEOMETRIC_DEGREE = 10  # geometric: edges / nodes
MAX_MEMORY_SHARE = 0.9  # --max-memory of the compressed run, of its cap (the rest: page cache headroom)


def graph(workdir: Path, family: str, size: str) -> tuple[Path, int]:
    nodes, edges = SIZES[size]
    if family == "geometric":
        nodes = edges // GEOMETRIC_DEGREE
    path = workdir / f"{family}-{size}.npz"
    if not path.exists():
        start = time.perf_counter()
        make(family, path, nodes, edges)
        print(f"generated {path.name}: {nodes:,} nodes, {edges:,} edges in {time.perf_counter() - start:.0f} s", flush=True)
    return path, edges


def run(path: Path, parts: int, out: Path, cap: int, max_memory: Optional[int], runner: list[str], timeout: float,
        show_log: bool = False, keep: bool = False) -> dict:
    """One `gpart partition` run (`runner`: the command that runs gpart) in its own memory group capped at `cap`:
    its figures (or its failure); `show_log`: echo what the run printed to stderr; `keep`: leave the output."""
    command = [*runner, "partition", str(path), "--parts", str(parts), "-o", str(out), "--force"]
    if max_memory is not None:
        command += ["--max-memory", str(max_memory)]
    base = dir_disk_bytes(out.parent)
    peak = {"disk": 0}
    with MemoryGroup(cap, "bench-scale") as group:

        def disk() -> None:  # scratch and output on disk
            peak["disk"] = max(peak["disk"], dir_disk_bytes(out.parent) - base)

        child, wall, cpu = run_in_group(command, group, disk, timeout)
        if show_log:
            print(child.stderr, end="", flush=True)
        figures = {"ok": child.returncode == 0, "wall": wall, "peak": group.peak, "oom": group.oom_killed,
                   "rss": group.anon_peak, "cpu": cpu, **peak}
    if child.returncode == 0:
        manifest = json.loads((out / "manifest.json").read_text())
        figures.update(stats=manifest["stats"], adjacency=manifest["params"].get("adjacency", "memory"),
                       levels=manifest["params"].get("backend_params", {}).get("disk_levels", []))
    else:
        figures["error"] = (child.stderr.strip().splitlines() or ["?"])[-1][:200]
    if not keep:
        shutil.rmtree(out, ignore_errors=True)
    return figures


def line(label: str, edges: int, f: dict) -> str:
    if not f["ok"]:
        return f"  {label:<10} FAILED (exit {'OOM' if f['oom'] else 'error'}) after {f['wall']:.0f} s: {f.get('error', '')}"
    s = f["stats"]
    train = s.get("train_balance")
    return (f"  {label:<10} {f['adjacency']:<10} wall {f['wall']:7.1f} s  cpu {f['cpu']:7.1f} s  peak {format_size(f['peak']):>10} "
            f"= {f['peak'] / edges:5.1f} B/edge (anon {f['rss'] / edges:5.1f})  cut {s['edge_cut_ratio']:.4f}  balance n {s['node_balance']:.3f} "
            f"e {s['edge_balance']:.3f}{'' if train is None else f' t {train:.3f}'}  disk {format_size(f['disk'])}  "
            f"cost {1e9 * f['wall'] / edges:.0f} ns/edge" + _levels(f["levels"]))


def _levels(levels: list) -> str:
    """The levels coarsened on disk before KaMinPar ran, as nodes/entries each."""
    if not levels:
        return ""
    return "  disk levels " + " > ".join(f"{lv['nodes'] / 1e6:.2f}M/{lv['entries'] / 1e6:.1f}M" for lv in levels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["10M"], choices=sorted(SIZES))
    parser.add_argument("--parts", nargs="+", type=int, default=[8, 16])
    parser.add_argument("--families", nargs="+", default=["rmat", "geometric"], choices=["rmat", "geometric"])
    parser.add_argument("--cap", default=None, help="memory cap of the compressed run (default: 24 bytes per input edge)")
    parser.add_argument("--max-memory", default=None,
                        help="--max-memory of the compressed run (default: 0.9 of --cap); below the in-memory path's "
                             "need it forces the compressed path under a roomier cap, to measure what it takes")
    parser.add_argument("--baseline-cap", default="13GB", help="memory cap of the in-memory default (default 13GB)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the in-memory default")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds a run may take (default 4 h)")
    parser.add_argument("--runner", default=str(Path(sys.executable).with_name("gpart")),
                        help="the command that runs gpart, split on spaces (e.g. a wrapper that times phases)")
    parser.add_argument("--show-log", action="store_true", help="print each run's stderr (with a -v runner: stage times)")
    args = parser.parse_args()
    reason = available()
    if reason:
        sys.exit(f"bench_scale: needs cgroup v1 memory groups: {reason}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    runner = args.runner.split()
    print(machine_line())
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)
    for size in args.sizes:
        for family in args.families:
            path, edges = graph(args.workdir, family, size)
            cap = parse_memory_size(args.cap) if args.cap else 24 * edges
            for parts in args.parts:
                print(f"{family} {size} ({edges:,} edges), {parts} parts; compressed under a {format_size(cap)} cap", flush=True)
                base = None
                if not args.no_baseline:
                    base = run(path, parts, args.workdir / "out", parse_memory_size(args.baseline_cap), None, runner,
                               args.timeout, args.show_log)
                    print(line("in-memory", edges, base), flush=True)
                limit = parse_memory_size(args.max_memory) if args.max_memory else int(cap * MAX_MEMORY_SHARE)
                mine = run(path, parts, args.workdir / "out", cap, limit, runner, args.timeout, args.show_log)
                print(line("compressed", edges, mine), flush=True)
                if base and base["ok"] and mine["ok"]:
                    ratio = mine["stats"]["edge_cut_ratio"] / max(base["stats"]["edge_cut_ratio"], 1e-12)
                    print(f"  compressed / in-memory: cut {ratio:.3f}x, wall {mine['wall'] / base['wall']:.2f}x, "
                          f"peak {mine['peak'] / base['peak']:.2f}x", flush=True)
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
