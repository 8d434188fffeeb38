"""Benchmark typed partitioning (SPEC.md 8) beside the same graph partitioned untyped, in the same run.

    python benchmarks/bench_hetero.py [--edges 10000000] [--parts 4] [--methods random,metis] [--skip-cora]

Graphs:
Sampling: edges sampled per second by the typed loader (fanouts [10, 10] per edge type)
beside the homogeneous loader (fanouts [10, 10]) on the same edges, one process.
  cora     the Cora-derived typed graph (sample_data/cora_hetero.npz: 4,141 nodes, 109,290 edges)
  gen      a generated typed graph: `user` (N_u = E/8) and `item` (N_i = E/40) nodes with 16-dim
           float32 `feat` each, and 3 edge types user:follows:user (40% of E), user:buys:item (30%),
           item:bought_by:user (30%, the reverse of buys); endpoints skewed (id = floor(N * u^2)).
For each graph and method, `--repeat` runs of each side (alternating which goes first; the
fastest is printed, since the machine may be shared), each in its own subprocess (peak RSS =
that process's getrusage maximum; METIS runs in a further isolated subprocess whose memory is
not in that figure): `typed` partitions the typed .npz; `untyped` partitions the same graph
written as a homogeneous .npz over erased ids (src, dst, num_nodes and, for `gen`, one `feat`
of all nodes: the same edges and the same feature bytes). Printed: wall seconds, peak RSS
and the ratio typed/untyped (the issue's target: <= 1.3x). Per-type node balance and edge cut
come from the typed manifest. Inputs are stored uncompressed (memory-mapped, as users should).
Temporary data lives in /tmp/gpart-bench-hetero-<pid>/ and is removed at the end.

Bounded memory (`--bounded 512MB`): the generated typed graph partitioned with `remainder` in
memory (the default --max-memory) and with `--max-memory 512MB` (the bounded pass: edges bucketed
on disk, typed edge arrays streamed block by block), each in its own process (wall seconds, peak
RSS of that process), beside the size of the graph's typed edge id arrays and, for scale, the
untyped twin under the same limit (the homogeneous bounded pass); nothing else runs.
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
from harness import fastest, peak_rss_mib, run_child, script_child

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora_hetero.npz"
WORKDIR = Path(f"/tmp/gpart-bench-hetero-{os.getpid()}")  # per run: two runs never share inputs


def child(args) -> dict:
    """One partition run (in its own process): wall, peak RSS, stats."""
    from gpart.pipeline.partition import partition_graph

    start = time.perf_counter()
    m = partition_graph(args.input, args.out, args.parts, args.method, force=True, max_memory=args.max_memory)
    wall = time.perf_counter() - start
    out = {"wall": wall, "rss": peak_rss_mib(), "cut": m["stats"]["edge_cut_ratio"],
           "node_balance": m["stats"]["node_balance"], "edge_balance": m["stats"]["edge_balance"]}
    if "hetero" in m["stats"]:
        out["types"] = {t: round(v["node_balance"], 3) for t, v in m["stats"]["hetero"]["node_types"].items()}
    return out


def generate(num_edges: int, path: Path, seed: int = 0) -> None:
    """The generated typed graph (see the module docstring), written uncompressed."""
    rng = np.random.default_rng(seed)
    nu, ni = max(num_edges // 8, 2), max(num_edges // 40, 2)
    skew = lambda n, k: np.floor(n * rng.random(k) ** 2).astype(np.int64)  # noqa: E731
    follows, buys = int(num_edges * 0.4), int(num_edges * 0.3)
    bu, bi = skew(nu, buys), skew(ni, buys)
    np.savez(path, **{
        "user/num_nodes": np.int64(nu), "item/num_nodes": np.int64(ni),
        "user/feat": rng.standard_normal((nu, 16), dtype=np.float32), "item/feat": rng.standard_normal((ni, 16), dtype=np.float32),
        "user:follows:user/src": skew(nu, follows), "user:follows:user/dst": skew(nu, follows),
        "user:buys:item/src": bu, "user:buys:item/dst": bi,
        "item:bought_by:user/src": bi, "item:bought_by:user/dst": bu,
    })


def untyped_twin(typed: Path, path: Path, with_feat: bool) -> None:
    """The same graph as a homogeneous .npz over erased ids (SPEC.md 8.2), features concatenated in erased order."""
    from gpart.formats.input.typed import read_hetero_graph

    g = read_hetero_graph(typed)
    e = g.erased()
    arrays = {"src": e.src, "dst": e.dst, "num_nodes": np.int64(e.num_nodes)}
    if with_feat:
        arrays["feat"] = np.concatenate([np.asarray(g.node_data[t]["feat"]) for t in g.node_types])
    np.savez(path, **arrays)


def partition_child(input: Path, method: str, parts: int, max_memory: str | None = None) -> dict:
    """One partition run in a child of this script: its figures, or {"error": what went wrong}."""
    out = WORKDIR / f"out_{input.stem}_{method}"
    args = ["--input", str(input), "--out", str(out), "--method", method, "--parts", str(parts)]
    args += ["--max-memory", max_memory] if max_memory else []
    run = run_child(script_child(__file__, *args))
    shutil.rmtree(out, ignore_errors=True)
    if run.returncode:
        return {"error": run.last_error_line() or f"exit {run.returncode}"}
    return run.result()


def fastest_or_error(runs: list[dict]) -> dict:
    """The fastest run, or the first error."""
    errors = [r for r in runs if "error" in r]
    return errors[0] if errors else fastest(runs)


def compare(label: str, typed: Path, untyped: Path, methods: list[str], parts: int, repeat: int = 1) -> None:
    for path in (typed, untyped):
        path.read_bytes()  # warm the page cache so both runs start alike
    for method in methods:
        # alternate which goes first, so neither always finds the cache warmer
        order = [("typed", typed), ("untyped", untyped)]
        results: dict[str, list[dict]] = {"typed": [], "untyped": []}
        for i in range(repeat):
            for kind, path in order if i % 2 == 0 else order[::-1]:
                results[kind].append(partition_child(path, method, parts))
        results = {kind: fastest_or_error(runs) for kind, runs in results.items()}
        t, u = results["typed"], results["untyped"]
        if "error" in t or "error" in u:
            print(f"{label:6s} {method:9s} error: typed {t.get('error')} / untyped {u.get('error')}", flush=True)
            continue
        print(f"{label:6s} {method:9s} typed {t['wall']:7.2f} s {t['rss']:8.0f} MiB | untyped {u['wall']:7.2f} s {u['rss']:8.0f} MiB | "
              f"ratio {t['wall'] / u['wall']:.2f}x time {t['rss'] / u['rss']:.2f}x RSS | typed cut {t['cut']:.3f} "
              f"node balance per type {t.get('types')} (untyped cut {u['cut']:.3f}, node balance {u['node_balance']:.3f})", flush=True)


def bounded(typed: Path, untyped: Path, parts: int, max_memory: str, repeat: int = 1) -> None:
    """`remainder` in memory vs under `max_memory` (the bounded pass), alternating, the fastest of `repeat` each;
    and, for scale, the untyped twin under the same `max_memory` (the homogeneous bounded pass)."""
    from gpart.formats.input.typed import read_hetero_graph

    g = read_hetero_graph(typed)
    edge_bytes = sum(a.nbytes for e in g.edge_types for a in g.edges[e])
    num_edges = sum(g.num_edges(e) for e in g.edge_types)
    del g
    typed.read_bytes()  # warm the page cache so both runs start alike
    sides = [("typed, in memory", typed, None), (f"typed, --max-memory {max_memory}", typed, max_memory),
             (f"untyped, --max-memory {max_memory}", untyped, max_memory)]
    results: dict[str, list[dict]] = {label: [] for label, _, _ in sides}
    for i in range(repeat):
        for label, path, limit in sides if i % 2 == 0 else sides[::-1]:
            results[label].append(partition_child(path, "remainder", parts, limit))
    print(f"typed graph: {num_edges:,} edges, typed edge id arrays {edge_bytes / 2**20:,.0f} MiB; remainder, {parts} parts", flush=True)
    for label, runs in results.items():
        r = fastest_or_error(runs)
        text = f"error: {r['error']}" if "error" in r else f"{r['wall']:7.2f} s, peak RSS {r['rss']:8.0f} MiB"
        print(f"  {label:30s} {text}", flush=True)


def sampling(parts: int = 1, epochs: int = 3, repeat: int = 5) -> None:
    """Sampled edges per second: the typed loader (fanouts [10, 10] for every edge type) beside the homogeneous
    loader (fanouts [10, 10]) on the same edges (the erased graph), one process, the Cora-derived graph's papers as seeds."""
    import torch

    import gpart.runtime as gr
    from gpart.formats.input.typed import read_hetero_graph
    from gpart.pipeline.partition import partition_graph

    torch.set_num_threads(1)
    g = read_hetero_graph(CORA)
    twin = WORKDIR / "cora_sampling_untyped.npz"
    untyped_twin(CORA, twin, with_feat=False)
    partition_graph(CORA, WORKDIR / "s_typed", parts, "range", force=True)
    partition_graph(twin, WORKDIR / "s_untyped", parts, "range", force=True)
    typed = gr.load_partition(WORKDIR / "s_typed", 0, device="cpu", node_data=[])
    plain = gr.load_partition(WORKDIR / "s_untyped", 0, device="cpu")
    papers = torch.arange(g.num_nodes["paper"])  # papers come first in the erased order (type order: paper, word)
    loaders = {
        "typed": gr.DistNeighborLoader(typed, {"paper": papers}, fanouts={e: [10, 10] for e in g.edge_types}, batch_size=256,
                                       node_data=None, labels=None),
        "untyped": gr.DistNeighborLoader(plain, papers, fanouts=[10, 10], batch_size=256, node_data=None, labels=None),
    }
    rates: dict[str, tuple[float, float, float]] = {}
    for loader in loaders.values():
        for _ in loader:  # warm-up epoch
            pass
    for _ in range(repeat):  # alternating, the best of `repeat` (the machine may be shared)
        for name, loader in loaders.items():
            edges, start = 0, time.perf_counter()
            for _ in range(epochs):
                for batch in loader:
                    edges += batch.num_edges
            seconds = time.perf_counter() - start
            rate = (edges / seconds, epochs * papers.numel() / seconds, edges / (epochs * papers.numel()))
            rates[name] = max(rates.get(name, rate), rate)
    (te, ts, tp), (ue, us, up) = rates["typed"], rates["untyped"]
    print(f"sampling cora  typed {te / 1e6:.2f} M edges/s ({ts:,.0f} seeds/s, {tp:.0f} edges/seed) | untyped {ue / 1e6:.2f} M edges/s "
          f"({us:,.0f} seeds/s, {up:.0f} edges/seed) | edges/s ratio {te / ue:.2f}x", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edges", type=int, default=10_000_000)
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--methods", default="random,metis")
    ap.add_argument("--cora-methods", default="random,metis,balanced")
    ap.add_argument("--skip-cora", action="store_true")
    ap.add_argument("--skip-sampling", action="store_true")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each side, alternating which goes first; the fastest is printed")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--generate", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--input", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--method", default="random")
    ap.add_argument("--max-memory", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--bounded", metavar="SIZE", default=None,
                    help="only compare remainder in memory vs --max-memory SIZE on the generated graph")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return
    if args.generate is not None:
        generate(args.generate, args.input)
        untyped_twin(args.input, args.out, with_feat=True)
        return
    WORKDIR.mkdir(parents=True, exist_ok=True)
    try:
        if not args.skip_cora and not args.bounded:
            twin = WORKDIR / "cora_untyped.npz"
            untyped_twin(CORA, twin, with_feat=False)
            # topology only on both sides (words have no features, so no untyped twin has the same feature bytes)
            topo = WORKDIR / "cora_typed_topology.npz"
            with np.load(CORA) as z:
                np.savez(topo, **{k: z[k] for k in z.files if k.endswith(("/num_nodes", "/src", "/dst"))})
            compare("cora", topo, twin, args.cora_methods.split(","), args.parts, args.repeat)
        start = time.perf_counter()
        typed = WORKDIR / f"gen_{args.edges}.npz"
        untyped = WORKDIR / f"gen_{args.edges}_untyped.npz"
        # in a child: Linux children inherit the RSS high-water mark of the parent at fork, so the
        # parent stays small (it never holds the generated arrays) and every measurement is the child's own
        subprocess.run([sys.executable, __file__, "--generate", str(args.edges), "--input", str(typed), "--out", str(untyped)], check=True)
        print(f"generated {args.edges:,} edges in {time.perf_counter() - start:.1f} s ({typed.stat().st_size / 2**20:.0f} MiB typed, "
              f"{untyped.stat().st_size / 2**20:.0f} MiB untyped)", flush=True)
        if args.bounded:
            bounded(typed, untyped, args.parts, args.bounded, args.repeat)
            return
        compare("gen", typed, untyped, args.methods.split(","), args.parts, args.repeat)
        if not args.skip_sampling:
            sampling()  # last: it loads torch into this process
    finally:
        shutil.rmtree(WORKDIR, ignore_errors=True)


if __name__ == "__main__":
    main()
