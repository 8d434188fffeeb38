"""The whole job a user runs, gpart's against DGL's: `gpart partition` (the default method) and DGL 2.1's
`dgl.distributed.partition_graph(..., part_method="metis")`, each one process from start to exit, on the
same graph with its features, in one run: wall, CPU, peak RSS, bytes written, cut and balances.

    python benchmarks/bench_dgl_partition.py --graph G.npz --parts 4 [--dgl-python /tmp/dglvenv/bin/python]
    python benchmarks/bench_dgl_partition.py --make rmat:1000000:10000000:128 --graph /tmp/rmat-1m.npz

This is what the issue timed with GNU time (bench_dgl_cut.py compares the assignment step alone). Both
children load the same .npz (src, dst, num_nodes, feat, train_mask when present), partition it and write
their partitions, features included; the wall time is the parent's clock around the child process, so
interpreter start-up and imports count. DGL's call is its default (balance_edges=False, no balance_ntypes),
as a user would write it. After a child has exited its owner of every input node is read back (gpart's
from its partition book, DGL's from partition_graph's mapping, saved by the child after its clock stopped),
and cut and balances are computed here the same way for both (bench_dgl_cut.cut_and_balances).
--make writes an R-MAT graph (bench_default.rmat_edges; a, b, c, d = 0.45, 0.22, 0.22, 0.11, ids permuted,
no self loops or duplicates) with float32 features and a 10% training mask first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from bench_dgl_cut import GPART_METHODS, QUALITY_HEADER, cut_and_balances, print_ratios, run_sides
from harness import TreeMemory, dir_bytes, machine_line, script_child

HERE = Path(__file__).resolve()
LABELS = {"gpart": "gpart partition (default)", "gpart-kdefault": "gpart partition --preset default",
          "gpart-stream": "gpart --method stream", "gpart-stream3": "stream --imbalance 0.03",
          "dgl": "DGL partition_graph (METIS)"}


def gpart_child(args) -> dict:
    from gpart.pipeline.partition import partition_graph

    method, options = GPART_METHODS[args.child]
    start = time.perf_counter()
    partition_graph(str(args.graph), str(args.out), args.parts, method, force=True, **options)
    seconds = time.perf_counter() - start
    return {"job_seconds": seconds}


def dgl_child(args) -> dict:
    import dgl
    import torch

    start = time.perf_counter()
    with np.load(args.graph) as z:
        graph = dgl.graph((torch.from_numpy(z["src"]), torch.from_numpy(z["dst"])), num_nodes=int(z["num_nodes"]))
        for key in ("feat", "train_mask"):
            if key in z.files:
                graph.ndata[key] = torch.from_numpy(np.asarray(z[key]))
    orig_nids, _ = dgl.distributed.partition_graph(graph, "g", args.parts, str(args.out), part_method="metis",
                                                   return_mapping=True)
    seconds = time.perf_counter() - start
    # after the clock: the owner of each input node, from the new ids' ranges per part and the mapping back
    config = json.loads((Path(args.out) / "g.json").read_text())
    ranges = np.asarray(config["node_map"]["_N"], dtype=np.int64)
    owner_new = np.searchsorted(ranges[:, 1], np.arange(graph.num_nodes()), side="right")
    owner = np.empty(graph.num_nodes(), dtype=np.int64)
    owner[orig_nids.numpy()] = owner_new
    np.save(Path(args.out).parent / "dgl-owner.npy", owner)  # beside the output: not counted in its bytes
    return {"job_seconds": seconds}


def owner_of(side: str, out: Path, num_nodes: int) -> np.ndarray:
    if side == "dgl":
        return np.load(out.parent / "dgl-owner.npy")
    from gpart.formats.partition.reader import PartitionReader  # the parent has gpart; DGL's child need not

    reader = PartitionReader(out, check_files=False)
    try:
        return np.asarray(reader.book().owner(np.arange(num_nodes)), dtype=np.int64)
    finally:
        reader.close()


def timed_process(cmd: list[str], env: dict, log: Path) -> dict:
    """Run `cmd` to its exit, output to `log`: wall, CPU (its own and its descendants'), peak RSS (largest process,
    from wait4's rusage of that child), peak memory of the process tree (harness.TreeMemory); its last stdout
    line parsed as JSON, or an error."""
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        memory = TreeMemory(proc.pid)
        _, status, usage = os.wait4(proc.pid, 0)
        tree_mib = memory.stop_mib()
    seconds = time.perf_counter() - start
    lines = log.read_text().strip().splitlines()
    if os.waitstatus_to_exitcode(status) != 0:
        return {"error": f"exit {os.waitstatus_to_exitcode(status)}: {lines[-1] if lines else ''} (log {log})"}
    return {"seconds": seconds, "cpu": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024,
            "tree_mib": tree_mib, **json.loads(lines[-1])}


def run_side(args, side: str) -> dict:
    out = args.workdir / side
    shutil.rmtree(out, ignore_errors=True)
    python = args.dgl_python if side == "dgl" else sys.executable
    cmd = script_child(HERE, side, "--graph", str(args.graph), "--parts", str(args.parts), "--out", str(out), python=python)
    path = os.pathsep.join(filter(None, [str(HERE.parents[1]), os.environ.get("PYTHONPATH")]))  # keeps a worktree shim
    result = timed_process(cmd, {**os.environ, "PYTHONPATH": path}, args.workdir / f"{side}.log")
    if "error" in result:
        return result
    result["bytes"] = dir_bytes(out)
    with np.load(args.graph) as z:
        src, dst, n = z["src"], z["dst"], int(z["num_nodes"])
        train = np.flatnonzero(z["train_mask"]) if "train_mask" in z.files else None
        result.update(cut_and_balances(owner_of(side, out, n), src, dst, train, args.parts))
    shutil.rmtree(out, ignore_errors=True)
    return result


def make_rmat(spec: str, path: Path) -> None:
    """--make rmat:NODES:EDGES:COLUMNS: an R-MAT graph with float32 features and a 10% training mask."""
    from bench_default import rmat_edges

    _, nodes, edges, columns = spec.split(":")
    n = int(nodes)
    src, dst = rmat_edges(n, int(edges))
    rng = np.random.default_rng(1)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, src=src, dst=dst, num_nodes=np.int64(n), feat=rng.standard_normal((n, int(columns)), dtype=np.float32),
             train_mask=rng.random(n) < 0.1)
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graph", type=Path, required=True)
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--dgl-python", default="/tmp/dglvenv/bin/python")
    parser.add_argument("--sides", default="gpart,dgl")
    parser.add_argument("--make", default=None, help="write --graph first: rmat:NODES:EDGES:COLUMNS")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/gpart-bench-dgl-partition"))
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(gpart_child(args) if args.child in GPART_METHODS else dgl_child(args)))
        return
    if args.make and not args.graph.exists():
        make_rmat(args.make, args.graph)
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"{args.graph}, {args.parts} parts; whole processes; cut = fraction of directed edges cut; balances max/mean")
    print(machine_line())  # walls depend on it (docs/partitioning.md: two machines of one kind, 2.3-2.8x apart)
    # RSS: the largest process's peak; tree: the peak of the whole process tree's memory together (PSS)
    print(f"  {'job':<30}{'wall s':>8}{'job s':>8}{'cpu s':>8}{'RSS MiB':>9}{'tree MiB':>9}{'GB out':>8}{QUALITY_HEADER}")
    results = run_sides(args.sides.split(","), lambda side: run_side(args, side), LABELS, 30,
                        lambda r: f"{r['seconds']:8.1f}{r['job_seconds']:8.1f}{r['cpu']:8.1f}{r['rss_mib']:9.0f}"
                                  f"{r['tree_mib']:9.0f}{r['bytes'] / 1e9:8.2f}")
    print_ratios(results, LABELS)  # the targets: wall <= 0.5, peak RSS <= 1, cut <= 1, every balance <= 1.10


if __name__ == "__main__":
    main()
