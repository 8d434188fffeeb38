"""Hit rates of load_partition(cache=...): the source-count order beside the measured-read order, per cache size.

    python benchmarks/bench_feature_cache.py --work /tmp/bench_cache [--powerlaw 1000000,10000000]

For each graph (Cora, SNAP email-Enron, the DIMACS road network of New York from tests/data/public, and a
power-law graph of benchmarks/make_powerlaw.py when asked), in one partition: an epoch of the node loader (fanouts [15, 10], 1024 seeds per batch, a random 10% of the nodes as seeds)
with the cache filled by the source-count order, then `refresh_cache()` and the next epoch (other draws)
with the measured order. Prints each hit rate per cache size (10%, 20%, 40% of the rows) beside the share
of reads the best possible static cache of that size would serve (the rows ranked by the second epoch's
own reads: an upper bound no order reaches without knowing the future). On a CPU the cache's device is
the CPU: the hit rates are what they are on a GPU; the time a GPU saves needs CUDA (not measured here).
"""

from __future__ import annotations

import argparse
import collections
import lzma
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import gpart.runtime as gr  # noqa: E402
from gpart.pipeline.partition import partition_graph  # noqa: E402

PUBLIC = REPO / "tests" / "data" / "public"
FRACTIONS = (0.1, 0.2, 0.4)


def snap_graph(path: Path, out: Path) -> Path:
    rows = np.loadtxt(path, dtype=np.int64, comments="#")
    return save_graph(out, rows[:, 0], rows[:, 1], int(rows.max()) + 1)


def pace_graph(path: Path, out: Path) -> Path:
    """A PACE .gr file (`p tw n m`, then `u v` per undirected edge, 1-based) as both directions."""
    with lzma.open(path, "rt") as fh:
        header = next(line for line in fh if line.startswith("p ")).split()
        pairs = np.loadtxt(fh, dtype=np.int64, comments="c").reshape(-1, 2) - 1
    n = int(header[2])
    return save_graph(out, np.concatenate([pairs[:, 0], pairs[:, 1]]), np.concatenate([pairs[:, 1], pairs[:, 0]]), n)


def save_graph(out: Path, src: np.ndarray, dst: np.ndarray, n: int) -> Path:
    np.savez(out, src=src, dst=dst, num_nodes=np.int64(n), feat=np.zeros((n, 1), np.float32))
    return out


def epoch_reads(part, seeds: torch.Tensor, epoch: int) -> None:
    loader = gr.DistNeighborLoader(part, seeds, fanouts=[15, 10], batch_size=1024, node_data=["feat"], labels=None)
    loader.set_epoch(epoch)
    collections.deque(loader, maxlen=0)  # every batch made (its rows read through the cache), none kept


def rates(parts: Path, rank: int, fraction: float, seeds: torch.Tensor) -> tuple[float, float, float]:
    """(source-count order's hit rate, measured order's, the best static cache's on the second epoch)."""
    part = gr.load_partition(parts, rank=rank, device="cpu", cache=fraction)
    epoch_reads(part, seeds, 0)
    first = part.cache_stats()["feat"]["hit_rate"]
    part.refresh_cache()
    before = part.cache_stats()["feat"]
    epoch_reads(part, seeds, 1)
    after = part.cache_stats()["feat"]
    hits, total = after["hits"] - before["hits"], after["hits"] + after["misses"] - before["hits"] - before["misses"]
    reads = torch.sort(part.row_cache.reads.to(torch.int64), descending=True).values
    best = float(reads[: part.row_cache.capacity].sum()) / max(1, int(reads.sum()))
    return first, hits / max(1, total), best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_cache"))
    parser.add_argument("--powerlaw", default="", help="nodes,edges of a make_powerlaw.py graph to add")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    graphs = {"Cora": REPO / "sample_data" / "cora.npz",
              "SNAP email-Enron": snap_graph(PUBLIC / "email-enron" / "email-Enron.txt.gz", args.work / "enron.npz"),
              "road NY (DIMACS)": pace_graph(PUBLIC / "road-ny" / "NY.gr.xz", args.work / "road.npz")}
    if args.powerlaw:
        nodes, edges = (int(x) for x in args.powerlaw.split(","))
        path = args.work / f"powerlaw_{nodes}_{edges}.npz"
        if not path.exists():
            import subprocess
            subprocess.run([sys.executable, str(REPO / "benchmarks" / "make_powerlaw.py"), str(path), "--nodes", str(nodes),
                            "--edges", str(edges), "--feat-dim", "1"], check=True)
        graphs[f"power-law {nodes:,}/{edges:,}"] = path
    print("hit rate of the row cache: source-count order (epoch 0) / measured order after refresh_cache (epoch 1)"
          " / best static cache of that size on epoch 1; fanouts [15, 10], 1024 seeds per batch, 10% of nodes as seeds")
    for name, path in graphs.items():
        n = int(np.load(path)["num_nodes"])
        seeds_all = torch.from_numpy(np.random.default_rng(0).choice(n, max(1, n // 10), replace=False))
        out = args.work / f"{path.stem}_1"
        if not out.exists():
            partition_graph(path, out, 1, "metis")
        start = time.perf_counter()
        cells = [rates(out, 0, f, seeds_all) for f in FRACTIONS]
        text = "   ".join(f"{int(f * 100)}%: {a:.2f} / {b:.2f} / {c:.2f}" for f, (a, b, c) in zip(FRACTIONS, cells))
        print(f"  {name:<28} {n:>9,} nodes   {text}   ({time.perf_counter() - start:.1f} s)")

if __name__ == "__main__":
    main()
