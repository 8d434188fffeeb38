"""save_checkpoint / load_checkpoint: resume on other world sizes and policies, gather-ckpt, crash safety.

Training follows tests/test_runtime_embedding.py's problem (same global
batches, split over the ranks) and its dense float64 reference: saving after
K steps and resuming for M more on any world size must equal K+M steps
without stopping.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.gloo_processes import DistributedTestError, run_distributed
from test_runtime_embedding import (
    SPECS,
    assemble,
    assert_close_to_reference,
    collect,
    make_optimizer,
    reference_train,
    train_steps,
)

import gpart.runtime as gr
from gpart.base.errors import InputError, OutputError
from gpart.formats.checkpoint.reader import read_checkpoint
from gpart.formats.sharding.policies import RangePolicy, make_policy

K, M = 2, 2  # steps before the save, steps after it
# (checkpoint name, optimizer, duplicates, policy when saved by 4 ranks, policy when loaded by 3)
RUNS = (("adam_run", "adam", "mean", "remainder", "range"), ("adagrad_run", "adagrad", "sum", "range", "remainder"))


def build(policy: str, kind: str, duplicates: str, seed: int = 0, lr_scale: float = 1.0):
    embs = [gr.ShardedEmbedding(rows, dim, name, policy=policy, seed=seed) for name, rows, dim in SPECS]
    opt = make_optimizer(kind, embs, duplicates)
    opt.param_groups[0]["lr"] *= lr_scale
    return embs, opt


def _save_and_continue(rank: int, world: int, root: str) -> dict:
    """4 ranks: K steps, save, M more steps; returns this rank's rows at the end ("never stopped")."""
    out = {}
    for name, kind, duplicates, save_policy, _ in RUNS:
        embs, opt = build(save_policy, kind, duplicates)
        train_steps(embs, opt, range(K), rank, world)
        gr.save_checkpoint(Path(root) / name, embs, opt, extra={"step": K})
        train_steps(embs, opt, range(K, K + M), rank, world)
        out[name] = collect(embs, opt)
    return out


def _load_and_continue(rank: int, world: int, root: str) -> dict:
    """Any world size: fresh tables (other seed) and an optimizer with the wrong lr and duplicates mode; load; M steps."""
    out = {}
    for name, kind, duplicates, _, load_policy in RUNS:
        wrong_mode = {"mean": "sum", "sum": "mean"}[duplicates]
        embs, opt = build(load_policy, kind, wrong_mode, seed=99, lr_scale=7.0)
        extra = gr.load_checkpoint(Path(root) / name, embs, opt)
        assert extra == {"step": K}
        train_steps(embs, opt, range(K, K + M), rank, world)
        out[name] = collect(embs, opt)
    return out


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    never_stopped = run_distributed(_save_and_continue, 4, str(root), timeout_s=120)
    return root, never_stopped


def reference_after(kind: str, duplicates: str, steps: int):
    return reference_train(kind, duplicates, range(steps))


def test_resume_on_3_ranks_and_on_1_equals_never_stopping(saved):
    root, never_stopped = saved
    on_three = run_distributed(_load_and_continue, 3, str(root), timeout_s=120)
    on_one = [_load_and_continue(0, 1, str(root))]  # no process group at all
    for name, kind, duplicates, _, _ in RUNS:
        ref_tables, ref_states = reference_after(kind, duplicates, K + M)
        for per_rank in (never_stopped, on_three, on_one):
            tables, states = assemble([r[name] for r in per_rank])
            assert_close_to_reference(tables, states, ref_tables, ref_states, kind)
        a_tables, a_states = assemble([r[name] for r in never_stopped])
        b_tables, b_states = assemble([r[name] for r in on_three])
        for emb_name, _, _ in SPECS:
            np.testing.assert_allclose(b_tables[emb_name], a_tables[emb_name], rtol=1e-6, atol=1e-7)
            for key in a_states[emb_name]:
                np.testing.assert_allclose(b_states[emb_name][key], a_states[emb_name][key], rtol=1e-6, atol=1e-7)


def test_checkpoint_files_follow_the_format(saved):
    root, _ = saved
    manifest = json.loads((root / "adam_run" / "manifest.json").read_text())
    assert manifest["format"] == "gpart.checkpoint" and manifest["world_size"] == 4
    assert manifest["optimizer"] == {"type": "adam", "lr": 0.05, "grad_duplicates": "mean", "betas": [0.9, 0.99], "eps": 1e-8, "state_dtype": "float32"}
    assert {e["name"]: e["policy"]["name"] for e in manifest["embeddings"]} == {"a": "remainder", "b": "remainder", "c": "remainder"}
    files = sorted(p.name for p in (root / "adam_run").iterdir())
    assert "a_part_3_of_4" in files and "a.exp_avg_sq_part_0_of_4" in files and "c.step_part_3_of_4" in files
    # rank 1 of the remainder table a holds rows 1, 5, 9, ... as raw little-endian float32
    ref_tables, _ = reference_after("adam", "mean", K)
    raw = np.fromfile(root / "adam_run" / "a_part_1_of_4", dtype="<f4").reshape(-1, 4)
    np.testing.assert_allclose(raw, ref_tables["a"][1::4], rtol=1e-5, atol=2e-6)
    assert read_checkpoint(root / "adam_run", verify=True).verify() == []
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == [], "no staging directories left behind"


def test_gather_ckpt_cli_on_a_training_checkpoint_equals_the_reference(saved, tmp_path, capsys):
    from gpart.cli.main import main

    root, _ = saved
    for name, kind, duplicates, _, _ in RUNS:
        full = tmp_path / f"{name}_full"
        assert main(["verify", str(root / name)]) == 0, capsys.readouterr().err
        assert main(["gather-ckpt", str(root / name), "-o", str(full)]) == 0, capsys.readouterr().err
        gathered = read_checkpoint(full, verify=True)
        assert gathered.layout == "global"
        ref_tables, ref_states = reference_after(kind, duplicates, K)
        for emb_name, rows, dim in SPECS:
            info = gathered.tensor(emb_name)
            table = np.fromfile(full / info.shards[0].file, dtype="<f4").reshape(rows, dim)  # plain numpy
            np.testing.assert_allclose(table, ref_tables[emb_name], rtol=1e-5, atol=2e-6)
            for state, ref in ref_states[emb_name].items():
                got = gathered.read_rows(f"{emb_name}.{state}", np.arange(rows))
                if state == "step":
                    np.testing.assert_array_equal(got, ref)
                else:
                    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)
        # a gathered (global) checkpoint loads straight back into a 1-rank job
        embs, opt = build("range", kind, duplicates, seed=5)
        gr.load_checkpoint(full, embs, opt)
        np.testing.assert_allclose(embs[0].weight.double().numpy(), ref_tables["a"], rtol=1e-5, atol=2e-6)


# ---- crash safety -----------------------------------------------------------------------------


def _tables(embs) -> dict[str, np.ndarray]:
    return {e.name: e.weight.numpy().copy() for e in embs}


def test_a_writer_failing_midway_leaves_the_old_checkpoint(tmp_path, monkeypatch):
    import gpart.runtime.embedding.checkpoint_save as ck

    run = tmp_path / "run"
    embs, opt = build("remainder", "adam", "mean")
    train_steps(embs, opt, range(1), 0, 1)
    ck.save_checkpoint(run, embs, opt)
    old = _tables(embs)
    old_manifest = (run / "manifest.json").read_bytes()
    train_steps(embs, opt, range(1, 2), 0, 1)

    calls = {"n": 0}
    real_write_shard = ck.write_shard

    def failing_write_shard(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 3:
            raise OSError(28, "No space left on device")
        return real_write_shard(*args, **kwargs)

    monkeypatch.setattr(ck, "write_shard", failing_write_shard)
    with pytest.raises(OSError, match="No space left"):
        ck.save_checkpoint(run, embs, opt)
    assert calls["n"] == 4
    assert (run / "manifest.json").read_bytes() == old_manifest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"], "the failed save's staging directory is removed"
    fresh, fresh_opt = build("range", "adam", "mean", seed=3)
    gr.load_checkpoint(run, fresh, fresh_opt, verify=True)
    for name, table in _tables(fresh).items():
        np.testing.assert_array_equal(table, old[name])
    assert int(fresh_opt.state["a"]["step"].max()) == 1


def _killed_during_save(rank: int, world: int, run: str) -> None:
    import gpart.runtime.embedding.checkpoint_save as ck

    embs, opt = build("remainder", "adagrad", "mean")
    train_steps(embs, opt, range(1), rank, world)
    ck.save_checkpoint(run, embs, opt)
    train_steps(embs, opt, range(1, 2), rank, world)
    if rank == 1:
        real_write_shard, calls = ck.write_shard, [0]

        def dying_write_shard(*args, **kwargs):
            calls[0] += 1
            if calls[0] > 2:
                os._exit(9)  # as if killed: no cleanup, no exception handling
            return real_write_shard(*args, **kwargs)

        ck.write_shard = dying_write_shard
    ck.save_checkpoint(run, embs, opt)


def test_a_rank_killed_during_save_leaves_the_old_checkpoint_and_no_manifest(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(DistributedTestError, match=r"rank \d of 2"):
        run_distributed(_killed_during_save, 2, str(run), timeout_s=60)
    # rank 0 may notice the dead peer and remove the staging directory, or be killed first and leave it
    leftovers = [p for p in tmp_path.iterdir() if p.name != "run"]
    assert all(p.name.startswith(".run.gpart-staging-") for p in leftovers), leftovers
    for stage in leftovers:
        assert not (stage / "manifest.json").exists(), "the interrupted save must not look complete"
        with pytest.raises(InputError, match="no manifest.json"):
            read_checkpoint(stage)
    # the checkpoint from before is intact and equals one Adagrad step
    embs, opt = build("range", "adagrad", "mean", seed=1)
    gr.load_checkpoint(run, embs, opt, verify=True)
    ref_tables, _ = reference_train("adagrad", "mean", range(1))
    np.testing.assert_allclose(embs[0].weight.double().numpy(), ref_tables["a"], rtol=1e-5, atol=2e-6)


# ---- bad input ----------------------------------------------------------------------------


def test_bad_destinations_and_mismatched_loads(tmp_path, dead_pid):
    embs, opt = build("remainder", "adam", "mean")
    user_dir = tmp_path / "mine"
    user_dir.mkdir()
    (user_dir / "notes.txt").write_text("keep me")
    with pytest.raises(OutputError, match="not a gpart checkpoint"):
        gr.save_checkpoint(user_dir, embs, opt)
    assert (user_dir / "notes.txt").read_text() == "keep me"
    run = tmp_path / "run"
    gr.save_checkpoint(run, embs, opt)
    with pytest.raises(OutputError, match="overwrite=False"):
        gr.save_checkpoint(run, embs, opt, overwrite=False)

    with pytest.raises(InputError, match="no such directory"):
        gr.load_checkpoint(tmp_path / "absent", embs, opt)
    other_shape = [gr.ShardedEmbedding(50, 5, "a")]
    with pytest.raises(InputError, match=r"embedding a is 50 x \[4\] in the checkpoint, 50 x \[5\] here"):
        gr.load_checkpoint(run, other_shape)
    with pytest.raises(InputError, match="has no embedding 'zz'"):
        gr.load_checkpoint(run, [gr.ShardedEmbedding(5, 4, "zz")])
    adagrad = gr.SparseAdagrad(embs, lr=0.1)
    with pytest.raises(InputError, match="optimizer 'adam' states, the optimizer given is 'adagrad'"):
        gr.load_checkpoint(run, embs, adagrad)
    gr.save_checkpoint(tmp_path / "tables_only", embs)
    with pytest.raises(InputError, match="holds no optimizer states"):
        gr.load_checkpoint(tmp_path / "tables_only", embs, opt)
    gr.load_checkpoint(tmp_path / "tables_only", embs)
    # killed between the two renames of the swap: the old checkpoint sits under a hidden name
    os.rename(tmp_path / "tables_only", tmp_path / f".moved.gpart-old-{dead_pid}-1234abcd")
    with pytest.raises(InputError, match=rf"interrupted while replacing it, the previous checkpoint is complete at .*gpart-old-{dead_pid}-1234abcd"):
        gr.load_checkpoint(tmp_path / "moved", embs)
    with pytest.raises(ValueError, match="does not hold"):
        gr.save_checkpoint(run, [gr.ShardedEmbedding(5, 4, "zz")], opt)
    # a damaged shard is caught with verify=True
    shard = run / "a_part_0_of_1"
    data = bytearray(shard.read_bytes())
    data[0] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(Exception, match="checksum mismatch"):
        gr.load_checkpoint(run, embs, opt, verify=True)


def test_float16_tables_round_trip_and_convert(tmp_path):
    emb = gr.ShardedEmbedding(30, 3, "h", dtype=torch.float16)
    opt = gr.SparseAdam([emb], lr=0.01, state_dtype=torch.float16)
    emb(torch.tensor([1, 2, 2])).float().sum().backward()
    opt.step()
    gr.save_checkpoint(tmp_path / "run", [emb], opt)
    back = gr.ShardedEmbedding(30, 3, "h", dtype=torch.float16, seed=4, policy="range")
    back_opt = gr.SparseAdam([back], lr=0.5, state_dtype=torch.float16)
    gr.load_checkpoint(tmp_path / "run", [back], back_opt)
    assert torch.equal(back.weight, emb.weight) and torch.equal(back_opt.state["h"]["exp_avg"], opt.state["h"]["exp_avg"])
    as_float32 = gr.ShardedEmbedding(30, 3, "h")
    gr.load_checkpoint(tmp_path / "run", [as_float32])
    assert torch.equal(as_float32.weight, emb.weight.float())


# ---- which rows a rank reads --------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(
    rows=st.integers(0, 40),
    saved_world=st.integers(1, 5),
    my_world=st.integers(1, 5),
    saved_kind=st.sampled_from(["remainder", "range", "even"]),
    my_kind=st.sampled_from(["remainder", "range", "even"]),
)
def test_read_plan_covers_exactly_the_owned_rows(rows, saved_world, my_world, saved_kind, my_kind):
    """Every rank's rows, under any policy pair, as few arithmetic progressions of saved shard rows."""
    from gpart.runtime.embedding.checkpoint_load import _read_plan

    def policy(kind, world):
        return RangePolicy.even(rows, world) if kind == "even" else make_policy(kind, rows, world)

    saved, mine = policy(saved_kind, saved_world), policy(my_kind, my_world)
    for rank in range(my_world):
        wanted = mine.global_ids(rank)
        np.testing.assert_array_equal(mine.global_rows(rank, np.arange(len(wanted))), wanted)
        got = np.full(len(wanted), -1)
        plan = _read_plan(saved, mine, rank)
        assert len(plan) <= saved_world
        for p in plan:
            dest = p.dest_start + p.dest_step * np.arange(p.count)
            assert (got[dest] == -1).all(), "each row read once"
            got[dest] = saved.global_ids(p.shard)[p.local_start + p.local_step * np.arange(p.count)]
        np.testing.assert_array_equal(got, wanted)
        if saved_kind == my_kind == "remainder" and saved_world == my_world or (saved_kind != "remainder" and my_kind != "remainder"):
            assert all(p.local_step == p.dest_step == 1 for p in plan), "same layout or range into range: plain sequential reads"


@pytest.mark.parametrize("world, policy", [(4, "remainder"), (3, "range")])
def test_load_re_sharded_checkpoints_by_span_reads_and_by_gathers(world, policy, tmp_path, monkeypatch):
    """A 1-rank save scattered offline to `world` ranks loads back bit for bit, whichever read path runs."""
    import gpart.runtime.embedding.checkpoint_load as ck
    from gpart.ckpt import gather_checkpoint, scatter_checkpoint

    embs, opt = build("remainder", "adam", "mean")
    train_steps(embs, opt, range(2), 0, 1)
    gr.save_checkpoint(tmp_path / "run", embs, opt)
    gather_checkpoint(tmp_path / "run", tmp_path / "full")
    scatter_checkpoint(tmp_path / "full", tmp_path / "scattered", world, policy)
    for limit in (ck.STRIDED_READ_LIMIT, 0):  # 0: every strided progression goes through read_rows
        monkeypatch.setattr(ck, "STRIDED_READ_LIMIT", limit)
        for my_policy in ("range", "remainder"):
            fresh, fresh_opt = build(my_policy, "adam", "mean", seed=9)
            gr.load_checkpoint(tmp_path / "scattered", fresh, fresh_opt)
            for a, b in zip(embs, fresh):
                assert torch.equal(a.weight, b.weight)
                for key, value in opt.state_tensors(a).items():
                    assert torch.equal(value, fresh_opt.state_tensors(b)[key]), key


def test_an_empty_table_saves_and_loads(tmp_path):
    emb = gr.ShardedEmbedding(0, 4, "empty")
    opt = gr.SparseAdagrad([emb], lr=0.1)
    assert emb(torch.zeros(0, dtype=torch.int64)).shape == (0, 4)
    opt.step()
    gr.save_checkpoint(tmp_path / "run", [emb], opt)
    assert read_checkpoint(tmp_path / "run", verify=True).tensor("empty.state_sum").num_rows == 0
    gr.load_checkpoint(tmp_path / "run", [emb], opt)
