"""Embedding checkpoints: format (SPEC.md section 6), gather/scatter round trips, importers, CLI errors."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpart import ckpt
from gpart.cli.main import main
from gpart.formats.checkpoint import entries as ck
from gpart.formats.checkpoint.reader import read_checkpoint
from gpart.formats.checkpoint.writer import write_checkpoint_manifest, write_shard
from gpart.formats.files.dtypes import storage_dtype
from gpart.formats.sharding.policies import RangePolicy, RemainderPolicy, ShardPolicy

STATE_DTYPES = {"step": "int32", "beta_powers": "float32"}


def run(*args: str) -> int:
    return main([str(a) for a in args])


def random_rows(rng: np.random.Generator, n: int, row_shape: tuple, dtype: str) -> np.ndarray:
    """Random rows whose raw bytes are arbitrary (NaN payloads too): round trips must be bit-exact."""
    sdt = storage_dtype(dtype)
    nbytes = n * int(np.prod(row_shape, dtype=np.int64)) * sdt.itemsize
    raw = rng.integers(0, 256, nbytes, dtype=np.uint8)
    if dtype == "bool":
        raw &= 1
    return raw.view(sdt).reshape((n, *row_shape))


def make_policy(kind: str, n: int, w: int, rng: np.random.Generator) -> ShardPolicy:
    if kind == "remainder":
        return RemainderPolicy(n, w)
    if kind == "range-wg":
        return RangePolicy.wholegraph(n, w)
    cuts = np.sort(rng.integers(0, n + 1, w - 1))
    return RangePolicy(n, w, tuple(int(x) for x in [0, *cuts, n]))


def make_run(
    directory: Path,
    n: int,
    w: int,
    row_shape: tuple = (4,),
    dtype: str = "float32",
    optimizer: str = "adam",
    policy: ShardPolicy | None = None,
    moment_dtype: str = "float32",
    seed: int = 0,
    name: str = "node_emb",
) -> dict[str, np.ndarray]:
    """Write a sharded checkpoint as W ranks would (write_shard per rank, manifest last); return global arrays."""
    rng = np.random.default_rng(seed)
    policy = policy or RemainderPolicy(n, w)
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {name: random_rows(rng, n, row_shape, dtype)}
    for state, spec in ck.OPTIMIZER_STATES[optimizer].items():
        sdt = STATE_DTYPES.get(state, moment_dtype)
        arrays[ck.tensor_name(name, state)] = random_rows(rng, n, spec.shape_for(row_shape), sdt)
    per_rank = []
    for r in range(w):
        ids = policy.global_ids(r)
        per_rank.append([write_shard(directory, t, r, w, a[ids], dtype=_dtype_of(t, dtype, moment_dtype)) for t, a in arrays.items()])
    opt = {"type": optimizer, "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "grad_duplicates": "sum"}
    manifest = ck.build_checkpoint_manifest([ck.EmbeddingSpec(name, n, row_shape, dtype, policy)], per_rank[::-1], w, opt)
    write_checkpoint_manifest(directory, manifest)
    return arrays


def _dtype_of(tensor: str, table_dtype: str, moment_dtype: str) -> str:
    state = ck.split_tensor_name(tensor)[1]
    return table_dtype if state is None else STATE_DTYPES.get(state, moment_dtype)


def global_bytes(full: Path, tensor: str, npy: bool = False) -> bytes:
    if npy:
        return np.ascontiguousarray(np.load(full / f"{tensor}.npy", allow_pickle=False)).tobytes()
    return (full / f"{tensor}_part_0_of_1").read_bytes()


def assert_sharded_as(run_dir: Path, arrays: dict[str, np.ndarray], policy: ShardPolicy) -> None:
    """Every row g of every tensor sits in shard owner(g) at local(g), and nowhere else."""
    c = read_checkpoint(run_dir, verify=True)
    for t, a in arrays.items():
        assert c.policy(t).to_json() == policy.to_json()
        for r in range(policy.world_size):
            data = (run_dir / ck.shard_file_name(t, r, policy.world_size)).read_bytes()
            assert data == np.ascontiguousarray(a[policy.global_ids(r)]).tobytes()
        ids = np.arange(policy.num_rows)
        owner, local = policy.owner(ids), policy.local(ids)
        counts = np.bincount(owner, minlength=policy.world_size) if ids.size else np.zeros(policy.world_size, int)
        assert counts.tolist() == [policy.count(r) for r in range(policy.world_size)]
        for r in range(policy.world_size):
            assert np.array_equal(np.sort(local[owner == r]), np.arange(policy.count(r)))


def no_output(path: Path) -> bool:
    return not path.exists() and not any(".gpart-staging-" in p.name for p in path.parent.iterdir())


# ----------------------------------------------------------------------------- properties

dtypes = st.sampled_from(["float32", "float16", "bfloat16", "float64", "int8", "int64"])
policies = st.sampled_from(["remainder", "range-wg", "range-random"])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.one_of(st.sampled_from([0, 1, 2, 3]), st.integers(0, 90)),
    w=st.integers(1, 7),
    w2=st.integers(1, 7),
    dim=st.sampled_from([(1,), (3,), (5,), (2, 3)]),
    dtype=dtypes,
    optimizer=st.sampled_from(list(ck.OPTIMIZER_STATES)),
    moment=st.sampled_from(["float32", "float16", "bfloat16"]),
    pol=policies,
    pol2=policies,
    chunk=st.one_of(st.none(), st.integers(1, 9)),
    npy=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_round_trips_bit_exact(n, w, w2, dim, dtype, optimizer, moment, pol, pol2, chunk, npy, seed):
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        policy = make_policy(pol, n, w, rng)
        arrays = make_run(tmp / "run", n, w, dim, dtype, optimizer, policy, moment, seed)
        assert_sharded_as(tmp / "run", arrays, policy)

        # gather: one global file per tensor, row g = row g
        full = ckpt.gather_checkpoint(tmp / "run", tmp / "full", npy=npy, chunk_rows=chunk)
        assert full["layout"] == "global" and full["optimizer"]["type"] == optimizer
        for t, a in arrays.items():
            assert global_bytes(tmp / "full", t, npy) == np.ascontiguousarray(a).tobytes()
        assert ckpt.verify_checkpoint(tmp / "full")["ok"]

        # scatter to another W / policy, then gather again: bit-identical
        policy2 = make_policy(pol2, n, w2, rng)
        bounds = list(policy2.boundaries) if pol2 == "range-random" else None
        ckpt.scatter_checkpoint(tmp / "full", tmp / "run2", w2, policy2.name, boundaries=bounds, chunk_rows=chunk)
        assert_sharded_as(tmp / "run2", arrays, policy2)
        ckpt.gather_checkpoint(tmp / "run2", tmp / "full2", chunk_rows=chunk)
        for t, a in arrays.items():
            assert global_bytes(tmp / "full2", t) == np.ascontiguousarray(a).tobytes()

        # scatter(gather(run)) with W and policy unchanged reproduces every shard and its entry
        b0 = list(policy.boundaries) if pol == "range-random" else None
        again = ckpt.scatter_checkpoint(tmp / "full", tmp / "run3", w, policy.name, boundaries=b0, chunk_rows=chunk)
        before = json.loads((tmp / "run" / "manifest.json").read_text())
        assert [t["shards"] for t in again["tensors"]] == [t["shards"] for t in before["tensors"]]
        for f in (tmp / "run").iterdir():
            if "_part_" in f.name:
                assert (tmp / "run3" / f.name).read_bytes() == f.read_bytes()

        # read_rows: any ids, from any layout
        ids = rng.integers(0, max(n, 1), 17) if n else np.zeros(0, dtype=np.int64)
        for d in ("run", "run2", "full"):
            c = read_checkpoint(tmp / d)
            for t, a in arrays.items():
                assert c.read_rows(t, ids).tobytes() == np.ascontiguousarray(a[ids]).tobytes()


def test_table_larger_than_chunk_streams_in_many_steps(tmp_path):
    arrays = make_run(tmp_path / "run", 5003, 6, (16,), "float32", "adagrad")
    ckpt.gather_checkpoint(tmp_path / "run", tmp_path / "full", chunk_rows=37)
    for t, a in arrays.items():
        assert global_bytes(tmp_path / "full", t) == a.tobytes()
    ckpt.scatter_checkpoint(tmp_path / "full", tmp_path / "r3", 3, "range", chunk_rows=41)
    assert_sharded_as(tmp_path / "r3", arrays, RangePolicy.wholegraph(5003, 3))
    # re-shard a sharded run directly (no global copy in between)
    ckpt.scatter_checkpoint(tmp_path / "r3", tmp_path / "r8", 8, "remainder", chunk_rows=29)
    assert_sharded_as(tmp_path / "r8", arrays, RemainderPolicy(5003, 8))


def test_spec_layout_names_and_manifest(tmp_path):
    make_run(tmp_path / "run", 10, 3, (2,), "float32", "adam")
    names = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert names == sorted(
        ["manifest.json"] + [f"node_emb{s}_part_{r}_of_3" for s in ("", ".step", ".exp_avg", ".exp_avg_sq") for r in range(3)]
    )
    m = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert (m["format"], m["version"], m["layout"], m["world_size"]) == ("gpart.checkpoint", 1, "sharded", 3)
    assert m["optimizer"] == {"type": "adam", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "grad_duplicates": "sum"}
    assert m["embeddings"] == [
        {"name": "node_emb", "num_rows": 10, "row_shape": [2], "dtype": "float32",
         "policy": {"name": "remainder", "num_rows": 10, "world_size": 3}, "states": ["step", "exp_avg", "exp_avg_sq"]}
    ]
    step = m["tensors"][1]
    assert (step["name"], step["role"], step["state"], step["dtype"], step["row_shape"]) == ("node_emb.step", "state", "step", "int32", [])
    assert [s["rows"] for s in step["shards"]] == [4, 3, 3]
    assert all(s["bytes"] == s["rows"] * 4 and len(s["crc32"]) == 8 for s in step["shards"])
    ckpt.gather_checkpoint(tmp_path / "run", tmp_path / "full")
    fl = json.loads((tmp_path / "full" / "node_emb.exp_avg.json").read_text())
    assert fl["format"] == "gpart.filelist" and fl["shape"] == [10, 2] and fl["files"][0]["file"] == "node_emb.exp_avg_part_0_of_1"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64"])
def test_gathered_flat_tensors_are_filelist_exports(tmp_path, dtype):
    """export-feat's reader (gpart.formats.filelist.layout) reads gather-ckpt's flat output as it is."""
    from gpart.formats.filelist.reader import open_filelist

    arrays = make_run(tmp_path / "run", 77, 5, (3,), dtype, "adagrad", moment_dtype="float16")
    ckpt.gather_checkpoint(tmp_path / "run", tmp_path / "full", chunk_rows=10)
    for t, a in arrays.items():
        fl = open_filelist(tmp_path / "full" / f"{t}.json", verify=True)
        assert fl.dtype == _dtype_of(t, dtype, "float16") and tuple(fl.shape) == a.shape
        assert fl.read_rows(0, 77).tobytes() == a.tobytes()
        assert fl.rank_slice(1, 2).tobytes() == a[39:].tobytes()


def test_write_shard_accepts_torch_and_chunks(tmp_path):
    import torch

    t = torch.arange(12, dtype=torch.float32).reshape(6, 2)
    e1 = write_shard(tmp_path, "e", 0, 2, t.to(torch.bfloat16))
    assert e1["dtype"] == "bfloat16" and e1["rows"] == 6
    raw = np.fromfile(tmp_path / e1["file"], dtype=np.uint16)
    assert np.array_equal(raw, t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).ravel())
    e2 = write_shard(tmp_path, "e", 1, 2, iter([np.ones((2, 2), np.float32), np.zeros((3, 2), np.float32)]), dtype="float32", row_shape=(2,))
    assert e2["rows"] == 5
    with pytest.raises(ValueError, match="ranks"):
        ck.build_checkpoint_manifest([ck.EmbeddingSpec("e", 11, (2,), "bfloat16", RangePolicy(11, 2, (0, 6, 11)))], [e1], 2)
    with pytest.raises(ValueError, match="dtypes"):
        ck.build_checkpoint_manifest([ck.EmbeddingSpec("e", 11, (2,), "bfloat16", RangePolicy(11, 2, (0, 6, 11)))], [e1, e2], 2)
    with pytest.raises(ValueError, match="rows"):
        ck.build_checkpoint_manifest([ck.EmbeddingSpec("e", 11, (2,), "float32", RemainderPolicy(11, 2))], [{**e1, "dtype": "float32"}, e2], 2)
    with pytest.raises(ValueError, match="needs tensors"):
        ck.build_checkpoint_manifest([ck.EmbeddingSpec("e", 11, (2,), "float32", RangePolicy(11, 2, (0, 6, 11)))], [{**e1, "dtype": "float32"}, e2], 2, {"type": "adam"})


# ----------------------------------------------------------------------------- CLI

def test_cli_gather_scatter_info_verify(tmp_path, capsys):
    arrays = make_run(tmp_path / "run", 1000, 4, (8,), "float32", "lazyadam")
    assert run("gather-ckpt", tmp_path / "run", "-o", tmp_path / "full", "-q") == 0
    assert run("scatter-ckpt", tmp_path / "full", "-o", tmp_path / "run3", "--world-size", "3", "--policy", "range", "-q") == 0
    assert_sharded_as(tmp_path / "run3", arrays, RangePolicy.wholegraph(1000, 3))
    assert run("scatter-ckpt", tmp_path / "full", "-o", tmp_path / "run5", "-w", "5", "--policy", "range", "--boundaries", "0,1,500,500,999,1000", "-q") == 0
    assert_sharded_as(tmp_path / "run5", arrays, RangePolicy(1000, 5, (0, 1, 500, 500, 999, 1000)))
    capsys.readouterr()
    assert run("gather-ckpt", tmp_path / "run5", "-o", tmp_path / "npy", "--npy", "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["layout"] == "global" and out["tensors"][0]["storage"] == "npy"
    assert np.load(tmp_path / "npy" / "node_emb.m.npy").tobytes() == arrays["node_emb.m"].tobytes()

    info = ckpt.checkpoint_info(tmp_path / "run3")
    assert info["world_size"] == 3 and info["optimizer"]["type"] == "lazyadam"
    assert info["embeddings"][0]["states"] == ["m", "v", "beta_powers"]
    assert info["embeddings"][0]["policy"]["boundaries"] == [0, 334, 668, 1000]
    assert info["total_bytes"] == sum(a.nbytes for a in arrays.values())
    from gpart.cli.commands.ckpt import render_checkpoint_info

    render_checkpoint_info(info)
    render_checkpoint_info(ckpt.checkpoint_info(tmp_path / "full"))
    text = capsys.readouterr().out
    assert "lazyadam" in text and "beta_powers" in text and "334" in text and "world size 3" in text
    assert "global" in text and "remainder" in text

    assert ckpt.verify_checkpoint(tmp_path / "run3")["ok"]
    shard = tmp_path / "run3" / "node_emb.v_part_1_of_3"
    data = bytearray(shard.read_bytes())
    data[5] ^= 0xFF
    shard.write_bytes(bytes(data))
    result = ckpt.verify_checkpoint(tmp_path / "run3")
    assert not result["ok"] and "node_emb.v_part_1_of_3" in result["problems"][0] and "checksum" in result["problems"][0]
    assert run("gather-ckpt", tmp_path / "run3", "-o", tmp_path / "bad", "--verify", "-q") == 1
    assert "checksum mismatch" in capsys.readouterr().err and no_output(tmp_path / "bad")


def test_gpart_info_and_verify_on_checkpoints(tmp_path, capsys):
    """`gpart info` / `gpart verify` (gpart.inspection.result) dispatch checkpoints to gpart.ckpt."""
    make_run(tmp_path / "run", 300, 3, (4,), "float16", "adam", moment_dtype="float16")
    assert run("info", tmp_path / "run") == 0
    out = capsys.readouterr().out
    assert "adam" in out and "world size 3" in out and "embeddings" in out
    assert run("info", tmp_path / "run", "--json") == 0
    assert json.loads(capsys.readouterr().out)["embeddings"][0]["states"] == ["step", "exp_avg", "exp_avg_sq"]
    assert run("verify", tmp_path / "run", "-q") == 0
    capsys.readouterr()
    shard = tmp_path / "run" / "node_emb.step_part_2_of_3"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    assert run("verify", tmp_path / "run", "-q") == 1
    captured = capsys.readouterr()
    assert "node_emb.step_part_2_of_3" in captured.out + captured.err
    shard.unlink()
    assert run("verify", tmp_path / "run", "-q", "--json") == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and "missing" in report["problems"][0]


@pytest.mark.parametrize("npy", [False, True])
def test_scatter_to_range_detects_damaged_input(tmp_path, capsys, npy):
    """Contiguous copies check the source's CRC-32 on the way: damage is reported, not re-checksummed."""
    make_run(tmp_path / "run", 200, 4, (4,), "float32", "none")
    ckpt.gather_checkpoint(tmp_path / "run", tmp_path / "full", npy=npy)
    f = tmp_path / "full" / ("node_emb.npy" if npy else "node_emb_part_0_of_1")
    data = bytearray(f.read_bytes())
    data[-3] ^= 0x40
    f.write_bytes(bytes(data))
    _expect_error(capsys, tmp_path / "r3", "scatter-ckpt", tmp_path / "full", "-o", tmp_path / "r3", "-w", "3", "--policy", "range",
                  code=1, match=f"{f}: checksum mismatch")


def test_scatter_without_kernel_copy_falls_back(tmp_path, monkeypatch):
    """Where copy_file_range cannot copy (e.g. across filesystems), range scatter takes the streaming path."""
    import errno

    arrays = make_run(tmp_path / "run", 500, 3, (4,), "float32", "adam")
    ckpt.gather_checkpoint(tmp_path / "run", tmp_path / "full")

    def unsupported(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", unsupported)
    ckpt.scatter_checkpoint(tmp_path / "full", tmp_path / "r2", 2, "range", chunk_rows=7)
    assert_sharded_as(tmp_path / "r2", arrays, RangePolicy.wholegraph(500, 2))


@pytest.fixture
def good_run(tmp_path):
    make_run(tmp_path / "run", 50, 4, (3,), "float32", "adam")
    return tmp_path / "run"


def _expect_error(capsys, out: Path, *args, code: int = 2, match: str = "") -> str:
    rc = run(*args)
    err = capsys.readouterr().err
    assert rc == code, err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert match in err, err
    assert no_output(out)
    return err


def test_cli_bad_shard_size(good_run, capsys):
    f = good_run / "node_emb.exp_avg_part_2_of_4"
    f.write_bytes(f.read_bytes()[:-4])
    _expect_error(capsys, good_run.parent / "out", "gather-ckpt", good_run, "-o", good_run.parent / "out", code=1, match=f"{f}: size")


def test_cli_missing_rank(good_run, capsys):
    f = good_run / "node_emb_part_3_of_4"
    f.unlink()
    # a shard the manifest names is missing: a damaged artifact, exit 1 as README says (issue 15)
    _expect_error(capsys, good_run.parent / "out", "scatter-ckpt", good_run, "-o", good_run.parent / "out", "-w", "2", code=1, match=f"{f}: shard file")


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda m: m["tensors"][1].update(dtype="int64"), "node_emb.step"),  # dtype the files do not have
        (lambda m: m["tensors"][0].update(row_shape=[4]), "differs from the embedding"),
        (lambda m: m["tensors"][2]["shards"][1].update(rows=99), "rows"),
        (lambda m: m["tensors"][0]["shards"].pop(), "shards listed"),
        (lambda m: m["embeddings"][0].update(num_rows=51), "policy is for N=50"),
        (lambda m: m.update(world_size=5), "policy"),
        (lambda m: m["tensors"].pop(), "not listed"),
        (lambda m: m["optimizer"].update(type="adamw"), "optimizer type"),
        (lambda m: m["tensors"][0]["shards"][0].update(file="../x"), "is not allowed"),
        (lambda m: m.update(version=2), "version"),
    ],
)
def test_cli_manifest_disagrees_with_files(good_run, capsys, edit, match):
    m = json.loads((good_run / "manifest.json").read_text())
    edit(m)
    (good_run / "manifest.json").write_text(json.dumps(m))
    _expect_error(capsys, good_run.parent / "out", "gather-ckpt", good_run, "-o", good_run.parent / "out", match=match)


def test_cli_output_exists_needs_force(good_run, capsys, tmp_path):
    out = tmp_path / "full"
    assert run("gather-ckpt", good_run, "-o", out, "-q") == 0
    before = (out / "manifest.json").read_bytes()
    assert run("gather-ckpt", good_run, "-o", out, "-q") == 2
    assert "--force" in capsys.readouterr().err and (out / "manifest.json").read_bytes() == before
    assert run("gather-ckpt", good_run, "-o", out, "--npy", "--force", "-q") == 0
    assert (out / "node_emb.npy").exists() and not (out / "node_emb_part_0_of_1").exists()
    # the output may not replace or sit inside the input
    assert run("scatter-ckpt", out, "-o", out, "-w", "2", "--force", "-q") == 2
    assert "input" in capsys.readouterr().err


def test_cli_unreadable_and_bad_options(tmp_path, good_run, capsys):
    _expect_error(capsys, tmp_path / "o", "gather-ckpt", tmp_path / "nope", "-o", tmp_path / "o", match="no such directory")
    (tmp_path / "empty").mkdir()
    _expect_error(capsys, tmp_path / "o", "gather-ckpt", tmp_path / "empty", "-o", tmp_path / "o", match="no manifest.json")
    (good_run / "manifest.json").chmod(0o000)
    if not os.access(good_run / "manifest.json", os.R_OK):  # root reads anything
        _expect_error(capsys, tmp_path / "o", "gather-ckpt", good_run, "-o", tmp_path / "o", match="cannot read")
    (good_run / "manifest.json").chmod(0o644)
    _expect_error(capsys, tmp_path / "o", "scatter-ckpt", good_run, "-o", tmp_path / "o", "-w", "2", "--boundaries", "0,10,50", match="boundaries")
    _expect_error(capsys, tmp_path / "o", "scatter-ckpt", good_run, "-o", tmp_path / "o", "-w", "2", "--policy", "range", "--boundaries", "0,60,50", match="boundaries")


# ----------------------------------------------------------------------------- importers

def write_wholegraph(prefix: Path, n: int, dim: int, w: int, rng, optimizer: str = "lazyadam") -> dict[str, np.ndarray]:
    """Files as WholeMemoryEmbedding.save(prefix) writes them: raw rows, WholeGraph's range split."""
    arrays = {"table": rng.standard_normal((n, dim)).astype(np.float32)}
    names = {"table": "embedding_tensor"}
    if optimizer == "lazyadam":
        arrays |= {"m": rng.standard_normal((n, dim)).astype(np.float32), "v": rng.random((n, dim)).astype(np.float32),
                   "beta_powers": rng.random((n, 2)).astype(np.float32)}
        names |= {"m": "m", "v": "v", "beta_powers": "beta12t"}
    b = RangePolicy.wholegraph(n, w).boundaries
    for key, a in arrays.items():
        for r in range(w):
            a[b[r] : b[r + 1]].tofile(f"{prefix}_{names[key]}_part_{r}_of_{w}")
    return arrays


def test_import_wholegraph(tmp_path, capsys):
    rng = np.random.default_rng(3)
    (tmp_path / "wg").mkdir()
    arrays = write_wholegraph(tmp_path / "wg" / "emb", 101, 6, 4, rng)
    out = tmp_path / "ck"
    assert run("import-ckpt", "--from", "wholegraph", tmp_path / "wg" / "emb", "--num-rows", 101, "--dim", 6, "-w", 4,
               "--optimizer", "lazyadam", "--name", "paper", "-o", out, "-q") == 0
    c = read_checkpoint(out, verify=True)
    assert c.optimizer["type"] == "lazyadam" and c.policy("paper").to_json() == RangePolicy.wholegraph(101, 4).to_json()
    ids = np.arange(101)
    assert np.array_equal(c.read_rows("paper", ids), arrays["table"])
    for s in ("m", "v", "beta_powers"):
        assert np.array_equal(c.read_rows(f"paper.{s}", ids), arrays[s])
    # wrong shape on the command line: every file is checked before anything is written
    err = _expect_error(capsys, tmp_path / "o2", "import-ckpt", "--from", "wholegraph", tmp_path / "wg" / "emb", "--num-rows", 100, "--dim", 6,
                        "-w", 4, "-o", tmp_path / "o2", match="emb_embedding_tensor_part_")
    assert "expected" in err
    f = tmp_path / "wg" / "emb_v_part_2_of_4"
    f.write_bytes(f.read_bytes() + b"\0" * 24)  # one extra row
    _expect_error(capsys, tmp_path / "o3", "import-ckpt", "--from", "wholegraph", tmp_path / "wg" / "emb", "--num-rows", 101, "--dim", 6,
                  "-w", 4, "--optimizer", "lazyadam", "-o", tmp_path / "o3", match=f"{f}: size")
    (tmp_path / "wg" / "emb_m_part_1_of_4").unlink()
    _expect_error(capsys, tmp_path / "o4", "import-ckpt", "--from", "wholegraph", tmp_path / "wg" / "emb", "--num-rows", 101, "--dim", 6,
                  "-w", 4, "--optimizer", "lazyadam", "-o", tmp_path / "o4", match="emb_m_part_1_of_4: missing")
    _expect_error(capsys, tmp_path / "o5", "import-ckpt", "--from", "wholegraph", tmp_path / "wg" / "emb", "--dim", 6, "-w", 4,
                  "-o", tmp_path / "o5", match="--num-rows")


class PickledObject:
    """An arbitrary pickled object: torch.load(weights_only=True) must refuse it."""


def _save_ranks(tmp_path: Path, dicts: list[dict], stem: str = "opt") -> list[Path]:
    import torch

    paths = []
    for r, d in enumerate(dicts):
        p = tmp_path / f"{stem}_{r}.pt"
        torch.save(d, p)
        paths.append(p)
    return paths


def test_import_torch_distdgl_with_ids(tmp_path):
    """DistDGL-style optimizer files (ids + states per rank) plus the table in per-rank files, merged."""
    import torch

    n, w, d = 97, 3, 5
    rng = np.random.default_rng(5)
    perm = rng.permutation(n)
    parts = np.array_split(perm, w)
    full = {k: rng.standard_normal((n, d)).astype(np.float32) for k in ("table", "mem", "power")}
    step = rng.integers(0, 50, n).astype(np.int32)
    opt_dicts, emb_dicts = [], []
    for ids in parts:
        t = torch.from_numpy(ids)
        states = {"node_emb_step": torch.from_numpy(step[ids]), "node_emb_mem": torch.from_numpy(full["mem"][ids]),
                  "node_emb_power": torch.from_numpy(full["power"][ids])}
        opt_dicts.append({"params": {"lr": 0.05, "eps": 1e-8, "betas": (0.9, 0.999)}, "emb_states": {"node_emb": {"ids": t, "states": states}},
                          "world_size": w})
        emb_dicts.append({"node_emb": torch.from_numpy(full["table"][ids]), "ids": t})
    _save_ranks(tmp_path, opt_dicts, "opt")
    _save_ranks(tmp_path, emb_dicts, "emb")
    out = tmp_path / "ck"
    assert run("import-ckpt", "--from", "torch", tmp_path / "opt_{rank}.pt", tmp_path / "emb_{rank}.pt", "-w", w, "--policy", "range", "-o", out, "-q") == 0
    c = read_checkpoint(out, verify=True)
    assert c.optimizer["type"] == "adam" and c.optimizer["lr"] == 0.05 and c.optimizer["betas"] == [0.9, 0.999]
    assert c.policy("node_emb").name == "range" and c.world_size == w
    ids = np.arange(n)
    assert np.array_equal(c.read_rows("node_emb", ids), full["table"])
    assert np.array_equal(c.read_rows("node_emb.exp_avg", ids), full["mem"])
    assert np.array_equal(c.read_rows("node_emb.exp_avg_sq", ids), full["power"])
    assert np.array_equal(c.read_rows("node_emb.step", ids), step)


def test_import_torch_flat_without_ids(tmp_path):
    import torch

    n, w = 20, 3
    table = torch.randn(n, 4).to(torch.bfloat16)
    pol = RemainderPolicy(n, w)
    files = _save_ranks(tmp_path, [{"e": table[torch.from_numpy(pol.global_ids(r))]} for r in range(w)])
    ckpt.import_torch(files, tmp_path / "ck")
    c = read_checkpoint(tmp_path / "ck")
    assert c.tensors["e"].dtype == "bfloat16" and c.optimizer["type"] == "none"
    got = torch.from_numpy(c.read_rows("e", np.arange(n)).view(np.int16)).view(torch.bfloat16)
    assert torch.equal(got, table)


@pytest.mark.parametrize(
    "case, match",
    [
        ("duplicate", "appears"),
        ("duplicate_across", "also in an earlier"),
        ("missing", "outside 0..9"),
        ("dtype", "float64"),
        ("row_shape", "rows [3]"),
        ("no_ids_wrong_rows", "rows, but rank"),
        ("not_a_dict", "expected a dict"),
        ("pickle", "weights_only"),
    ],
)
def test_import_torch_bad_inputs(tmp_path, capsys, case, match):
    import torch

    ids = [torch.tensor([0, 2, 4, 6, 8]), torch.tensor([1, 3, 5, 7, 9])]
    rows = [torch.randn(5, 2), torch.randn(5, 2)]
    if case == "duplicate":
        ids[1] = torch.tensor([1, 3, 5, 7, 7])
    elif case == "duplicate_across":
        ids[1] = torch.tensor([1, 3, 5, 7, 8])
    elif case == "missing":
        ids[1] = torch.tensor([1, 3, 5, 7, 11])
    elif case == "dtype":
        rows[1] = rows[1].double()
    elif case == "row_shape":
        rows[1] = torch.randn(5, 3)
    dicts: list = [{"e": rows[r], "ids": ids[r]} for r in range(2)]
    if case == "no_ids_wrong_rows":
        dicts = [{"e": torch.randn(6, 2)}, {"e": torch.randn(4, 2)}]
    files = _save_ranks(tmp_path, dicts)
    if case == "not_a_dict":
        torch.save([rows[0]], files[0])
    if case == "pickle":
        torch.save({"e": rows[0], "obj": PickledObject()}, files[0])
    _expect_error(capsys, tmp_path / "ck", "import-ckpt", "--from", "torch", *files, "-o", tmp_path / "ck", match=match)


# ----------------------------------------------------------------------------- kernel copies (contiguous layouts)


@pytest.mark.parametrize("npy", [False, True])
def test_gather_from_range_is_a_kernel_copy_with_combined_crcs(tmp_path, monkeypatch, npy, kernel_copies):
    policy = RangePolicy(300, 4, (0, 0, 120, 121, 300))  # an empty rank and a one-row rank too
    arrays = make_run(tmp_path / "run", 300, 4, (5,), "float32", "adam", policy=policy)
    calls = kernel_copies
    ckpt.gather_checkpoint(tmp_path / "run", tmp_path / "full", npy=npy)
    assert calls  # the kernel path was taken
    for t, a in arrays.items():
        assert global_bytes(tmp_path / "full", t, npy) == np.ascontiguousarray(a).tobytes()
    assert ckpt.verify_checkpoint(tmp_path / "full")["ok"]  # CRCs combined from the shards' match the data
    if not npy:
        for t in arrays:  # the flat outputs are valid file-list exports with their CRCs
            from gpart.formats.filelist.reader import open_filelist

            assert open_filelist(tmp_path / "full" / f"{t}.json", verify=True).verify() == []


def test_gather_from_range_damaged_input(tmp_path, capsys):
    """Without --verify the damaged shard's manifest CRC is passed on, so verifying the output finds it;
    with --verify the gather itself refuses."""
    make_run(tmp_path / "run", 90, 3, (4,), "float32", "none", policy=RangePolicy.wholegraph(90, 3))
    f = tmp_path / "run" / ck.shard_file_name("node_emb", 1, 3)
    data = bytearray(f.read_bytes())
    data[5] ^= 0x10
    f.write_bytes(bytes(data))
    ckpt.gather_checkpoint(tmp_path / "run", tmp_path / "full")
    report = ckpt.verify_checkpoint(tmp_path / "full")
    assert not report["ok"] and "checksum mismatch" in report["problems"][0]
    _expect_error(capsys, tmp_path / "full2", "gather-ckpt", tmp_path / "run", "-o", tmp_path / "full2", "--verify",
                  code=1, match=f"{f}: checksum mismatch")


def test_gather_from_range_checks_shard_sizes(tmp_path, capsys):
    make_run(tmp_path / "run", 60, 2, (4,), "float32", "none", policy=RangePolicy.wholegraph(60, 2))
    f = tmp_path / "run" / ck.shard_file_name("node_emb", 0, 2)
    with open(f, "ab") as fh:
        fh.write(b"\0" * 16)
    _expect_error(capsys, tmp_path / "full", "gather-ckpt", tmp_path / "run", "-o", tmp_path / "full", code=1, match=f"{f}: size")


@pytest.mark.parametrize("npy", [False, True])
def test_gather_from_range_without_kernel_copy_falls_back(tmp_path, monkeypatch, npy):
    import errno

    arrays = make_run(tmp_path / "run", 250, 3, (3,), "float16", "adagrad", policy=RangePolicy.wholegraph(250, 3))

    def unsupported(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", unsupported)
    ckpt.gather_checkpoint(tmp_path / "run", tmp_path / "full", npy=npy, chunk_rows=7)
    for t, a in arrays.items():
        assert global_bytes(tmp_path / "full", t, npy) == np.ascontiguousarray(a).tobytes()
    assert ckpt.verify_checkpoint(tmp_path / "full")["ok"]


# ----------------------------------------------------------------------------- DistDGL optimizer save files


def _distdgl_save(prefix: Path, emb: str, n: int, w: int, d: int, optimizer: str, step=None, seed: int = 0):
    """Per-rank files exactly as DistSparseGradOptimizer.save writes them (`{f}_{rank}`), plus the
    embedding table per rank (in the same row order as the optimizer's ids); return global arrays."""
    import torch

    rng = np.random.default_rng(seed)
    parts = np.array_split(rng.permutation(n).astype(np.int64), w)
    full = {k: rng.standard_normal((n, d)).astype(np.float32) for k in ("table", "mem", "power", "sum")}
    full["step"] = rng.integers(0, 5000, n).astype(np.float32) if step is None else np.asarray(step, np.float32)
    if optimizer == "adam":
        params = {"_lr": 0.01, "_eps": 1e-08, "_beta1": 0.9, "_beta2": 0.999}
        names = {"_step": "step", "_mem": "mem", "_power": "power"}
    else:
        params = {"_lr": 0.05, "_eps": 1e-10}
        names = {"_sum": "sum"}
    for r, ids in enumerate(parts):
        states = {emb + suffix: torch.from_numpy(full[key][ids]) for suffix, key in names.items()}
        torch.save({"params": {**params, "world_size": w}, "emb_states": {emb: {"ids": torch.from_numpy(ids), "states": states}}},
                   f"{prefix}_{r}")
        torch.save({emb: torch.from_numpy(full["table"][ids]), "ids": torch.from_numpy(ids)}, f"{prefix}_table_{r}")
    return full


@pytest.mark.parametrize("optimizer", ["adam", "adagrad"])
def test_import_distdgl_optimizer_save(tmp_path, optimizer):
    import torch

    n, w, d = 211, 3, 6
    full = _distdgl_save(tmp_path / "opt", "ent", n, w, d, optimizer)
    if optimizer == "adam":
        assert torch.load(f"{tmp_path / 'opt'}_0", weights_only=True)["emb_states"]["ent"]["states"]["ent_step"].dtype == torch.float32
    out = tmp_path / "ck"
    assert run("import-ckpt", "--from", "torch", f"{tmp_path / 'opt'}_{{rank}}", f"{tmp_path / 'opt'}_table_{{rank}}",
               "-w", w, "--policy", "remainder", "-o", out, "-q") == 0
    c = read_checkpoint(out, verify=True)
    manifest = json.loads((out / "manifest.json").read_text())
    opt = manifest["optimizer"]
    assert opt == c.optimizer
    assert opt["type"] == optimizer and opt["imported_from"] == "torch"
    assert not any(k.startswith("_") for k in opt) and "world_size" not in opt
    ids = np.arange(n)
    assert np.array_equal(c.read_rows("ent", ids), full["table"])
    if optimizer == "adam":
        assert opt["lr"] == 0.01 and opt["eps"] == 1e-08 and opt["betas"] == [0.9, 0.999]
        assert c.tensors["ent.step"].dtype == "int32"
        assert np.array_equal(c.read_rows("ent.step", ids), full["step"].astype(np.int32))
        assert np.array_equal(c.read_rows("ent.exp_avg", ids), full["mem"])
        assert np.array_equal(c.read_rows("ent.exp_avg_sq", ids), full["power"])
    else:
        assert opt["lr"] == 0.05 and opt["eps"] == 1e-10 and "betas" not in opt
        assert np.array_equal(c.read_rows("ent.state_sum", ids), full["sum"])
    assert c.world_size == w and c.policy("ent").name == "remainder"


@pytest.mark.parametrize("bad", [2.5, -1.0, 2.0**31, float("nan"), float("inf")])
def test_import_distdgl_step_that_is_no_int32_count(tmp_path, capsys, bad):
    n = 40
    step = np.arange(n, dtype=np.float32)
    step[17] = bad
    _distdgl_save(tmp_path / "opt", "ent", n, 2, 3, "adam", step=step)
    files = [f"{tmp_path / 'opt'}_{r}" for r in range(2)] + [f"{tmp_path / 'opt'}_table_{r}" for r in range(2)]
    err = _expect_error(capsys, tmp_path / "ck", "import-ckpt", "--from", "torch", f"{tmp_path / 'opt'}_{{rank}}",
                        f"{tmp_path / 'opt'}_table_{{rank}}", "-w", 2, "-o", tmp_path / "ck", match="'ent.step': step count")
    assert any(f"{f}: " in err for f in files)


def test_import_distdgl_world_size_mismatch(tmp_path, capsys):
    _distdgl_save(tmp_path / "opt", "ent", 30, 3, 2, "adam")
    _expect_error(capsys, tmp_path / "ck", "import-ckpt", "--from", "torch", f"{tmp_path / 'opt'}_0", f"{tmp_path / 'opt'}_1",
                  "-o", tmp_path / "ck", match="world size 3")
