"""The default partition across gloo ranks at scale: rank 0 under the single process's cap, every other rank under its share.

    python benchmarks/bench_scale_distributed.py --sizes 120M --parts 8 --worlds 2 4 --workdir W

For each family and size (benchmarks/scale_graphs.py, generated into
--workdir when missing, as bench_scale.py does), the graph is cut into
--chunks chunk files (`gpart chunk`) and partitioned in the same run:

- by one process, `gpart partition CHUNKS`, in a cgroup v1 memory group
  capped at --cap (default 24 bytes per input edge) with --max-memory 0.9 of
  it: the compressed path, the baseline;
- by W gloo ranks on 127.0.0.1 (`python -m gpart.distributed partition`, as
  torchrun starts them): rank 0 in a group under the same cap with the same
  --max-memory, every other rank in a group of its own capped at its share
  of the input (16 bytes per edge / W) + 1 GiB (the issue's bound).

Printed per run: wall, CPU seconds (every process's, children included),
each group's peak charge (page cache included) and anonymous peak (rank 0:
per input edge; the others: against their cap), OOM kills, and whether the
output is byte-identical to the single process's (but the measured seconds
in the manifest). Outputs are removed after each size. Needs root (cgroups).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

from bench_scale import MAX_MEMORY_SHARE, SIZES, graph, line, run
from harness import machine_line, same_files, torchrun_env  # puts the repository root on sys.path

from gpart.base.memory import format_size, parse_memory_size
from tests.support.gloo_processes import free_port
from tests.support.memcap import MemoryGroup, available

INPUT_BYTES_PER_EDGE = 16  # int64 src and dst: a rank's share of the input is 16 bytes per edge / W
OTHERS_HEADROOM = 1 << 30  # the bound for ranks other than 0: their share + 1 GB


def chunked(workdir: Path, path: Path, chunks: int) -> Path:
    """`path` cut into `chunks` chunk files under `workdir` (made once)."""
    out = workdir / f"{path.stem}-chunks{chunks}"
    if not (out / "manifest.json").exists():
        gpart = str(Path(sys.executable).with_name("gpart"))
        subprocess.run([gpart, "chunk", str(path), "--chunks", str(chunks), "-o", str(out), "--force", "--quiet"], check=True)
    return out


def run_ranks(chunks: Path, out: Path, parts: int, world: int, cap: int, max_memory: int, edges: int,
              timeout: float) -> dict:
    """`world` gloo ranks partitioning `chunks`, each in its memory group (module docstring); their figures."""
    others_cap = INPUT_BYTES_PER_EDGE * edges // world + OTHERS_HEADROOM
    port, procs, logs = free_port(), [], []
    with ExitStack() as stack:
        groups = [stack.enter_context(MemoryGroup(cap if rank == 0 else others_cap, f"bench-rank{rank}"))
                  for rank in range(world)]
        done = threading.Event()

        def sample() -> None:  # every group's anonymous memory, twice a second
            while not done.wait(0.5):
                for group in groups:
                    group.sample()

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        start = time.perf_counter()
        for rank in range(world):
            logs.append(open(out.parent / f"rank{rank}.log", "w+"))
            command = [sys.executable, "-m", "gpart.distributed", "partition", str(chunks), "--parts", str(parts), "-o",
                       str(out), "--force", "--quiet", "--timeout", str(int(timeout))]
            if rank == 0:
                command += ["--max-memory", str(max_memory)]
            procs.append(subprocess.Popen(command, env=torchrun_env(rank, world, port, LOCAL_RANK=str(rank)),
                                          stdout=subprocess.DEVNULL, stderr=logs[-1], preexec_fn=groups[rank].join))
        cpu, codes = 0.0, []
        for proc in procs:
            _, status, usage = os.wait4(proc.pid, 0)
            codes.append(os.waitstatus_to_exitcode(status))
            cpu += usage.ru_utime + usage.ru_stime
        wall = time.perf_counter() - start
        done.set()
        sampler.join()
        figures = {"ok": not any(codes), "wall": wall, "cpu": cpu, "others_cap": others_cap,
                   "groups": [(g.peak, g.anon_peak, g.oom_killed) for g in groups]}
    if not figures["ok"]:
        figures["error"] = _last_lines(logs)
    for log in logs:
        log.close()
    return figures


def _last_lines(logs) -> str:
    lines = []
    for rank, log in enumerate(logs):
        log.seek(0)
        tail = log.read().strip().splitlines()[-1:]
        lines.append(f"rank {rank}: {tail[0][:160] if tail else '?'}")
    return "; ".join(lines)


def ranks_line(world: int, edges: int, f: dict, same: bool) -> str:
    if not f["ok"]:
        return f"  {world} ranks    FAILED after {f['wall']:.0f} s: {f['error']}"
    (peak0, anon0, oom0), others = f["groups"][0], f["groups"][1:]
    rest = ", ".join(f"{format_size(p)} (anon {format_size(a)}){' OOM' if o else ''}" for p, a, o in others)
    return (f"  {world} ranks    wall {f['wall']:7.1f} s  cpu {f['cpu']:7.1f} s  rank 0 peak {format_size(peak0):>10} = "
            f"{peak0 / edges:5.1f} B/edge (anon {anon0 / edges:5.1f}){' OOM' if oom0 else ''}  others (cap "
            f"{format_size(f['others_cap'])}): {rest}  {'byte-identical to' if same else 'DIFFERENT from'} the single process's")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["120M"], choices=sorted(SIZES))
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--worlds", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--families", nargs="+", default=["rmat", "geometric"], choices=["rmat", "geometric"])
    parser.add_argument("--cap", default=None, help="memory cap of the single process and of rank 0 (default: 24 bytes per input edge)")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds a run may take (default 4 h)")
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args()
    reason = available()
    if reason:
        sys.exit(f"bench_scale_distributed: needs cgroup v1 memory groups: {reason}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(machine_line())
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}", flush=True)
    gpart = [str(Path(sys.executable).with_name("gpart"))]
    for size in args.sizes:
        for family in args.families:
            path, edges = graph(args.workdir, family, size)
            chunks = chunked(args.workdir, path, args.chunks)
            cap = parse_memory_size(args.cap) if args.cap else 24 * edges
            limit = int(cap * MAX_MEMORY_SHARE)
            print(f"{family} {size} ({edges:,} edges) in {args.chunks} chunks, {args.parts} parts; single process and "
                  f"rank 0 under a {format_size(cap)} cap", flush=True)
            single = run(chunks, args.parts, args.workdir / "single", cap, limit, gpart, args.timeout, keep=True)
            print(line("1 process", edges, single), flush=True)
            for world in args.worlds:
                out = args.workdir / f"ranks{world}"
                figures = run_ranks(chunks, out, args.parts, world, cap, limit, edges, args.timeout)
                same = figures["ok"] and single["ok"] and same_files(args.workdir / "single", out)
                print(ranks_line(world, edges, figures, same), flush=True)
                shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(args.workdir / "single", ignore_errors=True)
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
