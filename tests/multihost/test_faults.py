"""Faults between hosts during a distributed partition: a slow lossy link, a cut link, a host killed or
stopped, a host whose disk is full. Every rank on every host ends non-zero in bounded time, its one-line
error names the host it lost, and no host commits a result."""

from __future__ import annotations

import shutil
import signal
import sys
import time

import pytest
from jobs import ENV, HERE, one_machine_partition, rank_env, rank_pids, same_tree, torchrun
from netns_hosts import Cluster

TIMEOUT_S = 3  # --timeout of the collectives
# a failing rank: the collective's limit, half as long again probing which host is gone (gpart.collectives.peers), exit
BOUND_S = 2 * TIMEOUT_S + 10


def _partition(cluster, *extra: str, launcher: str = "direct") -> list:
    """The partition on every host: through torchrun, or `python -m` with torchrun's environment (faster)."""
    for host in cluster.hosts:
        shutil.copytree(cluster.chunks, host.disk / "chunks")
    args = ["-m", "gpart.distributed", "partition", "chunks", "--parts", "4", "--method", "random", "-o", "parts",
            "--timeout", str(TIMEOUT_S), *extra]
    if launcher == "torchrun":
        return [cluster.spawn(h, torchrun(cluster, h, *args), ENV) for h in cluster.hosts]
    return [cluster.spawn(h, [sys.executable, *args], rank_env(cluster, h)) for h in cluster.hosts]


@pytest.fixture
def hosts(cluster2, cora_chunks):
    cluster2.chunks = cora_chunks
    return cluster2


def _until_ranks_gone(cluster, hosts, limit_s: float) -> float:
    start = time.monotonic()
    while any(rank_pids(cluster, h) for h in hosts):
        assert time.monotonic() - start < limit_s, f"ranks still running after {limit_s} s"
        time.sleep(0.1)
    return time.monotonic() - start


def _error_line(log: str) -> str:
    """The one error line: the rank's, and under torchrun the same line in its failure summary (`traceback : error: ...`)."""
    lines = {line[line.index("error: "):] for line in log.splitlines()
             if line.startswith("error: ") or line.lstrip().startswith("traceback : error: ")}
    assert len(lines) == 1, log[-3000:]
    return lines.pop()


def _nothing_committed(cluster) -> None:
    for host in cluster.hosts:
        assert not (host.disk / "parts").exists(), sorted(p.name for p in host.disk.iterdir())
        assert not list(host.disk.rglob("manifest.json"))[len(list((host.disk / "chunks").rglob("manifest.json"))):]


def _shuffling(hosts, procs) -> None:
    # one edge (24 bytes) per message: thousands of rounds, the fault lands inside the shuffle
    hosts.wait_for_log(procs[1], "rank 1: assign", 90)


def test_delay_and_loss_on_one_link_completes_slower(hosts, cora_edge_chunks, tmp_path):
    hosts.chunks = cora_edge_chunks
    hosts.shape(hosts.hosts[1], delay_ms=50, loss=0.01)
    procs = _partition(hosts, "--max-message", "16KiB", "-v")
    results = hosts.wait(procs, 180)
    assert [r.returncode for r in results] == [0, 0], [r.log[-3000:] for r in results]
    # every message round trip crosses hostB's link twice each way (100 ms at least): the shuffle shows it
    shuffle_s = [float(line.split()[4]) for line in results[0].log.splitlines() if "shuffle edges" in line]
    assert shuffle_s and shuffle_s[0] >= 1.0, results[0].log[-2000:]
    single = one_machine_partition(hosts.chunks, tmp_path, "--parts", "4", "--method", "random")
    same_tree(single, [h.disk / "parts" for h in hosts.hosts])


def test_link_cut_mid_shuffle(hosts):
    """torchrun on both hosts; hostB's cable is pulled while the ranks shuffle."""
    a, b = hosts.hosts
    procs = _partition(hosts, "--max-message", "24", "-v", launcher="torchrun")
    _shuffling(hosts, procs)
    hosts.cut(b)
    _until_ranks_gone(hosts, [a, b], BOUND_S)  # the ranks of both sides end by themselves
    [result_a] = hosts.wait(procs[:1], 20)
    # hostB's torchrun (c10d agent) then blocks in its store client until the link is back (torch's
    # launcher, not a rank): plug the cable back and it ends non-zero too
    hosts.cut(b, up=True)
    [result_b] = hosts.wait(procs[1:], 60)
    for result, me, other in ((result_a, "rank 0 on hostA", "no answer from rank 1 on hostB"),
                              (result_b, "rank 1 on hostB", "lost contact with hostA")):
        assert result.returncode not in (0, None), result.log[-3000:]
        error = _error_line(result.log)
        assert error.startswith(f"error: {me}:") and other in error, error
    _nothing_committed(hosts)


@pytest.mark.parametrize("fault", [signal.SIGKILL, signal.SIGSTOP], ids=["kill", "stop"])
def test_host_killed_or_stopped_mid_shuffle(hosts, fault):
    procs = _partition(hosts, "--max-message", "24", "-v")
    _shuffling(hosts, procs)
    hosts.signal(hosts.hosts[1], fault)
    start = time.monotonic()
    [result_a] = hosts.wait(procs[:1], BOUND_S)
    assert time.monotonic() - start < BOUND_S and result_a.returncode not in (0, None), result_a.log[-3000:]
    error = _error_line(result_a.log)
    assert error.startswith("error: rank 0 on hostA:") and "no answer from rank 1 on hostB" in error, error
    if fault == signal.SIGSTOP:
        hosts.signal(hosts.hosts[1], signal.SIGCONT)  # hostB wakes up to a dead job: it ends in bounded time too
    [result_b] = hosts.wait(procs[1:], BOUND_S)
    if fault == signal.SIGKILL:
        assert result_b.returncode == -signal.SIGKILL, result_b
    else:
        assert result_b.returncode not in (0, None), result_b.log[-3000:]
        error = _error_line(result_b.log)
        assert error.startswith("error: rank 1 on hostB:") and "hostA" in error, error
    _nothing_committed(hosts)


def test_full_disk_on_one_host(cora_chunks, tmp_path):
    room = sum(p.stat().st_size for p in cora_chunks.rglob("*") if p.is_file()) + (256 << 10)
    with Cluster(2, tmp_path / "logs", disk_bytes={"hostB": room}) as cluster:
        cluster.chunks = cora_chunks
        results = cluster.wait(_partition(cluster), 120)
        assert all(r.returncode not in (0, None) for r in results), [r.log[-2000:] for r in results]
        error_b, error_a = _error_line(results[1].log), _error_line(results[0].log)
        assert "No space left on device" in error_b and "No space left on device" in error_a, (error_a, error_b)
        _nothing_committed(cluster)
    assert cluster.leftovers() == []


def test_link_cut_mid_epoch(hosts, tmp_path):
    """Training (tests/multihost/train_ckpt.py: sampler, feature exchange, gradient sums, all bounded) loses
    hostB's link after its first epoch: both ranks end non-zero in bounded time naming the other host, and
    no checkpoint is committed."""
    a, b = hosts.hosts
    parts = one_machine_partition(hosts.chunks, tmp_path, "--parts", "2", "--method", "random")
    for host in hosts.hosts:
        shutil.copytree(parts, host.disk / "parts")
    shared = hosts.root / "shared"
    shared.mkdir()
    train = [sys.executable, str(HERE / "train_ckpt.py"), "--parts", "parts", "--epochs", "1000", "--timeout",
             str(TIMEOUT_S), "--save", str(shared / "run")]
    procs = [hosts.spawn(h, train, rank_env(hosts, h), log_name=f"train-{h.name}") for h in hosts.hosts]
    hosts.wait_for_log(procs[1], "epoch 0 done", 120)
    hosts.cut(b)
    result_a, result_b = hosts.wait(procs, BOUND_S)
    for result, me, other in ((result_a, "rank 0 on hostA", "no answer from rank 1 on hostB"),
                              (result_b, "rank 1 on hostB", "lost contact with hostA")):
        assert result.returncode not in (0, None), result.log[-3000:]
        error = _error_line(result.log)
        assert error.startswith(f"error: {me}:") and other in error, error
    assert list(shared.iterdir()) == []
