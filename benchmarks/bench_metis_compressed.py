"""--method metis past its memory: the compressed path beside the in-memory METIS, in the same invocation.

    python benchmarks/bench_metis_compressed.py --workdir W                      # R-MAT and geometric 1M/10M, 8 parts
    python benchmarks/bench_metis_compressed.py --workdir W --max-memory 1.5GB 2.5GB --balance-edges
    python benchmarks/bench_metis_compressed.py --workdir W --metis-memory       # METIS's own peak per level

For each family (benchmarks/scale_graphs.py, generated into --workdir when
missing) `gpart partition --method metis` runs first in memory (under
--baseline-cap, with a --max-memory that holds its estimate), then on the
compressed path once per --max-memory (each below the in-memory estimate,
under a cap of --max-memory / 0.9), each run in its own cgroup v1 memory
group. Printed per run: wall, CPU (the process tree's), the group's peak
charge (RSS and page cache) and its anonymous memory sampled every 0.5 s,
per input edge, cut, node and in-edge balance, the levels coarsened on
disk; then the compressed run's ratios to the in-memory one. Outputs are
removed after each run. Needs root (cgroups).

--metis-memory measures what gpart.engines.metis_levels.METIS_ENTRY_BYTES
estimates instead: METIS's growth in its forked child (VmHWM over VmRSS at
its start) on each graph's symmetric file and on two levels coarsened from it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from harness import machine_line, run_in_group  # first: puts the repository root on sys.path
from scale_graphs import make

from gpart.base.memory import format_size, parse_memory_size
from tests.support.memcap import MemoryGroup, available

GRAPHS = {"rmat": (1_000_000, 10_000_000), "geometric": (1_000_000, 10_000_000)}
CAP_SHARE = 0.9  # --max-memory of a compressed run, of its group's cap (the rest: page cache headroom)


def graph(workdir: Path, family: str) -> tuple[Path, int]:
    nodes, edges = GRAPHS[family]
    path = workdir / f"{family}-{nodes // 10**6}M-{edges // 10**6}M.npz"
    if not path.exists():
        make(family, path, nodes, edges)
    return path, edges


def run(command: list[str], out: Path, cap: int) -> dict:
    """`command` (a gpart partition writing `out`) in its own memory group capped at `cap`: its figures."""
    with MemoryGroup(cap, "bench-metis") as group:
        child, wall, cpu = run_in_group(command, group)
        figures = {"ok": child.returncode == 0, "wall": wall, "peak": group.peak, "anon": group.anon_peak,
                   "oom": group.oom_killed, "cpu": cpu}
    if child.returncode == 0:
        manifest = json.loads((out / "manifest.json").read_text())
        figures.update(stats=manifest["stats"], params=manifest["params"])
    else:
        figures["error"] = (child.stderr.strip().splitlines() or ["?"])[-1][:300]
    shutil.rmtree(out, ignore_errors=True)
    return figures


def line(label: str, edges: int, f: dict) -> str:
    if not f["ok"]:
        return f"  {label:<22} FAILED ({'OOM' if f['oom'] else 'error'}) after {f['wall']:.0f} s: {f.get('error', '')}"
    s, p = f["stats"], f["params"]
    levels = p.get("disk_levels", [])
    shown = " > ".join(f"{lv['nodes'] / 1e6:.2f}M/{lv['entries'] / 1e6:.1f}M" for lv in levels)
    return (f"  {label:<22} wall {f['wall']:6.1f} s  cpu {f['cpu']:6.1f} s  peak {format_size(f['peak']):>9} "
            f"({f['peak'] / edges:5.1f} B/edge, anon {format_size(f['anon'])} = {f['anon'] / edges:5.1f})  "
            f"cut {s['edge_cut_ratio']:.4f}  balance n {s['node_balance']:.4f} e {s['edge_balance']:.3f}  "
            f"{p['algorithm']}{'  repaired' if p.get('repaired') else ''}{'  levels ' + shown if shown else ''}")


def compare(path: Path, edges: int, args: argparse.Namespace) -> None:
    out = args.workdir / "out"
    command = [str(Path(sys.executable).with_name("gpart")), "partition", str(path), "--parts", str(args.parts), "--method", "metis", "-o", str(out),
               "--force", *(["--balance-edges"] if args.balance_edges else [])]
    base = run(command + ["--max-memory", str(parse_memory_size(args.baseline_memory))], out,
               parse_memory_size(args.baseline_cap))
    print(line("in memory", edges, base), flush=True)
    for limit in args.max_memory:
        budget = parse_memory_size(limit)
        mine = run(command + ["--max-memory", str(budget)], out, int(budget / CAP_SHARE))
        print(line(f"compressed, {format_size(budget)}", edges, mine), flush=True)
        if base["ok"] and mine["ok"]:
            ratio = mine["stats"]["edge_cut_ratio"] / max(base["stats"]["edge_cut_ratio"], 1e-12)
            print(f"  {'':<22} / in memory: cut {ratio:.3f}x, wall {mine['wall'] / base['wall']:.2f}x, "
                  f"anon {mine['anon'] / max(base['anon'], 1):.2f}x", flush=True)


def metis_memory(path: Path) -> None:
    """METIS's growth on the symmetric file of `path` and on levels coarsened from it (gpart.engines.metis_levels)."""
    import numpy as np

    from gpart.engines.disk_levels import coarsen
    from gpart.engines.isolate import call_isolated
    from gpart.engines.metis_levels import DiskMetis, metis_bytes, metis_file
    from gpart.engines.symmetric_file import symmetric_parhip
    from gpart.formats.files.scratch import ScratchDir
    from gpart.formats.input.readers import read_graph

    def status(key: str) -> int:
        return next(int(row.split()[1]) * 1024 for row in open("/proc/self/status") if row.startswith(key))

    def measure(file, weights, recursive: bool) -> None:
        job = DiskMetis(8, recursive, dict(seed=0, imbalance=0.03, objective="cut", trials=1, iterations=None), None, 0)

        def child(out):
            start = status("VmRSS")
            out[:] = metis_file(file, weights, job)[1]
            return status("VmHWM") - start

        grown, _ = call_isolated(child, file.num_nodes, np.int32)
        print(f"  {file.num_nodes:>9,} nodes {file.num_entries:>11,} entries, {weights.shape[1]} constraint(s), "
              f"{'recursive' if recursive else 'k-way'}: METIS grew {format_size(grown)} "
              f"({grown / max(1, file.num_entries):.1f} B/entry), estimate {format_size(metis_bytes(file.num_nodes, file.num_entries, weights.shape[1]))}",
              flush=True)

    graph = read_graph(path)
    with ScratchDir(path.parent) as scratch:
        file, xadj = symmetric_parhip(graph, scratch, 1 << 28)
        weights = np.stack([np.ones(graph.num_nodes, dtype=np.int64), np.diff(xadj)], axis=1)
        levels = coarsen(file, weights, [0.03, 0.03], 8, 0, lambda n, m: m <= 0.6 * file.num_entries, scratch, 1 << 28)
        for level in [*levels.levels, None]:
            at, held = (levels.coarsest, levels.coarsest_weights) if level is None else (level.file, level.weights)
            measure(at, np.ascontiguousarray(held[:, :1]), True)
            measure(at, np.ascontiguousarray(held), False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=sorted(GRAPHS), choices=sorted(GRAPHS))
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--balance-edges", action="store_true", help="METIS with the in-degree as a second constraint")
    parser.add_argument("--max-memory", nargs="+", default=["1.5GB"],
                        help="--max-memory of each compressed run (default 1.5GB: below the in-memory 3.3 GB)")
    parser.add_argument("--baseline-memory", default="3.4GB", help="--max-memory of the in-memory run (its estimate: 3.27 GB)")
    parser.add_argument("--baseline-cap", default="4GB", help="memory cap of the in-memory run")
    parser.add_argument("--metis-memory", action="store_true", help="measure METIS's own peak per level instead")
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args()
    reason = available()
    if reason and not args.metis_memory:
        sys.exit(f"bench_metis_compressed: needs cgroup v1 memory groups: {reason}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(machine_line())
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)
    for family in args.families:
        path, edges = graph(args.workdir, family)
        print(f"{family} {path.name} ({edges:,} edges), {args.parts} parts"
              f"{', --balance-edges' if args.balance_edges else ''}", flush=True)
        if args.metis_memory:
            metis_memory(path)
        else:
            compare(path, edges, args)
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
