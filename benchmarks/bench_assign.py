"""Benchmark of gpart.pipeline.assign on a 1M-node / 10M-edge power-law graph.

Prints, each measured in its own child process so peak RSS is per step:
- symmetric_csr (symmetrise + drop loops/duplicates + CSR) wall and peak RSS,
  beside np.unique on the same keys (the approach it replaces, timed on a 1/10 slice);
- the raw pymetis call on the ready CSR, recursive bisection vs k-way, at 2/4/8
  parts: wall, peak RSS, edge cut (fraction of undirected edges) and balance;
- assign(graph, 4, "metis") end to end, beside the raw call.

Usage: python benchmarks/bench_assign.py [--nodes 1000000 --edges 10000000 --parts 2,4,8]
Temporary data lives in /tmp/gpart-bench-assign/ and is deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
from harness import child_result, peak_rss_mib, script_child  # first: puts the repository root on sys.path

from tests.support.synthetic import powerlaw_graph

WORK = Path("/tmp/gpart-bench-assign")


def make_graph(nodes: int, edges: int, seed: int = 0):
    """The power-law graph of tests/support/synthetic.py: src, dst and where it came from."""
    graph = powerlaw_graph(nodes, edges, 0, seed)
    return np.asarray(graph.src), np.asarray(graph.dst), "tests.support.synthetic.powerlaw_graph"


def load_graph():
    from gpart.base.graph import Graph

    meta = json.loads((WORK / "meta.json").read_text())
    src = np.load(WORK / "src.npy", mmap_mode="r")
    dst = np.load(WORK / "dst.npy", mmap_mode="r")
    return Graph(meta["nodes"], src, dst, source=str(WORK))


def child_symmetrise() -> dict:
    from gpart.engines.symmetric import symmetric_csr

    graph = load_graph()
    start = time.perf_counter()
    xadj, adjncy = symmetric_csr(graph)
    wall = time.perf_counter() - start
    np.save(WORK / "xadj.npy", xadj)
    np.save(WORK / "adjncy.npy", adjncy)
    return {"wall_s": wall, "peak_rss_mib": peak_rss_mib(), "sym_edges": int(adjncy.shape[0] // 2)}


def child_unique_baseline() -> dict:
    # np.unique on the same kind of keys, on a tenth of the edges, scaled x10.
    graph = load_graph()
    n, e = graph.num_nodes, graph.num_edges // 10
    src = np.asarray(graph.src[:e], dtype=np.int64)
    dst = np.asarray(graph.dst[:e], dtype=np.int64)
    keys = np.concatenate([src * n + dst, dst * n + src])
    start = time.perf_counter()
    np.unique(keys)
    unique_s = time.perf_counter() - start
    start = time.perf_counter()
    keys.sort()
    mask = np.empty(keys.shape[0], bool)
    mask[0] = True
    np.not_equal(keys[1:], keys[:-1], out=mask[1:])
    keys[mask]
    sort_mask_s = time.perf_counter() - start
    return {"unique_s": unique_s, "sort_mask_s": sort_mask_s, "edges": e}


def child_metis(parts: int, algorithm: str) -> dict:
    import pymetis

    from gpart.engines.metis import metis_options

    xadj = np.load(WORK / "xadj.npy")
    adjncy = np.load(WORK / "adjncy.npy")
    options = metis_options(seed=0, imbalance=0.03, objective="cut", trials=1, iterations=None)
    start = time.perf_counter()
    result = pymetis.part_graph(parts, pymetis.CSRAdjacency(xadj, adjncy), recursive=(algorithm == "recursive"), options=options)
    wall = time.perf_counter() - start
    owner = np.frombuffer(result.vertex_part, dtype=np.int64)
    counts = np.bincount(owner, minlength=parts)
    return {
        "wall_s": wall, "peak_rss_mib": peak_rss_mib(),
        "cut_fraction": result.edge_cuts / (adjncy.shape[0] // 2),
        "balance": float(counts.max() / counts.mean()),
    }


class StageTimer:
    """A gpart Progress that records each stage's wall time."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def stage(self, name, total=None, unit=""):
        timer = self

        class Stage:
            def __enter__(self):
                self.start = time.perf_counter()
                return self

            def __exit__(self, *exc):
                timer.seconds[name] = time.perf_counter() - self.start

            def advance(self, amount=1):
                pass

        return Stage()


def child_assign(parts: int) -> dict:
    from gpart.pipeline.assign import assign

    graph = load_graph()
    timer = StageTimer()
    start = time.perf_counter()
    result = assign(graph, parts, "metis", progress=timer)
    wall = time.perf_counter() - start
    return {"wall_s": wall, "peak_rss_mib": peak_rss_mib(), "algorithm": result.params["algorithm"],
            "cut": result.params["metis_objective_value"], "stages": timer.seconds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--edges", type=int, default=10_000_000)
    ap.add_argument("--parts", default="2,4,8")
    ap.add_argument("--child", nargs="*")
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        fn = {"sym": child_symmetrise, "unique": child_unique_baseline}.get(kind)
        if fn:
            print(json.dumps(fn()))
        elif kind == "metis":
            print(json.dumps(child_metis(int(rest[0]), rest[1])))
        else:
            print(json.dumps(child_assign(int(rest[0]))))
        return

    WORK.mkdir(parents=True, exist_ok=True)
    try:
        src, dst, origin = make_graph(args.nodes, args.edges)
        np.save(WORK / "src.npy", src)
        np.save(WORK / "dst.npy", dst)
        (WORK / "meta.json").write_text(json.dumps({"nodes": args.nodes}))
        input_mib = (src.nbytes + dst.nbytes) / 2**20
        del src, dst
        print(f"graph: {args.nodes:,} nodes, {args.edges:,} directed edges ({origin}); src+dst {input_mib:.0f} MiB")

        sym = child_result(script_child(__file__, "sym"))
        print(f"symmetric_csr: {sym['wall_s']:.2f} s, peak RSS {sym['peak_rss_mib']:.0f} MiB, "
              f"{sym['sym_edges']:,} undirected edges")
        base = child_result(script_child(__file__, "unique"))
        print(f"keys of {base['edges']:,} edges: np.unique {base['unique_s']:.2f} s vs sort+mask {base['sort_mask_s']:.2f} s "
              f"({base['unique_s'] / base['sort_mask_s']:.1f}x)")

        raw4 = None
        for parts in [int(p) for p in args.parts.split(",")]:
            for algorithm in ("recursive", "kway"):
                r = child_result(script_child(__file__, "metis", str(parts), algorithm))
                if parts == 4 and algorithm == "recursive":
                    raw4 = r
                print(f"raw pymetis {algorithm:9s} {parts} parts: {r['wall_s']:.1f} s, peak RSS {r['peak_rss_mib']:.0f} MiB, "
                      f"cut {r['cut_fraction']:.3f} of edges, max/avg part {r['balance']:.3f}")
        if raw4 is not None:
            a = child_result(script_child(__file__, "assign", "4"))
            metis_s = a["stages"]["metis"]
            print(f"assign(metis, 4 parts, {a['algorithm']}): {a['wall_s']:.1f} s, peak RSS {a['peak_rss_mib']:.0f} MiB; "
                  f"vs raw call: {a['wall_s'] / raw4['wall_s']:.2f}x wall, {a['peak_rss_mib'] / raw4['peak_rss_mib']:.2f}x peak RSS")
            print(f"  same run: symmetrise {a['stages']['symmetrise']:.2f} s, METIS {metis_s:.1f} s, "
                  f"everything but METIS = {(a['wall_s'] - metis_s) / metis_s:.1%} of METIS's time")
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
