"""Distributed partition with per-machine directories (SPEC.md 10.4): each rank holds only the chunks it
reads and writes its own output directory; the union of the outputs is the single-machine result."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.gloo_processes import free_port, run_distributed

from gpart.formats.input.chunked import ChunkedGraph, write_chunked
from gpart.formats.input.readers import read_graph
from gpart.pipeline.partition import partition_graph

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"


def rank_files(chunks: Path, rank: int, world: int) -> list[Path]:
    """The chunk files rank `rank` of `world` reads (edge and node chunks i % world == rank)."""
    cg = ChunkedGraph(chunks)
    files = [f for i in range(rank, cg.num_edge_chunks, world) for f in cg.edge_files[i]]
    files += [fs[i] for fs in cg.edge_data.values() for i in range(rank, cg.num_edge_chunks, world)]
    files += [fs[i] for fs in cg.node_data.values() for i in range(rank, cg.num_node_chunks, world)]
    return files


def machines(tmp: Path) -> Path:
    """m<r>/chunks for every rank, each holding manifest.json and rank r's chunk files only. m0/chunks is
    first written whole (the reference run reads it, so the manifests name the same source), then pruned."""
    full = tmp / "m0" / "chunks"
    write_chunked(read_graph(CORA), full, 5)
    return full


def split(tmp: Path, world: int) -> None:
    full = tmp / "m0" / "chunks"
    for rank in range(1, world):
        mine = tmp / f"m{rank}" / "chunks"
        for f in [full / "manifest.json"] + rank_files(full, rank, world):
            (mine / f.relative_to(full)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, mine / f.relative_to(full))
    keep = set(rank_files(full, 0, world)) | {full / "manifest.json"}
    for f in [p for p in full.rglob("*") if p.is_file() and p not in keep]:
        f.unlink()


def _partition(rank: int, world_size: int, base: str, parts: int, method: str, params: dict):
    from gpart.distributed.partition_chunks import partition_chunks

    here = Path(base) / f"m{rank}"
    info = partition_chunks(here / "chunks", here / "parts", parts, method, max_message=1 << 16, timeout_s=30, **params)
    return info.manifest["num_parts"]


@pytest.mark.parametrize("world, parts, method, halo", [(2, 3, "random", 1), (4, 5, "remainder", 0)])
def test_union_of_per_machine_outputs_is_the_single_machine_result(tmp_path, world, parts, method, halo):
    import gpart.runtime as gr

    full = machines(tmp_path)
    partition_graph(full, tmp_path / "single", parts, method, halo=halo, seed=2)
    split(tmp_path, world)
    assert run_distributed(_partition, world, str(tmp_path), parts, method, {"halo": halo, "seed": 2},
                           timeout_s=120) == [parts] * world
    single = tmp_path / "single"
    expected = sorted(str(p.relative_to(single)) for p in single.rglob("*") if p.is_file())
    union = set()
    for rank in range(world):
        out = tmp_path / f"m{rank}" / "parts"
        files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
        mine = [f for f in files if f.startswith("part_")]
        assert {int(f.split("/")[0][5:]) for f in mine} == set(range(rank, parts, world))
        for f in files:  # every file this machine holds, manifest and book included, is the single machine's
            assert (out / f).read_bytes() == (single / f).read_bytes(), f
        union |= set(files)
        loaded = gr.load_partition(out, rank)
        assert loaded.rank == rank and loaded.num_owned > 0
    assert sorted(union) == expected
    assert not [p for m in tmp_path.glob("m*") for p in m.iterdir() if ".gpart-" in p.name]


# --------------------------------------------------------------------------- through the CLI, one directory per machine


def launch(tmp: Path, world: int, *args, timeout: float = 20) -> list[subprocess.Popen]:
    """Rank r runs in m<r>/ with the same relative arguments (as on W machines with local disks)."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
               "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank), "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, "-m", "gpart.distributed", "partition", "chunks", "-o", "parts",
                                       *map(str, args), "--timeout", str(timeout)], env=env, cwd=tmp / f"m{rank}",
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def finish(procs: list[subprocess.Popen], limit: float = 90) -> list[tuple[int, str]]:
    out = []
    for proc in procs:
        err = proc.communicate(timeout=limit)[1]
        out.append((proc.returncode, err))
    return out


def no_output(tmp: Path, world: int) -> bool:
    return not any((tmp / f"m{r}" / "parts").exists() for r in range(world)) and \
        not [p for r in range(world) for p in (tmp / f"m{r}").rglob("manifest.json") if "chunks" not in p.parts]


def test_missing_chunk_is_named_on_every_rank(tmp_path):
    machines(tmp_path)
    split(tmp_path, 2)
    gone = tmp_path / "m1" / "chunks" / "edges" / "src-3.npy"  # edge chunk 3 is rank 1's
    gone.unlink()
    results = finish(launch(tmp_path, 2, "--parts", 4))
    assert [rc for rc, _ in results] == [2, 2], results
    for _, err in results:
        assert err.count("\n") == 1 and "chunks/edges/src-3.npy: no such file: rank 1 of 2 reads this edge chunk" in err
    assert "failed on rank 1" in results[0][1]
    assert no_output(tmp_path, 2)


def test_killed_rank_leaves_no_manifest_on_any_machine(tmp_path):
    machines(tmp_path)
    split(tmp_path, 2)
    procs = launch(tmp_path, 2, "--parts", 4, "--max-message", 24, "--method", "random", "-v", timeout=15)
    victim = procs[1]
    line = victim.stderr.readline()
    assert "rank 1: assign" in line, line
    victim.send_signal(signal.SIGKILL)
    start = time.monotonic()
    results = finish(procs)
    assert time.monotonic() - start < 60
    assert results[1][0] == -signal.SIGKILL
    assert results[0][0] != 0 and "error: rank" in results[0][1].splitlines()[-1], results[0][1]
    assert no_output(tmp_path, 2)


def test_ranks_that_share_a_directory_write_it_together_and_the_others_their_own(tmp_path):
    # ranks 0 and 1 share m0/ (the same directory), rank 2 has its own: two output directories (issue 38;
    # this layout was refused before): m0 gets partitions 0 and 1, m2 partition 2, each the manifest
    shutil.copytree(machines(tmp_path), tmp_path / "m2" / "chunks")
    os.symlink(tmp_path / "m0", tmp_path / "m1")
    assert run_distributed(_partition, 3, str(tmp_path), 3, "remainder", {}, timeout_s=120) == [3] * 3
    assert sorted(p.name for p in (tmp_path / "m0" / "parts").iterdir()) == ["manifest.json", "part_0", "part_1"]  # remainder: no book arrays
    assert sorted(p.name for p in (tmp_path / "m2" / "parts").iterdir()) == ["manifest.json", "part_2"]
    assert (tmp_path / "m0" / "parts" / "manifest.json").read_bytes() == (tmp_path / "m2" / "parts" / "manifest.json").read_bytes()


# --------------------------------------------------------------------------- checkpoints, one directory per machine


def _scatter(rank: int, world: int, base: str, target: int, policy: str) -> None:
    from gpart.ckpt.distributed_reshard import scatter_ckpt

    here = Path(base) / f"m{rank}"
    scatter_ckpt(here / "full", here / "run", target, policy)


@pytest.mark.parametrize("target, policy", [(5, "remainder"), (4, "range")])
def test_scatter_ckpt_writes_each_machines_shards_there(tmp_path, target, policy):
    from test_ckpt import make_run

    from gpart.ckpt import gather_checkpoint, scatter_checkpoint
    from gpart.formats.checkpoint.reader import read_checkpoint

    make_run(tmp_path / "src", 777, 3, row_shape=(3, 2), optimizer="adagrad")
    gather_checkpoint(tmp_path / "src", tmp_path / "m0" / "full")
    shutil.copytree(tmp_path / "m0" / "full", tmp_path / "m1" / "full")  # FULL readable on every machine
    scatter_checkpoint(tmp_path / "m0" / "full", tmp_path / "single", target, policy)
    run_distributed(_scatter, 2, str(tmp_path), target, policy, timeout_s=120)
    union = {}
    for rank in range(2):
        out = tmp_path / f"m{rank}" / "run"
        shards = [p.name for p in out.iterdir() if p.name != "manifest.json"]
        assert shards and {int(n.split("_part_")[1].split("_of_")[0]) % 2 for n in shards} == {rank}
        union.update({p.name: p.read_bytes() for p in out.iterdir()})
        assert (out / "manifest.json").read_bytes() == (tmp_path / "single" / "manifest.json").read_bytes()
    assert union == {p.name: p.read_bytes() for p in (tmp_path / "single").iterdir()}
    for rank in range(1, 2):  # the union is a complete checkpoint
        for p in (tmp_path / f"m{rank}" / "run").iterdir():
            shutil.copyfile(p, tmp_path / "m0" / "run" / p.name)
    read_checkpoint(tmp_path / "m0" / "run")


def _gather(rank: int, world: int, base: str, out: str, npy: bool, max_message: int) -> None:
    from gpart.ckpt.distributed_reshard import gather_ckpt

    os.chdir(Path(base) / f"m{rank}")  # the same relative RUN_DIR names each machine's directory
    gather_ckpt("run", out if out else "full", npy=npy, max_message=max_message)


@pytest.mark.parametrize("npy, shared, source", [(False, False, "remainder"), (True, True, "range"), (False, True, "remainder")])
def test_gather_ckpt_from_per_machine_run_directories(tmp_path, monkeypatch, npy, shared, source):
    from test_ckpt import make_run

    from gpart.ckpt import gather_checkpoint
    from gpart.formats.checkpoint.reader import read_checkpoint
    from gpart.formats.sharding.policies import RangePolicy

    policy = RangePolicy.wholegraph(1001, 4) if source == "range" else None
    make_run(tmp_path / "m0" / "run", 1001, 4, row_shape=(6,), optimizer="adam", policy=policy, dtype="bfloat16")
    monkeypatch.chdir(tmp_path / "m0")
    gather_checkpoint("run", tmp_path / "single", npy=npy)
    run = read_checkpoint(tmp_path / "m0" / "run")
    (tmp_path / "m1" / "run").mkdir(parents=True)
    shutil.copyfile(tmp_path / "m0" / "run" / "manifest.json", tmp_path / "m1" / "run" / "manifest.json")
    for t in run.tensors.values():  # rank r keeps shards s % 2 == r
        for k, s in enumerate(t.shards):
            if k % 2:
                os.rename(tmp_path / "m0" / "run" / s.file, tmp_path / "m1" / "run" / s.file)
    out = str(tmp_path / "full") if shared else ""
    run_distributed(_gather, 2, str(tmp_path), out, npy, 5000, timeout_s=120)  # 5000 B: one 64 KiB record per round
    full = tmp_path / "full" if shared else tmp_path / "m0" / "full"
    files = sorted(p.name for p in (tmp_path / "single").iterdir())
    assert files == sorted(p.name for p in full.iterdir())
    for name in files:
        assert (full / name).read_bytes() == (tmp_path / "single" / name).read_bytes(), name
    assert not (tmp_path / "m1" / "full").exists()
    assert not [p for m in ("m0", "m1") for p in (tmp_path / m).iterdir() if ".gpart-" in p.name]


def test_gather_ckpt_names_a_missing_shard(tmp_path):
    from test_ckpt import make_run

    from gpart.formats.checkpoint.reader import read_checkpoint

    make_run(tmp_path / "m0" / "run", 301, 4, row_shape=(2,), optimizer="adagrad")
    run = read_checkpoint(tmp_path / "m0" / "run")
    (tmp_path / "m1" / "run").mkdir(parents=True)
    shutil.copyfile(tmp_path / "m0" / "run" / "manifest.json", tmp_path / "m1" / "run" / "manifest.json")
    for t in run.tensors.values():  # rank 1 should hold shards 1 and 3, but shard 3 of every tensor is lost
        for k, s in enumerate(t.shards):
            if k % 2:
                os.rename(tmp_path / "m0" / "run" / s.file, tmp_path / "m1" / "run" / s.file)
                if k == 3:
                    (tmp_path / "m1" / "run" / s.file).unlink()
    with pytest.raises(Exception, match="no such file: rank 1 of 2 holds shard 3 of tensor"):
        run_distributed(_gather, 2, str(tmp_path), "", False, 1 << 20, timeout_s=120)
    assert not (tmp_path / "m0" / "full").exists()
