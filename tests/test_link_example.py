"""examples/train_link.py as a user runs it: --prepare holds the val/test pairs out of the partitioned graph (in
either direction) and refuses an existing output without --force; GraphSAGE link prediction on Cora, selected by
val AUC, reaches the test AUC and MRR asserted here in one process and on 2 gloo ranks (2 METIS partitions).

The runs here are shorter than the example's defaults (fewer, larger steps) to stay under ~30 s each on a loaded
2-core machine: measured test AUC 0.742 / MRR 0.103 (1 rank) and 0.770 / 0.119 (2 ranks); asserted AUC > 0.70
(random scoring gives 0.5) and MRR > 0.08 (random ranks among 100 candidates give about 0.052).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from support.example_scripts import load_example
from support.gloo_processes import run_distributed

import gpart.runtime as gr
from gpart.base.errors import InputError
from gpart.formats.input.readers import read_graph

CORA = Path(__file__).resolve().parents[1] / "sample_data" / "cora.npz"
SHORT_RUN = ["--epochs", "4", "--batch-size", "1024", "--lr", "0.01", "--seed", "0", "--eval-every", "2", "--quiet"]
LEAST_AUC = 0.70
LEAST_MRR = 0.08


def _prepare(out: Path, num_parts: int, *extra: str) -> None:
    load_example("train_link").main(["--prepare", str(CORA), "--num-parts", str(num_parts), "--parts", str(out), *extra])


def _train_rank(rank: int, world_size: int, parts: str) -> dict:
    return load_example("train_link").main(["--parts", parts, *SHORT_RUN])


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> dict[int, Path]:
    """Cora prepared by the example into 1 and 2 partitions (shared by the tests that only read them)."""
    out = tmp_path_factory.mktemp("link")
    for num_parts in (1, 2):
        _prepare(out / f"cora_{num_parts}", num_parts)
    return {n: out / f"cora_{n}" for n in (1, 2)}


def _stored_edges(parts: Path) -> np.ndarray:
    """[2, E] global (source, destination) of every edge the partitions store, read partition by partition."""
    first = gr.load_partition(parts, rank=0, device="cpu")
    found = []
    for rank in range(first.num_parts):
        part = gr.load_partition(parts, rank=rank, device="cpu")
        dst_local = torch.repeat_interleave(torch.arange(part.num_owned), part.indptr.diff())
        found.append(torch.stack([part.node_ids[part.indices], part.node_ids[dst_local]]).numpy())
    return np.concatenate(found, axis=1)


@pytest.mark.parametrize("num_parts", [1, 2])
def test_prepared_graph_holds_exactly_the_training_pairs_in_both_directions(prepared, num_parts):
    example = load_example("train_link")
    graph = read_graph(CORA)
    n = graph.num_nodes
    held = np.load(prepared[num_parts] / example.SPLIT_FILE, allow_pickle=False)
    held_out = np.concatenate([example.pair_keys(*held[f"{s}_pos"], n) for s in ("val", "test")])
    src, dst = _stored_edges(prepared[num_parts])
    stored = example.pair_keys(src, dst, n)
    assert not np.isin(stored, held_out).any()  # no val/test pair is stored, in either direction: no leak
    all_pairs = np.unique(example.pair_keys(graph.src, graph.dst, n))
    assert np.isin(held_out, all_pairs).all() and len(np.unique(held_out)) == len(held_out)
    assert np.array_equal(np.unique(stored), np.setdiff1d(all_pairs, held_out))  # every other pair is kept
    directed = np.unique(src.astype(np.int64) * n + dst)
    assert np.isin(dst.astype(np.int64) * n + src, directed).all()  # every stored edge has its reverse


def test_held_out_negatives_are_fixed_non_edges(prepared):
    example = load_example("train_link")
    graph = read_graph(CORA)
    n = graph.num_nodes
    one, two = (np.load(prepared[k] / example.SPLIT_FILE, allow_pickle=False) for k in (1, 2))
    all_pairs = np.unique(example.pair_keys(graph.src, graph.dst, n))
    for split in ("val", "test"):
        pos, neg, ranked = one[f"{split}_pos"], one[f"{split}_neg"], one[f"{split}_rank_neg"]
        assert neg.shape == pos.shape and ranked.shape == (pos.shape[1], example.RANK_NEGATIVES)
        sources = np.broadcast_to(pos[0][:, None], ranked.shape)
        for u, v in ((neg[0], neg[1]), (sources, ranked)):
            assert not np.isin(example.pair_keys(u, v, n), all_pairs).any() and (u != v).all()
        for name in (f"{split}_pos", f"{split}_neg", f"{split}_rank_neg"):  # one seeded draw, whatever the partitioning
            assert np.array_equal(one[name], two[name]), name
    assert [one[f"{s}_pos"].shape[1] for s in ("val", "test")] == [264, 528]  # of Cora's 5,278 distinct pairs


def test_split_pairs_puts_both_directions_of_a_pair_in_one_split():
    split, held_out = load_example("train_link").split_pairs(np.array([0, 1, 2, 3, 1]), np.array([1, 0, 3, 1, 3]), 4, 0)
    assert split[0] == split[1]  # 0 -> 1 and 1 -> 0: one pair
    assert sorted(held_out) == ["test", "val"] and all((p[0] < p[1]).all() for p in held_out.values())


def test_negatives_avoid_every_pair_and_a_graph_too_dense_is_one_error():
    example = load_example("train_link")
    src, dst = np.triu_indices(4, 1)  # every pair of nodes 0..3; node 4 joined to none
    known = np.unique(example.pair_keys(src, dst, 5))
    drawn = example.draw_negatives(np.array([0, 1, 4]), 4, 5, known, np.random.default_rng(0), "g.npz")
    assert (drawn[:2] == 4).all() and (drawn[2] < 4).all()
    with pytest.raises(InputError, match=r"^g\.npz: cannot draw negative pairs: after 1000 draws 1 still join"):
        example.draw_negatives(np.array([0]), 1, 4, np.unique(example.pair_keys(src, dst, 4)), np.random.default_rng(0), "g.npz")


def test_prepare_refuses_an_existing_output_without_force(tmp_path, capsys):
    out = tmp_path / "parts"
    _prepare(out, 1)
    manifest = (out / "manifest.json").read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        _prepare(out, 1)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.splitlines() == [f"error: {out}: already exists (a gpart result); use --force to replace it"], err
    assert (out / "manifest.json").read_bytes() == manifest  # untouched
    _prepare(out, 1, "--force")
    assert (out / "link_split.npz").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["parts"]  # no leftovers


@pytest.mark.parametrize("damage, problem", [
    ("remove", "not found: {parts} was not written by this example's --prepare (the held-out pairs are missing)"),
    ("truncate", "cannot read: "),
    ("drop_array", "no array 'test_rank_neg'; write it again with --prepare --force"),
])
def test_a_missing_or_bad_side_file_is_one_line(prepared, tmp_path, capsys, damage, problem):
    parts = tmp_path / "parts"
    shutil.copytree(prepared[1], parts)
    side = parts / "link_split.npz"
    if damage == "remove":
        side.unlink()
    elif damage == "truncate":
        side.write_bytes(side.read_bytes()[:100])
    else:
        arrays = dict(np.load(side, allow_pickle=False))
        del arrays["test_rank_neg"]
        np.savez(side, **arrays)
    with pytest.raises(SystemExit) as exc:
        load_example("train_link").main(["--parts", str(parts), "--epochs", "0", "--quiet"])
    err = capsys.readouterr().err.splitlines()
    assert exc.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {side}: {problem.format(parts=parts)}"), err


def test_auc_and_mrr_against_their_definitions():
    example = load_example("train_link")
    assert example.roc_auc(torch.tensor([3.0, 4.0]), torch.tensor([1.0, 2.0])) == 1.0
    assert example.roc_auc(torch.tensor([1.0]), torch.tensor([2.0])) == 0.0
    assert example.roc_auc(torch.tensor([1.0, 3.0]), torch.tensor([1.0, 2.0])) == (0.5 + 0 + 1 + 1) / 4  # a tie counts half
    # OGB: rank = 1 + #higher + #tied / 2; positive 1 beats both, positive 2 is below one and tied with one
    candidates = torch.tensor([[0.0, 1.0], [3.0, 2.0]])
    assert example.mrr(torch.tensor([5.0, 2.0]), candidates) == (1 / 1 + 1 / 2.5) / 2


def test_link_prediction_auc_and_mrr_one_and_two_ranks(prepared):
    whole = load_example("train_link").main(["--parts", str(prepared[1]), *SHORT_RUN])
    two, two_again = run_distributed(_train_rank, 2, str(prepared[2]), timeout_s=180)
    assert whole["world_size"] == 1 and two["world_size"] == 2
    assert two == two_again  # every rank reports the same global figures and picks the same epoch
    for report in (whole, two):
        assert report["best_epoch"] in (1, 3), report  # validated after epochs 1 and 3 (--eval-every 2)
        assert report["val_auc"] > LEAST_AUC, report
        assert report["test_auc"] > LEAST_AUC and report["test_mrr"] > LEAST_MRR, (whole, two)
