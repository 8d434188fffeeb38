"""What the liveness of gpart's collectives costs when every rank is there (2 gloo ranks on this machine).

    python benchmarks/bench_collective_waits.py [--calls 300]

Two figures, each beside its baseline measured in the same processes, calls interleaved:
- a named check (check_same_across_ranks: a presence record written in the background, the header's
  all_gather waited in slices) against what the check did before (monitored_barrier, then the
  all_gather waited once);
- an exchange of counts (exchange_counts: the work waited in slices) against the same
  all_to_all_single and conversions waited once with the same limit.
Median and 90th percentile microseconds per call, on rank 0.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time

import torch
import torch.distributed as dist
from harness import REPO  # noqa: F401 (first: puts the repository root on sys.path)

from gpart.collectives import check_same_across_ranks, exchange_counts
from tests.support.gloo_processes import run_distributed

LIMIT_S = 60.0


def _old_check(rank: int, world_size: int) -> None:
    # the check before presence records: a monitored barrier, then the header's all_gather
    limit = datetime.timedelta(seconds=LIMIT_S)
    dist.monitored_barrier(timeout=limit, wait_all_ranks=True)
    mine = torch.zeros(346, dtype=torch.uint8)
    out = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(out, mine, async_op=True).wait(limit)


def _bare_counts(world_size: int) -> list[int]:
    # exchange_counts as it was before the sliced wait: the same conversions, one timed wait
    send = torch.as_tensor([1] * world_size, dtype=torch.int64).reshape(-1)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, async_op=True).wait(datetime.timedelta(seconds=LIMIT_S))
    return [int(x) for x in recv.tolist()]


def _measure(rank: int, world_size: int, calls: int) -> dict:
    torch.set_num_threads(1)
    pairs = {
        "check": (lambda: check_same_across_ranks("v", "bench", LIMIT_S), lambda: _old_check(rank, world_size)),
        "counts": (lambda: exchange_counts([1] * world_size, timeout_s=LIMIT_S), lambda: _bare_counts(world_size)),
    }
    out = {}
    for name, (new, old) in pairs.items():
        times = {"gpart": [], "baseline": []}
        for i in range(calls):
            for label, fn in (("gpart", new), ("baseline", old)) if i % 2 else (("baseline", old), ("gpart", new)):
                start = time.perf_counter()
                fn()
                times[label].append((time.perf_counter() - start) * 1e6)
        out[name] = {label: (statistics.median(t[10:]), statistics.quantiles(t[10:], n=10)[-1]) for label, t in times.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args()
    result = run_distributed(_measure, 2, args.calls, timeout_s=600)[0]
    print(f"2 gloo ranks on 127.0.0.1, {args.calls} calls each, rank 0, microseconds per call (median / p90)")
    for name, label in (("check", "named check (check_same_across_ranks) vs monitored_barrier + all_gather"),
                        ("counts", "exchange_counts (sliced wait) vs bare all_to_all_single + wait")):
        new, old = result[name]["gpart"], result[name]["baseline"]
        print(f"{label}: {new[0]:.0f} / {new[1]:.0f} vs {old[0]:.0f} / {old[1]:.0f} ({new[0] / old[0]:.2f}x)")


if __name__ == "__main__":
    main()
