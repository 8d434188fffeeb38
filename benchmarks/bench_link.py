"""Link batches (DistLinkNeighborLoader) beside node batches (DistNeighborLoader), and layer-wise inference beside the
loader's full-neighbour path, on one generated graph, 1 and 2 gloo ranks in the same run.

    python benchmarks/bench_link.py --nodes 200000 --edges 2000000 --workdir /tmp/bench_link

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
  sub-graph), seconds and the largest batch each took.
The issue asks for a 1M-node / 10M-edge graph: pass --nodes 1000000 --edges
10000000 on a machine with the cores for it (the default here is 10x
smaller: the development machine has 2 shared cores). Figures on a shared
machine are noisy: compare each with its neighbour from the same run.
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
def _rank_run(rank: int, world_size: int, parts: str, batches: int, batch_size: int, infer_batch: int) -> dict:
    import gpart.runtime as gr

    part = gr.load_partition(parts, device="cpu", node_data=["feat"])
    out = {}
    seeds = part.node_ids[: part.num_owned][torch.randperm(part.num_owned, generator=torch.Generator().manual_seed(rank))]
    nodes = gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, batch_size=batch_size)
    out["node"] = _rate(iter(nodes), batches)
    edges = gr.edge_split(part, torch.arange(part.num_edges))
    links = gr.DistLinkNeighborLoader(part, edges, fanouts=FANOUTS, batch_size=batch_size, neg_sampling="binary",
                                      strict_negatives=True, exclude_seed_edges=True)
    out["link"] = _rate(iter(links), batches)
    layers = _layers(part.node_data["feat"].shape[1])
    start = time.perf_counter()
    _, rows = gr.layerwise_inference(layers, part, batch_size=infer_batch)
    out["layerwise_s"] = time.perf_counter() - start
    start, largest = time.perf_counter(), 0
    full = gr.DistNeighborLoader(part, part.node_ids[: part.num_owned], fanouts=[-1, -1], batch_size=infer_batch, shuffle=False)
    check = []
    for batch in full:
        h = batch.x
        for layer in layers:
            h = layer(h, batch.edge_index)
        check.append(h[: batch.batch_size])
        largest = max(largest, batch.num_nodes)
    out["full_s"] = time.perf_counter() - start
    out["full_largest"] = largest
    out["max_diff"] = float((torch.cat(check) - rows).abs().max()) if rows.numel() else 0.0
    out["rss_mb"] = peak_rss_mib()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--feat-dim", type=int, default=32)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_link"))
    parser.add_argument("--batches", type=int, default=10, help="measured batches per loader and rank (default 10)")
    parser.add_argument("--batch-size", type=int, default=512, help="seeds / seed edges per batch and rank (default 512)")
    parser.add_argument("--infer-batch", type=int, default=4096, help="nodes per inference batch and rank (default 4096)")
    parser.add_argument("--world-sizes", default="1,2")
    args = parser.parse_args()
    from gpart.partition import partition_graph

    args.workdir.mkdir(parents=True, exist_ok=True)
    graph = args.workdir / f"powerlaw_{args.nodes}_{args.edges}.npz"
    if not graph.exists():
        write_powerlaw_npz(graph, args.nodes, args.edges, args.feat_dim)
    print(f"graph: {args.nodes:,} nodes, {args.edges:,} edges, {args.feat_dim} float32 features; fanouts {FANOUTS}, "
          f"{args.batch_size} seeds (node) / seed edges (link, binary, strict, exclusion) per batch and rank, "
          f"{args.batches} batches after one warm-up; one thread per rank")
    print(f"{'ranks':>5} {'loader':<8} {'batches/s':>10} {'M edges/s':>10} | {'layerwise s':>11} {'full-nbr s':>10} "
          f"{'largest full batch':>18} {'max |diff|':>10} {'RSS/proc':>9}")
    for w in [int(x) for x in args.world_sizes.split(",") if x]:
        parts = args.workdir / f"remainder_{w}"
        if not (parts / "manifest.json").exists():
            partition_graph(graph, parts, w, "remainder")
        res = run_distributed(_rank_run, w, str(parts), args.batches, args.batch_size, args.infer_batch, timeout_s=3000)
        for kind in ("node", "link"):
            wall = max(r[kind][0] for r in res)
            edges = sum(r[kind][1] for r in res)
            tail = ""
            if kind == "node":
                tail = (f" | {max(r['layerwise_s'] for r in res):>11.2f} {max(r['full_s'] for r in res):>10.2f} "
                        f"{max(r['full_largest'] for r in res):>12,} nodes {max(r['max_diff'] for r in res):>10.1e} "
                        f"{max(r['rss_mb'] for r in res):>5.0f} MiB")
            print(f"{w:>5} {kind:<8} {args.batches / wall:>10.2f} {edges / wall / 1e6:>10.2f}{tail}", flush=True)


if __name__ == "__main__":
    main()
