"""Partition methods side by side under a memory cap: wall, peak RSS, edge cut and the three balances.

    python benchmarks/bench_balance.py                         # 1M/10M, 4M/50M, 5.6M/70M; 4 and 8 parts
    python benchmarks/bench_balance.py --sizes 1m --parts 4    # one graph, one part count

Every measurement is one child process (`gpart.pipeline.partition.partition_graph`,
the whole pipeline: read, assign, write) run inside a cgroup v1 memory
group capped at --cap (default 10 GiB; tests/support/memcap.py), so a method that
needs more memory is killed by the OOM killer and reported as `OOM at cap`
(that is a result: it does not fit this machine). The child's --max-memory
is set far above the cap so gpart's own up-front refusal does not hide the
out-of-memory. Baselines measured in the same run, printed beside the
figures: `random` (cut of an exactly balanced random assignment; each
method's cut is also shown as a ratio to it) and the numpy I/O floor for
remainder (load src/dst, write the same bytes, fsync; from
bench_partition.py). Graphs come from tests/support/synthetic.py (Chung-Lu power law,
exponent 2.5, with a 10% training mask, no features) and are generated
into --workdir when missing. Without a cgroup (not root, cgroup v2) the
children run uncapped and the table says so.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from harness import child_result, dir_bytes, peak_rss_mib, run_child, script_child  # first: puts the repository root on sys.path

from tests.support.memcap import available
from tests.support.synthetic import write_powerlaw_npz

SIZES = {"1m": (1_000_000, 10_000_000), "4m": (4_000_000, 50_000_000), "5.6m": (5_600_000, 70_000_000)}
# METHOD@SIZE runs METHOD with --max-memory SIZE (the bounded pipeline: edges bucketed on disk)
METHODS = ("balanced", "metis", "kaminpar", "stream", "stream@1GB", "remainder", "remainder@1GB", "random")
# METIS needs ~300 B per input edge (symmetrised adjacency, its own copies): on graphs where that
# exceeds the cap it is still run once (4 parts) to show the OOM, and skipped for 8 parts.
METIS_BYTES_PER_EDGE = 300


def child(args) -> None:
    from gpart.pipeline.partition import partition_graph

    extra = {"threads": args.threads} if args.method in ("balanced", "kaminpar") else {}
    if args.method == "kaminpar":
        extra.update(balance_edges=True)  # node + in-degree weight: what the balanced default tries first
    start = time.perf_counter()
    manifest = partition_graph(args.input, args.out, args.parts, args.method, force=True,
                               max_memory=args.max_memory, **extra)
    wall = time.perf_counter() - start
    print(json.dumps({"wall": wall, "rss": peak_rss_mib() * 2**20, "stats": manifest["stats"], "bytes": dir_bytes(args.out),
                      "backend": manifest["params"].get("backend")}))


def measure_method(graph: Path, parts: int, method: str, workdir: Path, cap: int, threads: int,
                   source: Path | None = None) -> tuple[dict | None, str]:
    """One child run, capped where this host allows; (result, "") or (None, what went wrong).

    `source`: a gpart checkout to import instead of this one (e.g. main, for a same-run baseline).
    """
    method, _, max_memory = method.partition("@")
    out = workdir / f"out-{method}"
    cmd = script_child(__file__, "--input", str(graph), "--parts", str(parts), "--method", method,
                       "--out", str(out), "--threads", str(threads), "--max-memory", max_memory or "1TB")
    if source is not None:
        cmd = ["env", f"PYTHONPATH={source}"] + cmd
    try:
        run = run_child(cmd, cap=cap if available() is None else None)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if run.oom_killed:
        return None, f"OOM at cap ({cap / 2**30:.0f} GiB) after {run.seconds:.0f} s"
    if run.returncode != 0:
        return None, f"failed (exit {run.returncode}): {run.last_error_line()}"
    return run.result(), ""


def floor_ratio(graph: Path, parts: int, workdir: Path, cap: int, repeats: int, baseline: Path | None) -> None:
    """remainder wall / numpy floor, runs alternating (this checkout, `baseline` checkout, floor), medians."""
    walls: dict[str, list[float]] = {"remainder": [], "floor": []}
    if baseline is not None:
        walls[f"remainder ({baseline})"] = []
    for _ in range(repeats):
        result, note = measure_method(graph, parts, "remainder", workdir, cap, 1)
        if result is None:
            print(f"    remainder failed: {note}")
            return
        walls["remainder"].append(result["wall"])
        if baseline is not None:
            other, note = measure_method(graph, parts, "remainder", workdir, cap, 1, source=baseline)
            walls[f"remainder ({baseline})"].append(other["wall"] if other else float("nan"))
        walls["floor"].append(measure_floor(graph, result["bytes"], workdir)["wall"])
    floor = sorted(walls["floor"])[repeats // 2]
    print(f"    remainder against the numpy load+write floor, {repeats} alternating runs (median; all runs):")
    for name, values in walls.items():
        med = sorted(values)[repeats // 2]
        print(f"      {name:<28}{med:7.2f} s  {med / floor:5.2f} x floor   ({', '.join(f'{v:.2f}' for v in values)})", flush=True)


def measure_floor(graph: Path, out_bytes: int, workdir: Path) -> dict:
    """The numpy load + write floor, in a child: bench_partition.py's, one definition."""
    cmd = script_child(Path(__file__).with_name("bench_partition.py"), "floor", "--input", str(graph),
                       "--out", str(workdir / "floor"), "--out-bytes", str(out_bytes))
    try:
        return child_result(cmd)
    finally:
        shutil.rmtree(workdir / "floor", ignore_errors=True)


def ensure_graph(workdir: Path, size: str) -> Path:
    nodes, edges = SIZES[size]
    path = workdir / f"powerlaw-{size}.npz"
    if not path.exists():
        print(f"generating {path} ({nodes:,} nodes, {edges:,} edges, train_mask, no features) ...", flush=True)
        write_powerlaw_npz(path, nodes, edges, 0, 0)
    return path


def row(label: str, result: dict | None, note: str, num_edges: int, random_cut: float | None) -> str:
    if result is None:
        return f"    {label:<22}{note}"
    s = result["stats"]
    train = "-" if s.get("train_balance") is None else f"{s['train_balance']:.3f}"
    vs_random = f"{s['edge_cut_ratio'] / random_cut:6.2f}" if random_cut else "     -"
    label += f" ({result['backend']})" if result.get("backend") else ""
    return (f"    {label:<22}{result['wall']:8.1f}{result['rss'] / 2**20:9.0f}{result['rss'] / num_edges:7.0f}"
            f"{s['edge_cut_ratio']:8.3f}{vs_random}{s['node_balance']:8.3f}{s['edge_balance']:8.3f}{train:>8} {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1m,4m,5.6m", help="graphs to run, from " + ", ".join(SIZES))
    parser.add_argument("--parts", default="4,8", help="part counts (default 4,8)")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--cap", default="10GiB", help="cgroup memory cap of every child (default 10GiB)")
    parser.add_argument("--threads", type=int, default=2, help="KaMinPar threads (default 2)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/gpart-bench-balance"))
    parser.add_argument("--floor-repeats", type=int, default=0,
                        help="only measure remainder / numpy floor, this many alternating runs per graph and part count")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="with --floor-repeats: also run remainder from this gpart checkout (e.g. /work/main)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--input"), parser.add_argument("--out"), parser.add_argument("--method")
    parser.add_argument("--max-memory", dest="max_memory")
    args = parser.parse_args()
    if args.child:
        args.parts = int(args.parts)
        return child(args)
    from gpart.base.memory import parse_memory_size

    cap = parse_memory_size(args.cap, "--cap")
    reason = available()
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"gpart bench_balance: {os.cpu_count()} CPUs (shared machine: timings are noisy), "
          + (f"every child capped at {cap / 2**30:.1f} GiB" if reason is None else f"UNCAPPED ({reason})"), flush=True)
    for size in args.sizes.split(","):
        graph = ensure_graph(args.workdir, size)
        nodes, edges = SIZES[size]
        for parts in [int(p) for p in args.parts.split(",")]:
            print(f"\n{size}: {nodes:,} nodes, {edges:,} edges, {parts} parts", flush=True)
            if args.floor_repeats:
                floor_ratio(graph, parts, args.workdir, cap, args.floor_repeats, args.baseline)
                continue
            print(f"    {'method':<22}{'wall s':>8}{'RSS MiB':>9}{'B/edge':>7}{'cut':>8}{'/rand':>6}"
                  f"{'node':>8}{'edge':>8}{'train':>8}", flush=True)
            results = {}
            for method in ["random"] + [m for m in args.methods.split(",") if m != "random"]:
                if method == "metis" and METIS_BYTES_PER_EDGE * edges > cap and parts != 4:
                    print(f"    {method:<22}skipped: OOM at 4 parts already (needs ~{METIS_BYTES_PER_EDGE * edges / 2**30:.0f} GiB)",
                          flush=True)
                    continue
                result, note = measure_method(graph, parts, method, args.workdir, cap, args.threads)
                results[method] = result
                random_cut = results["random"]["stats"]["edge_cut_ratio"] if results.get("random") else None
                print(row(method, result, note, edges, random_cut), flush=True)
            if results.get("remainder"):
                floor = measure_floor(graph, results["remainder"]["bytes"], args.workdir)
                ratio = results["remainder"]["wall"] / floor["wall"]
                print(f"    {'numpy floor':<22}{floor['wall']:8.1f}{floor['rss'] / 1:9.0f}"
                      f"        remainder wall / floor = {ratio:.2f} (load {floor['load']:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
