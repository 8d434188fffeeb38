"""Link batches (DistLinkNeighborLoader) beside node batches (DistNeighborLoader), and layer-wise inference beside the
loader's full-neighbour path, on one generated graph, 1 and 2 gloo ranks in the same run.

    python benchmarks/bench_link.py --workdir /tmp/bench_link                          # 100K nodes, 1M edges
    python benchmarks/bench_link.py --size 1m --full-batches 20 --workdir /tmp/bench_link   # 1M nodes, 10M edges

Per world size (one process per partition, one thread each, remainder
partitions, fanouts [15, 10], --batch-size seeds or seed edges per rank):
- node loader: batches/s and sampled M edges/s over the same number of
  batches, x (feat) carried;
- link loader, binary negatives (ratio 1), strict negatives and seed-edge
  exclusion on: batches/s, sampled M edges/s (a batch's node seeds are the
  up to 4 x batch-size endpoints of its positives and negatives);
- inference over every node with a 2-layer mean-aggregation model (hidden
  16): gr.layerwise_inference (one hop per layer, --infer-batch nodes per
  batch) against the loader's full-neighbour path (DistNeighborLoader over
  the owned nodes, fanouts [-1, -1], the model on each batch's 2-hop
  sub-graph): wall and CPU seconds (the slowest rank's), the largest batch,
  the largest difference of their rows, and the peak RSS per process after
  layer-wise inference (with --batches 0: loading and layer-wise inference
  alone) and at the end. --full-batches N times the
  full-neighbour path on its first N batches per rank only and extrapolates
  to all of them (seconds x batches / N), said so in the output: at 1M / 10M
  it takes far longer than layer-wise inference.
--size picks the graph: 100k (100,000 nodes, 1,000,000 edges; the default)
or 1m (1,000,000 nodes, 10,000,000 edges, the size the issue names);
--nodes / --edges override it. Figures on a shared machine are noisy:
compare each with its neighbour from the same run; the CPU seconds show
what the waits on a busy machine hide.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from harness import peak_rss_mib  # first: puts the repository root on sys.path

from tests.support.gloo_processes import run_distributed
from tests.support.synthetic import write_powerlaw_npz

FANOUTS = [15, 10]
HIDDEN = 16
SIZES = {"100k": (100_000, 1_000_000), "1m": (1_000_000, 10_000_000)}  # --size: (nodes, edges)


def _mean_conv(dim_in: int, dim_out: int, seed: int) -> torch.nn.Module:
    gen = torch.Generator().manual_seed(seed)
    lin = torch.nn.Linear(2 * dim_in, dim_out)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(lin.weight.shape, generator=gen) * 0.1)

    def conv(x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        src, dst = edge_index
        x = x.float()
        deg = torch.bincount(dst, minlength=x.shape[0]).clamp(min=1).unsqueeze(1)
        mean = torch.zeros_like(x).index_add_(0, dst, x[src]) / deg
        return lin(torch.cat([x, mean], 1))
    return conv


def _layers(dim_in: int) -> list:
    first, second = _mean_conv(dim_in, HIDDEN, 1), _mean_conv(HIDDEN, HIDDEN, 2)
    return [lambda x, ei: first(x, ei).relu(), second]


def _rate(iterator, batches: int) -> tuple[float, int]:
    """(seconds, sampled edges) of `batches` batches after one warm-up batch."""
    next(iterator)
    start, edges = time.perf_counter(), 0
    for _ in range(batches):
        batch = next(iterator)
        edges += int(batch.e_id.numel())
    return time.perf_counter() - start, edges


@torch.no_grad()
def _rank_run(rank: int, world_size: int, parts: str, batches: int, batch_size: int, infer_batch: int,
              full_batches: int) -> dict:
    import gpart.runtime as gr

    part = gr.load_partition(parts, device="cpu", node_data=["feat"])
    out = {}
    if batches:
        seeds = part.node_ids[: part.num_owned][torch.randperm(part.num_owned, generator=torch.Generator().manual_seed(rank))]
        nodes = gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, batch_size=batch_size)
        out["node"] = _rate(iter(nodes), batches)
        edges = gr.edge_split(part, torch.arange(part.num_edges))
        links = gr.DistLinkNeighborLoader(part, edges, fanouts=FANOUTS, batch_size=batch_size, neg_sampling="binary",
                                          strict_negatives=True, exclude_seed_edges=True)
        out["link"] = _rate(iter(links), batches)
    out.update(_inference(part, infer_batch, full_batches))
    out["rss_mb"] = peak_rss_mib()
    return out


def _inference(part, infer_batch: int, full_batches: int) -> dict:
    """Layer-wise inference over every owned node, then the loader's full-neighbour path (its first `full_batches`
    batches when > 0): wall and CPU seconds, the batches done and in all, the largest batch, the rows' largest difference."""
    import gpart.runtime as gr

    layers = _layers(part.node_data["feat"].shape[1])
    out: dict = {}
    wall, cpu = time.perf_counter(), time.process_time()
    _, rows = gr.layerwise_inference(layers, part, batch_size=infer_batch)
    out["layerwise_s"], out["layerwise_cpu_s"] = time.perf_counter() - wall, time.process_time() - cpu
    out["layerwise_rss_mb"] = peak_rss_mib()  # the peak so far: loading, the loaders (unless --batches 0), layer-wise
    wall, cpu = time.perf_counter(), time.process_time()
    full = gr.DistNeighborLoader(part, part.node_ids[: part.num_owned], fanouts=[-1, -1], batch_size=infer_batch, shuffle=False)
    total = len(full)
    limit = min(full_batches, total) if full_batches > 0 else total
    check, largest = [], 0
    for i, batch in enumerate(full):  # every rank stops after the same batch: no collective is left half-made
        if i == limit:
            break
        h = batch.x
        for layer in layers:
            h = layer(h, batch.edge_index)
        check.append(h[: batch.batch_size])
        largest = max(largest, batch.num_nodes)
    out["full_s"], out["full_cpu_s"] = time.perf_counter() - wall, time.process_time() - cpu
    out["full_done"], out["full_total"], out["full_largest"] = limit, total, largest
    done = torch.cat(check) if check else rows[:0]
    out["max_diff"] = float((done - rows[: done.shape[0]]).abs().max()) if done.numel() else 0.0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="100k", help="100k: 100K nodes / 1M edges (default); "
                        "1m: 1M nodes / 10M edges")
    parser.add_argument("--nodes", type=int, default=None, help="nodes (overrides --size)")
    parser.add_argument("--edges", type=int, default=None, help="edges (overrides --size)")
    parser.add_argument("--feat-dim", type=int, default=32)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_link"))
    parser.add_argument("--batches", type=int, default=10, help="measured batches per loader and rank (default 10; 0: "
                        "inference alone)")
    parser.add_argument("--batch-size", type=int, default=512, help="seeds / seed edges per batch and rank (default 512)")
    parser.add_argument("--infer-batch", type=int, default=4096, help="nodes per inference batch and rank (default 4096)")
    parser.add_argument("--full-batches", type=int, default=0, help="time the full-neighbour path on this many batches "
                        "per rank and extrapolate (default 0: all of them)")
    parser.add_argument("--world-sizes", default="1,2")
    args = parser.parse_args()
    from gpart.pipeline.partition import partition_graph

    nodes, edges = SIZES[args.size]
    nodes, edges = args.nodes or nodes, args.edges or edges
    args.workdir.mkdir(parents=True, exist_ok=True)
    graph = args.workdir / f"powerlaw_{nodes}_{edges}.npz"
    if not graph.exists():
        write_powerlaw_npz(graph, nodes, edges, args.feat_dim)
    print(f"graph: {nodes:,} nodes, {edges:,} edges, {args.feat_dim} float32 features; fanouts {FANOUTS}, "
          f"{args.batch_size} seeds (node) / seed edges (link, binary, strict, exclusion) per batch and rank, "
          f"{args.batches} batches after one warm-up; inference {args.infer_batch} nodes per batch and rank; "
          f"one thread per rank; seconds: the slowest rank's wall (CPU)")
    print(f"{'ranks':>5} {'loader':<8} {'batches/s':>10} {'M edges/s':>10} | {'layerwise s (cpu)':>17} "
          f"{'full-nbr s (cpu)':>24} {'largest full batch':>18} {'max |diff|':>10} {'peak RSS/proc: layer-wise, all':>30}")
    for w in [int(x) for x in args.world_sizes.split(",") if x]:
        parts = args.workdir / f"remainder_{nodes}_{edges}_{w}"
        if not (parts / "manifest.json").exists():
            partition_graph(graph, parts, w, "remainder")
        res = run_distributed(_rank_run, w, str(parts), args.batches, args.batch_size, args.infer_batch, args.full_batches,
                              timeout_s=3000)
        for kind in ("node", "link") if args.batches else ("-",):
            head = f"{w:>5} {kind:<8} {'':>10} {'':>10}"
            if kind != "-":
                wall = max(r[kind][0] for r in res)
                head = f"{w:>5} {kind:<8} {args.batches / wall:>10.2f} {sum(r[kind][1] for r in res) / wall / 1e6:>10.2f}"
            print(head + (_inference_columns(res) if kind in ("node", "-") else ""), flush=True)
        done, total = res[0]["full_done"], res[0]["full_total"]
        if done < total:
            print(f"      full-nbr: timed on {done} of {total} batches per rank, seconds extrapolated x {total / done:.1f}")


def _inference_columns(res: list[dict]) -> str:
    """The inference figures of one world size: layer-wise and full-neighbour seconds (extrapolated to every batch
    when only some were run), the largest full batch, the largest difference, the peak RSS."""
    scale = res[0]["full_total"] / max(res[0]["full_done"], 1)
    mark = "~" if scale != 1 else ""  # extrapolated
    layerwise = f"{max(r['layerwise_s'] for r in res):.2f} ({max(r['layerwise_cpu_s'] for r in res):.2f})"
    full = f"{mark}{max(r['full_s'] for r in res) * scale:.2f} ({mark}{max(r['full_cpu_s'] for r in res) * scale:.2f})"
    return (f" | {layerwise:>17} {full:>24} {max(r['full_largest'] for r in res):>12,} nodes "
            f"{max(r['max_diff'] for r in res):>10.1e} {max(r['layerwise_rss_mb'] for r in res):>14.0f} MiB, "
            f"{max(r['rss_mb'] for r in res):>5.0f} MiB")


if __name__ == "__main__":
    main()
