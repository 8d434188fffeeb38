"""How far is the balanced default's cut from the best cut possible? A calibration on a random graph whose optimum is known.

    python benchmarks/bench_cut_calibration.py --nodes 1000000 --edges 10000000 --parts 2,4

The synthetic power-law graphs (tests/support/synthetic.py) have no community
structure, so the issue's cut target (0.75 x DGL's cut, 0.46 on 1M/10M at
in-edge balance <= 1.10) cannot be checked against a known optimum there.
An Erdos-Renyi graph with the same node and edge counts can: for G(n, d/n)
the minimum bisection is n * (d/4 - P* * sqrt(d/4) + o(sqrt(d))) with the
Parisi constant P* = 0.7632 (Dembo, Montanari, Sen, "Extremal cuts of
sparse random graphs", Ann. Probab. 45(2), 2017), i.e. a cut fraction of

    1/2 - P* / sqrt(d)          (d: average degree of the simple graph)

and bisecting each half again (whose inner degree is d * (1 - cut)) gives an
estimate of the best 4-way cut. This script draws such a graph, partitions
it with the backend the default uses (KaMinPar, default and strong presets,
unit weights: on a random graph node balance is edge balance) and prints
each cut beside that optimum: the gap says how much any partitioner could
still gain. A small gap here, with the same backend landing at 0.578 on the
power-law graph, says the target is out of reach there, not the tool.

Cuts are fractions of the undirected simple graph's edges (what the theorem
counts) and of the directed input edges (what `gpart info` reports).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

PARISI = 0.7632


def optimum_estimate(degree: float, parts: int) -> float:
    """Best cut fraction of a k-way (k a power of two) balanced split of G(n, degree/n), by recursive bisection."""
    cut_so_far, inner = 0.0, 1.0
    while parts > 1:
        bisection = 0.5 - PARISI / np.sqrt(degree * inner)
        cut_so_far += inner * bisection
        inner *= 1.0 - bisection
        parts //= 2
    return cut_so_far


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000)
    parser.add_argument("--edges", type=int, default=10_000_000, help="directed edges drawn (duplicates and loops dropped in the simple graph)")
    parser.add_argument("--parts", default="2,4", help="comma-separated powers of two")
    parser.add_argument("--presets", default="default,strong")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from gpart.base.graph import Graph
    from gpart.engines.kaminpar import kaminpar_partition
    from gpart.engines.refine import edge_cut
    from gpart.engines.symmetric import symmetric_csr

    rng = np.random.default_rng(args.seed)
    n, m = args.nodes, args.edges
    src = rng.integers(0, n, m, dtype=np.int64)
    dst = rng.integers(0, n, m, dtype=np.int64)
    xadj, adjncy = symmetric_csr(Graph(num_nodes=n, src=src, dst=dst))
    degree = adjncy.shape[0] / n
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(xadj))
    print(f"Erdos-Renyi: {n:,} nodes, {m:,} directed edges drawn, simple undirected average degree d = {degree:.2f}")
    print(f"  {'parts':>5} {'preset':<8} {'cut (simple)':>12} {'cut (directed)':>15} {'optimum est.':>13} {'gap':>6} {'node bal.':>9} {'s':>6}")
    for parts in (int(p) for p in args.parts.split(",")):
        if parts & (parts - 1):
            parser.error(f"--parts {parts}: powers of two only (the estimate bisects recursively)")
        best = optimum_estimate(degree, parts)
        for preset in args.presets.split(","):
            start = time.perf_counter()
            owner = kaminpar_partition(xadj, adjncy, None, parts, seed=args.seed, imbalance=0.03, threads=args.threads, preset=preset)
            seconds = time.perf_counter() - start
            simple = float(np.count_nonzero(owner[rows] != owner[adjncy])) / adjncy.shape[0]
            directed = edge_cut(owner, src, dst) / m
            balance = np.bincount(owner, minlength=parts).max() * parts / n
            print(f"  {parts:>5} {preset:<8} {simple:>12.3f} {directed:>15.3f} {best:>13.3f} {simple - best:>6.3f} {balance:>9.3f} {seconds:>6.1f}", flush=True)
    print(f"\noptimum est.: 1/2 - {PARISI}/sqrt(d) per bisection (Dembo-Montanari-Sen 2017; asymptotic in n, "
          "o(1/sqrt d) terms left out), applied recursively for more parts")


if __name__ == "__main__":
    main()
