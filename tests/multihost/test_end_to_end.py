"""Chunked input -> distributed partition over two hosts, each writing only its own directory ->
training across the hosts (sampler and feature exchange over the bridge), against one host."""

from __future__ import annotations

import re
import shutil
import subprocess
import os

from jobs import ENV, REPO, one_machine_partition, same_tree, torchrun

TRAIN = ["--epochs", "5", "--batch-size", "64", "--quiet", "--seed", "3"]


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
    results = cluster2.run({h.name: torchrun(cluster2, h, script, "--parts", "parts", *TRAIN) for h in cluster2.hosts}, 180, ENV)
    assert [r.returncode for r in results] == [0, 0], [r.log[-3000:] for r in results]
    across = _test_acc(results[0].log)
    one_host = subprocess.run(["torchrun", "--standalone", "--nproc-per-node", "2", script, "--parts", str(single), *TRAIN],
                              capture_output=True, text=True, timeout=180, env={**os.environ, **ENV})
    assert one_host.returncode == 0, one_host.stderr[-3000:]
    assert abs(across - _test_acc(one_host.stdout)) <= 0.02, (across, one_host.stdout)
    assert across > 0.6
