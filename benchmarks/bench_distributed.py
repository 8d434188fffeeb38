"""Distributed partitioning (python -m gpart.distributed partition) beside single-machine gpart partition.

    python benchmarks/bench_distributed.py --nodes 4000000 --edges 50000000 --work /tmp/bench_dist

Makes (or reuses) the power-law graph of benchmarks/make_powerlaw.py, cuts it
with `gpart chunk`, then in the same run partitions the chunked directory
with single-machine `gpart partition` (the baseline) and with 2 and 4 gloo
processes on 127.0.0.1 (as torchrun would start them). Prints wall time,
per-process peak RSS (ru_maxrss from wait4 of each process), the largest
all_to_all message any rank sent and the rounds, checks that every output
file is byte-identical to the baseline's, and derives per-edge costs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from harness import same_files, torchrun_env, wait_peak_rss  # first: puts the repository root on sys.path

from tests.support.gloo_processes import free_port

REPO = Path(__file__).resolve().parents[1]


VERBOSE = False  # --verbose: every process prints its stage times and peak RSS (-v) to stderr


def run_one(args: list[str], env: dict | None = None) -> tuple[float, int, str]:
    start = time.perf_counter()
    proc = subprocess.Popen(args + (["-v"] if VERBOSE and "partition" in args else []), env=env, stdout=subprocess.PIPE,
                            stderr=None if VERBOSE else subprocess.DEVNULL, text=True)
    out = proc.stdout.read()
    code, rss = wait_peak_rss(proc)
    if code:
        sys.exit(f"failed ({code}): {' '.join(args)}")
    return time.perf_counter() - start, rss, out


def run_distributed(world: int, chunks: Path, out: Path, parts: int, method: str, max_message: str) -> dict:
    port, procs = free_port(), []
    start = time.perf_counter()
    for rank in range(world):
        env = torchrun_env(rank, world, port, LOCAL_RANK=str(rank))
        procs.append(subprocess.Popen([sys.executable, "-m", "gpart.distributed", "partition", str(chunks), "--parts",
                                       str(parts), "-o", str(out), "--method", method, "--max-message", max_message,
                                       "--json"] + (["-v"] if VERBOSE else []), env=env, stdout=subprocess.PIPE,
                                      stderr=None if VERBOSE else subprocess.DEVNULL, text=True))
    summary = json.loads(procs[0].stdout.read())
    results = [wait_peak_rss(p) for p in procs]
    seconds = time.perf_counter() - start
    if any(code for code, _ in results):
        sys.exit(f"distributed run on {world} ranks failed: exit codes {[c for c, _ in results]}")
    return {"seconds": seconds, "rss": [rss for _, rss in results], "largest_message": summary["largest_message"],
            "rounds": summary["rounds"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4_000_000)
    parser.add_argument("--edges", type=int, default=50_000_000)
    parser.add_argument("--feat-dim", type=int, default=32)
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--method", default="remainder")
    parser.add_argument("--max-message", default="256MiB")
    parser.add_argument("--worlds", default="2,4")
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpart_bench_distributed"))
    parser.add_argument("--verbose", action="store_true", help="stage times and peak RSS of every process on stderr")
    args = parser.parse_args()
    global VERBOSE
    VERBOSE = args.verbose
    args.work.mkdir(parents=True, exist_ok=True)
    gpart = [sys.executable, "-m", "gpart.cli.main"]
    graph = args.work / f"powerlaw_{args.nodes}_{args.edges}_{args.feat_dim}.npz"
    if not graph.exists():
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "make_powerlaw.py"), str(graph), "--nodes", str(args.nodes),
                        "--edges", str(args.edges), "--feat-dim", str(args.feat_dim)], check=True)
    chunks = args.work / f"chunks_{graph.stem}_{args.chunks}"
    if not chunks.exists():
        seconds, rss, _ = run_one(gpart + ["chunk", str(graph), "--chunks", str(args.chunks), "-o", str(chunks)])
        print(f"gpart chunk: {seconds:.1f} s, peak RSS {rss / 2**20:.0f} MiB")
    E = args.edges
    print(f"graph {args.nodes:,} nodes, {E:,} edges, feat {args.feat_dim} float32, {args.chunks} chunks -> "
          f"{args.parts} parts by {args.method}, --max-message {args.max_message}")
    base, npz_out = args.work / "single", args.work / "single_npz"
    singles = [("single machine (baseline)", chunks, base, ""),
               ("single machine, from .npz", graph, npz_out, "   (the input memory-mapped, not concatenated from chunks)")]
    for label, source, out, remark in singles:
        shutil.rmtree(out, ignore_errors=True)
        seconds, rss, _ = run_one(gpart + ["partition", str(source), "--parts", str(args.parts), "--method", args.method,
                                           "-o", str(out), "-q"])
        print(f"{label:<28} {seconds:8.1f} s   peak RSS {rss / 2**20:8.0f} MiB   {seconds / E * 1e9:6.0f} ns/edge{remark}")
    shutil.rmtree(npz_out, ignore_errors=True)  # only the chunked baseline is compared with the distributed outputs
    for world in [int(w) for w in args.worlds.split(",")]:
        out = args.work / f"dist{world}"
        shutil.rmtree(out, ignore_errors=True)
        r = run_distributed(world, chunks, out, args.parts, args.method, args.max_message)
        same = same_files(base, out)
        print(f"{world} processes{'':<17} {r['seconds']:8.1f} s   peak RSS per rank "
              f"{', '.join(f'{x / 2**20:.0f}' for x in r['rss'])} MiB (max {max(r['rss']) / E:.1f} B/edge)   "
              f"largest message {r['largest_message'] / 2**20:.1f} MiB   rounds {r['rounds']}   "
              f"{r['seconds'] * world / E * 1e9:6.0f} ns/edge (x ranks)   byte-identical {same}")
        shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
