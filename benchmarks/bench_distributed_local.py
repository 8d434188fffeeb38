"""gather-ckpt from per-machine run directories (SPEC.md 10.4) beside single-process and shared-directory runs.

    python benchmarks/bench_distributed_local.py --rows 1000000 --dim 32 --work /tmp/bench_dlocal

Writes a sharded Adam checkpoint (4 source shards, float32 rows), then in the
same run gathers it with single-process `gpart gather-ckpt` (the baseline),
with 2 gloo processes on one shared directory, and with 2 processes whose
run directories are per machine (m<r>/run holding shards s % 2 == r): there
the shards rank 0 lacks travel to it in bounded all_to_all rounds and rank 0
writes FULL. Prints wall time, per-process peak RSS (wait4) and checks that
every output file is byte-identical to the baseline's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from harness import same_files, torchrun_env, wait_peak_rss  # first: puts the repository root on sys.path

from gpart.formats.checkpoint import entries as ck
from gpart.formats.checkpoint.writer import write_checkpoint_manifest, write_shard
from gpart.formats.sharding.policies import RemainderPolicy
from tests.support.gloo_processes import free_port


def make_run(directory: Path, rows: int, dim: int, world: int) -> None:
    """A sharded Adam checkpoint as `world` ranks write it (write_shard per rank, manifest last)."""
    rng = np.random.default_rng(0)
    policy = RemainderPolicy(rows, world)
    directory.mkdir(parents=True)
    names = [ck.tensor_name("emb", s) for s in (None, *ck.OPTIMIZER_STATES["adam"])]
    shapes = {n: ck.OPTIMIZER_STATES["adam"][n.split(".")[-1]].shape_for((dim,)) if n != "emb" else (dim,) for n in names}
    entries = []
    for r in range(world):
        ids = policy.global_ids(r)
        for n in names:
            dtype = "int64" if n.endswith("step") else "float32"
            data = rng.standard_normal((ids.shape[0], *shapes[n])).astype(np.float32).astype(dtype)
            entries.append(write_shard(directory, n, r, world, data, dtype=dtype))
    opt = {"type": "adam", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "grad_duplicates": "sum"}
    manifest = ck.build_checkpoint_manifest([ck.EmbeddingSpec("emb", rows, (dim,), "float32", policy)], entries, world, opt)
    write_checkpoint_manifest(directory, manifest)


def run(world: int, cwds: list[Path], args: list[str]) -> tuple[float, list[int]]:
    port = free_port()
    start, procs = time.perf_counter(), []
    for rank in range(world):
        env = torchrun_env(rank, world, port, OMP_NUM_THREADS="1")
        cmd = [sys.executable, "-m", "gpart.distributed", *args] if world > 1 else [sys.executable, "-c", "from gpart.cli.main import run; run()", *args]
        procs.append(subprocess.Popen(cmd + ["-q"], cwd=cwds[rank], env=env if world > 1 else None))
    results = [wait_peak_rss(p) for p in procs]
    if any(code for code, _ in results):
        sys.exit(f"failed: {args} {results}")
    return time.perf_counter() - start, [rss for _, rss in results]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--max-message", default="64MiB")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_dlocal"))
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    m0, m1 = a.work / "m0", a.work / "m1"
    make_run(m0 / "run", a.rows, a.dim, 4)
    size = sum(p.stat().st_size for p in (m0 / "run").iterdir())
    print(f"checkpoint: {a.rows} rows x {a.dim} float32, Adam, 4 shards, {size / 2**20:.0f} MiB")
    wall, rss = run(1, [m0], ["gather-ckpt", "run", "-o", "single"])
    print(f"single process gpart gather-ckpt (baseline): {wall:6.1f} s, peak RSS {rss[0] / 2**20:.0f} MiB")
    wall, rss = run(2, [m0, m0], ["gather-ckpt", "run", "-o", "shared"])
    print(f"2 ranks, shared directories:                  {wall:6.1f} s, peak RSS {', '.join(f'{r / 2**20:.0f}' for r in rss)} MiB, "
          f"identical: {same_files(m0 / 'single', m0 / 'shared')}")
    (m1 / "run").mkdir(parents=True)
    shutil.copyfile(m0 / "run" / "manifest.json", m1 / "run" / "manifest.json")
    moved = 0
    for p in (m0 / "run").iterdir():
        if "_part_1_of_" in p.name or "_part_3_of_" in p.name:
            moved += p.stat().st_size
            os.rename(p, m1 / "run" / p.name)
    wall, rss = run(2, [m0, m1], ["gather-ckpt", "run", "-o", "full", "--max-message", a.max_message])
    print(f"2 ranks, per-machine run and output:         {wall:6.1f} s, peak RSS {', '.join(f'{r / 2**20:.0f}' for r in rss)} MiB, "
          f"{moved / 2**20:.0f} MiB sent to rank 0 in messages <= {a.max_message}, identical: {same_files(m0 / 'single', m0 / 'full')}")
    shutil.rmtree(a.work, ignore_errors=True)


if __name__ == "__main__":
    main()
