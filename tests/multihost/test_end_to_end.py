"""Chunked input -> distributed partition over two hosts, each writing only its own directory ->
training across the hosts (2 hosts x 2 trainers: sampler and feature exchange over the bridge) against
the same on one host -> checkpoint save, gather, re-scatter to another world size, resume."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

from jobs import ENV, HERE, REPO, one_machine_partition, rank_env, same_tree, torchrun

# 10 epochs: at 5 the test accuracy of 4 ranks on 2 random partitions moved 0.49-0.70 with the seed (0.51-0.66 after
# the held-first node order changed which neighbours are drawn), too close to the bound below; at 10 it is 0.76-0.77
TRAIN = ["--epochs", "10", "--batch-size", "64", "--quiet", "--seed", "3"]


def _copy_chunks(cluster, chunks) -> None:
    for host in cluster.hosts:
        shutil.copytree(chunks, host.disk / "chunks")


def _test_acc(log: str) -> float:
    found = re.findall(r"test acc (\d\.\d+)", log)
    assert found, log[-3000:]
    return float(found[-1])


def test_partition_and_train_across_hosts(cluster2, cora_chunks, tmp_path):
    _copy_chunks(cluster2, cora_chunks)
    partition = ["-m", "gpart.distributed", "partition", "chunks", "--parts", "2", "--method", "random", "--seed", "1",
                 "-o", "parts", "--timeout", "60"]
    results = cluster2.run({h.name: torchrun(cluster2, h, *partition) for h in cluster2.hosts}, 120, ENV)
    assert [r.returncode for r in results] == [0, 0], [r.log[-3000:] for r in results]
    # each host holds the book, the manifest and only its own partition
    for host, mine in zip(cluster2.hosts, ("part_0", "part_1")):
        assert sorted(p.name for p in (host.disk / "parts").iterdir()) == ["book", "manifest.json", mine]
    single = one_machine_partition(cora_chunks, tmp_path, "--parts", "2", "--method", "random", "--seed", "1")
    files = same_tree(single, [h.disk / "parts" for h in cluster2.hosts])
    assert "part_1/node_data/feat.bin" in files

    script = str(REPO / "examples" / "train_sage.py")
    # 2 hosts x 2 trainers, each pair on its host's partition; the same 2 x 2 on one machine (4 ranks over
    # loopback) runs meanwhile: the baseline
    one_host = subprocess.Popen(["torchrun", "--standalone", "--nproc-per-node", "4", script, "--parts", str(single), *TRAIN],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **ENV})
    results = cluster2.run({h.name: torchrun(cluster2, h, script, "--parts", "parts", *TRAIN, nproc=2) for h in cluster2.hosts},
                           240, ENV)
    out, err = one_host.communicate(timeout=240)
    assert [r.returncode for r in results] == [0, 0], [r.log[-3000:] for r in results]
    assert one_host.returncode == 0, err[-3000:]
    across, base = _test_acc(results[0].log), _test_acc(out)
    print(f"train_sage test accuracy: 2 hosts x 2 trainers {across:.4f}, one host 4 ranks {base:.4f}")
    assert abs(across - base) <= 0.02, (across, out)
    assert across > 0.6
    _checkpoint_round_trip(cluster2)


def _each_rank(cluster, *argv: str) -> list:
    return cluster.wait([cluster.spawn(h, argv, rank_env(cluster, h)) for h in cluster.hosts], 180)


def _checkpoint_round_trip(cluster) -> None:
    """Train with a sharded embedding on both hosts and save (to the one directory both hosts share, as
    save_checkpoint needs), gather-ckpt across the hosts (FULL on hostA), copy FULL to hostB, scatter-ckpt
    to a world of one across the hosts, resume on hostA alone: the restored model predicts as saved.
    The ranks start as torchrun would start them (its environment), without the launcher's start-up."""
    a, b = cluster.hosts
    shared = cluster.root / "shared"  # outside the hosts' own directories: every host sees it (NFS-like)
    shared.mkdir()
    train = [sys.executable, str(HERE / "train_ckpt.py"), "--timeout", "30"]
    results = _each_rank(cluster, *train, "--parts", "parts", "--epochs", "3", "--save", str(shared / "run"))
    assert [r.returncode for r in results] == [0, 0], [r.log[-3000:] for r in results]
    saved = _test_acc(results[0].log)
    ckpt = [sys.executable, "-m", "gpart.distributed"]
    results = _each_rank(cluster, *ckpt, "gather-ckpt", str(shared / "run"), "-o", "full")
    assert [r.returncode for r in results] == [0, 0], [r.log[-3000:] for r in results]
    assert (a.disk / "full" / "manifest.json").exists() and not (b.disk / "full").exists()
    shutil.copytree(a.disk / "full", b.disk / "full")  # scatter-ckpt reads FULL on every machine (scp)
    results = _each_rank(cluster, *ckpt, "scatter-ckpt", "full", "--world-size", "1", "-o", "run1")
    assert [r.returncode for r in results] == [0, 0], [r.log[-3000:] for r in results]
    [made] = cluster.run({"hostA": ["gpart", "partition", "chunks", "--parts", "1", "--method", "random", "-o", "parts1", "-q"]},
                         60, ENV)
    assert made.returncode == 0, made.log
    [resumed] = cluster.run({"hostA": [*train, "--parts", "parts1", "--epochs", "1", "--resume", "run1",
                                       "--model", str(shared / "run.model.pt")]}, 120, ENV)
    assert resumed.returncode == 0, resumed.log[-3000:]
    loaded = float(re.search(r"loaded: test acc (\d\.\d+)", resumed.log).group(1))
    assert abs(loaded - saved) <= 0.005, (loaded, saved)  # same weights; only summation order differs
    assert _test_acc(resumed.log) > 0.5
