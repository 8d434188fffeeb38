"""`gpart chunk` of a METIS .graph and a DIMACS .gr in a cgroup v1 memory group: this checkout beside a base one.

    sudo python benchmarks/bench_structured_spill.py --workdir /tmp/spill --base /tmp/before-spill
    sudo python benchmarks/bench_structured_spill.py --workdir /tmp/spill --base /tmp/before-spill --cap 200MB

The METIS file is a random symmetric graph (--edges adjacency entries, both directions of --edges/2 pairs, no edge
weights), the DIMACS file `p sp` with --edges weighted arcs, the OGB folder raw/edge.csv.gz of --edges random edges
(and its counts; no feature files), all on --nodes nodes, generated with numpy (tests/support/graph_text.py) unless
already in --workdir. Each `gpart chunk FILE --chunks 4` runs in a fresh
memory group, once per checkout, with no limit (figures: wall, the group's peak charge, page cache included, and
its anonymous memory sampled every 20 ms) and, with --cap, once more under that limit (exit status, OOM kill).

--base is a git worktree of an earlier commit (`git worktree add /tmp/before-spill <commit>`); its gpart runs with
PYTHONPATH at it. An editable install maps gpart.formats and gpart.cli to this checkout's formats/ and cli/, so the
script links gpart/formats and gpart/cli inside the base worktree to its own folders first (untracked links).
Needs root on a cgroup v1 host.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import numpy as np
from harness import REPO, machine_line  # first: puts the repository root on sys.path

from tests.support.graph_text import decimal_text, write_dimacs_sp, write_metis
from tests.support.memcap import MemoryGroup, available

UNLIMITED = 1 << 62  # a memory group's "no limit" (the kernel rounds it down to its own maximum)


def parse_bytes(text: str) -> int:
    units = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
    for unit, factor in units.items():
        if text.upper().endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def base_env(base: Path) -> dict[str, str]:
    """The environment that runs gpart from the worktree `base` (its gpart/formats and gpart/cli linked in)."""
    for name in ("formats", "cli"):
        link = base / "gpart" / name
        if not link.exists():
            link.symlink_to(Path("..") / name)
    return {**os.environ, "PYTHONPATH": str(base)}


def write_ogb_edges(folder: Path, num_nodes: int, num_edges: int, seed: int = 0) -> None:
    """An OGB folder of random edges: raw/edge.csv.gz (`src,dst` lines, gzip level 1) and raw/num-*-list.csv.gz."""
    raw = folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    ids = np.random.default_rng(seed).integers(0, num_nodes, 2 * num_edges)
    ends = np.tile(np.frombuffer(b",\n", dtype=np.uint8), num_edges)
    with gzip.open(raw / "edge.csv.gz", "wb", compresslevel=1) as fh:
        fh.write(decimal_text(ids, ends))
    for name, value in (("num-node-list", num_nodes), ("num-edge-list", num_edges)):
        with gzip.open(raw / f"{name}.csv.gz", "wt") as fh:
            fh.write(f"{value}\n")


def chunk_run(graph: Path, out: Path, limit: int, env: dict[str, str], timeout: float) -> dict:
    """One `gpart chunk` in its own memory group: exit status, wall, group peak, sampled anonymous peak, OOM kill."""
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-c", "from gpart.cli.main import run; run()", "chunk", str(graph), "--chunks", "4",
               "-o", str(out), "-q"]
    done = threading.Event()
    with MemoryGroup(limit, "bench-spill") as group:
        def watch() -> None:
            while not done.wait(0.02):
                group.sample()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        start = time.perf_counter()
        try:
            child = subprocess.run(command, capture_output=True, text=True, preexec_fn=group.join, env=env,
                                   timeout=timeout, cwd="/")
        finally:
            done.set()
            watcher.join()
        figures = {"rc": child.returncode, "wall": time.perf_counter() - start, "peak": group.peak,
                   "anon": group.anon_peak, "oom": group.oom_killed, "error": child.stderr.strip()[-200:]}
    shutil.rmtree(out, ignore_errors=True)
    return figures


def row(label: str, f: dict) -> str:
    status = "ok" if f["rc"] == 0 else ("OOM-killed" if f["oom"] else f"exit {f['rc']}")
    return (f"| {label} | {status} | {f['wall']:.1f} | {f['peak'] / 2**20:.0f} | {f['anon'] / 2**20:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--base", type=Path, help="a worktree of the commit to compare with")
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=12_000_000)
    parser.add_argument("--cap", type=parse_bytes, help="also run each under this memory limit (e.g. 200MB)")
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()
    reason = available()
    if reason:
        sys.exit(f"cannot run: {reason}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    files = {"METIS": args.workdir / f"g{args.edges}.graph", "DIMACS": args.workdir / f"g{args.edges}.gr",
             "OGB": args.workdir / f"ogb{args.edges}"}
    if not files["METIS"].exists():
        write_metis(files["METIS"], args.nodes, args.edges // 2)
    if not files["DIMACS"].exists():
        write_dimacs_sp(files["DIMACS"], args.nodes, args.edges)
    if not files["OGB"].exists():
        write_ogb_edges(files["OGB"], args.nodes, args.edges)
    checkouts: list[tuple[str, dict[str, str]]] = [("now", dict(os.environ))]
    if args.base is not None:
        checkouts.insert(0, ("before", base_env(args.base.resolve())))
    print(machine_line())
    print(f"this checkout: {REPO}; load before: {os.getloadavg()}")
    print("| input, checkout | status | wall s | group peak MiB | anon peak MiB |\n|---|---|---:|---:|---:|")
    for kind, graph in files.items():
        size = (graph / "raw" / "edge.csv.gz" if graph.is_dir() else graph).stat().st_size / 2**20
        for label, env in checkouts:
            limits: list[Optional[int]] = [None] + ([args.cap] if args.cap else [])
            for limit in limits:
                figures = chunk_run(graph, args.workdir / "out", limit or UNLIMITED, env, args.timeout)
                cap = f", cap {limit / 2**20:.0f} MiB" if limit else ""
                print(row(f"{kind} ({size:.0f} MiB {'gzip' if kind == 'OGB' else 'text'}), {label}{cap}", figures), flush=True)
                if figures["rc"] != 0 and not figures["oom"]:
                    print(f"    {figures['error']}")
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
