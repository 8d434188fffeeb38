"""2 hosts x 2 ranks, each host writing its own local directory (issue 38): the partition step and the
checkpoint re-shard as a machine with several GPUs runs them. Each host's directory holds its ranks'
partitions (shards), the book and the manifest; the union is the one-host result byte for byte. A healthy
run with --quiet prints no wait warning while rank 0 computes (issue 42)."""

from __future__ import annotations

import shutil

from jobs import ENV, one_machine_partition, same_tree, torchrun

ARGS = ["--parts", "4", "--method", "metis", "--seed", "1"]  # metis: rank 0 computes the book while the others wait


def test_two_hosts_of_two_ranks_write_per_host_directories(cluster2, cora_chunks, tmp_path):
    for host in cluster2.hosts:
        shutil.copytree(cora_chunks, host.disk / "chunks")
    partition = ["-m", "gpart.distributed", "partition", "chunks", *ARGS, "-o", "parts", "--timeout", "60", "--quiet"]
    results = cluster2.run({h.name: torchrun(cluster2, h, *partition, nproc=2) for h in cluster2.hosts}, 180, ENV)
    assert [r.returncode for r in results] == [0, 0], [r.log[-3000:] for r in results]
    for r in results:  # normal work: no "rank 1 has waited 3 s in gathering sizes ... one may be computing"
        assert "has waited" not in r.log and "gpart:" not in r.log, r.log[-3000:]
    for host, mine in zip(cluster2.hosts, (["part_0", "part_1"], ["part_2", "part_3"])):
        assert sorted(p.name for p in (host.disk / "parts").iterdir()) == ["book", "manifest.json", *mine]
    single = one_machine_partition(cora_chunks, tmp_path, *ARGS)
    files = same_tree(single, [h.disk / "parts" for h in cluster2.hosts])
    assert "part_3/node_data/feat.bin" in files
    _checkpoint_two_by_two(cluster2, tmp_path)


def _checkpoint_two_by_two(cluster, tmp_path) -> None:
    """scatter-ckpt to 6 shards on 2 x 2 ranks (each host: its ranks' shards), then gather-ckpt back from those
    per-host run directories: the table is the one FULL held, byte for byte."""
    from test_ckpt import make_run

    from gpart.ckpt import gather_checkpoint

    make_run(tmp_path / "src", 901, 3, row_shape=(4,), optimizer="adam")
    gather_checkpoint(tmp_path / "src", tmp_path / "full")
    for host in cluster.hosts:
        shutil.copytree(tmp_path / "full", host.disk / "full")
    ckpt = ["-m", "gpart.distributed"]
    scatter = [*ckpt, "scatter-ckpt", "full", "-o", "run", "--world-size", "6", "--timeout", "60", "--quiet"]
    results = cluster.run({h.name: torchrun(cluster, h, *scatter, nproc=2) for h in cluster.hosts}, 180, ENV)
    assert [r.returncode for r in results] == [0, 0], [r.log[-3000:] for r in results]
    for host, ranks in zip(cluster.hosts, ((0, 1), (2, 3))):
        shards = [p.name for p in (host.disk / "run").iterdir() if p.name != "manifest.json"]
        assert {int(n.split("_part_")[1].split("_of_")[0]) % 4 for n in shards} == set(ranks)
    gather = [*ckpt, "gather-ckpt", "run", "-o", "full2", "--timeout", "60", "--quiet"]
    results = cluster.run({h.name: torchrun(cluster, h, *gather, nproc=2) for h in cluster.hosts}, 180, ENV)
    assert [r.returncode for r in results] == [0, 0], [r.log[-3000:] for r in results]
    a, b = cluster.hosts
    assert not (b.disk / "full2").exists()
    for p in (tmp_path / "full").iterdir():
        if p.suffix != ".json":  # the JSON files name their source
            assert (a.disk / "full2" / p.name).read_bytes() == p.read_bytes(), p.name
