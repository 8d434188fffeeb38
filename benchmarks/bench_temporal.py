"""Temporal draws (gpart.runtime.sampling.temporal) beside plain disjoint draws: sampled edges per CPU second.

    python benchmarks/bench_temporal.py --input sample_data/cora.npz --workdir /tmp/bench_temporal
    python benchmarks/bench_temporal.py --input /tmp/g.npz --workdir /tmp/bench_temporal   # make_powerlaw.py graph
    python benchmarks/bench_temporal.py --input sample_data/cora.npz --ranks 2   # also across 2 gloo ranks

One process, one thread, one partition (written under --workdir when
missing), fanouts [15, 10], disjoint=True in every run, the same seeds in
the same order: "uniform" (no time, the baseline), "temporal uniform" and
"temporal last" with random node times in [0, 1000) and each seed's time
drawn in the same range, so about half of the candidates are allowed. The
runs take turns per repeat; printed: median sampled edges per CPU second
(time.process_time) and the ratio of CPU seconds per edge to the baseline
(target <= 1.5x). Temporal draws have fewer allowed neighbours, so compare
per edge, not per batch.

--ranks 2 adds the same three runs across 2 partitions (random) on 2 gloo
ranks of one thread each, every rank its own seeds: the requests then
carry each (node, time) pair's time to the owner. Printed for the slower
rank: median sampled edges per CPU second, CPU per edge against the 2-rank
baseline, and collectives per batch (the same with time as without).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from harness import peak_rss_mib  # first: puts the repository root on sys.path

from tests.support.gloo_processes import run_distributed

FANOUTS = [15, 10]


def _run(loader, batches: list[tuple[torch.Tensor, torch.Tensor]], temporal) -> tuple[int, float]:
    """(sampled edges, CPU seconds) of the protocol over `batches` with the sampler's `temporal` set as given."""
    loader.sampler.temporal = temporal
    gen = torch.Generator().manual_seed(0)
    edges, cpu = 0, time.process_time()
    for seeds, seed_time in batches:
        edges += loader.protocol.sample(seeds, gen, seed_time=seed_time if temporal else None).num_edges
    return edges, time.process_time() - cpu


def _inputs(num_nodes: int, batches: int, batch_size: int, seed: int) -> tuple[torch.Tensor, list]:
    """(node times in [0, 1000) over global ids, batches of (seeds, seed times in the same range))."""
    rng = np.random.default_rng(0)
    node_time = torch.from_numpy(rng.integers(0, 1000, num_nodes)).to(torch.float64)
    if seed:  # another rank's seeds
        rng = np.random.default_rng(seed)
    return node_time, [(torch.from_numpy(rng.integers(0, num_nodes, batch_size)),
                        torch.from_numpy(rng.integers(0, 1000, batch_size)).to(torch.float64)) for _ in range(batches)]


def _runs(loader, node_time: torch.Tensor, batches: list, repeats: int) -> dict[str, list[tuple[int, float, int]]]:
    """Per run (plain, temporal uniform, temporal last), per repeat taking turns: (edges, CPU s, collectives)."""
    from gpart.runtime.sampling.temporal import temporal_index

    times = temporal_index(loader.part, node_time=node_time)
    runs = {"uniform (no time, baseline)": None, "temporal uniform": (times, "uniform"), "temporal last": (times, "last")}
    for temporal in runs.values():
        _run(loader, batches[:1], temporal)  # warm-up
    got: dict[str, list[tuple[int, float, int]]] = {name: [] for name in runs}
    stats = loader.protocol.exchange.stats
    for _ in range(repeats):
        for name, temporal in runs.items():
            before = stats["collectives"]
            got[name].append((*_run(loader, batches, temporal), stats["collectives"] - before))
    return got


def _rank(rank: int, world: int, path: str, batches: int, batch_size: int, repeats: int) -> dict:
    """One rank of the --ranks run: its own seeds over the partitions at `path`."""
    import gpart.runtime as gr

    part = gr.load_partition(path, device="cpu")
    loader = gr.DistNeighborLoader(part, [0], fanouts=FANOUTS, disjoint=True, node_data=None, labels=None)
    node_time, mine = _inputs(part.num_nodes, batches, batch_size, 1 + rank)
    return _runs(loader, node_time, mine, repeats)


def _print(got: dict, batches: int) -> None:
    base = None
    for name, values in got.items():
        per_edge = sorted(cpu / max(edges, 1) for edges, cpu, _ in values)[len(values) // 2]
        per_batch = sorted(cpu for _, cpu, _ in values)[len(values) // 2] / batches
        base = per_edge if base is None else base
        print(f"  {name:<28} {1 / per_edge / 1e6:7.3f} M edges/CPU-s  {values[0][0] / batches:9.0f} edges/batch  "
              f"{per_batch * 1e3:7.2f} CPU ms/batch  {per_edge / base:5.2f}x CPU per edge  "
              f"{values[0][2] / batches:4.1f} collectives/batch")


def main() -> None:
    import gpart.runtime as gr
    from gpart.pipeline.partition import partition_graph
    from gpart.runtime.sampling.temporal import temporal_index

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", type=Path, default=Path("sample_data/cora.npz"))
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_temporal"))
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ranks", type=int, default=1, help="also run across this many partitions on as many gloo ranks")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = args.workdir / f"{args.input.stem}-one"
    if not out.exists():
        partition_graph(args.input, out, 1, "random")
    part = gr.load_partition(out, device="cpu")
    node_time, batches = _inputs(part.num_nodes, args.batches, args.batch_size, 0)
    loader = gr.DistNeighborLoader(part, [0], fanouts=FANOUTS, disjoint=True, node_data=None, labels=None)
    built = time.process_time()
    temporal_index(part, node_time=node_time)
    built = time.process_time() - built
    got = _runs(loader, node_time, batches, args.repeats)
    print(f"{args.input.name}: {part.num_nodes} nodes, {part.num_edges} edges; one thread, disjoint, fanouts {FANOUTS}, "
          f"{args.batches} batches of {args.batch_size} seeds x {args.repeats} repeats, taking turns (median)")
    _print(got, args.batches)
    print(f"  temporal index built once in {built:.2f} CPU s; peak RSS {peak_rss_mib():.0f} MiB")
    if args.ranks > 1:
        parts = args.workdir / f"{args.input.stem}-{args.ranks}"
        if not parts.exists():
            partition_graph(args.input, parts, args.ranks, "random")
        res = run_distributed(_rank, args.ranks, str(parts), args.batches, args.batch_size, args.repeats,
                              timeout_s=1800, threads=1)
        slow = max(res, key=lambda r: sum(cpu for values in r.values() for _, cpu, _ in values))
        print(f"{args.ranks} partitions (random) on {args.ranks} gloo ranks, one thread each, each rank its own seeds; "
              f"the slower rank:")
        _print(slow, args.batches)


if __name__ == "__main__":
    main()
