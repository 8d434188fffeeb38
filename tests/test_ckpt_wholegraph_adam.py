"""gpart's SparseAdam (DGL-style Adam) exported as WholeGraph LazyAdam files and back (SPEC.md 6.6-6.8).

A real gpart SparseAdam run (some rows trained more often than others, some
never) is scattered to 3 ranks under each policy, exported with
`export-ckpt --to wholegraph` for W in {1, 3, 8}, and checked three ways:
the files hold the moments as they are and beta12t = (beta1^t, beta2^t) of
each row's step count, computed here by WholeGraph's own float32 recurrence;
`import-ckpt --from wholegraph --optimizer adam` brings back the same table,
moments and steps bit for bit; and one further step, gpart's SparseAdam on
the checkpoint beside a numpy LazyAdam step written from WholeGraph's kernel
(lazy_adam_optimizer_step_kernel) on the exported files, gives the same table
to float32 rounding (1e-4 of lr: WholeGraph forms 1 - beta2^t in float32). DistDGL's
Adam files (float32 step counts) take the same way through import-ckpt --from torch.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_ckpt import _expect_error, no_output, run
from test_ckpt_export import gathered

import gpart.runtime as gr
from gpart.formats.sharding.policies import RangePolicy

N, D, STEPS, LR, BETAS, EPS = 103, 6, 5, 0.05, (0.9, 0.999), 1e-8
# gpart's Adam and WholeGraph's LazyAdam round differently: WholeGraph keeps beta1, beta2 and their powers in float32
# and forms 1 - beta2^t there (relative error about t * 6e-8 / (1 - beta2^t), some 6e-5 for small t), gpart in float64;
# an update (at most lr) of one further step therefore agrees to about 1e-4 of lr, the table to that plus its rounding
TOLERANCE = 1e-4 * LR


def _one_step(emb, opt, ids: np.ndarray, grad: np.ndarray) -> None:
    """One optimizer step whose gradient is exactly `grad` on the (unique) rows `ids`."""
    opt.zero_grad()
    (emb(torch.from_numpy(ids)) * torch.from_numpy(grad)).sum().backward()
    opt.step()


def _batch(step: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows 0..9 are never touched; the others in random subsets, so step counts differ from row to row."""
    rng = np.random.default_rng(100 + step)
    ids = np.flatnonzero(rng.random(N) < 0.6)
    ids = ids[ids >= 10].astype(np.int64)
    return ids, rng.standard_normal((ids.size, D)).astype(np.float32)


@pytest.fixture(scope="module")
def adam_runs(tmp_path_factory) -> Path:
    """A gpart SparseAdam checkpoint of one rank, and that checkpoint scattered to 3 ranks under each policy."""
    root = tmp_path_factory.mktemp("adam")
    emb = gr.ShardedEmbedding(N, D, "paper", seed=3)
    opt = gr.SparseAdam([emb], lr=LR, betas=BETAS, eps=EPS)
    for step in range(STEPS):
        _one_step(emb, opt, *_batch(step))
    gr.save_checkpoint(root / "run", [emb], opt)
    for policy in ("remainder", "range"):
        assert run("scatter-ckpt", root / "run", "-w", 3, "--policy", policy, "-o", root / f"run-{policy}", "-q") == 0
    return root


def _pow32(beta: float, t: int) -> np.float32:
    """WholeGraph's beta12t after t steps of a row: 1.0f multiplied t times by float32 beta (each product rounded)."""
    x, b = np.float32(1.0), np.float32(beta)
    for _ in range(t):
        x = np.float32(x * b)
    return x


def _wholegraph(out: Path, stem: str, w: int, dtype, width: int) -> np.ndarray:
    """WholeGraph's rank files of one tensor, concatenated in rank order (the whole table, range split)."""
    parts = [np.fromfile(out / f"emb_{stem}_part_{r}_of_{w}", dtype=dtype) for r in range(w)]
    return np.concatenate(parts).reshape(-1, width)


def _lazy_adam_step(table, m, v, beta12t, ids, grad, lr=LR, betas=BETAS, eps=EPS) -> np.ndarray:
    """The table after WholeGraph's lazy_adam_optimizer_step_kernel (no weight decay, not AdamW), in float32:
    per touched row, beta12t *= (beta1, beta2) first, then m, v, and the bias-corrected update."""
    f = np.float32
    b1, b2 = f(betas[0]), f(betas[1])
    b1t, b2t = beta12t[ids, 0] * b1, beta12t[ids, 1] * b2
    mm = b1 * m[ids] + (f(1) - b1) * grad
    vv = b2 * v[ids] + (f(1) - b2) * grad * grad
    mhat = mm / (f(1) - b1t)[:, None]
    vhat = vv / (f(1) - b2t)[:, None]
    out = np.array(table, dtype=np.float32)
    out[ids] = out[ids] - f(lr) * mhat / (np.sqrt(vhat) + f(eps))
    return out


@pytest.mark.parametrize("w", [1, 3, 8])
@pytest.mark.parametrize("policy", ["remainder", "range"])
def test_adam_exports_as_lazyadam_and_round_trips(adam_runs, tmp_path, w, policy):
    src = adam_runs / f"run-{policy}"
    out = tmp_path / "wg"
    assert run("export-ckpt", src, "--to", "wholegraph", "-w", w, "-o", out, "--prefix", "emb", "-q") == 0
    full = gathered(src, tmp_path / "full")
    table = np.frombuffer(full["paper"], dtype=np.float32).reshape(N, D)
    steps = np.frombuffer(full["paper.step"], dtype=np.int32)
    assert steps[:10].tolist() == [0] * 10 and len(set(steps[10:].tolist())) >= 4  # untouched rows, and varied counts

    # the files: WholeGraph's names, range split, moments as they are, beta12t from the step counts
    b = RangePolicy.wholegraph(N, w).boundaries
    for stem, tensor in (("embedding_tensor", "paper"), ("m", "paper.exp_avg"), ("v", "paper.exp_avg_sq")):
        for r in range(w):
            assert (out / f"emb_{stem}_part_{r}_of_{w}").read_bytes() == full[tensor][b[r] * D * 4: b[r + 1] * D * 4]
    beta12t = _wholegraph(out, "beta12t", w, np.float32, 2)
    want = np.array([[_pow32(BETAS[0], t), _pow32(BETAS[1], t)] for t in steps], dtype=np.float32)
    assert beta12t.tobytes() == want.tobytes()
    assert (beta12t[:10] == 1.0).all()  # WholeGraph's initial state for rows no step touched
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["optimizer"]["type"] == "adam" and manifest["optimizer"]["wholegraph_optimizer"] == "lazyadam"
    assert manifest["optimizer"]["betas"] == list(BETAS)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["manifest.json"] + [f"emb_{s}_part_{r}_of_{w}" for s in ("embedding_tensor", "m", "v", "beta12t") for r in range(w)])

    # import-ckpt --from wholegraph --optimizer adam: the same table, moments and steps, bit for bit
    back = tmp_path / "back"
    assert run("import-ckpt", "--from", "wholegraph", out / "emb", "--num-rows", N, "--dim", D, "-w", w, "--name", "paper",
               "--optimizer", "adam", "--betas", "0.9,0.999", "-o", back, "-q") == 0
    assert gathered(back, tmp_path / "g") == full

    # one further step on each side: gpart's SparseAdam on the checkpoint, the numpy LazyAdam on WholeGraph's files
    ids = np.concatenate([np.arange(0, 20), np.arange(60, 70)]).astype(np.int64)  # untouched rows too
    grad = np.random.default_rng(9).standard_normal((ids.size, D)).astype(np.float32)
    gpart_table = _gpart_step(src, ids, grad)
    assert not np.array_equal(gpart_table[ids], table[ids])  # the step moved the rows, and only them
    np.testing.assert_array_equal(np.delete(gpart_table, ids, axis=0), np.delete(table, ids, axis=0))
    states = [_wholegraph(out, s, w, np.float32, D) for s in ("embedding_tensor", "m", "v")] + [beta12t]
    np.testing.assert_allclose(gpart_table, _lazy_adam_step(*states, ids, grad), rtol=0, atol=TOLERANCE)
    # and the comparison tells states apart: beta12t one step further along, or WholeGraph's initial (1, 1), do not pass
    for wrong in (np.stack([np.vectorize(_pow32)(b, steps + 1) for b in BETAS], axis=1).astype(np.float32), np.ones_like(beta12t)):
        assert np.abs(gpart_table - _lazy_adam_step(*states[:3], wrong, ids, grad)).max() > 10 * TOLERANCE


def _gpart_step(run_dir: Path, ids: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """The table after gpart's SparseAdam resumes from `run_dir` and takes one step."""
    emb = gr.ShardedEmbedding(N, D, "paper", seed=11)
    opt = gr.SparseAdam([emb], lr=0.5)  # load_checkpoint restores lr, betas and eps
    gr.load_checkpoint(run_dir, [emb], opt)
    opt.param_groups[0]["lr"] = LR
    _one_step(emb, opt, ids, grad)
    return emb.weight.numpy()


def test_adam_export_and_import_refusals(adam_runs, tmp_path, capsys):
    src = adam_runs / "run"
    manifest = json.loads((src / "manifest.json").read_text())
    # an adam checkpoint without betas has no beta12t
    nobetas = tmp_path / "nobetas"
    assert run("scatter-ckpt", src, "-w", 1, "-o", nobetas, "-q") == 0
    m = json.loads((nobetas / "manifest.json").read_text())
    del m["optimizer"]["betas"]
    (nobetas / "manifest.json").write_text(json.dumps(m))
    _expect_error(capsys, tmp_path / "x", "export-ckpt", nobetas, "--to", "wholegraph", "-w", 2, "-o", tmp_path / "x",
                  match="records no betas")
    assert no_output(tmp_path / "x")
    # beta12t files written with other betas are no step counts of these: refused, naming the file and the row
    out = tmp_path / "wg"
    assert run("export-ckpt", src, "--to", "wholegraph", "-w", 2, "-o", out, "--prefix", "emb", "-q") == 0
    args = ["import-ckpt", "--from", "wholegraph", out / "emb", "--num-rows", N, "--dim", D, "-w", 2, "--optimizer", "adam"]
    err = _expect_error(capsys, tmp_path / "y", *args, "--betas", "0.8,0.99", "-o", tmp_path / "y", match="beta12t")
    assert "emb_beta12t_part_0_of_2" in err and "row 10" in err and no_output(tmp_path / "y")
    _expect_error(capsys, tmp_path / "y", *args, "--betas", "0.9", "-o", tmp_path / "y", match="--betas must be two")
    # the defaults are WholeGraph's betas, which this run used
    assert manifest["optimizer"]["betas"] == [0.9, 0.999]
    assert run(*args, "-o", tmp_path / "z", "-q") == 0


def test_distdgl_adam_resumes_as_lazyadam(tmp_path):
    """DistDGL's SparseAdam files (float32 step counts up to 5000) -> import-ckpt -> WholeGraph LazyAdam -> back."""
    from test_ckpt import _distdgl_save

    n, w, d = 211, 3, 6
    full = _distdgl_save(tmp_path / "opt", "ent", n, w, d, "adam")
    assert run("import-ckpt", "--from", "torch", f"{tmp_path / 'opt'}_{{rank}}", f"{tmp_path / 'opt'}_table_{{rank}}",
               "-w", w, "-o", tmp_path / "ck", "-q") == 0
    assert run("export-ckpt", tmp_path / "ck", "--to", "wholegraph", "-w", 4, "-o", tmp_path / "wg", "--prefix", "ent", "-q") == 0
    beta12t = np.concatenate([np.fromfile(tmp_path / "wg" / f"ent_beta12t_part_{r}_of_4", dtype=np.float32) for r in range(4)]).reshape(n, 2)
    power = {t: (_pow32(0.9, t), _pow32(0.999, t)) for t in np.unique(full["step"].astype(np.int64)).tolist()}
    assert beta12t.tobytes() == np.array([power[int(t)] for t in full["step"]], dtype=np.float32).tobytes()
    m = np.concatenate([np.fromfile(tmp_path / "wg" / f"ent_m_part_{r}_of_4", dtype=np.float32) for r in range(4)]).reshape(n, d)
    assert np.array_equal(m, full["mem"])
    assert run("import-ckpt", "--from", "wholegraph", tmp_path / "wg" / "ent", "--num-rows", n, "--dim", d, "-w", 4, "--name", "ent",
               "--optimizer", "adam", "-o", tmp_path / "back", "-q") == 0
    assert gathered(tmp_path / "back", tmp_path / "g1") == gathered(tmp_path / "ck", tmp_path / "g2")
