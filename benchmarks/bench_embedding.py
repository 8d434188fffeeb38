"""Benchmark ShardedEmbedding training steps and checkpoint save/load.

Step = lookup + backward + optimizer step, on batches of --batch random ids
(uniform over the table, so a few duplicates) of a --rows x --dim float32
table, for:

  gpart    ShardedEmbedding + gpart SparseAdam (DGL math), one process
  torch    torch.nn.Embedding(sparse=True) + torch.optim.SparseAdam, same batches, same run
  gpart W2 the same with 2 gloo processes (1 torch thread each; each rank its own batch)

All in-process timings use --threads torch threads (default 1: on a shared
machine, OpenMP threads that wait for each other distort every figure).

then checkpoint I/O of the table with its Adam states (exp_avg, exp_avg_sq,
step): save_checkpoint from one process, load_checkpoint into one process
(same layout), load of the 2-rank remainder checkpoint into one process with
the range policy (re-sharding), and a plain copy of the same files
(shutil.copyfile + fsync) as the baseline. Peak RSS via getrusage.

    python benchmarks/bench_embedding.py                       # 1M x 128, 10k ids
    python benchmarks/bench_embedding.py --rows 100000 --steps 5   # quick
    python benchmarks/bench_embedding.py --device cuda          # on a GPU (process group parts skipped)

Temporary files go to /tmp/gpart-bench-embedding/ and are deleted at the end.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch
from harness import dir_bytes, peak_rss_mib  # first: puts the repository root on sys.path

from tests.support.gloo_processes import run_distributed

ROOT = Path("/tmp/gpart-bench-embedding")


def current_rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def batches(rows: int, batch: int, count: int, seed: int, device: torch.device) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, rows, (batch,), generator=gen).to(device) for _ in range(count)]


def time_steps(step, ids_list: list[torch.Tensor], warmup: int, device: torch.device) -> list[float]:
    for ids in ids_list[:warmup]:
        step(ids)
    times = []
    for ids in ids_list[warmup:]:
        sync(device)
        t0 = time.perf_counter()
        step(ids)
        sync(device)
        times.append(time.perf_counter() - t0)
    return times


def gpart_step_fn(emb, opt):
    def step(ids: torch.Tensor) -> None:
        opt.zero_grad()
        emb(ids).pow(2).sum().backward()
        opt.step()

    return step


def bench_gpart(args, device: torch.device) -> tuple[float, object, object]:
    import gpart.runtime as gr

    emb = gr.ShardedEmbedding(args.rows, args.dim, "bench", device=device)
    opt = gr.SparseAdam([emb], lr=0.01)
    times = time_steps(gpart_step_fn(emb, opt), batches(args.rows, args.batch, args.warmup + args.steps, 1, device), args.warmup, device)
    return statistics.median(times), emb, opt


def bench_torch(args, device: torch.device) -> float:
    table = torch.nn.Embedding(args.rows, args.dim, sparse=True).to(device)
    torch.nn.init.uniform_(table.weight, -0.1, 0.1)
    opt = torch.optim.SparseAdam(table.parameters(), lr=0.01)

    def step(ids: torch.Tensor) -> None:
        opt.zero_grad()
        table(ids).pow(2).sum().backward()
        opt.step()

    times = time_steps(step, batches(args.rows, args.batch, args.warmup + args.steps, 1, device), args.warmup, device)
    return statistics.median(times)


def _two_rank_worker(rank: int, world: int, rows: int, dim: int, batch: int, warmup: int, steps: int, save_to: str) -> dict:
    import gpart.runtime as gr

    device = torch.device("cpu")
    emb = gr.ShardedEmbedding(rows, dim, "bench", policy="remainder")
    opt = gr.SparseAdam([emb], lr=0.01)
    # each rank its own batch; every step is a collective, so ranks move in lockstep
    times = time_steps(gpart_step_fn(emb, opt), batches(rows, batch, warmup + steps, 100 + rank, device), warmup, device)
    save_s = None
    if save_to:
        t0 = time.perf_counter()
        gr.save_checkpoint(save_to, [emb], opt)
        save_s = time.perf_counter() - t0
    return {"step_s": statistics.median(times), "save_s": save_s, "rss_mib": peak_rss_mib()}


def copy_with_fsync(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        shutil.copyfile(f, dst / f.name)
        with open(dst / f.name, "rb+") as fh:
            os.fsync(fh.fileno())


def read_files(src: Path) -> None:
    """Plain sequential read of every file (1 MiB reads into one cache-resident buffer): a baseline for load."""
    buf = bytearray(1 << 20)
    for f in sorted(src.iterdir()):
        with open(f, "rb", buffering=0) as fh:
            while fh.readinto(buf):
                pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process (gloo ranks use 1)")
    parser.add_argument("--skip-io", action="store_true", help="step times only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if ROOT.exists():
        shutil.rmtree(ROOT)
    ROOT.mkdir(parents=True)
    print(f"table {args.rows:,} x {args.dim} float32, batch {args.batch:,} uniform ids, device {device}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cpus")
    try:
        gpart_s, emb, opt = bench_gpart(args, device)
        print(f"step  gpart ShardedEmbedding+SparseAdam, 1 process  : {gpart_s * 1e3:8.2f} ms  ({args.batch / gpart_s / 1e6:.2f} M ids/s)"
              f"   [RSS now {current_rss_mib():.0f} MiB, peak {peak_rss_mib():.0f} MiB]")
        if not args.skip_io:
            io_single(args, emb, opt)
        print(f"      [RSS now {current_rss_mib():.0f} MiB, peak {peak_rss_mib():.0f} MiB]")
        del emb, opt
        gc.collect()
        torch_s = bench_torch(args, device)
        print(f"step  torch Embedding(sparse)+optim.SparseAdam       : {torch_s * 1e3:8.2f} ms  ({args.batch / torch_s / 1e6:.2f} M ids/s)")
        print(f"      gpart / torch step time                          : {gpart_s / torch_s:8.2f}x   [RSS now {current_rss_mib():.0f} MiB, peak {peak_rss_mib():.0f} MiB]")
        if device.type == "cpu":
            two_ranks(args, gpart_s)
        else:
            print("      (2-process figures: gloo runs on CPU tensors only; skipped on a GPU)")
        print(f"peak RSS of this process                               : {peak_rss_mib():8.0f} MiB")
    finally:
        shutil.rmtree(ROOT, ignore_errors=True)
    return 0


def io_single(args, emb, opt) -> None:
    import gpart.runtime as gr

    run = ROOT / "run1"
    t0 = time.perf_counter()
    gr.save_checkpoint(run, [emb], opt)
    save_s = time.perf_counter() - t0
    nbytes = dir_bytes(run)
    t0 = time.perf_counter()
    copy_with_fsync(run, ROOT / "copy1")
    copy_s = time.perf_counter() - t0
    shutil.rmtree(ROOT / "copy1")
    t0 = time.perf_counter()
    read_files(run)
    read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    gr.load_checkpoint(run, [emb], opt)
    load_s = time.perf_counter() - t0
    gb = nbytes / 1e9
    print(f"save  1 process ({gb:.2f} GB, table + Adam states)      : {save_s:8.2f} s   {gb / save_s:6.2f} GB/s")
    print(f"copy  plain shutil.copyfile + fsync of the same files : {copy_s:8.2f} s   {gb / copy_s:6.2f} GB/s")
    print(f"      save / copy throughput                          : {copy_s / save_s:8.2f}x")
    print(f"load  1 process, same layout                          : {load_s:8.2f} s   {gb / load_s:6.2f} GB/s")
    print(f"read  plain sequential read of the same files (cached): {read_s:8.2f} s   {gb / read_s:6.2f} GB/s")
    print(f"      load / read throughput                          : {read_s / load_s:8.2f}x")
    shutil.rmtree(run)


def two_ranks(args, single_s: float) -> None:
    import gpart.runtime as gr

    run = ROOT / "run2"
    results = run_distributed(
        _two_rank_worker, 2, args.rows, args.dim, args.batch, args.warmup, args.steps, "" if args.skip_io else str(run),
        timeout_s=1800, threads=1,
    )
    step_s = max(r["step_s"] for r in results)
    print(f"step  gpart, 2 gloo processes (1 thread each)         : {step_s * 1e3:8.2f} ms  "
          f"({2 * args.batch / step_s / 1e6:.2f} M ids/s over both ranks; {step_s / single_s:.2f}x the 1-process step)")
    print(f"peak RSS per gloo rank                                 : {max(r['rss_mib'] for r in results):8.0f} MiB")
    if args.skip_io:
        return
    save_s = max(r["save_s"] for r in results)
    nbytes = dir_bytes(run)
    gb = nbytes / 1e9
    emb = gr.ShardedEmbedding(args.rows, args.dim, "bench", policy="range")
    opt = gr.SparseAdam([emb], lr=0.5)
    t0 = time.perf_counter()
    gr.load_checkpoint(run, [emb], opt)
    load_s = time.perf_counter() - t0
    print(f"save  2 gloo processes ({gb:.2f} GB)                     : {save_s:8.2f} s   {gb / save_s:6.2f} GB/s")
    print(f"load  2-rank remainder -> 1 process range (re-shard)  : {load_s:8.2f} s   {gb / load_s:6.2f} GB/s")
    t0 = time.perf_counter()
    read_files(run)
    read_s = time.perf_counter() - t0
    print(f"read  plain sequential read of the same files (cached): {read_s:8.2f} s   {gb / read_s:6.2f} GB/s   load / read: {read_s / load_s:.2f}x")
    shutil.rmtree(run)


if __name__ == "__main__":
    sys.exit(main())
