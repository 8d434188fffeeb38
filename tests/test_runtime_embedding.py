"""ShardedEmbedding lookups and SparseAdam/SparseAdagrad steps against a dense float64 reference.

The reference below is written independently of gpart.runtime.embedding.optim: numpy,
whole-table arrays, the row-wise math of DGL's sparse optimizers (mean of the
gradients of an id per step, or their sum; per-row Adam step counts). The
multi-process tests run the same global batches split over 1, 2 and 4 gloo
ranks and must land on the same tables and states.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.gloo_processes import run_distributed

import gpart.runtime as gr
from gpart.base.errors import RankMismatchError
from gpart.formats.sharding.policies import RangePolicy
from gpart.runtime.embedding.initializers import INIT_CHUNK_ROWS, iter_init_chunks

LR, BETAS, ADAM_EPS, ADAGRAD_EPS = 0.05, (0.9, 0.99), 1e-8, 1e-10
# (name, rows, dim): "c" has fewer rows than ranks, so some ranks own nothing
SPECS = (("a", 50, 4), ("b", 37, 3), ("c", 3, 2))
BATCH = 40


# ---- the training problem and its dense reference ------------------------------------------


def global_batch(step: int, spec_rows: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The ids (with duplicates) and per-occurrence targets of one step, for a table of spec_rows rows."""
    rng = np.random.default_rng(1000 + step)
    ids = rng.integers(0, 50, size=BATCH) % spec_rows
    targets = rng.normal(size=(BATCH, 4))[:, :dim]
    return ids.astype(np.int64), targets


def rank_piece(arr: np.ndarray, rank: int, world: int) -> np.ndarray:
    return np.array_split(arr, world)[rank]


def make_optimizer(kind: str, embs, duplicates: str):
    if kind == "adam":
        return gr.SparseAdam(embs, lr=LR, betas=BETAS, eps=ADAM_EPS, duplicates=duplicates)
    return gr.SparseAdagrad(embs, lr=LR, eps=ADAGRAD_EPS, duplicates=duplicates)


def train_steps(embs, opt, steps: range, rank: int, world: int) -> None:
    """The usual loop; each rank looks up its piece of the global batch in two lookups."""
    for step in steps:
        opt.zero_grad()
        loss = 0.0
        for emb in embs:
            ids, targets = global_batch(step, emb.num_embeddings, emb.dim)
            ids, targets = rank_piece(ids, rank, world), torch.from_numpy(rank_piece(targets, rank, world)).float()
            half = len(ids) // 2
            h = torch.cat([emb(torch.from_numpy(ids[:half])), emb(ids[half:])])
            loss = loss + 0.5 * ((h - targets) ** 2).sum()
        loss.backward()
        opt.step()


def initial_tables() -> dict[str, np.ndarray]:
    """The single-process initial tables (float64), the starting point of the reference."""
    return {name: gr.ShardedEmbedding(rows, dim, name).weight.double().numpy() for name, rows, dim in SPECS}


def reference_train(kind: str, duplicates: str, steps: range, tables=None, states=None):
    """Dense float64 reference: returns (tables, states) after `steps`."""
    tables = {k: v.copy() for k, v in (tables or initial_tables()).items()}
    if states is None:
        states = {}
        for name, rows, dim in SPECS:
            if kind == "adam":
                states[name] = {"step": np.zeros(rows, np.int64), "exp_avg": np.zeros((rows, dim)), "exp_avg_sq": np.zeros((rows, dim))}
            else:
                states[name] = {"state_sum": np.zeros((rows, dim))}
    states = {n: {k: v.copy() for k, v in s.items()} for n, s in states.items()}
    for step in steps:
        for name, rows, dim in SPECS:
            ids, targets = global_batch(step, rows, dim)
            w, st = tables[name], states[name]
            occurrence_grads = w[ids] - targets
            uniq, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
            g = np.zeros((len(uniq), dim))
            np.add.at(g, inverse, occurrence_grads)
            if duplicates == "mean":
                g /= counts[:, None]
            if kind == "adam":
                b1, b2 = BETAS
                st["step"][uniq] += 1
                t = st["step"][uniq][:, None].astype(np.float64)
                st["exp_avg"][uniq] = b1 * st["exp_avg"][uniq] + (1 - b1) * g
                st["exp_avg_sq"][uniq] = b2 * st["exp_avg_sq"][uniq] + (1 - b2) * g * g
                m_hat = st["exp_avg"][uniq] / (1 - b1**t)
                v_hat = st["exp_avg_sq"][uniq] / (1 - b2**t)
                w[uniq] -= LR * m_hat / (np.sqrt(v_hat) + ADAM_EPS)
            else:
                st["state_sum"][uniq] += g * g
                w[uniq] -= LR * g / np.sqrt(st["state_sum"][uniq] + ADAGRAD_EPS)
    return tables, states


def assert_close_to_reference(tables, states, ref_tables, ref_states, kind):
    for name, _, _ in SPECS:
        np.testing.assert_allclose(tables[name], ref_tables[name], rtol=1e-5, atol=2e-6, err_msg=name)
        for key, ref in ref_states[name].items():
            if key == "step":
                np.testing.assert_array_equal(states[name][key], ref, err_msg=f"{name}/{key}")
            else:
                np.testing.assert_allclose(states[name][key], ref, rtol=1e-5, atol=1e-7, err_msg=f"{name}/{key}")


def collect(embs, opt) -> dict:
    """This rank's rows and states with their global ids (to be assembled in the parent)."""
    out = {}
    for emb in embs:
        out[emb.name] = {
            "gids": emb.local_global_ids(),
            "weight": emb.weight.double().numpy().copy(),
            "states": {k: v.numpy().copy() for k, v in opt.state_tensors(emb).items()} if opt else {},
        }
    return out


def assemble(per_rank: list[dict]) -> tuple[dict, dict]:
    tables, states = {}, {}
    for name, rows, dim in SPECS:
        table = np.full((rows, dim), np.nan)
        st: dict[str, np.ndarray] = {}
        seen = np.zeros(rows, np.int64)
        for part in per_rank:
            mine = part[name]
            table[mine["gids"]] = mine["weight"]
            seen[mine["gids"]] += 1
            for key, value in mine["states"].items():
                st.setdefault(key, np.zeros((rows, *value.shape[1:]), value.dtype))[mine["gids"]] = value
        assert (seen == 1).all(), f"{name}: every row must be owned by exactly one rank"
        tables[name], states[name] = table, st
    return tables, states


# ---- single process ---------------------------------------------------------------------------


def test_lookup_returns_rows_in_request_order_with_shape():
    emb = gr.ShardedEmbedding(100, 5, "x", init=gr.init.normal(0.0, 1.0), seed=3)
    ids = torch.tensor([[7, 3, 7], [99, 0, 42]])
    rows = emb(ids)
    assert rows.shape == (2, 3, 5) and rows.requires_grad
    np.testing.assert_array_equal(rows.detach().numpy(), emb.weight.numpy()[ids.numpy()])
    with torch.no_grad():
        assert not emb(np.array([1, 2])).requires_grad
    assert emb(torch.zeros(0, dtype=torch.int32)).shape == (0, 5)
    assert emb(torch.tensor([1]), device="cpu").requires_grad


def test_backward_records_row_gradients_not_a_dense_table():
    emb = gr.ShardedEmbedding(100, 3, "x")
    with torch.no_grad():
        emb(torch.tensor([1, 2]))
    assert emb.trace()[0].numel() == 0, "lookups without backward record nothing"
    h = emb(torch.tensor([4, 9, 4]))
    (h * torch.arange(3.0).unsqueeze(1)).sum().backward()
    ids, grads = emb.trace()
    assert ids.tolist() == [4, 9, 4]
    np.testing.assert_array_equal(grads.numpy(), np.repeat([[0.0], [1.0], [2.0]], 3, axis=1))
    opt = gr.SparseAdagrad([emb], lr=0.1)
    opt.zero_grad()
    assert emb.trace()[0].numel() == 0


def test_initial_table_is_independent_of_policy_chunks_and_seeded_by_name():
    rows = INIT_CHUNK_ROWS + 17  # two init chunks
    a = gr.ShardedEmbedding(rows, 2, "t", policy="remainder").weight
    b = gr.ShardedEmbedding(rows, 2, "t", policy="range").weight
    assert torch.equal(a, b)
    assert a.min() >= -0.1 and a.max() < 0.1 and a.std() > 0.05
    assert not torch.equal(a, gr.ShardedEmbedding(rows, 2, "u").weight), "different names give different tables"
    assert not torch.equal(a, gr.ShardedEmbedding(rows, 2, "t", seed=1).weight)
    # a rank's rows come out of whole chunks: chunk 1 alone gives the same rows
    (start, tail), = list(iter_init_chunks(rows, 2, "t", 0, gr.init.uniform(-0.1, 0.1), INIT_CHUNK_ROWS + 5, rows))
    assert start == INIT_CHUNK_ROWS and torch.equal(tail, a[INIT_CHUNK_ROWS:])
    # the caller's random stream is left alone
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    gr.ShardedEmbedding(10, 2, "v")
    assert torch.equal(torch.rand(3), expected)
    assert torch.count_nonzero(gr.ShardedEmbedding(10, 2, "z", init=gr.init.zeros()).weight) == 0


@pytest.mark.parametrize("kind", ["adam", "adagrad"])
@pytest.mark.parametrize("duplicates", ["mean", "sum"])
def test_single_process_steps_match_dense_reference(kind, duplicates):
    embs = [gr.ShardedEmbedding(rows, dim, name) for name, rows, dim in SPECS]
    opt = make_optimizer(kind, embs, duplicates)
    train_steps(embs, opt, range(4), 0, 1)
    tables, states = assemble([collect(embs, opt)])
    ref_tables, ref_states = reference_train(kind, duplicates, range(4))
    assert_close_to_reference(tables, states, ref_tables, ref_states, kind)
    # rows never looked up keep their initial values (and Adam step 0)
    touched = np.unique(np.concatenate([global_batch(s, 50, 4)[0] for s in range(4)]))
    untouched = np.setdiff1d(np.arange(50), touched)
    assert len(untouched) > 0
    np.testing.assert_array_equal(tables["a"][untouched], initial_tables()["a"][untouched])
    if kind == "adam":
        assert (states["a"]["step"][untouched] == 0).all()
        assert (states["a"]["step"][touched] > 0).all()


def test_mean_and_sum_differ_exactly_by_duplicate_counts():
    """One step of Adagrad with a doubled id: mean mode sees g, sum mode 2g."""
    results = {}
    for mode in ("mean", "sum"):
        emb = gr.ShardedEmbedding(4, 2, "d", init=gr.init.zeros())
        opt = gr.SparseAdagrad([emb], lr=1.0, eps=0.0, duplicates=mode)
        (emb(torch.tensor([1, 1, 2])) * torch.tensor([[3.0, 3.0], [3.0, 3.0], [1.0, 1.0]])).sum().backward()
        opt.step()
        results[mode] = opt.state["d"]["state_sum"].clone()
    assert results["mean"][1].tolist() == [9.0, 9.0] and results["sum"][1].tolist() == [36.0, 36.0]
    assert results["mean"][2].tolist() == [1.0, 1.0] == results["sum"][2].tolist()
    assert results["mean"][0].tolist() == [0.0, 0.0]


def test_float16_table_and_state():
    emb = gr.ShardedEmbedding(20, 4, "h", dtype=torch.float16)
    opt = gr.SparseAdam([emb], lr=0.01, state_dtype=torch.float16)
    before = emb.weight.clone()
    h = emb(torch.tensor([3, 3, 8]))
    assert h.dtype == torch.float16
    h.float().sum().backward()
    opt.step()
    changed = (emb.weight != before).any(1).nonzero().flatten().tolist()
    assert changed == [3, 8]
    assert opt.state["h"]["exp_avg"].dtype == torch.float16
    assert opt.state["h"]["step"].dtype == torch.int32


def test_bad_ids_and_arguments():
    emb = gr.ShardedEmbedding(10, 2, "b")
    with pytest.raises(IndexError, match="id 10 out of range"):
        emb(torch.tensor([1, 10]))
    with pytest.raises(IndexError, match="id -1"):
        emb(torch.tensor([-1]))
    with pytest.raises(TypeError, match="integers"):
        emb(torch.tensor([1.0]))
    with pytest.raises(ValueError, match="policy"):
        gr.ShardedEmbedding(10, 2, "b", policy="cyclic")
    with pytest.raises(ValueError, match="unique"):
        gr.SparseAdam([emb, gr.ShardedEmbedding(10, 2, "b")], lr=0.1)
    with pytest.raises(ValueError, match="duplicates"):
        gr.SparseAdam([emb], lr=0.1, duplicates="max")
    with pytest.raises(TypeError):
        gr.SparseAdagrad([torch.nn.Embedding(3, 2)], lr=0.1)
    with pytest.raises(ValueError, match="policy is for 12 rows on 1 ranks"):
        gr.ShardedEmbedding(10, 2, "b", policy=RangePolicy.even(12, 1))
    with pytest.raises(ValueError, match="name must match"):
        gr.ShardedEmbedding(10, 2, "a.b")


# ---- several processes ------------------------------------------------------------------------

CONFIGS = (
    ("remainder", "adam", "mean"),
    ("range", "adam", "sum"),
    ("remainder", "adagrad", "sum"),
    ("range", "adagrad", "mean"),
    ("even", "adam", "mean"),  # a policy object: range with even boundaries instead of WholeGraph's
)


def make_policy_arg(policy: str, rows: int, world: int):
    return RangePolicy.even(rows, world) if policy == "even" else policy
STEPS = 3


def _train_worker(rank: int, world: int) -> dict:
    """Every config on this rank: initial rows, first lookups, rows and states after STEPS steps."""
    out = {}
    for policy, kind, duplicates in CONFIGS:
        embs = [gr.ShardedEmbedding(rows, dim, name, policy=make_policy_arg(policy, rows, world)) for name, rows, dim in SPECS]
        initial = collect(embs, None)
        ids, _ = global_batch(0, 50, 4)
        piece = rank_piece(ids, rank, world)
        with torch.no_grad():
            looked_up = embs[0](torch.from_numpy(piece)).numpy().copy()
        opt = make_optimizer(kind, embs, duplicates)
        train_steps(embs, opt, range(STEPS), rank, world)
        out[(policy, kind, duplicates)] = {"initial": initial, "lookup": (piece, looked_up), "final": collect(embs, opt)}
    if world > 1:
        # a rank asking for an id out of range fails at once, and the others still get their rows
        emb = gr.ShardedEmbedding(50, 4, "a", policy="remainder")
        with torch.no_grad():
            if rank == world - 1:
                with pytest.raises(IndexError, match="id 50 out of range"):
                    emb(torch.tensor([1, 50]))
            else:
                out["lookup beside a bad rank"] = (piece, emb(torch.from_numpy(piece)).numpy().copy())
        # ranks disagreeing about a table fail at construction instead of hanging in the first lookup
        with pytest.raises(RankMismatchError, match="ranks disagree about embedding 'bad'"):
            gr.ShardedEmbedding(10 + rank, 2, "bad")
    return out


@pytest.fixture(scope="module")
def single_process_initial():
    return initial_tables()


@pytest.mark.parametrize("world", [1, 2, 4])
def test_multiprocess_training_matches_single_process_reference(world, single_process_initial):
    per_rank = run_distributed(_train_worker, world, timeout_s=120)
    for config in CONFIGS:
        _, kind, duplicates = config
        initial, _ = assemble([r[config]["initial"] for r in per_rank])
        for name, _, _ in SPECS:
            np.testing.assert_array_equal(initial[name], single_process_initial[name], err_msg=f"{config} {name} initial")
        for r in per_rank:
            piece, rows = r[config]["lookup"]
            np.testing.assert_array_equal(rows, single_process_initial["a"][piece].astype(np.float32))
        tables, states = assemble([r[config]["final"] for r in per_rank])
        ref_tables, ref_states = reference_train(kind, duplicates, range(STEPS))
        assert_close_to_reference(tables, states, ref_tables, ref_states, kind)
    for r in per_rank[:-1] if world > 1 else ():
        piece, rows = r["lookup beside a bad rank"]
        np.testing.assert_array_equal(rows, single_process_initial["a"][piece].astype(np.float32))
