"""The CPU proxy of the GPU sampler's per-batch cost: torch ops and host synchronisations per batch, and speed.

    python benchmarks/bench_sampler_ops.py                     # a 5% products-like graph, [15, 10, 5], batch 1024
    python benchmarks/bench_sampler_ops.py --scale 0.1 --batches 20 --fused

On a GPU every dispatched torch op is a kernel launch and every host
synchronisation drains the queue, so the per-batch fixed cost follows these
counts (gpart.runtime.sampling.op_count.OpCounter, topology only: no rows, as
the issue's baseline of 213 ops and 3 synchronisations was counted). One
partition of a generated power-law graph (bench_gpu_pipeline's, --scale of
ogbn-products' size), the same seeds for every row, one torch thread. Rows:

- compact hops: the CPU default (gpart.runtime.sampling.kernels.sample_columns);
- per-hop tables (before): table hops with a host synchronisation per hop (the
  path before fixed capacities; protocol.fixed_capacity = False);
- fixed capacity, trimmed: gpart.runtime.sampling.table_hops, one
  synchronisation per batch (what the loader yields);
- fixed capacity, padded: the same without trimming (padded=True), no
  synchronisation; its edges are counted from the sizes after the timing;
- fused kernel (--fused, when triton is installed): the fixed-capacity batch
  with the Triton kernel run by its interpreter, counted (one op per launch),
  not timed (the interpreter is not a GPU).

Sampled edges per CPU second of this process (what a loaded machine changes
least) and per wall second; each the median of --repeats runs of --batches
batches. Compare rows of the same run only.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch
from bench_gpu_pipeline import PRODUCTS, prepare, seed_order  # first: puts the repository root on sys.path

import gpart.runtime as gr
from gpart.runtime.sampling import fused_floyd
from gpart.runtime.sampling.op_count import OpCounter
from gpart.runtime.sampling.table_hops import PaddedSampled

FANOUTS = [15, 10, 5]
ROWS = ("compact hops (CPU default)", "per-hop tables (before)", "fixed capacity, trimmed", "fixed capacity, padded")


def protocol_for(part, name: str, fused: bool = False):
    loader = gr.DistNeighborLoader(part, [0], fanouts=FANOUTS, batch_size=1, node_data=None, labels=None)
    loader.sampler.table_hops = name != ROWS[0]
    loader.sampler.fused = fused
    loader.protocol.fixed_capacity = name != ROWS[1]
    return loader.protocol


def one_batch(protocol, name: str, seeds: torch.Tensor, gen: torch.Generator):
    return protocol.sample_padded(seeds, gen) if name == ROWS[3] else protocol.sample(seeds, gen)


def edges_of(batches: list) -> int:
    """Sampled edges of the batches (padded ones: from their device sizes, read once, after the timing)."""
    total = 0
    for b in batches:
        total += int(b.sizes[-1]) if isinstance(b, PaddedSampled) else b.num_edges
    return total


def measure(protocol, name: str, seeds: np.ndarray, batch: int, batches: int, repeats: int) -> dict:
    gen = torch.Generator().manual_seed(0)
    chunks = [torch.from_numpy(seeds[i * batch:(i + 1) * batch]) for i in range(len(seeds) // batch)]
    for chunk in chunks[:3]:  # warm: buffers of the shape made (compact: the guaranteed set, then two learned ones)
        one_batch(protocol, name, chunk, gen)
    with OpCounter() as count:
        one_batch(protocol, name, chunks[3], gen)
    runs = []
    for r in range(repeats):
        todo = chunks[4 + r * batches:4 + (r + 1) * batches]
        wall, cpu = time.perf_counter(), time.process_time()
        done = []
        for chunk in todo:
            b = one_batch(protocol, name, chunk, gen)
            done.append(b.sizes.clone() if isinstance(b, PaddedSampled) else b)  # padded buffers are reused
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        edges = sum(int(s[-1]) for s in done) if name == ROWS[3] else edges_of(done)
        runs.append((edges / wall, edges / max(cpu, 1e-9)))
    wall_rate, cpu_rate = sorted(runs)[len(runs) // 2]
    return {"ops": count.ops, "syncs": count.syncs, "sync_kinds": dict(count.syncs_by_name), "wall": wall_rate, "cpu": cpu_rate}


def fused_counts(part, seeds: np.ndarray, batch: int) -> dict:
    """Ops and syncs of a fixed-capacity batch with the fused kernel, run by Triton's interpreter."""
    if not fused_floyd.available():
        return {"error": "triton is not installed"}
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        protocol = protocol_for(part, ROWS[2], fused=True)
        gen = torch.Generator().manual_seed(0)
        small = torch.from_numpy(seeds[:min(batch, 128)])  # the count does not depend on the size; the interpreter's time does
        for _ in range(3):  # warm: the guaranteed capacities' buffers, then both sets at the learned ones
            protocol.sample(small, gen)
        for _ in range(2):
            protocol.sample_padded(small, gen)
        result = {}
        for label, run in (("trimmed", protocol.sample), ("padded", protocol.sample_padded)):
            with OpCounter() as count:
                run(small, gen)
            result[label] = (count.ops, count.syncs)
        return result
    finally:
        os.environ.pop("TRITON_INTERPRET", None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.05, help="fraction of ogbn-products' nodes and edges (default 0.05)")
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--batches", type=int, default=10, help="timed batches per run (default 10)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fused", action="store_true", help="also count the fused kernel's batch (Triton interpreter)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_gpu_pipeline"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    nodes, edges = (max(1000, int(v * args.scale)) for v in PRODUCTS)
    graph, parts = prepare(args.workdir, nodes, edges)
    part = gr.load_partition(parts, device="cpu")
    seeds = seed_order(graph, args.batch * (4 + args.batches * args.repeats))
    print(f"graph: {nodes} nodes, {edges} edges, one partition on the CPU, 1 torch thread; fanouts {FANOUTS}, batch "
          f"{args.batch}; load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    print(f"  {'path':<32}{'ops/batch':>10}{'syncs':>7}{'M edges/CPU-s':>15}{'M edges/s':>11}  synchronisations")
    for name in ROWS:
        r = measure(protocol_for(part, name), name, seeds, args.batch, args.batches, args.repeats)
        print(f"  {name:<32}{r['ops']:>10}{r['syncs']:>7}{r['cpu'] / 1e6:>15.2f}{r['wall'] / 1e6:>11.2f}  {r['sync_kinds']}",
              flush=True)
    if args.fused:
        got = fused_counts(part, seeds, args.batch)
        if "error" in got:
            print(f"  {'fused kernel (interpreted)':<32}{'-':>10}{'-':>7}  {got['error']}")
        for label, (ops, syncs) in ((k, v) for k, v in got.items() if k != "error"):
            print(f"  {'fused kernel, ' + label:<32}{ops:>10}{syncs:>7}{'-':>15}{'-':>11}  (the kernel: 1 op; not timed)")
    print("CUDA figures: not measured here (a GPU runs these op sequences; bench_gpu_pipeline.py times them there)")


if __name__ == "__main__":
    main()
