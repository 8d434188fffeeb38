"""What checking the input's CRC-32 on the way costs gather-ckpt, scatter-ckpt and export-feat PARTDIR.

    python benchmarks/bench_input_crc.py [--rows 1000000] [--dim 32] [--repeats 3]

A remainder-sharded (W=8) Adam checkpoint of N x D float32 rows and a 4-part
partition of a random graph with an N x D feature array are written under
/tmp/gpart-bench-input-crc/. Each command then runs in this process, alternating
with the check on (as shipped) and off (OnTheWayCrc.feed replaced by a no-op:
the baseline, measured in the same run; which goes first alternates), and the
median wall and CPU seconds
of `--repeats` runs of each are printed side by side. The inputs stay in the
page cache (they were just written), so the figures show the CPU cost of the
checks. The machine may be shared: compare the two columns, not absolute times.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
from pathlib import Path

import numpy as np
from harness import timed

from gpart import ckpt
from gpart.base.graph import Graph
from gpart.bytes.crc import OnTheWayCrc
from gpart.export.features import export_feat
from gpart.formats.checkpoint import entries as ck
from gpart.formats.checkpoint.writer import write_checkpoint_manifest, write_shard
from gpart.formats.sharding.policies import RemainderPolicy
from gpart.pipeline.partition import partition_graph

ROOT = Path("/tmp/gpart-bench-input-crc")


def make_inputs(rows: int, dim: int) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    run, w = ROOT / "run", 8
    run.mkdir(parents=True)
    policy = RemainderPolicy(rows, w)
    table = rng.standard_normal((rows, dim), dtype=np.float32)
    per_rank = []
    for r in range(w):
        ids = policy.global_ids(r)
        per_rank.append([write_shard(run, ck.tensor_name("emb", s), r, w, a)
                         for s, a in ((None, table[ids]), ("exp_avg", table[ids]), ("exp_avg_sq", table[ids]),
                                      ("step", np.ones(ids.size, np.int32)))])
    opt = {"type": "adam", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "grad_duplicates": "sum"}
    write_checkpoint_manifest(run, ck.build_checkpoint_manifest([ck.EmbeddingSpec("emb", rows, (dim,), "float32", policy)], per_rank, w, opt))
    edges = rows * 4
    graph = Graph.from_arrays(rng.integers(0, rows, edges), rng.integers(0, rows, edges), rows, feat=table)
    partition_graph(graph, ROOT / "parts", 4, method="random")
    return run, ROOT / "parts"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    shutil.rmtree(ROOT, ignore_errors=True)
    run, parts = make_inputs(args.rows, args.dim)
    commands = {
        "gather-ckpt (remainder W=8)": lambda: ckpt.gather_checkpoint(run, ROOT / "full", force=True),
        "scatter-ckpt (W=8 -> W=3)": lambda: ckpt.scatter_checkpoint(run, ROOT / "run3", 3, force=True),
        "export-feat PARTDIR": lambda: export_feat(str(parts), ROOT / "wg", name="feat", force=True),
    }
    real_feed = OnTheWayCrc.feed
    mb = args.rows * args.dim * 4 / 2**20
    print(f"{args.rows} x {args.dim} float32 ({mb:.0f} MiB per table), median of {args.repeats}; wall / CPU seconds")
    for label, fn in commands.items():
        fn()  # warm the page cache and the output directory
        runs: dict[str, list[tuple[float, float]]] = {"checked": [], "baseline (no check)": []}
        for i in range(args.repeats):
            # alternate which goes first: the first of a pair pays for removing the previous output
            for checked in ((True, False) if i % 2 == 0 else (False, True)):
                OnTheWayCrc.feed = real_feed if checked else (lambda self, *a: None)
                _, wall, cpu = timed(fn)
                runs["checked" if checked else "baseline (no check)"].append((wall, cpu))
        OnTheWayCrc.feed = real_feed
        cells = [f"{name} {statistics.median(w for w, _ in r):.2f} / {statistics.median(c for _, c in r):.2f}" for name, r in runs.items()]
        print(f"  {label:28s} " + "   ".join(cells), flush=True)
    shutil.rmtree(ROOT, ignore_errors=True)


if __name__ == "__main__":
    main()
