"""Typed sampler throughput before/after a change, each beside the homogeneous sampler, in one run.

    python benchmarks/bench_hetero_sampling.py [--baseline-rev 9b4c2b6 [--baseline-rev main]] [--repeat 3]

Measures what bench_hetero.py's sampling line measures (the Cora-derived typed graph, one
process, one thread, papers as seeds, batch 256, fanouts [10, 10] for every edge type,
against the homogeneous loader with fanouts [10, 10] on the same edges written untyped; the
best of 5 alternating timed passes of 3 epochs after a warm-up epoch), for two code trees:
each `before` (a baseline revision, extracted with `git archive` into a temporary directory
and put first on PYTHONPATH) and `after` (this checkout). Each measurement runs in its own
process; the trees alternate `--repeat` times and the best run of each is printed, with
after/before for the typed and the untyped sampler (the untyped ratio shows what changed in
the shared code or the machine's load between the trees).
The homogeneous figure is measured in the same process as each typed figure, so each line
carries its own baseline. Temporary files live in /tmp/gpart-bench-hetero-sampling-<pid>/.

    python benchmarks/bench_hetero_sampling.py --fused [--generated 200000] [--batches 40]

Fuse on vs off in one run: 2 gloo ranks (one thread each) on a 2-part metis partition (with
and without --halo 1) of the typed Cora (and, with --generated N, of a generated typed graph:
N nodes of type a with 128 float32 features and labels, N/2 of type b with 64 float32, 10 N
edges over three edge types), papers (a) as seeds, batch 256, fanouts [10, 10] for every edge
type, every typed array of `feat` and the seeds' labels: topology alone, rows gathered after
sampling (gpart.runtime.loaders.node.unfused_loader) and rows in the sampling answers (the loader's way), taking turns batch by batch.
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
from harness import child_result, script_child  # first: puts the repository root on sys.path

from tests.support.gloo_processes import run_distributed

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora_hetero.npz"
WORKDIR = Path(f"/tmp/gpart-bench-hetero-sampling-{os.getpid()}")


def sampling_rates(work: Path, epochs: int = 3, repeat: int = 5) -> dict:
    """Typed and untyped sampled edges/s with whichever gpart this process imports."""
    import torch

    import gpart
    import gpart.runtime as gr
    from gpart.pipeline.partition import partition_graph

    torch.set_num_threads(1)
    work.mkdir(parents=True, exist_ok=True)
    with np.load(CORA) as z:
        num = {k.split("/")[0]: int(z[k]) for k in z.files if k.endswith("/num_nodes")}
        etypes = sorted(tuple(k.split("/")[0].split(":")) for k in z.files if k.endswith("/src"))
        types = sorted(num)
        noff = dict(zip(types, np.cumsum([0] + [num[t] for t in types])))
        # the same edges over erased ids (SPEC.md 8.2), homogeneous
        src = np.concatenate([z[f"{':'.join(e)}/src"] + noff[e[0]] for e in etypes])
        dst = np.concatenate([z[f"{':'.join(e)}/dst"] + noff[e[2]] for e in etypes])
    np.savez(work / "untyped.npz", src=src, dst=dst, num_nodes=np.int64(sum(num.values())))
    partition_graph(CORA, work / "typed", 1, "range", force=True)
    partition_graph(work / "untyped.npz", work / "untyped", 1, "range", force=True)
    typed = gr.load_partition(work / "typed", 0, device="cpu", node_data=[])
    plain = gr.load_partition(work / "untyped", 0, device="cpu")
    papers = torch.arange(num["paper"])  # papers come first in the erased order
    loaders = {
        "typed": gr.DistNeighborLoader(typed, {"paper": papers}, fanouts={e: [10, 10] for e in etypes}, batch_size=256,
                                       node_data=None, labels=None),
        "untyped": gr.DistNeighborLoader(plain, papers, fanouts=[10, 10], batch_size=256, node_data=None, labels=None),
    }
    for loader in loaders.values():
        for _ in loader:  # warm-up epoch
            pass
    rates: dict[str, float] = {}
    per_seed: dict[str, float] = {}
    for _ in range(repeat):
        for name, loader in loaders.items():
            edges, start = 0, time.perf_counter()
            for _ in range(epochs):
                for batch in loader:
                    edges += batch.num_edges
            rates[name] = max(rates.get(name, 0.0), edges / (time.perf_counter() - start))
            per_seed[name] = edges / (epochs * papers.numel())
    import gpart.formats

    return {"typed": rates["typed"], "untyped": rates["untyped"], "per_seed": per_seed,
            "gpart": [gpart.__file__, gpart.formats.__file__, gr.__file__]}


RUNS = (("topology", None, True), ("gathered after", ["feat"], False), ("fused", ["feat"], True))


def generate_typed(path: Path, n: int) -> None:
    """A typed graph: `n` nodes of type a (128 float32 features, 16 classes), n // 2 of type b (64 float32),
    10 n edges: a-cites-a (6 n, a few clustered communities so metis has a cut to find), b-in-a and a-has-b (2 n each)."""
    rng = np.random.default_rng(0)
    nb = n // 2

    def local(count: int, hi_src: int, hi_dst: int) -> tuple[np.ndarray, np.ndarray]:
        dst = rng.integers(0, hi_dst, count)
        near = (dst * hi_src // hi_dst + rng.integers(-hi_src // 50, hi_src // 50, count)) % hi_src  # mostly nearby ids
        far = rng.integers(0, hi_src, count)
        return np.where(rng.random(count) < 0.8, near, far), dst

    arrays = {"a/num_nodes": np.int64(n), "b/num_nodes": np.int64(nb),
              "a/feat": rng.standard_normal((n, 128), dtype=np.float32), "a/label": rng.integers(0, 16, n),
              "b/feat": rng.standard_normal((nb, 64), dtype=np.float32)}
    for key, (count, hi_src, hi_dst) in {"a:cites:a": (6 * n, n, n), "b:in:a": (2 * n, nb, n), "a:has:b": (2 * n, n, nb)}.items():
        arrays[f"{key}/src"], arrays[f"{key}/dst"] = local(count, hi_src, hi_dst)
    np.savez(path, **arrays)


def _epochs(loader):
    while True:  # epoch after epoch (every rank runs the same number of batches per epoch)
        yield from loader


def _fused_rank(rank: int, world_size: int, parts: str, seed_type: str, batches: int) -> dict:
    """One rank: the three RUNS' loaders take turns batch by batch; per run its stats and wall time."""
    import gpart.runtime as gr
    from gpart.runtime.loaders.node import unfused_loader

    part = gr.load_partition(parts, device="cpu")
    seeds = part.owned_ids(seed_type)
    fanouts = {e: [10, 10] for e in part.edge_types}
    loaders, iters = {}, {}
    for label, names, fuse in RUNS:
        make = gr.DistNeighborLoader if fuse else unfused_loader  # rows in the sampling answers, or fetched after
        loaders[label] = make(part, {seed_type: seeds}, fanouts=fanouts, batch_size=256, node_data=names,
                              labels=None if names is None else "label", seed=rank)
        iters[label] = _epochs(loaders[label])
        next(iters[label])  # warm-up batch
        loaders[label].stats.update(batches=0, sampled_edges=0, collective_s=0.0, total_s=0.0, collectives=0)
    walls = dict.fromkeys(loaders, 0.0)
    for _ in range(batches):
        for label, it in iters.items():
            start = time.perf_counter()
            next(it)
            walls[label] += time.perf_counter() - start
    return {label: dict(loader.stats, wall_s=walls[label]) for label, loader in loaders.items()}


def fused_vs_unfused(generated: int, batches: int) -> None:
    from gpart.pipeline.partition import partition_graph

    WORKDIR.mkdir(parents=True)
    try:
        graphs = [("cora_hetero", CORA, "paper")]
        if generated:
            generate_typed(WORKDIR / "generated.npz", generated)
            graphs.append((f"generated {generated}", WORKDIR / "generated.npz", "a"))
        print(f"2 gloo ranks, one thread each; batch 256, fanouts [10, 10] per edge type; {batches} batches per rank per run "
              f"after a warm-up batch, the runs taking turns batch by batch")
        print(f"  {'graph':<18} {'parts':<12} {'run':<15} {'coll/batch':>10} {'batches/s':>10} {'M edges/s':>10} {'in coll.':>9}")
        for name, graph, seed_type in graphs:
            for halo in (0, 1):
                out = WORKDIR / f"{name.split()[0]}_{halo}"
                partition_graph(graph, out, 2, "metis", halo=halo, force=True)
                res = run_distributed(_fused_rank, 2, str(out), seed_type, batches, timeout_s=1800, threads=1)
                for label, _, _ in RUNS:
                    runs = [r[label] for r in res]
                    wall = max(r["wall_s"] for r in runs)
                    share = sum(r["collective_s"] for r in runs) / sum(r["total_s"] for r in runs)
                    print(f"  {name:<18} {'metis' + (' +halo' if halo else ''):<12} {label:<15} "
                          f"{runs[0]['collectives'] / max(runs[0]['batches'], 1):>10.0f} {batches / wall:>10.1f} "
                          f"{sum(r['sampled_edges'] for r in runs) / wall / 1e6:>10.3f} {share:>9.0%}", flush=True)
    finally:
        shutil.rmtree(WORKDIR, ignore_errors=True)


def tree_child(tree: Path, tag: str) -> dict:
    """sampling_rates in a child of this script that imports gpart from `tree`."""
    env = dict(os.environ, PYTHONPATH=str(tree) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = child_result(script_child(__file__, "--work", str(WORKDIR / tag)), env=env)
    if not all(f.startswith(str(tree)) for f in result["gpart"]):  # the tree measured must be the tree meant
        raise SystemExit(f"{tag}: imported {result['gpart']}, not all from {tree}")
    return result


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-rev", action="append", default=None,
                    help="git revision measured as a `before` (repeatable; default: 9b4c2b6, issue 13 as merged)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--fused", action="store_true", help="fuse on vs off on 2 gloo ranks, in one run")
    ap.add_argument("--generated", type=int, default=0, help="with --fused: also a generated typed graph of this many a nodes")
    ap.add_argument("--batches", type=int, default=40, help="with --fused: timed batches per rank and run")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        # an editable install of this checkout maps gpart.formats / gpart.cli here whatever PYTHONPATH says:
        # drop its finder so a baseline tree's own formats/ and cli/ are imported (checked in tree_child)
        sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
        print(json.dumps(sampling_rates(args.work)))
        return
    if args.fused:
        fused_vs_unfused(args.generated, args.batches)
        return
    revs = args.baseline_rev or ["9b4c2b6"]
    WORKDIR.mkdir(parents=True)
    try:
        trees = []
        for i, rev in enumerate(revs):
            tree = WORKDIR / f"baseline_{i}"
            tree.mkdir()
            archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
            trees.append((f"before ({rev})", tree))
        trees.append(("after (this checkout)", REPO))
        best: dict[str, dict] = {}
        for i in range(args.repeat):  # alternating the order, so no tree always runs first
            for j, (tag, tree) in enumerate(trees if i % 2 == 0 else trees[::-1]):
                r = tree_child(tree, f"{i}_{j}")
                if tag not in best or r["typed"] > best[tag]["typed"]:
                    best[tag] = r
        after = best[trees[-1][0]]
        for tag, _ in trees:
            r = best[tag]
            print(f"sampling cora {tag:<28} typed {r['typed'] / 1e6:6.2f} M edges/s ({r['per_seed']['typed']:.0f} edges/seed) | "
                  f"untyped {r['untyped'] / 1e6:6.2f} M edges/s ({r['per_seed']['untyped']:.0f} edges/seed) | "
                  f"typed/untyped {r['typed'] / r['untyped']:.2f}x | after/this: typed {after['typed'] / r['typed']:.2f}x, "
                  f"untyped {after['untyped'] / r['untyped']:.2f}x", flush=True)
    finally:
        shutil.rmtree(WORKDIR, ignore_errors=True)


if __name__ == "__main__":
    main()
