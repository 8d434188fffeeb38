"""remainder / range / random under a cgroup v1 memory cap, beside the same command without one.

    sudo python benchmarks/bench_capped.py --workdir /tmp/capped                  # R-MAT 4M/50M, 8 parts, 350 MB cap
    sudo python benchmarks/bench_capped.py --nodes 1000000 --edges 12000000 --cap 120MB --max-memory 100MB

For each method the same `gpart partition GRAPH --method M --parts P --max-memory X -o OUT` runs
twice: in a memory group capped at --cap (what the issue asks to hold), and in a group with no
limit (the baseline of the same run: same code, page cache free to grow). Printed per run: exit
status, wall seconds, the group's peak charge (memory.max_usage_in_bytes: RSS plus the page cache
of what the run read and wrote) and that peak per input edge. Needs root on a cgroup v1 host.

The graph is R-MAT (the quadrant probabilities of benchmarks/bench_default.py, ids folded onto N
and permuted) streamed to an uncompressed .npz in chunks, so generating it takes tens of MB
whatever its size; unlike bench_default's recipe, duplicate edges are kept and a self loop's
destination moves to the next id (a global duplicate removal would hold every edge in memory).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import zipfile
from pathlib import Path
from typing import Iterator

import numpy as np
from harness import REPO, dir_bytes, machine_line, rmat_block  # first: puts the repository root on sys.path

from tests.support.memcap import available, run_capped

GENERATE_CHUNK = 1 << 22
UNLIMITED = 1 << 62  # a memory group's "no limit" (the kernel rounds it down to its own maximum)


def rmat_chunks(num_nodes: int, num_edges: int, seed: int, column: int) -> Iterator[np.ndarray]:
    """The src (`column` 0) or dst (1) ids of the streamed R-MAT graph, chunk by chunk; both columns
    draw the same edges (each chunk from its own seeded stream)."""
    relabel = np.random.default_rng([seed, 0]).permutation(num_nodes)
    for index, start in enumerate(range(0, num_edges, GENERATE_CHUNK)):
        rng = np.random.default_rng([seed, 1, index])
        src, dst = rmat_block(rng, min(GENERATE_CHUNK, num_edges - start), num_nodes)
        dst = np.where(src == dst, (dst + 1) % num_nodes, dst)
        yield relabel[src if column == 0 else dst]


def write_rmat_npz(path: Path, num_nodes: int, num_edges: int, seed: int = 0) -> None:
    """The streamed R-MAT graph as an uncompressed .npz (src, dst int64; num_nodes), written whole or not at all."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for column, name in enumerate(("src", "dst")):
                header = {"descr": "<i8", "fortran_order": False, "shape": (num_edges,)}
                with zf.open(name + ".npy", "w", force_zip64=True) as fh:
                    np.lib.format.write_array_header_1_0(fh, header)
                    for chunk in rmat_chunks(num_nodes, num_edges, seed, column):
                        fh.write(memoryview(np.ascontiguousarray(chunk, dtype="<i8")).cast("B"))
            with zf.open("num_nodes.npy", "w") as fh:
                np.lib.format.write_array(fh, np.asarray(num_nodes, dtype=np.int64))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def run_method(graph: Path, out: Path, method: str, args: argparse.Namespace, cap: int) -> dict:
    """One `gpart partition` run in a memory group of `cap` bytes: status, wall, group peak, bytes per edge."""
    gpart = str(Path(sys.executable).with_name("gpart"))
    shutil.rmtree(out, ignore_errors=True)
    command = [gpart, "partition", str(graph), "--parts", str(args.parts), "--method", method,
               "--max-memory", args.max_memory, "-o", str(out), "--json"]
    run = run_capped(command, cap, timeout=args.timeout)
    written = dir_bytes(out) if out.exists() else 0
    shutil.rmtree(out, ignore_errors=True)
    error = run.stderr.strip().splitlines()[-1] if run.returncode and run.stderr.strip() else ""
    return {"exit": run.returncode, "oom": run.oom_killed, "wall": run.seconds, "peak": run.group_peak,
            "per_edge": run.group_peak / args.edges, "written": written, "error": error}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/gpart-capped"), help="graph and outputs go here")
    parser.add_argument("--nodes", type=int, default=4_000_000)
    parser.add_argument("--edges", type=int, default=50_000_000)
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--cap", default="350MB", help="the memory group's limit (default 350MB)")
    parser.add_argument("--max-memory", default="300MB", help="gpart's --max-memory (default 300MB)")
    parser.add_argument("--methods", nargs="+", default=["remainder", "range", "random"])
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--keep", action="store_true", help="keep the generated graph")
    args = parser.parse_args()
    from gpart.base.memory import parse_memory_size

    cap = parse_memory_size(args.cap, "--cap")
    assert cap is not None
    reason = available()
    if reason:
        parser.error(f"capped runs are not possible here: {reason}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    graph = args.workdir / f"rmat-{args.nodes}-{args.edges}.npz"
    if not graph.exists():
        start = time.perf_counter()
        write_rmat_npz(graph, args.nodes, args.edges)
        print(f"generated {graph} ({graph.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - start:.0f} s")
    print(machine_line())
    print(f"load before: {os.getloadavg()}")
    print(f"R-MAT {args.nodes:,} nodes / {args.edges:,} edges, {args.parts} parts, --max-memory {args.max_memory}, "
          f"cap {args.cap}; repository {REPO}")
    print(f"{'method':<10} {'group':<9} {'exit':>4} {'wall s':>8} {'peak MiB':>9} {'B/edge':>7} {'written MB':>10}")
    results = {}
    try:
        for method in args.methods:
            for label, limit in (("capped", cap), ("no cap", UNLIMITED)):
                row = run_method(graph, args.workdir / "out", method, args, limit)
                results[f"{method} {label}"] = row
                print(f"{method:<10} {label:<9} {row['exit']:>4} {row['wall']:>8.1f} {row['peak'] / 2**20:>9.0f} "
                      f"{row['per_edge']:>7.2f} {row['written'] / 1e6:>10.0f}"
                      + ("  OOM-killed" if row["oom"] else "") + (f"  {row['error']}" if row["error"] else ""))
    finally:
        if not args.keep:
            graph.unlink(missing_ok=True)
    print(f"load after: {os.getloadavg()}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
