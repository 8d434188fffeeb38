"""Temporal draws (gpart.runtime.sampling.temporal) beside plain disjoint draws: sampled edges per CPU second.

    python benchmarks/bench_temporal.py --input sample_data/cora.npz --workdir /tmp/bench_temporal
    python benchmarks/bench_temporal.py --input /tmp/g.npz --workdir /tmp/bench_temporal   # make_powerlaw.py graph

One process, one thread, one partition (written under --workdir when
missing), fanouts [15, 10], disjoint=True in every run, the same seeds in
the same order: "uniform" (no time, the baseline), "temporal uniform" and
"temporal last" with random node times in [0, 1000) and each seed's time
drawn in the same range, so about half of the candidates are allowed. The
runs take turns per repeat; printed: median sampled edges per CPU second
(time.process_time) and the ratio of CPU seconds per edge to the baseline
(target <= 1.5x). Temporal draws have fewer allowed neighbours, so compare
per edge, not per batch.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from harness import peak_rss_mib  # first: puts the repository root on sys.path

FANOUTS = [15, 10]


def _run(loader, batches: list[tuple[torch.Tensor, torch.Tensor]], temporal) -> tuple[int, float]:
    """(sampled edges, CPU seconds) of the protocol over `batches` with the sampler's `temporal` set as given."""
    loader.sampler.temporal = temporal
    gen = torch.Generator().manual_seed(0)
    edges, cpu = 0, time.process_time()
    for seeds, seed_time in batches:
        edges += loader.protocol.sample(seeds, gen, seed_time=seed_time if temporal else None).num_edges
    return edges, time.process_time() - cpu


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
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = args.workdir / f"{args.input.stem}-one"
    if not out.exists():
        partition_graph(args.input, out, 1, "random")
    part = gr.load_partition(out, device="cpu")
    rng = np.random.default_rng(0)
    node_time = torch.from_numpy(rng.integers(0, 1000, part.num_nodes)).to(torch.float64)
    batches = [(torch.from_numpy(rng.integers(0, part.num_nodes, args.batch_size)),
                torch.from_numpy(rng.integers(0, 1000, args.batch_size)).to(torch.float64)) for _ in range(args.batches)]
    loader = gr.DistNeighborLoader(part, [0], fanouts=FANOUTS, disjoint=True, node_data=None, labels=None)
    built = time.process_time()
    times = temporal_index(part, node_time=node_time)
    built = time.process_time() - built
    runs = {"uniform (no time, baseline)": None, "temporal uniform": (times, "uniform"), "temporal last": (times, "last")}
    for temporal in runs.values():
        _run(loader, batches[:1], temporal)  # warm-up
    got: dict[str, list[tuple[int, float]]] = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, temporal in runs.items():
            got[name].append(_run(loader, batches, temporal))
    print(f"{args.input.name}: {part.num_nodes} nodes, {part.num_edges} edges; one thread, disjoint, fanouts {FANOUTS}, "
          f"{args.batches} batches of {args.batch_size} seeds x {args.repeats} repeats, taking turns (median)")
    base = None
    for name, values in got.items():
        per_edge = sorted(cpu / max(edges, 1) for edges, cpu in values)[len(values) // 2]
        per_batch = sorted(cpu for _, cpu in values)[len(values) // 2] / args.batches
        base = per_edge if base is None else base
        print(f"  {name:<28} {1 / per_edge / 1e6:7.3f} M edges/CPU-s  {values[0][0] / args.batches:9.0f} edges/batch  "
              f"{per_batch * 1e3:7.2f} CPU ms/batch  {per_edge / base:5.2f}x CPU per edge")
    print(f"  temporal index built once in {built:.2f} CPU s; peak RSS {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    main()
