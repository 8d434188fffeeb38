"""`gpart export-ckpt`: gpart checkpoints back to WholeGraph and DistDGL files (SPEC.md 6.7).

Every export is re-imported with `gpart import-ckpt` and compared byte for byte
with the source, and files that WholeGraph / DistDGL wrote (as their save
functions lay them out) survive import -> scatter -> export unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_ckpt import _distdgl_save, _expect_error, make_run, no_output, run, write_wholegraph

from gpart.formats.checkpoint.reader import read_checkpoint
from gpart.formats.sharding.policies import RangePolicy, RemainderPolicy


def gathered(run_dir: Path, out: Path) -> dict[str, bytes]:
    assert run("gather-ckpt", run_dir, "-o", out, "-q") == 0
    c = read_checkpoint(out)
    return {name: (out / f"{name}_part_0_of_1").read_bytes() for name in c.tensors}


def source_policy(kind: str, n: int, w: int):
    if kind == "remainder":
        return RemainderPolicy(n, w)
    if kind == "range-wg":
        return RangePolicy.wholegraph(n, w)
    return RangePolicy(n, w, tuple(int(x) for x in np.linspace(0, n, w + 1).round()))


@pytest.mark.parametrize("w", [1, 3, 4])
@pytest.mark.parametrize("src_policy", ["remainder", "range-wg", "range-linspace"])
@pytest.mark.parametrize("optimizer", ["lazyadam", "adagrad", "none"])
def test_wholegraph_export_reimports_bit_exact(tmp_path, w, src_policy, optimizer):
    n, d = 103, 5
    arrays = make_run(tmp_path / "run", n, 3, (d,), "float32", optimizer, policy=source_policy(src_policy, n, 3), name="paper")
    out = tmp_path / "wg"
    assert run("export-ckpt", tmp_path / "run", "--to", "wholegraph", "-w", w, "-o", out, "--prefix", "emb", "-q") == 0
    # the files are WholeGraph's names, each holding its rank's contiguous rows
    b = RangePolicy.wholegraph(n, w).boundaries
    names = {"paper": "embedding_tensor", "paper.m": "m", "paper.v": "v", "paper.beta_powers": "beta12t", "paper.state_sum": "state_sum"}
    for tensor, a in arrays.items():
        for r in range(w):
            assert (out / f"emb_{names[tensor]}_part_{r}_of_{w}").read_bytes() == a[b[r] : b[r + 1]].tobytes()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "gpart.ckpt-export" and manifest["target"] == "wholegraph"
    assert len(manifest["files"]) == w * len(arrays)
    # and import-ckpt --from wholegraph brings back the same checkpoint
    back = tmp_path / "back"
    args = ["import-ckpt", "--from", "wholegraph", out / "emb", "--num-rows", n, "--dim", d, "-w", w, "--name", "paper", "--optimizer", optimizer]
    assert run(*args, "-o", back, "-q") == 0
    assert gathered(back, tmp_path / "g1") == gathered(tmp_path / "run", tmp_path / "g2")


def test_wholegraph_files_survive_import_scatter_export(tmp_path):
    """WholeGraph's own save files -> import -> scatter to another world size and policy -> export: identical files."""
    rng = np.random.default_rng(7)
    (tmp_path / "wg").mkdir()
    write_wholegraph(tmp_path / "wg" / "emb", 1001, 8, 4, rng)
    assert run("import-ckpt", "--from", "wholegraph", tmp_path / "wg" / "emb", "--num-rows", 1001, "--dim", 8, "-w", 4,
               "--optimizer", "lazyadam", "-o", tmp_path / "ck", "-q") == 0
    assert run("scatter-ckpt", tmp_path / "ck", "-w", 3, "--policy", "remainder", "-o", tmp_path / "ck3", "-q") == 0
    assert run("export-ckpt", tmp_path / "ck3", "--to", "wholegraph", "-w", 4, "--prefix", "emb", "-o", tmp_path / "out", "--chunk-rows", 97, "-q") == 0
    originals = sorted(p.name for p in (tmp_path / "wg").iterdir())
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == originals + ["manifest.json"]
    for name in originals:
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "wg" / name).read_bytes(), name


def _import_distdgl(tmp_path: Path, prefix: Path, w: int, out: Path, table: str) -> None:
    """import-ckpt --from torch of optimizer files `<prefix>_<r>` and table files `<prefix><table with {rank}>`."""
    assert run("import-ckpt", "--from", "torch", f"{prefix}_{{rank}}", f"{prefix}{table}", "-w", w, "--policy", "remainder", "-o", out, "-q") == 0


@pytest.mark.parametrize("w", [1, 3, 4])
@pytest.mark.parametrize("policy", ["remainder", "range"])
@pytest.mark.parametrize("optimizer", ["adam", "adagrad"])
def test_distdgl_export_reimports_bit_exact(tmp_path, w, policy, optimizer):
    import torch

    n, d = 89, 4
    full = _distdgl_save(tmp_path / "opt", "ent", n, 2, d, optimizer)
    _import_distdgl(tmp_path, tmp_path / "opt", 2, tmp_path / "ck", "_table_{rank}")
    out = tmp_path / "dgl"
    assert run("export-ckpt", tmp_path / "ck", "--to", "distdgl", "-w", w, "--policy", policy, "-o", out, "-q") == 0
    target = RemainderPolicy(n, w) if policy == "remainder" else RangePolicy.wholegraph(n, w)
    states = {"adam": {"_step": "step", "_mem": "mem", "_power": "power"}, "adagrad": {"_sum": "sum"}}[optimizer]
    for r in range(w):
        saved = torch.load(out / f"sparse_opt_{r}", weights_only=True)
        ids = target.global_ids(r)
        assert set(saved) == {"emb_states", "params"}
        assert saved["params"]["world_size"] == saved["params"]["num_clients"] == w and saved["params"]["_lr"] == (0.01 if optimizer == "adam" else 0.05)
        entry = saved["emb_states"]["ent"]
        assert np.array_equal(entry["ids"].numpy(), ids) and entry["ids"].dtype == torch.int64
        assert sorted(entry["states"]) == sorted(f"node~_N~ent{s}" for s in states)
        for suffix, key in states.items():
            value = entry["states"][f"node~_N~ent{suffix}"]
            assert value.dtype == torch.float32  # DistDGL keeps every state, step counts too, as float32
            assert np.array_equal(value.numpy(), full[key][ids])
        tables = torch.load(out / f"sparse_opt_emb_{r}.pt", weights_only=True)
        assert np.array_equal(tables["ent"].numpy(), full["table"][ids]) and np.array_equal(tables["ent.ids"].numpy(), ids)
    _import_distdgl(tmp_path, out / "sparse_opt", w, tmp_path / "back", "_emb_{rank}.pt")
    assert gathered(tmp_path / "back", tmp_path / "g1") == gathered(tmp_path / "ck", tmp_path / "g2")
    if optimizer == "adam":
        assert json.loads((tmp_path / "back" / "manifest.json").read_text())["optimizer"]["betas"] == [0.9, 0.999]


def test_distdgl_files_survive_import_scatter_export(tmp_path):
    """DGL 2.1's own per-rank save files (remainder ids) -> import -> scatter -> export: the same tensors under the same keys."""
    import torch

    n, w = 150, 3
    pol = RemainderPolicy(n, w)
    rng = np.random.default_rng(11)
    for r in range(w):
        ids = torch.from_numpy(pol.global_ids(r).astype(np.int64))
        rows = len(ids)
        states = {"node~_N~ent_step": torch.from_numpy(rng.integers(0, 900, rows).astype(np.float32)),
                  "node~_N~ent_mem": torch.randn(rows, 6), "node~_N~ent_power": torch.rand(rows, 6)}
        torch.save({"emb_states": {"ent": {"ids": ids, "states": states}},
                    "params": {"world_size": w, "_lr": 0.01, "_eps": 1e-08, "_beta1": 0.9, "_beta2": 0.999}}, tmp_path / f"opt_{r}")
        torch.save({"ent": torch.randn(rows, 6), "ent.ids": ids}, tmp_path / f"opt_emb_{r}.pt")
    _import_distdgl(tmp_path, tmp_path / "opt", w, tmp_path / "ck", "_emb_{rank}.pt")
    assert run("scatter-ckpt", tmp_path / "ck", "-w", 2, "--policy", "range", "-o", tmp_path / "ck2", "-q") == 0
    assert run("export-ckpt", tmp_path / "ck2", "--to", "distdgl", "-w", w, "--prefix", "opt", "-o", tmp_path / "out", "-q") == 0
    for name in [f"opt_{r}" for r in range(w)] + [f"opt_emb_{r}.pt" for r in range(w)]:
        a = torch.load(tmp_path / name, weights_only=True)
        b = torch.load(tmp_path / "out" / name, weights_only=True)
        # the same, plus the size under later DGL's name as well
        assert _flat(a) == {k: v for k, v in _flat(b).items() if k != "/params/num_clients"}, name
        if "params" in b:
            assert b["params"]["num_clients"] == w


def _flat(obj, key=""):
    """Nested dicts of tensors and numbers as {path: (dtype, shape, bytes) or value}, for exact comparison."""
    import torch

    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out |= _flat(v, f"{key}/{k}")
        return out
    if isinstance(obj, torch.Tensor):
        return {key: (str(obj.dtype), tuple(obj.shape), obj.contiguous().numpy().tobytes())}
    return {key: obj}


def test_export_table_only_and_errors(tmp_path, capsys):
    make_run(tmp_path / "run", 60, 2, (3,), "float32", "adam")  # random step counts: negative ones, none exact in float32
    _expect_error(capsys, tmp_path / "wg", "export-ckpt", tmp_path / "run", "--to", "wholegraph", "-w", 2, "-o", tmp_path / "wg",
                  match="node_emb.step: negative step count")
    assert no_output(tmp_path / "wg")
    _expect_error(capsys, tmp_path / "dgl", "export-ckpt", tmp_path / "run", "--to", "distdgl", "-w", 2, "-o", tmp_path / "dgl",
                  match="node_emb.step: step count")
    assert no_output(tmp_path / "dgl")
    assert run("export-ckpt", tmp_path / "run", "--to", "wholegraph", "-w", 3, "-o", tmp_path / "wg", "--table-only", "-q") == 0
    assert sorted(p.name for p in (tmp_path / "wg").iterdir()) == ["manifest.json"] + [f"node_emb_embedding_tensor_part_{r}_of_3" for r in range(3)]
    before = {p.name: p.read_bytes() for p in (tmp_path / "wg").iterdir()}
    assert run("export-ckpt", tmp_path / "run", "--to", "wholegraph", "-w", 2, "-o", tmp_path / "wg", "--table-only") == 2
    assert "already exists" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in (tmp_path / "wg").iterdir()} == before  # nothing the user had is touched
    _expect_error(capsys, tmp_path / "x", "export-ckpt", tmp_path / "run", "--to", "wholegraph", "-w", 3, "-o", tmp_path / "x",
                  "--table-only", "--embedding", "nope", match="has no embedding 'nope'")
    _expect_error(capsys, tmp_path / "x", "export-ckpt", tmp_path / "run", "--to", "wholegraph", "-w", 3, "-o", tmp_path / "x",
                  "--table-only", "--prefix", "../evil", match="is not allowed")
    _expect_error(capsys, tmp_path / "x", "export-ckpt", tmp_path / "nothing", "--to", "distdgl", "-w", 3, "-o", tmp_path / "x",
                  match="nothing")
    _expect_error(capsys, tmp_path / "x", "export-ckpt", tmp_path / "run", "--to", "wholegraph", "-w", 2, "-o", tmp_path / "x",
                  "--table-only", "--boundaries", "0,70,60", match="boundaries")
