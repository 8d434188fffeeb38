"""Neighbour sampling throughput of gpart.runtime.DistNeighborLoader beside a plain torch baseline.

    python benchmarks/make_powerlaw.py /tmp/g.npz --nodes 1000000 --edges 10000000 --feat-dim 128
    python benchmarks/bench_sampler.py --input /tmp/g.npz --workdir /tmp/bench_sampler

Prints, for 2-hop fanouts [15, 10] and 1024 seeds per batch:
- one process, one thread: sampled edges/s and seeds/s of the loader, beside
  a straightforward torch sampler measured in the same run on the same seeds
  (per hop: random keys for every in-edge of the frontier, one argsort, the
  first `fanout` of each node; relabelling with torch.unique). The issue's
  anchor, DGL 2.1's C++ sample_neighbors + to_block on this graph, is about
  11 million edges/s (DGL does not install beside torch 2.13, so it is quoted,
  not measured);
- 2 and 4 gloo processes (one thread each) on 2 and 4 partitions (metis and
  random, without and with halo data): total and per-rank edges/s, and for
  topology only, x gathered after sampling, and x fused into the sampling
  answers: collectives per batch, share of the loader's time spent in
  collectives, batches/s, peak RSS per process;
- with --baseline CHECKOUT: the same single-process loader from another gpart
  checkout (e.g. /work/main, through PYTHONPATH), one child process per run,
  the two alternating: before/after in the same run;
- with --disjoint: disjoint=True (a sub-graph per seed) beside the default
  on the same seeds, taking turns, one process and on the gloo ranks:
  batches/s, edges/s and nodes per batch of each (the multi-process table
  gets disjoint topology and fused-x rows);
- with --weighted: weight= (random edge weights, a tenth zero) beside
  uniform draws on the same seeds, with and without replacement, taking
  turns: sampled edges per CPU second and the cost per edge relative to
  uniform (--world-sizes "" skips the gloo tables).
Partitions are written under --workdir when missing (1 part remainder, and
the metis/random ones). On a shared machine the figures are noisy: compare
each with its baseline from the same run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
from harness import child_result, peak_rss_mib, timed  # first: puts the repository root on sys.path

from tests.support.gloo_processes import run_distributed

FANOUTS = [15, 10]


def naive_sample(indptr: torch.Tensor, indices: torch.Tensor, seeds: torch.Tensor, fanouts: list[int], gen: torch.Generator):
    """The baseline: per hop, a random key for every in-edge of the frontier, argsort, first `fanout` per node."""
    nodes, frontier, edges = [seeds], seeds, 0
    for fanout in fanouts:
        start = indptr[frontier]
        deg = indptr[frontier + 1] - start
        total = int(deg.sum())
        seg = torch.repeat_interleave(torch.arange(frontier.numel()), deg, output_size=total)
        offsets = torch.cumsum(deg, 0) - deg
        rank_in_seg = torch.arange(total) - torch.repeat_interleave(offsets, deg, output_size=total)
        order = torch.argsort(seg.double() + torch.rand(total, dtype=torch.float64, generator=gen))
        pos = (torch.repeat_interleave(start, deg, output_size=total) + rank_in_seg)[order]
        chosen = pos[rank_in_seg < fanout]  # rank_in_seg is unchanged by the within-segment shuffle
        src = indices[chosen]
        edges += src.numel()
        everything = torch.cat(nodes + [src])
        uniq, inverse = torch.unique(everything, return_inverse=True)
        seen = torch.zeros(uniq.numel(), dtype=torch.bool)
        seen[inverse[: everything.numel() - src.numel()]] = True
        frontier = uniq[~seen]
        nodes.append(frontier)
    return edges


def ensure_partitions(graph: Path, workdir: Path, world_sizes: list[int], methods: list[str], halos: list[int]) -> dict:
    from gpart.pipeline.partition import partition_graph

    wanted = {("remainder", 1, 0): workdir / "remainder_1"}
    for method in methods:
        for w in world_sizes:
            for halo in halos:
                wanted[(method, w, halo)] = workdir / (f"{method}_{w}" + ("_halo" if halo else ""))
    for (method, parts, halo), d in wanted.items():
        if not (d / "manifest.json").exists():
            start = time.perf_counter()
            partition_graph(graph, d, parts, method, halo=halo)
            print(f"partitioned {graph} -> {d} ({method}, {parts} parts, halo {halo}) in {time.perf_counter() - start:.1f} s",
                  flush=True)
    return wanted


def warm(part) -> None:
    """Read every page of the mapped topology and features once, so the figures are not page-fault counts."""
    for t in (part.indptr, part.indices, part.node_ids, part.edge_ids, *part.node_data.values()):
        float(t.reshape(-1)[:: 512].sum()) if t.dtype != torch.bool else int(t.sum())


def disjoint_vs_shared(part, seeds: torch.Tensor, batches: int, repeats: int) -> None:
    """disjoint=True beside the default on the same seeds, alternating per repeat: batches/s, edges/s, nodes/batch."""
    import gpart.runtime as gr

    runs = {(label, disjoint): iter(gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, batch_size=1024, node_data=names,
                                                          labels=None, disjoint=disjoint))
            for label, names in (("topology", None), ("x gathered", ["feat"])) for disjoint in (False, True)}
    for it in runs.values():
        next(it)  # warm-up batch
    figures: dict[tuple[str, bool], list[tuple[float, float, float, float]]] = {key: [] for key in runs}
    for _ in range(repeats):
        for key, it in runs.items():
            got, seconds, cpu = timed(lambda it=it: [next(it) for _ in range(batches)])
            figures[key].append((batches / seconds, sum(b.num_edges for b in got) / seconds,
                                 sum(b.num_nodes for b in got) / batches, cpu / batches))
    print(f"\ndisjoint=True beside the default, one process, one thread, fanouts {FANOUTS}, 1024 seeds/batch, "
          f"{batches} batches x {repeats} repeats, taking turns (median, min..max batches/s; median CPU per batch, "
          f"which a busy machine moves less than the wall)")
    for (label, disjoint), values in figures.items():
        rates = sorted(v[0] for v in values)
        med = values[[v[0] for v in values].index(rates[len(rates) // 2])]
        cpu_ms = sorted(v[3] for v in values)[len(values) // 2] * 1e3
        print(f"  {label:<11} {'disjoint' if disjoint else 'shared':<9} {med[0]:8.2f} batches/s "
              f"({rates[0]:.2f}..{rates[-1]:.2f})"
              f"  {med[1] / 1e6:6.2f} M edges/s  {med[2]:9.0f} nodes/batch  {cpu_ms:6.2f} CPU ms/batch")
    print(f"  peak RSS {peak_rss_mib():.0f} MiB")


def weighted_vs_uniform(part, seeds: torch.Tensor, batches: int, repeats: int) -> None:
    """weight= beside uniform draws on the same seeds, with and without replacement, taking turns: sampled edges per
    CPU second (one thread). The weights: uniform in [0, 1) with a tenth set to 0, put in the loaded partition's
    edge data (the partition on disk is not changed)."""
    import gpart.runtime as gr

    gen = torch.Generator().manual_seed(1)
    w = torch.rand(part.indices.numel(), generator=gen)
    part.edge_data["bench_w"] = w.masked_fill_(torch.rand(w.shape, generator=gen) < 0.1, 0.0)
    runs = {(weight, replace): iter(gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, batch_size=1024, node_data=None,
                                                          labels=None, replace=replace, weight=weight))
            for replace in (False, True) for weight in (None, "bench_w")}
    for it in runs.values():
        next(it)  # warm-up batch
    rates: dict[tuple, list[float]] = {key: [] for key in runs}
    for _ in range(repeats):
        for key, it in runs.items():
            edges, _, cpu = timed(lambda it=it: sum(next(it).num_edges for _ in range(batches)))
            rates[key].append(edges / cpu)
    print(f"\nweight= beside uniform, one process, one thread, fanouts {FANOUTS}, 1024 seeds/batch, {batches} batches x "
          f"{repeats} repeats, taking turns: sampled edges per CPU second (median, min..max)")
    for (weight, replace), values in rates.items():
        values.sort()
        base = sorted(rates[(None, replace)])[len(values) // 2]
        cost = base / values[len(values) // 2]
        print(f"  {'weighted' if weight else 'uniform':<9} replace={replace!s:<5} {values[len(values) // 2] / 1e6:7.2f} M edges/CPU-s "
              f"({values[0] / 1e6:.2f}..{values[-1] / 1e6:.2f})  cost per edge x{cost:.2f} of uniform")
    del part.edge_data["bench_w"]


def single_process(parts: Path, batches: int, repeats: int, disjoint: bool = False, weighted: bool = False) -> None:
    import gpart.runtime as gr

    torch.set_num_threads(1)
    part = gr.load_partition(parts, device="cpu", node_data=["feat", "train_mask"])
    warm(part)
    seeds = torch.randperm(part.num_nodes, generator=torch.Generator().manual_seed(0))[: 1024 * batches * (repeats + 1)]
    loader = gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, batch_size=1024, node_data=None, labels=None)
    it = iter(loader)
    for _ in range(2):  # warm the page cache and the scratch map
        next(it)
    gen = torch.Generator().manual_seed(0)
    naive_sample(part.indptr, part.indices, seeds[:1024], FANOUTS, gen)
    names = ("gpart DistNeighborLoader", "baseline: torch argsort of random keys + unique")
    rates: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    per_batch = 0.0
    for rep in range(repeats):  # alternate loader and baseline so both see the same machine load
        edges, wall, cpu = timed(lambda: sum(next(it).num_edges for _ in range(batches)))
        rates[names[0]].append((edges / wall, edges / cpu))
        per_batch = edges / batches
        chunk = seeds[rep * batches * 1024:]
        edges, wall, cpu = timed(lambda chunk=chunk: sum(naive_sample(part.indptr, part.indices, chunk[i * 1024 : (i + 1) * 1024], FANOUTS, gen)
                                             for i in range(batches)))
        rates[names[1]].append((edges / wall, edges / cpu))
    print(f"\none process, one thread, fanouts {FANOUTS}, 1024 seeds/batch, {batches} batches x {repeats} repeats "
          f"({per_batch:.0f} edges/batch); median wall rate (min..max), and per CPU second (shared machine: wall "
          f"includes waiting for a core)")
    for name, values in rates.items():
        walls, cpus = sorted(v[0] for v in values), sorted(v[1] for v in values)
        med = walls[len(walls) // 2]
        print(f"  {name:<50} {med / 1e6:7.2f} M edges/s  {med / per_batch * 1024:9.0f} seeds/s  "
              f"({walls[0] / 1e6:.2f}..{walls[-1] / 1e6:.2f}; {cpus[len(cpus) // 2] / 1e6:.2f} M/CPU-s)")
    print(f"  {'anchor: DGL 2.1 sample_neighbors + to_block (issue)':<50} {11.0:7.2f} M edges/s  {'~100000':>9} seeds/s  (not measured here)")
    with_x = gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, batch_size=1024, node_data=["feat"], labels=None)
    start = time.perf_counter()
    b = None  # the last batch: the report below prints its x
    for _, batch in zip(range(batches), with_x):
        b = batch
    seconds = time.perf_counter() - start
    print(f"  with x ({tuple(b.x.shape[1:])} {b.x.dtype}) gathered: {batches / seconds:.1f} batches/s "
          f"({b.x.numel() * b.x.element_size() / 2**20:.0f} MiB of x per batch); peak RSS {peak_rss_mib():.0f} MiB")
    if disjoint:
        disjoint_vs_shared(part, seeds, batches, repeats)
    if weighted:
        weighted_vs_uniform(part, seeds, batches, repeats)


RUNS = (("topology", None, True, False), ("x, gathered after", ["feat"], False, False), ("x, fused", ["feat"], True, False))
DISJOINT_RUNS = (("topology, disjoint", None, True, True), ("x, fused, disjoint", ["feat"], True, True))


def _rank_run(rank: int, world_size: int, parts: str, batches: int, runs=RUNS) -> dict:
    import gpart.runtime as gr
    from gpart.runtime.loaders.node import unfused_loader

    part = gr.load_partition(parts, device="cpu", node_data=["feat", "label", "train_mask"])
    warm(part)
    seeds = gr.node_split(part, "train_mask")
    loaders, iters = {}, {}
    for label, names, fuse, disjoint in runs:
        make = gr.DistNeighborLoader if fuse else unfused_loader  # rows in the sampling answers, or fetched after
        loaders[label] = make(part, seeds, fanouts=FANOUTS, batch_size=1024, node_data=names,
                              labels=None if names is None else "label", disjoint=disjoint)
        iters[label] = iter(loaders[label])
        next(iters[label])  # warm-up batch
        loaders[label].stats.update(batches=0, sampled_edges=0, seeds=0, collective_s=0.0, total_s=0.0, collectives=0)
    walls, nodes = dict.fromkeys(loaders, 0.0), dict.fromkeys(loaders, 0)
    for _ in range(batches):  # one batch of each run in turn, so all see the same machine load
        for label, it in iters.items():
            start = time.perf_counter()
            nodes[label] += next(it).num_nodes
            walls[label] += time.perf_counter() - start
    out = {label: dict(loader.stats, wall_s=walls[label], nodes=nodes[label]) for label, loader in loaders.items()}
    out["rss_mb"] = peak_rss_mib()
    return out


def multi_process(parts: dict, world_sizes: list[int], methods: list[str], halos: list[int], batches: int,
                  disjoint: bool = False) -> None:
    print(f"\ngloo processes (one thread each), one per partition; {batches} batches per rank after a warm-up batch;")
    print("  x = 128 float32 per node (+ the seeds' labels): 'gathered after' = sample, then one row round per array (gpart.runtime.loaders.node.unfused_loader);")
    print("  'fused' = rows carried in the sampling answers (the loader's way); 'disjoint' = disjoint=True;")
    print("  the runs take turns batch by batch; nodes/batch: rank 0's mean")
    runs = RUNS + (DISJOINT_RUNS if disjoint else ())
    print(f"  {'parts':<14} {'procs':>5} {'M edges/s':>10} {'per rank':>9} {'run':<18} {'coll/batch':>10} {'in coll.':>9} "
          f"{'batches/s':>10} {'nodes/batch':>11} {'RSS/proc':>9}")
    for method in methods:
        for halo in halos:
            for w in world_sizes:
                res = run_distributed(_rank_run, w, str(parts[(method, w, halo)]), batches, runs, timeout_s=900, threads=1)
                topo = [r["topology"] for r in res]
                wall = max(r["wall_s"] for r in topo)
                total = sum(r["sampled_edges"] for r in topo) / wall / 1e6
                name = method + (" +halo" if halo else "")
                for label, _, _, _ in runs:
                    got = [r[label] for r in res]
                    share = sum(r["collective_s"] for r in got) / sum(r["total_s"] for r in got)
                    per_batch = got[0]["collectives"] / max(got[0]["batches"], 1)
                    rate = batches / max(r["wall_s"] for r in got)
                    head = f"  {name:<14} {w:>5} {total:>10.2f} {total / w:>9.2f}" if label == "topology" else " " * 42
                    print(f"{head} {label:<18} {per_batch:>10.0f} {share:>9.0%} {rate:>10.1f} "
                          f"{got[0]['nodes'] / batches:>11.0f} "
                          f"{max(r['rss_mb'] for r in res):>6.0f} MiB", flush=True)


def _loader_rate(parts: str, batches: int, skip: int) -> dict:
    """Child process: edges per wall and per CPU second of the loader over `batches` batches (after `skip` + 2)."""
    import gpart.runtime as gr

    torch.set_num_threads(1)
    part = gr.load_partition(parts, device="cpu", node_data=[])
    warm(part)
    seeds = torch.randperm(part.num_nodes, generator=torch.Generator().manual_seed(0))[: 1024 * (skip + batches + 2)]
    it = iter(gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, batch_size=1024, node_data=None, labels=None))
    for _ in range(skip + 2):
        next(it)
    edges, wall, cpu = timed(lambda: sum(next(it).num_edges for _ in range(batches)))
    return {"wall": edges / wall, "cpu": edges / cpu}


def _env_for(checkout: Path) -> dict[str, str]:
    """This environment with the gpart checkout `checkout` in place of this one (PYTHONPATH entries, GPART_ROOT)."""
    here = str(Path(__file__).resolve().parents[1])
    paths = [str(checkout) if p == here else p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths if str(checkout) in paths else paths + [str(checkout)])}
    if "GPART_ROOT" in env:  # a worktree shim that maps gpart.formats / gpart.cli to this root
        env["GPART_ROOT"] = str(checkout)
    return env


def against_checkout(parts: Path, batches: int, repeats: int, baseline: Path) -> None:
    """This checkout's loader and `baseline`'s (e.g. main), one child process each, alternating."""
    code = ("import json, sys; sys.path.insert(0, %r); from bench_sampler import _loader_rate; "
            "print(json.dumps(_loader_rate(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))") % str(Path(__file__).parent)
    rates: dict[str, list[dict]] = {"this checkout": [], f"baseline {baseline}": []}
    for rep in range(repeats):
        for name in (list(rates) if rep % 2 == 0 else list(rates)[::-1]):
            env = _env_for(baseline) if name != "this checkout" else dict(os.environ)
            # cwd "/": `python -c` looks in its working directory first, which must not be a checkout
            rates[name].append(child_result([sys.executable, "-c", code, str(parts), str(batches), str(rep * batches)], env=env,
                                            cwd="/"))
    print(f"\nloader against another checkout, one process each, {repeats} alternating runs of {batches} batches (median):")
    for name, runs in rates.items():
        wall = sorted(r["wall"] for r in runs)[repeats // 2]
        cpu = sorted(r["cpu"] for r in runs)[repeats // 2]
        print(f"  {name:<40} {wall / 1e6:7.2f} M edges/s wall  {cpu / 1e6:7.2f} M edges/CPU-s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, default=Path("/tmp/g.npz"), help="graph from make_powerlaw.py")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_sampler"), help="where partitions are kept")
    parser.add_argument("--batches", type=int, default=30, help="measured batches per run (default 30)")
    parser.add_argument("--world-sizes", default="2,4")
    parser.add_argument("--methods", default="metis,random")
    parser.add_argument("--halo", default="0,1", help="halo settings of the multi-process partitions (default 0,1)")
    parser.add_argument("--repeats", type=int, default=5, help="single-process repeats, loader and baseline alternating (default 5)")
    parser.add_argument("--disjoint", action="store_true",
                        help="also time disjoint=True beside the default (same seeds, taking turns)")
    parser.add_argument("--weighted", action="store_true",
                        help="also time weight= beside uniform draws (same seeds, taking turns, edges per CPU second)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="also time the single-process loader of this gpart checkout (e.g. /work/main), alternating")
    args = parser.parse_args()
    world_sizes = [int(w) for w in args.world_sizes.split(",") if w]
    methods = [m for m in args.methods.split(",") if m]
    halos = [int(h) for h in args.halo.split(",") if h]
    parts = ensure_partitions(args.input, args.workdir, world_sizes, methods, halos)
    single_process(parts[("remainder", 1, 0)], args.batches, args.repeats, args.disjoint, args.weighted)
    if args.baseline is not None:
        against_checkout(parts[("remainder", 1, 0)], args.batches, 2 * args.repeats, args.baseline)
    if world_sizes:
        multi_process(parts, world_sizes, methods, halos, args.batches, args.disjoint)


if __name__ == "__main__":
    main()
