"""`python -m gpart.distributed gather-ckpt / scatter-ckpt`: each rank writes only its tensors or shards,
and the result is byte-identical to the single-process commands (every file, manifest included)."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.gloo_processes import free_port, run_distributed
from test_ckpt import make_run

from gpart.ckpt import gather_checkpoint, scatter_checkpoint
from gpart.formats.sharding.policies import RangePolicy


def same_files(a: Path, b: Path) -> None:
    files = sorted(p.name for p in a.iterdir())
    assert files == sorted(p.name for p in b.iterdir())
    _, mismatch, errors = filecmp.cmpfiles(a, b, files, shallow=False)
    assert not mismatch and not errors, (mismatch, errors)


def _gather(rank: int, world: int, run: str, out: str, npy: bool) -> None:
    from gpart.ckpt.distributed_reshard import gather_ckpt

    gather_ckpt(run, out, npy=npy)


def _scatter(rank: int, world: int, full: str, out: str, target: int, policy: str) -> list[int]:
    from gpart.ckpt.distributed_reshard import scatter_ckpt

    manifest = scatter_ckpt(full, out, target, policy)
    return sorted({s["rank"] for t in manifest["tensors"] for s in t["shards"] if s["rank"] % world == rank})


@pytest.mark.parametrize("world, npy, source", [(2, False, "remainder"), (3, True, "range")])
def test_gather_matches_single_process(tmp_path, world, npy, source):
    policy = RangePolicy.wholegraph(1001, 4) if source == "range" else None
    make_run(tmp_path / "run", 1001, 4, row_shape=(6,), optimizer="adam", policy=policy, dtype="bfloat16")
    gather_checkpoint(tmp_path / "run", tmp_path / "single", npy=npy)
    run_distributed(_gather, world, str(tmp_path / "run"), str(tmp_path / "dist"), npy, timeout_s=120)
    same_files(tmp_path / "single", tmp_path / "dist")
    assert not [p for p in tmp_path.iterdir() if ".gpart-" in p.name]


@pytest.mark.parametrize("world, target, policy", [(2, 5, "remainder"), (3, 4, "range"), (2, 1, "remainder")])
def test_scatter_matches_single_process(tmp_path, world, target, policy):
    make_run(tmp_path / "run", 777, 3, row_shape=(3, 2), optimizer="adagrad")
    gather_checkpoint(tmp_path / "run", tmp_path / "full")
    scatter_checkpoint(tmp_path / "full", tmp_path / "single", target, policy)
    results = run_distributed(_scatter, world, str(tmp_path / "full"), str(tmp_path / "dist"), target, policy, timeout_s=120)
    same_files(tmp_path / "single", tmp_path / "dist")
    assert sorted(q for r in results for q in r) == list(range(target))
    # sharded run -> sharded run directly, without the global copy
    scatter_checkpoint(tmp_path / "run", tmp_path / "single2", target, policy)
    run_distributed(_scatter, world, str(tmp_path / "run"), str(tmp_path / "dist2"), target, policy, timeout_s=120)
    same_files(tmp_path / "single2", tmp_path / "dist2")


def test_cli_scatter_and_a_damaged_shard(tmp_path):
    make_run(tmp_path / "run", 500, 2, row_shape=(4,), optimizer="adam")
    port = free_port()

    def launch(*args):
        procs = [subprocess.Popen([sys.executable, "-m", "gpart.distributed", *map(str, args), "--timeout", "20"],
                                  env={**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(r),
                                       "WORLD_SIZE": "2"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(2)]
        return [(p.wait(timeout=90), p.stderr.read()) for p in procs]

    assert [rc for rc, _ in launch("scatter-ckpt", tmp_path / "run", "-w", 3, "-o", tmp_path / "out")] == [0, 0]
    scatter_checkpoint(tmp_path / "run", tmp_path / "single", 3)
    same_files(tmp_path / "single", tmp_path / "out")
    shard = tmp_path / "run" / "node_emb_part_1_of_2"
    data = bytearray(shard.read_bytes())
    data[10] ^= 0xFF
    shard.write_bytes(bytes(data))
    port = free_port()
    results = launch("scatter-ckpt", tmp_path / "run", "-w", 3, "-o", tmp_path / "bad")
    assert all(rc != 0 for rc, _ in results), results
    assert any(f"{shard}: checksum mismatch" in err for _, err in results), results
    assert not (tmp_path / "bad").exists()
