"""Benchmark gather-ckpt / scatter-ckpt against a plain file copy of the same bytes.

A N x D float32 embedding with Adam states (table, exp_avg, exp_avg_sq float32,
step int32) in 8 remainder shards is generated (streaming) under
/tmp/gpart-bench-ckpt/, then, each in a fresh subprocess whose peak RSS
(VmHWM) is reported, and whose output is spot-checked against its input:

  gather   run8 (remainder, W=8)  -> full  (global, one file per tensor)
  scatter  full                   -> run3  (range, W=3)
  gather   run3 (range, W=3)      -> full2

With --export W (or --only-export W), also

  export   run8 (remainder, W=8, Adam) -> WholeGraph LazyAdam files for W ranks
           (gpart export-ckpt --to wholegraph: table, m, v range-split, beta12t
           computed from the step counts; SPEC.md 6.7)

whose output is spot-checked against the input's rows and WholeGraph's
float32 beta powers of their step counts.

Each is compared with copying the same input files (shutil.copyfile, which
on Linux copies inside the kernel, plus fsync like gpart's writers) measured
in the same run, right before and right after; the better (faster) copy is
the baseline. Before every timed run the benchmark's own input files are
evicted from the page cache (posix_fadvise DONTNEED after fsync; nothing
else on the machine is touched), so copy and gpart both start cold and read
the same bytes from disk. CPU seconds (user+sys) are printed beside wall time
since the machine may be shared. Everything is deleted at the end unless --keep.

    python benchmarks/bench_ckpt.py                 # 5M x 128 (about 7.7 GB)
    python benchmarks/bench_ckpt.py --rows 250000   # quick check
    python benchmarks/bench_ckpt.py --rows 480000 --only-export 4   # a 0.74 GB Adam checkpoint to WholeGraph, 4 ranks
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import child_result, drop_cache  # noqa: E402  (beside this script)

ROOT = Path("/tmp/gpart-bench-ckpt")

CHILD = r"""
import json, resource, sys, time
from gpart import ckpt
kind, src, out = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
if kind == "gather":
    ckpt.gather_checkpoint(src, out)
elif kind == "export":
    ckpt.export_checkpoint(src, out, to="wholegraph", options=ckpt.ExportOptions(world_size=int(sys.argv[4]), prefix="emb"))
else:
    world, policy = int(sys.argv[4]), sys.argv[5]
    ckpt.scatter_checkpoint(src, out, world, policy)
dt = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_SELF)
# VmHWM: peak RSS of this process image (ru_maxrss would also count the parent's peak before exec)
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": dt, "cpu": ru.ru_utime + ru.ru_stime, "maxrss_kib": hwm}))
"""


def generate(run: Path, rows: int, dim: int, world: int) -> int:
    """A remainder-sharded Adam checkpoint written rank by rank, chunk by chunk."""
    from gpart.formats.checkpoint import entries as ck
    from gpart.formats.checkpoint.writer import write_checkpoint_manifest, write_shard
    from gpart.formats.sharding.policies import RemainderPolicy

    run.mkdir(parents=True)
    policy = RemainderPolicy(rows, world)
    rng = np.random.default_rng(0)
    chunk = 1 << 17
    entries = []

    def floats(count):
        for a in range(0, count, chunk):
            yield rng.random((min(chunk, count - a), dim), dtype=np.float32)

    def steps(count):
        for a in range(0, count, chunk):
            yield rng.integers(0, 1000, min(chunk, count - a), dtype=np.int32)

    for r in range(world):
        count = policy.count(r)
        entries.append(write_shard(run, "node_emb", r, world, floats(count), dtype="float32", row_shape=(dim,)))
        entries.append(write_shard(run, "node_emb.exp_avg", r, world, floats(count), dtype="float32", row_shape=(dim,)))
        entries.append(write_shard(run, "node_emb.exp_avg_sq", r, world, floats(count), dtype="float32", row_shape=(dim,)))
        entries.append(write_shard(run, "node_emb.step", r, world, steps(count), dtype="int32", row_shape=()))
    manifest = ck.build_checkpoint_manifest(
        [ck.EmbeddingSpec("node_emb", rows, (dim,), "float32", policy)],
        entries,
        world,
        {"type": "adam", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0},
    )
    write_checkpoint_manifest(run, manifest)
    return sum(e["bytes"] for e in entries)


def data_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if "_part_" in p.name or p.suffix == ".npy")


def evict(directory: Path) -> None:
    """Drop this benchmark's files in `directory` from the page cache (fsync first: only clean pages go)."""
    if directory.exists():
        for p in directory.iterdir():
            if p.is_file():
                drop_cache(p)


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def plain_copy(directory: Path, dest: Path) -> tuple[float, float]:
    """(wall, cpu) seconds to copy the data files of `directory` (kernel copy + fsync), then delete the copy."""
    evict(directory)
    dest.mkdir()
    t0, c0 = time.perf_counter(), cpu_seconds()
    for p in data_files(directory):
        shutil.copyfile(p, dest / p.name)
        fd = os.open(dest / p.name, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    dt, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    shutil.rmtree(dest)
    return dt, cpu


def run_child(*args: str) -> dict:
    return child_result([sys.executable, "-c", CHILD, *args])


def same_rows(src: Path, out: Path, samples: int = 20000) -> bool:
    """Spot check: random rows of every tensor read the same from input and output."""
    from gpart.formats.checkpoint.reader import read_checkpoint

    a, b = read_checkpoint(src), read_checkpoint(out)
    for name, t in a.tensors.items():
        ids = np.random.default_rng(1).integers(0, t.num_rows, samples)
        ids[:2] = (0, t.num_rows - 1)
        if a.read_rows(name, ids).tobytes() != b.read_rows(name, ids).tobytes():
            return False
    return True


def same_rows_wholegraph(src: Path, out: Path, samples: int = 20000) -> bool:
    """Spot check of an export: random rows of the table and moments read the same from the input and WholeGraph's
    range-split files, and their beta12t is WholeGraph's float32 (beta1^t, beta2^t) of the input's step counts."""
    from gpart.ckpt.beta_powers import BetaPowers
    from gpart.formats.checkpoint.reader import read_checkpoint

    a = read_checkpoint(src)
    world = json.loads((out / "manifest.json").read_text())["world_size"]
    n = a.tensors["node_emb"].num_rows
    ids = np.random.default_rng(1).integers(0, n, samples)
    ids[:2] = (0, n - 1)
    for tensor, stem, dtype in (("node_emb", "embedding_tensor", np.float32), ("node_emb.exp_avg", "m", np.float32),
                                ("node_emb.exp_avg_sq", "v", np.float32), ("node_emb.step", "beta12t", np.float32)):
        whole = np.concatenate([np.fromfile(out / f"emb_{stem}_part_{r}_of_{world}", dtype=dtype) for r in range(world)])
        rows = whole.reshape(n, -1)[ids]
        want = a.read_rows(tensor, ids)
        if stem == "beta12t":
            want = BetaPowers(a.optimizer["betas"]).pairs(want)
        if rows.tobytes() != np.ascontiguousarray(want).reshape(len(ids), -1).tobytes():
            return False
    return True


def measure(label: str, nbytes: int, src: Path, child_args: tuple[str, ...], target: float, check=same_rows) -> dict:
    copy_before, cpu_before = plain_copy(src, ROOT / "copy")
    evict(src)
    res = run_child(*child_args)
    correct = check(src, Path(child_args[2]))
    evict(Path(child_args[2]))
    copy_after, cpu_after = plain_copy(src, ROOT / "copy")
    copy = min(copy_before, copy_after)
    copy_cpu = cpu_before if copy_before <= copy_after else cpu_after
    gbps = nbytes / res["seconds"] / 1e9
    copy_gbps = nbytes / copy / 1e9
    ratio = gbps / copy_gbps
    rss_mb = res["maxrss_kib"] / 1024
    print(
        f"{label:<34} {nbytes / 1e9:5.2f} GB {res['seconds']:6.1f} s (cpu {res['cpu']:5.1f} s) {gbps:5.2f} GB/s | copy {copy:6.1f} s "
        f"(before/after {copy_before:.1f}/{copy_after:.1f}, cpu {copy_cpu:.1f} s) {copy_gbps:5.2f} GB/s | ratio {ratio:4.2f} (target >= {target}) "
        f"| peak RSS {rss_mb:6.1f} MB (target <= 500) | rows {'identical' if correct else 'DIFFER'} "
        f"{'OK' if ratio >= target and rss_mb <= 500 and correct else 'MISS'}",
        flush=True,
    )
    return {"label": label, "bytes": nbytes, "seconds": res["seconds"], "cpu_seconds": res["cpu"], "copy_seconds": copy,
            "copy_cpu_seconds": copy_cpu, "ratio": ratio, "peak_rss_mb": rss_mb, "rows_identical": correct}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--export", type=int, default=0, metavar="W", help="also export-ckpt --to wholegraph for W ranks")
    ap.add_argument("--only-export", type=int, default=0, metavar="W", help="only the WholeGraph export, for W ranks")
    args = ap.parse_args()
    if ROOT.exists():
        shutil.rmtree(ROOT)
    ROOT.mkdir(parents=True)
    try:
        t0 = time.perf_counter()
        nbytes = generate(ROOT / "run8", args.rows, args.dim, 8)
        print(f"generated {args.rows:,} x {args.dim} float32 + Adam states, 8 remainder shards: {nbytes / 1e9:.2f} GB in {time.perf_counter() - t0:.1f} s", flush=True)
        results = []
        export = args.only_export or args.export
        if export:
            results.append(measure(f"export  Adam W=8 -> WholeGraph W={export}", nbytes, ROOT / "run8",
                                   ("export", str(ROOT / "run8"), str(ROOT / "wg"), str(export)), 0.5, check=same_rows_wholegraph))
            shutil.rmtree(ROOT / "wg")
        if args.only_export:
            print(json.dumps(results))
            return
        results.append(measure("gather  remainder W=8 -> global", nbytes, ROOT / "run8", ("gather", str(ROOT / "run8"), str(ROOT / "full")), 0.5))
        shutil.rmtree(ROOT / "run8")
        results.append(measure("scatter global -> range W=3", nbytes, ROOT / "full", ("scatter", str(ROOT / "full"), str(ROOT / "run3"), "3", "range"), 0.8))
        shutil.rmtree(ROOT / "full")
        results.append(measure("gather  range W=3 -> global", nbytes, ROOT / "run3", ("gather", str(ROOT / "run3"), str(ROOT / "full2")), 0.8))
        print(json.dumps(results))
    finally:
        if not args.keep:
            shutil.rmtree(ROOT, ignore_errors=True)


if __name__ == "__main__":
    main()
