"""Distributed partitioning and a training epoch across separate hosts (network namespaces) beside one host.

    sudo python benchmarks/bench_multihost.py --nodes 4000000 --edges 50000000 --hosts 2,4 --work /tmp/bench_mh

Makes (or reuses) the power-law graph of benchmarks/make_powerlaw.py, with
validation and test masks, cuts it with `gpart chunk` and gives every host a
copy. Then for each host count H, in the same run:

- across hosts: H network namespaces (tests/multihost/netns_hosts.py), one
  rank each, torchrun with the c10d rendezvous on hostA, every host link
  shaped to `--rate-mbit` and `--delay-ms` one way between two hosts;
- one host: the same H ranks in one namespace over its loopback
  (torchrun --standalone), the baseline.

For `python -m gpart.distributed partition` and for one epoch of
tests/multihost/train_ckpt.py (GraphSAGE + a sharded node embedding over the
partitions just written) it prints the wall time, the bytes each host sent
(its link's tx counter; loopback's for one host) and the share of time in
the network: for the partition the shuffle stages' share of the run (-v
stage times: the exchanges plus the packing around them), for training the
loader's collective seconds (DistNeighborLoader.stats) over the epoch. It
also measures the emulated link itself (TCP throughput and connect time
between two hosts) and derives seconds per million edges and per GB sent.
Root only (ip netns).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from harness import REPO  # first: puts the repository root on sys.path

sys.path.insert(0, str(REPO / "tests" / "multihost"))
from jobs import torchrun  # noqa: E402 (tests/multihost is not a package)
from netns_hosts import Cluster, unavailable  # noqa: E402

from tests.support.synthetic import write_powerlaw_npz  # noqa: E402

TRAIN = REPO / "tests" / "multihost" / "train_ckpt.py"
ENV = {"OMP_NUM_THREADS": "1"}


def make_input(work: Path, nodes: int, edges: int, feat_dim: int) -> Path:
    """The chunked power-law graph with val/test masks (reused when present)."""
    chunks = work / f"chunks_{nodes}_{edges}_{feat_dim}"
    if (chunks / "manifest.json").exists():
        return chunks
    graph = work / f"powerlaw_{nodes}_{edges}_{feat_dim}.npz"
    if not graph.exists():
        write_powerlaw_npz(graph, nodes, edges, feat_dim, 0)
    rng = np.random.default_rng(1)
    for name in ("val_mask", "test_mask"):
        np.save(work / f"{name}.npy", rng.random(nodes) < 0.05)
    subprocess.run(["gpart", "chunk", str(graph), "--chunks", "8", "-o", str(chunks), "-q", "--force",
                    "--node-data", f"val_mask={work / 'val_mask.npy'}", "--node-data", f"test_mask={work / 'test_mask.npy'}"],
                   check=True)
    return chunks


def measure_link(cluster: Cluster) -> dict:
    """TCP between hostB and hostA through the shaped links: connect time (about one round trip) and MB/s."""
    server = ("import socket; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
              "s.bind(('0.0.0.0', 7001)); s.listen(); c, _ = s.accept()\nwhile c.recv(1 << 20): pass")
    client = ("import socket, time, json; time.sleep(1); t = time.perf_counter(); s = socket.create_connection(('hostA', 7001)); "
              "c = time.perf_counter() - t; b = b'x' * (1 << 20); t = time.perf_counter()\nfor _ in range(200): s.sendall(b)\n"
              "s.close(); print(json.dumps({'connect_ms': c * 1e3, 'mb_per_s': 200 / (time.perf_counter() - t)}))")
    a, b = cluster.hosts[:2]
    results = cluster.wait([cluster.spawn(a, [sys.executable, "-c", server], log_name="link-server"),
                            cluster.spawn(b, [sys.executable, "-c", client], log_name="link-client")], 120)
    return json.loads(results[1].log.strip().splitlines()[-1])


def run_job(cluster: Cluster, commands: dict[str, list[str]], counters: list, timeout_s: float, step: str) -> dict:
    """Run one command per host at once: wall seconds, bytes each counter's host sent, the logs."""
    before = [cluster.bytes_sent(host, dev) for host, dev in counters]
    start = time.perf_counter()
    results = cluster.run(commands, timeout_s, ENV, step)
    wall = time.perf_counter() - start
    failed = [r for r in results if r.returncode != 0]
    if failed:
        sys.exit(f"{failed[0].host} failed ({failed[0].returncode}):\n{failed[0].log[-3000:]}")
    sent = [cluster.bytes_sent(host, dev) - b for (host, dev), b in zip(counters, before)]
    return {"wall": wall, "sent": sent, "logs": [r.log for r in results]}


def stage_figures(logs: list[str]) -> tuple[float, float]:
    """(work, shuffle) seconds of the slowest rank, from the -v lines 'rank r: STAGE  S s' (assign, shuffle
    edges, shuffle nodes, write): the run without the launcher's start-up, and its exchanges (with the
    packing around them)."""
    ranks: dict[str, dict[str, float]] = {}
    for log in logs:
        for m in re.finditer(r"rank (\d+): (assign|shuffle edges|shuffle nodes|write)\s+([\d.]+) s", log):
            ranks.setdefault(m.group(1), {})[m.group(2)] = float(m.group(3))
    slowest = max(ranks.values(), key=lambda stages: sum(stages.values()))
    return sum(slowest.values()), slowest.get("shuffle edges", 0.0) + slowest.get("shuffle nodes", 0.0)


def epoch_figures(logs: list[str]) -> tuple[float, float]:
    """(slowest rank's epoch seconds, its loader-collective share) from train_ckpt.py --timing lines."""
    rows = [json.loads(line) for log in logs for line in log.splitlines() if line.startswith("{")]
    slowest = max(rows, key=lambda r: r["seconds"])
    return slowest["seconds"], slowest["loader_collective_s"] / max(slowest["seconds"], 1e-9)


def partition_and_epoch(cluster: Cluster, commands, counters, args) -> dict:
    """The partition, then one training epoch on its result, with the same launcher (`commands(host, argv)`)."""
    parts = ["-m", "gpart.distributed", "partition", "chunks", "--parts", str(args.ranks), "--method", "random",
             "-o", "parts", "-v", "--max-message", args.max_message, "--timeout", "600"]
    part = run_job(cluster, commands(parts), counters, 3600, "partition")
    train = [str(TRAIN), "--parts", "parts", "--epochs", "1", "--timing", "--timeout", "600", "--fanouts", args.fanouts,
             "--batch-size", str(args.batch_size)]
    epoch = run_job(cluster, commands(train), counters, 3600, "train")
    epoch_s, loader_share = epoch_figures(epoch["logs"])
    work_s, shuffle_s = stage_figures(part["logs"])
    return {"partition_job_s": part["wall"], "partition_s": work_s, "shuffle_s": shuffle_s, "partition_sent": part["sent"],
            "epoch_job_s": epoch["wall"], "epoch_s": epoch_s, "epoch_sent": epoch["sent"], "loader_share": loader_share}


def across_hosts(chunks: Path, work: Path, args) -> tuple[dict, dict]:
    with Cluster(args.ranks, work / f"logs_{args.ranks}_hosts") as cluster:
        for host in cluster.hosts:
            # one way between two hosts crosses two shaped links: half the delay on each
            cluster.shape(host, delay_ms=args.delay_ms / 2, rate_mbit=args.rate_mbit)
            shutil.copytree(chunks, host.disk / "chunks")
        link = measure_link(cluster)
        figures = partition_and_epoch(cluster, lambda argv: {h.name: torchrun(cluster, h, *argv) for h in cluster.hosts},
                                      [(h, "eth0") for h in cluster.hosts], args)
    return figures, link


def one_host(chunks: Path, work: Path, args) -> dict:
    with Cluster(1, work / f"logs_{args.ranks}_on_one") as cluster:
        host = cluster.hosts[0]
        shutil.copytree(chunks, host.disk / "chunks")
        launch = ["torchrun", "--standalone", "--nproc-per-node", str(args.ranks)]
        return partition_and_epoch(cluster, lambda argv: {host.name: [*launch, *argv]}, [(host, "lo")], args)


def report(ranks: int, across: dict, one: dict, link: dict, args) -> None:
    mib = 1 << 20
    print(f"\n{ranks} ranks: link measured {link['mb_per_s']:.0f} MB/s, TCP connect {link['connect_ms']:.2f} ms "
          f"(shaped: {args.rate_mbit:g} Mbit/s, {args.delay_ms:g} ms one way)")
    print(f"  {'':24}{'job s':>8}{'run s':>8}{'network s':>10}{'share':>7}   MiB sent per host")
    for name, fig in ((f"partition, {ranks} hosts", across), ("partition, one host", one)):
        sent = " ".join(f"{b / mib:.1f}" for b in fig["partition_sent"])
        print(f"  {name:24}{fig['partition_job_s']:8.2f}{fig['partition_s']:8.2f}{fig['shuffle_s']:10.2f}"
              f"{fig['shuffle_s'] / max(fig['partition_s'], 1e-9):7.2f}   {sent}")
    for name, fig in ((f"epoch, {ranks} hosts", across), ("epoch, one host", one)):
        sent = " ".join(f"{b / mib:.1f}" for b in fig["epoch_sent"])
        print(f"  {name:24}{fig['epoch_job_s']:8.2f}{fig['epoch_s']:8.2f}{fig['epoch_s'] * fig['loader_share']:10.2f}"
              f"{fig['loader_share']:7.2f}   {sent}")
    busiest = max(across["partition_sent"])
    print(f"  partition across hosts: {across['partition_s'] * ranks / args.edges * 1e6:.3f} rank-s per M edges "
          f"(one host: {one['partition_s'] * ranks / args.edges * 1e6:.3f}), {sum(across['partition_sent']) / args.edges:.1f} "
          f"bytes sent per edge, shuffle {across['shuffle_s'] / max(busiest / 1e9, 1e-9):.1f} s per GB the busiest host sent; "
          f"epoch: {max(across['epoch_sent']) / max(across['epoch_s'], 1e-9) / 1e6:.0f} MB/s per host")
    print("  JSON " + json.dumps({"ranks": ranks, "across": across, "one_host": one, "link": link}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4_000_000)
    parser.add_argument("--edges", type=int, default=50_000_000)
    parser.add_argument("--feat-dim", type=int, default=128)
    parser.add_argument("--hosts", default="2,4", help="host counts, comma-separated (one rank per host)")
    parser.add_argument("--rate-mbit", type=float, default=10000.0, help="each host link's rate (default 10 Gbit/s)")
    parser.add_argument("--delay-ms", type=float, default=0.2, help="one-way delay between two hosts (default 0.2 ms)")
    parser.add_argument("--max-message", default="64MiB")
    parser.add_argument("--fanouts", default="10,5")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_multihost"))
    args = parser.parse_args()
    reason = unavailable()
    if reason:
        sys.exit(reason)
    args.work.mkdir(parents=True, exist_ok=True)
    chunks = make_input(args.work, args.nodes, args.edges, args.feat_dim)
    print(f"graph: {args.nodes:,} nodes, {args.edges:,} edges, feat {args.feat_dim} float32 ({chunks})")
    for ranks in [int(h) for h in args.hosts.split(",")]:
        args.ranks = ranks
        across, link = across_hosts(chunks, args.work, args)
        report(ranks, across, one_host(chunks, args.work, args), link, args)


if __name__ == "__main__":
    main()
