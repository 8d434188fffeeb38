"""DistLinkNeighborLoader: link batches exact against the input, 1 process and 2 / 4 gloo ranks, homogeneous and typed.

Real data: the repository's Cora (partitioned with --add-reverse, so the
stored graph has every citation both ways) and its typed form. Every batch is
checked against the input: positive seed edges are input edges (and the very
edges whose ids were given), every sampled edge exists in the stored graph
with its edge id, strict negatives are no stored edge, with exclusion no
sampled edge joins a seed edge's endpoints in either direction, the labels
and triplet indices follow PyG's convention, and over the ranks one epoch
covers the seed edges once each.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from support.gloo_processes import run_distributed
from support.npz_arrays import npz_arrays

import gpart.runtime as gr
from gpart.base.errors import InputError

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"
HETERO = REPO / "sample_data" / "cora_hetero.npz"
FANOUTS = [4, 3]
TYPED_FANOUTS = {("paper", "cites", "paper"): [4, 2], ("word", "in", "paper"): [3, 2], ("paper", "has", "word"): [3, 2]}


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> dict:
    from gpart.pipeline.partition import partition_graph

    if not CORA.exists() or not HETERO.exists():
        pytest.skip("sample_data missing")
    root = tmp_path_factory.mktemp("link_parts")
    out = {}
    for n, method in ((1, "metis"), (2, "metis"), (4, "random")):
        out[n] = root / f"cora_{n}"
        partition_graph(CORA, out[n], n, method, add_reverse=True)
    for n in (1, 2):
        out[("typed", n)] = root / f"typed_{n}"
        partition_graph(HETERO, out[("typed", n)], n, "random")
    return out


def _pair_set(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    return np.unique(src.astype(np.int64) * n + dst)


def _within(keys: np.ndarray, src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    return np.isin(src.astype(np.int64) * n + dst, keys)


def check_homogeneous(batch, data: dict, mode, ratio: int, strict: bool, exclude: bool) -> int:
    """Every invariant of a homogeneous link batch that the input decides; returns the number of positives."""
    src, dst, n = data["src"], data["dst"], data["feat"].shape[0]
    num_input = src.size
    both = _pair_set(np.concatenate([src, dst]), np.concatenate([dst, src]), n)  # the stored graph (--add-reverse)
    n_id, ei, e_id = batch.n_id.numpy(), batch.edge_index.numpy(), batch.e_id.numpy()
    assert np.unique(n_id).size == n_id.size and sum(batch.num_sampled_edges) == e_id.size
    s, d = n_id[ei[0]], n_id[ei[1]]
    inp = e_id < num_input  # input edges keep their ids; the others are reverse copies of input pairs
    assert np.array_equal(src[e_id[inp]], s[inp]) and np.array_equal(dst[e_id[inp]], d[inp])
    assert _within(_pair_set(src, dst, n), d[~inp], s[~inp], n).all()
    b = batch.input_id.numel()
    eli = batch.edge_label_index.numpy()
    pos_s, pos_d = n_id[eli[0, :b]], n_id[eli[1, :b]]
    assert np.array_equal(pos_s, src[batch.input_id.numpy()]) and np.array_equal(pos_d, dst[batch.input_id.numpy()])
    assert np.array_equal(np.sort(n_id[: batch.batch_size]), np.unique(n_id[eli.reshape(-1)]) if mode != "triplet"
                          else np.unique(np.concatenate([n_id[eli.reshape(-1)], n_id[batch.dst_neg_index.numpy().reshape(-1)]])))
    if mode == "binary":
        assert eli.shape[1] == b + round(ratio * b)
        assert batch.edge_label.tolist() == [1.0] * b + [0.0] * (eli.shape[1] - b)
        neg_s, neg_d = n_id[eli[0, b:]], n_id[eli[1, b:]]
    elif mode == "triplet":
        neg = batch.dst_neg_index.numpy().reshape(b, ratio)
        assert torch.equal(batch.src_index, batch.edge_label_index[0]) and torch.equal(batch.dst_pos_index, batch.edge_label_index[1])
        neg_s, neg_d = np.repeat(pos_s, ratio), n_id[neg.reshape(-1)]
    else:
        assert eli.shape[1] == b and batch.edge_label is None
        neg_s = neg_d = np.zeros(0, np.int64)
    if strict:
        assert not _within(both, neg_s, neg_d, n).any()
    if exclude and b:
        seeds = _pair_set(pos_s, pos_d, n)
        assert not (_within(seeds, s, d, n) | _within(seeds, d, s, n)).any()
    return b


def test_one_process_link_batches(parts):
    data = npz_arrays(CORA)
    part = gr.load_partition(parts[1], device="cpu")
    train = gr.edge_split(part, torch.arange(0, data["src"].size, 3))
    seen = 0
    for mode, ratio, strict, exclude in ((None, 1, False, False), ("binary", 2, True, True), ("triplet", 3, True, True),
                                         ("binary", 1, False, True), ("triplet", 1, False, False)):
        loader = gr.DistLinkNeighborLoader(part, train, fanouts=FANOUTS, batch_size=200, neg_sampling=mode, neg_ratio=ratio,
                                           strict_negatives=strict, exclude_seed_edges=exclude, seed=1)
        ids = []
        for batch in loader:
            seen += check_homogeneous(batch, data, mode, ratio, strict, exclude)
            ids += batch.input_id.tolist()
        assert sorted(ids) == train.tolist() and len(loader) == 10
    # exclusion removes edges that sampling took: without it the seed pairs show up
    every = gr.DistLinkNeighborLoader(part, train, fanouts=[-1], batch_size=500, shuffle=False)
    batch = next(iter(every))
    eli = batch.edge_label_index
    pairs = set(zip(batch.n_id[eli[0]].tolist(), batch.n_id[eli[1]].tolist()))
    sampled = set(zip(batch.n_id[batch.edge_index[0]].tolist(), batch.n_id[batch.edge_index[1]].tolist()))
    assert len(pairs & sampled) == len(pairs)  # all in-edges of the destinations: every seed edge among them
    # [2, B] node pairs as seed edges, a graph without feat (the default node data is skipped)
    pair_loader = gr.DistLinkNeighborLoader(part, torch.tensor([[1, 2], [3, 4]]), fanouts=[2], node_data="feat")
    assert next(iter(pair_loader)).input_id is None
    bare = gr.load_partition(parts[1], device="cpu", node_data=[])
    assert next(iter(gr.DistLinkNeighborLoader(bare, train[:10], fanouts=[2]))).x is None


def test_link_loader_errors(parts):
    part = gr.load_partition(parts[1], device="cpu")
    for kwargs, message in (({"neg_sampling": "random"}, "neg_sampling must be None"),
                            ({"neg_sampling": "triplet", "neg_ratio": 1.5}, "positive integer neg_ratio"),
                            ({"batch_size": 0}, "batch_size must be >= 1")):
        with pytest.raises(InputError, match=message):
            gr.DistLinkNeighborLoader(part, [0, 1], **kwargs)
    with pytest.raises(InputError, match=r"seed edge ids outside 0\.\.10555"):
        gr.DistLinkNeighborLoader(part, [10556])
    with pytest.raises(InputError, match="node ids outside"):
        gr.DistLinkNeighborLoader(part, torch.tensor([[0], [5000]]))


def check_typed(batch, data: dict, etype, strict: bool, exclude: bool) -> int:
    key = ":".join(etype)
    for t, ei in batch.edge_index.items():  # every sampled typed edge exists with its typed id
        k = ":".join(t)
        e = batch.e_id[t].numpy()
        assert np.array_equal(data[f"{k}/src"][e], batch.n_id[t[0]][ei[0]].numpy())
        assert np.array_equal(data[f"{k}/dst"][e], batch.n_id[t[2]][ei[1]].numpy())
    b = batch.input_id.numel()
    eli = batch.edge_label_index.numpy()
    s_ids, d_ids = batch.n_id[etype[0]].numpy(), batch.n_id[etype[2]].numpy()
    pos_s, pos_d = s_ids[eli[0, :b]], d_ids[eli[1, :b]]
    e = batch.input_id.numpy()
    assert np.array_equal(pos_s, data[f"{key}/src"][e]) and np.array_equal(pos_d, data[f"{key}/dst"][e])
    n = 1 << 20
    stored = _pair_set(data[f"{key}/src"], data[f"{key}/dst"], n)
    assert batch.edge_label.tolist() == [1.0] * b + [0.0] * b
    if strict:
        assert not _within(stored, s_ids[eli[0, b:]], d_ids[eli[1, b:]], n).any()
    if exclude and etype in batch.edge_index:
        ei = batch.edge_index[etype].numpy()
        assert not _within(_pair_set(pos_s, pos_d, n), s_ids[ei[0]], d_ids[ei[1]], n).any()
    return b


def test_one_process_typed_link_batches(parts):
    data = npz_arrays(HETERO)
    part = gr.load_partition(parts[("typed", 1)], device="cpu")
    for etype in (("paper", "cites", "paper"), ("word", "in", "paper")):
        ids = torch.arange(0, data[f"{':'.join(etype)}/src"].size, 7)
        assert checked_typed_seeds(part, data, etype, ids, 300) == ids.tolist()
    pyg = pytest.importorskip("torch_geometric")
    assert pyg is not None
    data_pyg = next(iter(gr.DistLinkNeighborLoader(part, (etype, ids), fanouts=TYPED_FANOUTS, neg_sampling="binary", pyg=True)))
    assert data_pyg[etype].edge_label_index.shape[0] == 2


def _ranks(rank: int, world_size: int, parts: dict) -> dict:
    data = npz_arrays(CORA)
    part = gr.load_partition(parts[world_size], device="cpu")
    train = gr.edge_split(part, torch.arange(0, data["src"].size, 2))
    out = {"train": train.tolist()}
    for mode, ratio in (("binary", 1), ("triplet", 2)):
        loader = gr.DistLinkNeighborLoader(part, train, fanouts=FANOUTS, batch_size=128, neg_sampling=mode, neg_ratio=ratio,
                                           strict_negatives=True, exclude_seed_edges=True, seed=rank)
        ids = []
        for batch in loader:
            check_homogeneous(batch, data, mode, ratio, True, True)
            ids += batch.input_id.tolist()
        out[mode] = {"ids": ids, "batches": len(loader)}
    # a rank with no seed edges runs as many (empty) batches and serves the others
    mine = train if rank else train[:0]
    out["empty"] = [b.input_id.numel() for b in gr.DistLinkNeighborLoader(part, mine, fanouts=FANOUTS, batch_size=256)]
    if world_size == 2:
        typed = npz_arrays(HETERO)
        hpart = gr.load_partition(parts[("typed", 2)], device="cpu")
        etype = ("word", "in", "paper")
        ids = torch.arange(rank, typed["word:in:paper/src"].size, 2 * 5)
        out["typed"] = checked_typed_seeds(hpart, typed, etype, ids, 256) == ids.tolist()
    return out


@pytest.mark.parametrize("world_size", [2, 4])
def test_distributed_link_batches(parts, world_size):
    results = run_distributed(_ranks, world_size, parts, timeout_s=240)
    n_edges = npz_arrays(CORA)["src"].size
    assert sorted(sum((r["train"] for r in results), [])) == list(range(0, n_edges, 2))
    for mode in ("binary", "triplet"):
        assert len({r[mode]["batches"] for r in results}) == 1
        assert all(sorted(r[mode]["ids"]) == r["train"] for r in results)
    empty = [r["empty"] for r in results]
    assert sum(empty[0]) == 0 and all(len(e) == len(empty[1]) for e in empty) and sum(map(sum, empty[1:])) > 0
    if world_size == 2:
        assert all(r["typed"] for r in results)


def _typed_pairs(batch, etype) -> set:
    ei = batch.edge_index.get(etype)
    if ei is None:
        return set()
    return set(zip(batch.n_id[etype[0]][ei[0]].tolist(), batch.n_id[etype[2]][ei[1]].tolist()))


def test_typed_exclusion_removes_reverse_copies(tmp_path):
    """A typed result made with --add-reverse: excluding seed edges of (word, in, paper) also drops their copies in
    (paper, rev_in, word); of (paper, cites, paper) both directions within the relation."""
    from gpart.pipeline.partition import partition_graph

    if not HETERO.exists():
        pytest.skip("sample_data/cora_hetero.npz missing")
    partition_graph(HETERO, tmp_path / "rev", 1, "range", add_reverse=True)
    part = gr.load_partition(tmp_path / "rev", device="cpu")
    cases = {("word", "in", "paper"): ("paper", "rev_in", "word"), ("paper", "cites", "paper"): ("paper", "cites", "paper")}
    for etype, reverse in cases.items():
        fanouts = {etype: [-1], reverse: [-1]}
        ids = torch.arange(0, 400, 3)
        seen = {}
        for exclude in (False, True):
            batch = next(iter(gr.DistLinkNeighborLoader(part, (etype, ids), fanouts=fanouts, batch_size=len(ids),
                                                        shuffle=False, exclude_seed_edges=exclude)))
            eli = batch.edge_label_index
            seeds = set(zip(batch.n_id[etype[0]][eli[0]].tolist(), batch.n_id[etype[2]][eli[1]].tolist()))
            forward, back = _typed_pairs(batch, etype), {(b, a) for a, b in _typed_pairs(batch, reverse)}
            seen[exclude] = (len(seeds & forward), len(seeds & back))
        assert seen[False][0] == len(ids) and seen[False][1] > 0, seen  # every in-edge taken: the seeds are there
        assert seen[True] == (0, 0), seen


def checked_typed_seeds(part, data, etype, ids, batch_size: int) -> list[int]:
    """Every strict, seed-excluding binary batch of `ids` of `etype` checked against the input; the seed edge ids the
    batches covered, sorted."""
    loader = gr.DistLinkNeighborLoader(part, (etype, ids), fanouts=TYPED_FANOUTS, batch_size=batch_size,
                                       neg_sampling="binary", strict_negatives=True, exclude_seed_edges=True)
    seen = []
    for batch in loader:
        check_typed(batch, data, etype, True, True)
        seen += batch.input_id.tolist()
    return sorted(seen)
