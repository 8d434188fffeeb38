"""gpart's DistNeighborLoader against DistDGL 2.1 across partitions on the CPU, side by side in one run.

    python benchmarks/bench_distdgl.py --dgl-python /path/to/dglvenv/bin/python [--nodes 1000000 --edges 10000000]
                                       [--parts 2,4] [--max-batches 0] [--work /tmp/gpart-bench-distdgl]

An R-MAT graph (--nodes, --edges, then every edge's reverse added when
partitioning), float32 features (--dim), int64 labels and a 10% training
mask is partitioned by gpart (its default method) into P parts and
converted to DGL's layout (`gpart convert --to dgl`, in DGL's venv), so
both read the same partitions. Per P:

- gpart: P gloo ranks, DistNeighborLoader over gr.node_split(part,
  "train_mask"), fanouts [15, 10, 5] per hop, batch 1024, the input nodes'
  features and the seeds' labels fetched, no model;
- DistDGL: one server and one trainer per partition, each pair in its own
  mount namespace with its own /dev/shm (`unshare -m`: the servers' shared
  memory names collide otherwise), the trainer's machine id set to its
  partition (benchmarks/distdgl_worker.py), DistNodeDataLoader with
  NeighborSampler([5, 10, 15]) (DGL's fanouts are per layer, input first),
  g.ndata["feat"][input_nodes] and g.ndata["label"][seeds] per batch.

One thread per process (torch.set_num_threads(1), OMP_NUM_THREADS=1) on
both sides. Figures: sampled edges (summed over ranks) per second of the
slowest rank's epoch, the ratio gpart / DistDGL, gpart's collectives and
host reads per batch, and the load average before and after each side
(the machine may be shared); then sampled edges per CPU second of all the
side's processes over the epoch (gpart's ranks; DistDGL's trainers and
their servers, read from /proc), which other jobs on the machine move far
less than the wall time. The DGL venv: see docs/benchmarks.md.
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
from harness import REPO, machine_line  # first: puts the repository root on sys.path

from tests.support.gloo_processes import free_port, run_distributed

FANOUTS = [15, 10, 5]


def make_graph(path: Path, nodes: int, edges: int, dim: int) -> None:
    from bench_default import rmat_edges

    src, dst = rmat_edges(nodes, edges)
    rng = np.random.default_rng(1)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, src=src, dst=dst, num_nodes=np.int64(nodes), feat=rng.standard_normal((nodes, dim), dtype=np.float32),
             label=rng.integers(0, 47, nodes), train_mask=rng.random(nodes) < 0.1)
    os.replace(tmp, path)


def partition(graph: Path, out: Path, parts: int, dgl_python: str) -> Path:
    """gpart's partitions of `graph` (reverse edges added) in `out`, and their DGL conversion; the DGL part config."""
    from gpart.pipeline.partition import partition_graph

    dgl_dir = out.with_name(out.name + "-dgl")
    if not (dgl_dir / "g.json").exists():
        partition_graph(graph, out, parts, force=True, add_reverse=True)
        # DGL's venv imports this gpart through the installation's own finder (cli/ and formats/ are mapped into
        # gpart by package-dir), appended to its path so that its own torch comes first
        code = ("import sys; sys.path.append(sys.argv[1]); import importlib; "
                "[importlib.import_module(m).install() for m in sys.argv[2:3] if m]; "
                "from gpart.convert import convert_partitions; "
                "convert_partitions(sys.argv[3], sys.argv[4], to='dgl', graph_name='g', force=True)")
        site, finder = _gpart_site()
        subprocess.run([dgl_python, "-c", code, site, finder, str(out), str(dgl_dir)], check=True)
    return dgl_dir / "g.json"


def _gpart_site() -> tuple[str, str]:
    """(the folder to append to another interpreter's path so that it imports this gpart, the editable finder module
    to install there, or '')."""
    import importlib.util

    import gpart

    for name in sys.modules.keys() | {m.name for m in __import__("pkgutil").iter_modules()}:
        if name.startswith("__editable___gpart") and name.endswith("_finder"):
            spec = importlib.util.find_spec(name)
            return str(Path(spec.origin).parent), name
    return str(Path(gpart.__file__).resolve().parents[1]), ""


def _gpart_rank(rank: int, world_size: int, parts: str, batch_size: int, max_batches: int, prefetch: int) -> dict:
    import torch
    import torch.distributed as dist

    import gpart.runtime as gr

    torch.set_num_threads(1)
    part = gr.load_partition(parts, device="cpu")
    ids = gr.node_split(part, "train_mask")
    loader = gr.DistNeighborLoader(part, ids, fanouts=FANOUTS, batch_size=batch_size, seed=0, prefetch=prefetch)
    limit = min(len(loader), max_batches) if max_batches else len(loader)
    dist.barrier()
    start, cpu = time.perf_counter(), time.process_time()
    for i, batch in enumerate(loader):
        assert batch.x.shape[0] == batch.n_id.shape[0] and batch.y.shape[0] == batch.batch_size
        if i + 1 == limit:
            break
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    dist.barrier()
    s = loader.stats
    return {"edges": s["sampled_edges"], "batches": s["batches"], "seconds": seconds, "collectives": s["collectives"],
            "collective_s": s["collective_s"], "host_syncs": s["host_syncs"], "seeds": int(ids.numel()), "seeds_done": s["seeds"], "cpu": cpu}


def run_gpart(parts: Path, world_size: int, batch_size: int, max_batches: int, prefetch: int) -> dict:
    os.environ["OMP_NUM_THREADS"] = "1"
    ranks = run_distributed(_gpart_rank, world_size, str(parts), batch_size, max_batches, prefetch, timeout_s=1800)
    return _summary(ranks)


def run_distdgl(config: Path, world_size: int, batch_size: int, max_batches: int, dgl_python: str, work: Path) -> dict:
    """One server and one trainer per partition, each pair in its own mount namespace (see the module)."""
    ip_config = work / f"ip_config_{world_size}.txt"
    base = free_port()
    ip_config.write_text("".join(f"127.0.0.1 {base + 10 + 10 * p}\n" for p in range(world_size)))
    master = free_port()
    worker = REPO / "benchmarks" / "distdgl_worker.py"
    common = {"OMP_NUM_THREADS": "1", "DGL_DIST_MODE": "distributed", "DGL_NUM_SERVER": "1",
              "DGL_NUM_CLIENT": str(world_size), "DGL_CONF_PATH": str(config), "DGL_IP_CONFIG": str(ip_config),
              "DGL_NUM_SAMPLER": "0", "DGL_GRAPH_FORMAT": "csc", "PYTHONPATH": ""}
    procs, outs = [], []
    for p in range(world_size):
        out = work / f"dgl_{world_size}_{p}.json"
        out.unlink(missing_ok=True)
        outs.append(out)
        server = {**common, "DGL_ROLE": "server", "DGL_SERVER_ID": str(p)}
        trainer = {**common, "DGL_ROLE": "client", "DGL_GROUP_ID": "0", "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": str(master), "RANK": str(p), "WORLD_SIZE": str(world_size)}
        script = (f"mount -t tmpfs tmpfs /dev/shm && "
                  f"{{ env {_env(server)} {dgl_python} {worker} server & }} && "
                  f"env {_env(trainer)} SERVER_PID=$! {dgl_python} {worker} trainer {p} {out} g "
                  f"{','.join(map(str, FANOUTS))} {batch_size} {max_batches}; wait")
        procs.append(subprocess.Popen(["unshare", "-m", "sh", "-c", script], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    logs = [proc.communicate(timeout=1800)[0] for proc in procs]
    if not all(out.exists() for out in outs):
        raise RuntimeError("a DistDGL trainer wrote no result:\n" + "\n".join(log[-3000:] for log in logs))
    return _summary([json.loads(out.read_text()) for out in outs])


def _env(values: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in values.items())


def _summary(ranks: list[dict]) -> dict:
    edges = sum(r["edges"] for r in ranks)
    seconds = max(r["seconds"] for r in ranks)
    batches = max(r["batches"] for r in ranks)
    done = sum(r["seeds_done"] for r in ranks)
    cpu = sum(r.get("cpu", 0.0) for r in ranks)
    out = {"edges": edges, "seconds": seconds, "batches": batches, "edges_per_s": edges / seconds,
           "cpu": cpu, "edges_per_cpu_s": edges / cpu if cpu else float("nan"),
           "seeds": sum(r["seeds"] for r in ranks), "seeds_done": done, "seeds_per_s": done / seconds}
    if "collectives" in ranks[0]:
        out.update(collectives=ranks[0]["collectives"] / max(1, ranks[0]["batches"]),
                   host_syncs=ranks[0]["host_syncs"] / max(1, ranks[0]["batches"]),
                   collective_share=max(r["collective_s"] / r["seconds"] for r in ranks))
    return out


def load() -> str:
    return "load " + " ".join(open("/proc/loadavg").read().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dgl-python", required=True)
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=10_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--parts", default="2,4")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--max-batches", type=int, default=0, help="per rank and epoch (0: the whole epoch)")
    parser.add_argument("--prefetch", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=1, help="gpart and DistDGL alternate this many times")
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpart-bench-distdgl"))
    parser.add_argument("--keep", action="store_true", help="keep the graph and partitions in --work")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    print(machine_line())
    graph = args.work / f"rmat-{args.nodes}-{args.edges}.npz"
    if not graph.exists():
        make_graph(graph, args.nodes, args.edges, args.dim)
    try:
        for world_size in (int(p) for p in args.parts.split(",")):
            parts = args.work / f"parts{world_size}"
            config = partition(graph, parts, world_size, args.dgl_python)
            for round_ in range(args.rounds):
                before = load()
                g = run_gpart(parts, world_size, args.batch_size, args.max_batches, args.prefetch)
                middle = load()
                d = run_distdgl(config, world_size, args.batch_size, args.max_batches, args.dgl_python, args.work)
                print(f"P={world_size} round {round_}: gpart {g['edges_per_s'] / 1e6:.2f} M sampled edges/s "
                      f"({g['edges']} edges, {g['batches']} batches, {g['seconds']:.2f} s; {g['collectives']:.1f} "
                      f"collectives and {g['host_syncs']:.1f} host reads per batch, {100 * g['collective_share']:.0f}% "
                      f"of the epoch in collectives; {before}) | DistDGL {d['edges_per_s'] / 1e6:.2f} M/s "
                      f"({d['edges']} edges, {d['batches']} batches, {d['seconds']:.2f} s; {middle}, after {load()}) "
                      f"| gpart/DistDGL {g['edges_per_s'] / d['edges_per_s']:.2f}x per sampled edge (target >= 1.5x), "
                      f"{g['seeds_per_s'] / d['seeds_per_s']:.2f}x per seed (DGL samples every hop's destinations again, "
                      f"the seeds included: {d['edges'] / max(1, d['seeds_done']):.1f} edges per seed against gpart's "
                      f"{g['edges'] / max(1, g['seeds_done']):.1f})", flush=True)
                # CPU seconds of every process (gpart's ranks; DistDGL's trainers and servers) over the epoch: on a
                # shared machine the wall times move with the other jobs, the CPU per sampled edge much less
                print(f"P={world_size} round {round_} CPU: gpart {g['cpu']:.2f} CPU-s, {g['edges_per_cpu_s'] / 1e6:.2f} M "
                      f"sampled edges per CPU-s | DistDGL {d['cpu']:.2f} CPU-s, {d['edges_per_cpu_s'] / 1e6:.2f} M | "
                      f"gpart/DistDGL {g['edges_per_cpu_s'] / d['edges_per_cpu_s']:.2f}x per sampled edge per CPU-s",
                      flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
