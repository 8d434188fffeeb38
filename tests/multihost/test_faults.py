"""Faults between hosts during a distributed partition: a slow lossy link, a cut link, a host killed or
stopped, a host whose disk is full. Every rank on every host ends non-zero in bounded time, its one-line
error names the host it lost, and no host commits a result."""

from __future__ import annotations

import shutil
import signal
import time

import pytest

from jobs import ENV, HERE, one_machine_partition, rank_pids, same_tree, torchrun
from netns_hosts import Cluster

TIMEOUT_S = 5  # --timeout of the collectives
# a failing rank: the collective's limit, up to 5 s probing which host is gone (gpart.collectives.peers), exit
BOUND_S = TIMEOUT_S + 5 + 10


def _partition(cluster, *extra: str) -> list:
    for host in cluster.hosts:
        shutil.copytree(cluster.chunks, host.disk / "chunks")
    args = ["-m", "gpart.distributed", "partition", "chunks", "--parts", "4", "--method", "random", "-o", "parts",
            "--timeout", str(TIMEOUT_S), *extra]
    return [cluster.spawn(h, torchrun(cluster, h, *args), ENV) for h in cluster.hosts]


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
    lines = [line for line in log.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, log[-3000:]
    return lines[0]


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


@pytest.mark.parametrize("fault", ["cut", "kill", "stop"])
def test_host_lost_mid_shuffle(hosts, fault):
    a, b = hosts.hosts
    procs = _partition(hosts, "--max-message", "24", "-v")
    _shuffling(hosts, procs)
    {"cut": lambda: hosts.cut(b), "kill": lambda: hosts.signal(b, signal.SIGKILL),
     "stop": lambda: hosts.signal(b, signal.SIGSTOP)}[fault]()
    _until_ranks_gone(hosts, [a], BOUND_S)
    [result_a] = hosts.wait(procs[:1], 20)
    assert result_a.returncode not in (0, None), result_a.log[-3000:]
    error = _error_line(result_a.log)
    assert error.startswith("error: rank 0 on hostA:") and "no answer from rank 1 on hostB" in error, error
    if fault == "stop":
        hosts.signal(b, signal.SIGCONT)  # hostB wakes up to a dead job: its rank too ends in bounded time
    if fault == "cut":
        # hostB's rank ends by itself; torchrun's c10d agent there then blocks in its store client until
        # the link is back (torch's launcher, not a rank): plug the cable back and it ends non-zero too
        _until_ranks_gone(hosts, [b], BOUND_S)
        hosts.cut(b, up=True)
    [result_b] = hosts.wait(procs[1:], BOUND_S + 40)
    if fault == "kill":
        assert result_b.returncode == -signal.SIGKILL or result_b.returncode == 128 + signal.SIGKILL
    elif fault == "stop":
        # woken up, hostB's torchrun finds the rendezvous store gone, stops its rank and ends non-zero
        assert result_b.returncode not in (0, None) and "RendezvousConnectionError" in result_b.log, result_b.log[-3000:]
    else:
        assert result_b.returncode not in (0, None), result_b.log[-3000:]
        error = _error_line(result_b.log)
        assert error.startswith("error: rank 1 on hostB:"), error
        assert "lost contact with hostA" in error or "no answer from rank 0 on hostA" in error, error
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
    for host in hosts.hosts:
        shutil.copytree(hosts.chunks, host.disk / "chunks")
    args = ["-m", "gpart.distributed", "partition", "chunks", "--parts", "2", "--method", "random", "-o", "parts"]
    assert [r.returncode for r in hosts.run({h.name: torchrun(hosts, h, *args) for h in hosts.hosts}, 120, ENV)] == [0, 0]
    shared = hosts.root / "shared"
    shared.mkdir()
    train = [str(HERE / "train_ckpt.py"), "--parts", "parts", "--epochs", "1000", "--timeout", str(TIMEOUT_S),
             "--save", str(shared / "run")]
    procs = [hosts.spawn(h, torchrun(hosts, h, *train), ENV, log_name=f"train-{h.name}") for h in hosts.hosts]
    hosts.wait_for_log(procs[1], "epoch 0 done", 120)
    hosts.cut(b)
    _until_ranks_gone(hosts, [a, b], BOUND_S)
    hosts.cut(b, up=True)  # lets hostB's torchrun agent finish (see test_host_lost_mid_shuffle)
    result_a, result_b = hosts.wait(procs, 60)
    assert result_a.returncode not in (0, None) and result_b.returncode not in (0, None)
    error_a, error_b = _error_line(result_a.log), _error_line(result_b.log)
    assert "rank 0 on hostA" in error_a and "no answer from rank 1 on hostB" in error_a, error_a
    assert "rank 1 on hostB" in error_b and "hostA" in error_b.split(";")[-1], error_b
    assert list(shared.iterdir()) == []
