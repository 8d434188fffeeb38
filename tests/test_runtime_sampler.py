"""gpart.runtime sampling: the vectorised kernel, node_split/edge_split and DistNeighborLoader.

The kernel and the relabelling are checked against plain Python references
and chi-square tests; the loader on the repository's Cora sample (real data)
in one process (one partition) and over 2 and 4 gloo ranks, both storages,
metis and random partitions, with and without halo data. One process group
per world size runs every multi-process check, since start-up dominates.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
import torch
from support.example_scripts import load_example
from support.gloo_processes import error_text, run_distributed

import gpart.runtime as gr
from gpart.base.errors import InputError
from gpart.runtime.loaders.node import unfused_loader
from gpart.runtime.sampling.kernels import Relabeller, floyd_offsets, sample_columns

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"
FANOUTS = [4, 3]

# (method, storage, halo) per world size
LAYOUTS = {2: [("metis", "binary", 1), ("random", "hdf5", 0)], 4: [("metis", "hdf5", 0), ("random", "binary", 1)]}


def _cora() -> dict[str, np.ndarray]:
    with np.load(CORA, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _chi2_critical(df: int) -> float:
    """Upper 0.1% point of chi-square with df degrees of freedom (Wilson-Hilferty approximation)."""
    z = 3.09
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _chi2(observed: np.ndarray) -> float:
    expected = observed.sum() / observed.size
    return float(((observed - expected) ** 2 / expected).sum())


# ---------------------------------------------------------------- kernel


def _csc(degrees: list[int]) -> torch.Tensor:
    return torch.tensor(np.concatenate([[0], np.cumsum(degrees)]), dtype=torch.int64)


def test_sample_columns_counts_ranges_and_distinct():
    gen = torch.Generator().manual_seed(0)
    degrees = [0, 1, 3, 5, 6, 40, 1000, 7, 5]
    indptr = _csc(degrees)
    cols = torch.tensor([8, 0, 5, 6, 2, 6, 4, 1, 7, 3])  # a repeated column is sampled twice
    for fanout in (1, 5, 6):
        for replace in (False, True):
            picks = sample_columns(indptr, cols, fanout, replace, gen)
            want = [min(fanout, degrees[c]) if not replace else (fanout if degrees[c] else 0) for c in cols.tolist()]
            assert picks.counts.tolist() == want
            for c, seg in zip(cols.tolist(), picks.positions.split(want)):
                assert bool(((seg >= indptr[c]) & (seg < indptr[c + 1])).all())
                if not replace:
                    assert seg.unique().numel() == seg.numel()
    everything = sample_columns(indptr, cols, -1)
    assert everything.counts.tolist() == [degrees[c] for c in cols.tolist()]
    assert torch.equal(everything.positions, torch.cat([torch.arange(int(indptr[c]), int(indptr[c + 1])) for c in cols.tolist()]))
    empty = sample_columns(indptr, torch.zeros(0, dtype=torch.int64), 3, False, gen)
    assert empty.counts.numel() == 0 and empty.positions.numel() == 0


def test_slot_table_and_run_paths_give_the_same_picks(monkeypatch):
    indptr = _csc([3, 47, 2, 148, 1000, 0, 11])
    cols = torch.tensor([0, 1, 2, 3, 4, 1, 4, 5, 6, 6])
    for fanout in (2, 10, 40):
        table = sample_columns(indptr, cols, fanout, False, torch.Generator().manual_seed(fanout))
        monkeypatch.setattr("gpart.runtime.sampling.kernels.SLOT_TABLE_FANOUT", 0)
        runs = sample_columns(indptr, cols, fanout, False, torch.Generator().manual_seed(fanout))
        monkeypatch.undo()
        assert torch.equal(table.counts, runs.counts) and torch.equal(table.positions, runs.positions)


def test_without_replacement_is_uniform_over_subsets():
    # deg 6, fanout 3: all 20 subsets equally likely; deg 50, fanout 10: every neighbour equally often.
    gen = torch.Generator().manual_seed(1)
    indptr = _csc([6, 50])
    trials = 12000
    picks = sample_columns(indptr, torch.zeros(trials, dtype=torch.int64), 3, False, gen)
    subsets = Counter(tuple(sorted(row)) for row in picks.positions.reshape(trials, 3).tolist())
    assert set(subsets) == set(combinations(range(6), 3))
    assert _chi2(np.array(list(subsets.values()))) < _chi2_critical(19)
    picks = sample_columns(indptr, torch.ones(4000, dtype=torch.int64), 10, False, gen)
    freq = np.bincount(picks.positions.numpy() - 6, minlength=50)
    assert _chi2(freq) < _chi2_critical(49)
    picks = sample_columns(indptr, torch.ones(4000, dtype=torch.int64), 10, True, gen)
    assert _chi2(np.bincount(picks.positions.numpy() - 6, minlength=50)) < _chi2_critical(49)


def test_floyd_paths_agree_and_degrees_just_above_fanout_are_uniform():
    # deg = fanout + 1 or + 2: most rounds collide, the case where taken tops chain.
    deg = torch.tensor([11, 12, 13, 40, 1000] * 200)
    a = floyd_offsets(deg, 10, torch.Generator().manual_seed(3), use_numpy=True)
    b = floyd_offsets(deg, 10, torch.Generator().manual_seed(3), use_numpy=False)
    assert torch.equal(a, b)
    assert bool((a < deg.unsqueeze(1)).all()) and bool((a >= 0).all())
    assert all(len(set(row)) == 10 for row in a.tolist())
    gen = torch.Generator().manual_seed(4)
    trials = 8000
    left_out = floyd_offsets(torch.full((trials,), 11), 10, gen)  # the one offset not taken: uniform over 11
    missing = 55 - left_out.sum(1)
    assert _chi2(np.bincount(missing.numpy(), minlength=11)) < _chi2_critical(10)
    pairs = floyd_offsets(torch.full((trials,), 6), 4, gen)  # 15 subsets of 4 out of 6
    subsets = Counter(tuple(sorted(row)) for row in pairs.tolist())
    assert len(subsets) == 15 and _chi2(np.array(list(subsets.values()))) < _chi2_critical(14)


def test_rowpack_round_trip():
    from gpart.runtime.sampling.packed_rows import RowLayout

    arrays = [torch.arange(5), torch.randn(5, 3), torch.tensor([True, False, True, True, False]), torch.randn(5, 2).bfloat16()]
    layout = RowLayout.of(arrays)
    packed = layout.pack(arrays)
    assert packed.dtype == torch.uint8 and packed.shape == (5, 8 + 12 + 1 + 4) == (5, layout.row_bytes)
    assert all(torch.equal(a, b) for a, b in zip(arrays, layout.unpack(packed)))
    assert all(torch.equal(a[2:3], b) for a, b in zip(arrays, layout.unpack(packed[2:3])))  # one row: strides differ
    assert [t.shape for t in layout.unpack(layout.pack([a[:0] for a in arrays]))] == [a[:0].shape for a in arrays]


def test_relabeller_first_appearance():
    rel = Relabeller(100, torch.device("cpu"))
    rel.start(torch.tensor([7, 3]))
    pos, new = rel.add_unique(torch.tensor([5, 3, 9, 5, 7, 42, 9]))
    assert new.tolist() == [5, 9, 42] and pos.tolist() == [2, 1, 3, 2, 0, 4, 3]
    pos, new = rel.add_unique(torch.tensor([42, 1, 1]))
    assert new.tolist() == [1] and pos.tolist() == [4, 5, 5]
    pos, new = rel.add_unique(torch.tensor([8, 1, 8, 6, 6]), final=True)  # the last hop: same answer
    assert new.tolist() == [8, 6] and pos.tolist() == [6, 5, 6, 7, 7]
    rel.reset()
    assert bool((rel.slot == torch.iinfo(torch.int32).max).all())


# ---------------------------------------------------------------- batches against the input


def check_batch(batch, fanouts, data: dict, indeg: np.ndarray, node_names=("feat",)) -> None:
    """Every invariant of a batch that the input graph decides."""
    src, dst = data["src"], data["dst"]
    n_id, ei, e_id = batch.n_id.numpy(), batch.edge_index.numpy(), batch.e_id.numpy()
    assert len(set(n_id.tolist())) == n_id.size  # de-duplicated (seeds are distinct here)
    assert sum(batch.num_sampled_nodes) == n_id.size and sum(batch.num_sampled_edges) == e_id.size
    assert len(batch.num_sampled_nodes) == len(fanouts) + 1 and batch.num_sampled_nodes[0] == batch.batch_size
    # every edge exists in the input, as source -> destination
    assert np.array_equal(src[e_id], n_id[ei[0]]) and np.array_equal(dst[e_id], n_id[ei[1]])
    first, edge_start = 0, 0
    for hop, fanout in enumerate(fanouts):
        size = batch.num_sampled_nodes[hop]
        frontier = n_id[first : first + size]
        hop_edges = slice(edge_start, edge_start + batch.num_sampled_edges[hop])
        # each frontier node got min(fanout, in-degree) distinct in-edges in this hop
        got = np.bincount(ei[1, hop_edges] - first, minlength=size)
        want = indeg[frontier] if fanout < 0 else np.minimum(indeg[frontier], fanout)
        assert np.array_equal(got, want), hop
        assert np.unique(e_id[hop_edges]).size == e_id[hop_edges].size
        assert ei[1, hop_edges].min(initial=first) >= first and ei[1, hop_edges].max(initial=first) < first + size
        first += size
        edge_start += batch.num_sampled_edges[hop]
    for name in node_names:
        assert np.array_equal(batch.node_data[name].numpy(), data[name][n_id])
    assert np.array_equal(batch.y.numpy(), data["label"][n_id[: batch.batch_size]])


def _signature(batches) -> list:
    return [(b.n_id.tolist(), b.edge_index.tolist(), b.e_id.tolist()) for b in batches]


@pytest.fixture(scope="module")
def cora_parts(tmp_path_factory) -> dict:
    from gpart.pipeline.partition import partition_graph

    if not CORA.exists():
        pytest.skip("sample_data/cora.npz missing")
    root = tmp_path_factory.mktemp("sampler_parts")
    out = {1: root / "one"}
    partition_graph(CORA, out[1], 1, "metis")
    for world_size, layouts in LAYOUTS.items():
        for method, storage, halo in layouts:
            d = root / f"{method}_{world_size}"
            partition_graph(CORA, d, world_size, method, storage=storage, halo=halo)
            out[(world_size, method)] = d
    # a star: node 0 has in-edges from 1..29 (and an edge back); its owner differs from some seeds' ranks
    star = root / "star.npz"
    leaves = np.arange(1, 30)
    np.savez(star, src=np.concatenate([leaves, [0]]), dst=np.concatenate([np.zeros(29, np.int64), [1]]),
             label=np.zeros(30, np.int64))
    for world_size in LAYOUTS:
        partition_graph(star, root / f"star_{world_size}", world_size, "remainder")
    out["star_root"] = root
    return out


def test_one_process_whole_graph(cora_parts):
    data = _cora()
    indeg = np.bincount(data["dst"], minlength=data["feat"].shape[0])
    part = gr.load_partition(cora_parts[1], device="cpu")
    train = gr.node_split(part, "train_mask")
    assert train.tolist() == np.flatnonzero(data["train_mask"]).tolist()
    loader = gr.DistNeighborLoader(part, train, fanouts=FANOUTS, batch_size=32, node_data=["feat", "train_mask"])
    batches = list(loader)
    assert len(batches) == len(loader) == 5 and [b.batch_size for b in batches] == [32, 32, 32, 32, 12]
    for b in batches:
        check_batch(b, FANOUTS, data, indeg, node_names=("feat", "train_mask"))
        assert b.x is b.node_data["feat"]
    assert sorted(sum((b.n_id[: b.batch_size].tolist() for b in batches), [])) == train.tolist()
    # reproducible: the same seed and epoch give the same batches; the next epoch differs
    again = gr.DistNeighborLoader(part, train, fanouts=FANOUTS, batch_size=32)
    assert _signature(again) == _signature(batches)
    assert _signature(again) != _signature(batches)  # epoch 1 now
    # -1 takes every in-edge; replace=True draws fanout edges for every node with in-edges
    full = next(iter(gr.DistNeighborLoader(part, train, fanouts=[-1, -1], batch_size=64, shuffle=False)))
    check_batch(full, [-1, -1], data, indeg)
    rep = next(iter(gr.DistNeighborLoader(part, train, fanouts=[3], batch_size=64, replace=True, labels=None, node_data=None)))
    frontier = rep.n_id[:64].numpy()
    assert np.array_equal(np.bincount(rep.edge_index[1].numpy(), minlength=64), np.where(indeg[frontier] > 0, 3, 0))
    assert rep.x is None and rep.y is None
    # edges: all training edges in one partition
    mask = np.zeros(data["src"].size, dtype=bool)
    mask[::3] = True
    assert gr.edge_split(part, mask).tolist() == np.flatnonzero(mask).tolist()
    assert gr.edge_split(part, torch.tensor([5, 1, 5])).tolist() == [1, 5]


def test_loader_and_split_errors(cora_parts):
    part = gr.load_partition(cora_parts[1], device="cpu")
    with pytest.raises(InputError, match=r"seeds hold ids outside 0\.\.2707"):
        gr.DistNeighborLoader(part, [0, 2708])
    with pytest.raises(InputError, match="seeds must be integer"):
        gr.DistNeighborLoader(part, torch.tensor([0.5]))
    with pytest.raises(InputError, match="no node data 'nope'"):
        gr.DistNeighborLoader(part, [0], node_data=["nope"])
    with pytest.raises(InputError, match="fanouts must be"):
        gr.DistNeighborLoader(part, [0], fanouts=[0])
    with pytest.raises(InputError, match="needs 2708 entries"):
        gr.node_split(part, np.ones(5, dtype=bool))
    with pytest.raises(InputError, match="has dtype torch.int64, a node mask must be bool"):
        gr.node_split(part, "label")
    with pytest.raises(InputError, match="edge ids outside"):
        gr.edge_split(part, [10**6])
    two = gr.load_partition(cora_parts[(2, "metis")], 0, device="cpu")
    with pytest.raises(InputError, match="has 2 partitions"):
        gr.DistNeighborLoader(two, [0])
    with pytest.raises(InputError, match="has 2 partitions"):
        gr.node_split(two, "train_mask")


def test_to_pyg_without_pyg(cora_parts):
    part = gr.load_partition(cora_parts[1], device="cpu")
    batch = next(iter(gr.DistNeighborLoader(part, [1, 2], fanouts=[2])))
    try:
        import torch_geometric  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="needs torch_geometric"):
            batch.to_pyg()
    else:
        data = batch.to_pyg()
        assert torch.equal(data.edge_index, batch.edge_index) and data.batch_size == 2


# ---------------------------------------------------------------- across gloo ranks


def _ranks_check(rank: int, world_size: int, parts: dict) -> dict:
    data = _cora()
    n = data["feat"].shape[0]
    indeg = np.bincount(data["dst"], minlength=n)
    out: dict = {"layouts": {}}
    for method, _, _ in LAYOUTS[world_size]:
        part = gr.load_partition(parts[(world_size, method)], device="cpu")
        ids = gr.node_split(part, torch.arange(0, n, 2))  # half the nodes as seeds
        loader = gr.DistNeighborLoader(part, ids, fanouts=FANOUTS, batch_size=96, seed=3)
        unfused = unfused_loader(part, ids, fanouts=FANOUTS, batch_size=96, seed=3)
        seen = []
        for batch, plain in zip(loader, unfused):
            check_batch(batch, FANOUTS, data, indeg)
            # node data in the sampling answers: the same batch as sampling, then gathering (and fewer collectives)
            assert all(torch.equal(getattr(batch, k), getattr(plain, k)) for k in ("n_id", "edge_index", "e_id", "x", "y"))
            seen += batch.n_id[: batch.batch_size].tolist()
        # 3 per hop (count table, requests, answers with the edges) + 3 for the last hop's rows
        assert loader.stats["collectives"] == len(loader) * (6 + 3)
        assert unfused.stats["collectives"] == len(loader) * (6 + 3 + 3)
        owned = int((part.owner(ids) == rank).sum())
        owned_selected = int((part.owner(torch.arange(0, n, 2)) == rank).sum())
        train = gr.node_split(part, "train_mask")
        edges = gr.edge_split(part, np.arange(data["src"].size) % 4 == 0)
        out["layouts"][method] = dict(split=ids.tolist(), seen=seen, batches=len(loader), owned=owned, owned_selected=owned_selected,
                                      train=train.tolist(), edges=edges.tolist(), collective_s=loader.stats["collective_s"])
    part = gr.load_partition(parts[(world_size, "random")], device="cpu")
    # reproducible for a fixed world size: the same seed gives the same batches
    ids = gr.node_split(part, "train_mask")
    first = _signature(gr.DistNeighborLoader(part, ids, fanouts=FANOUTS, batch_size=16, seed=9))
    assert first == _signature(gr.DistNeighborLoader(part, ids, fanouts=FANOUTS, batch_size=16, seed=9))
    # rank 0 has no seeds at all: it yields as many (empty) batches as the others and serves them
    mine = ids if rank else ids[:0]
    empty_run = [b.batch_size for b in gr.DistNeighborLoader(part, mine, fanouts=FANOUTS, batch_size=16)]
    out["empty_run"] = empty_run
    # a bad seed on one rank fails every rank in bounded time, naming the problem
    bad = torch.tensor([n + 5]) if rank == world_size - 1 else ids
    out["bad"] = error_text(lambda: gr.DistNeighborLoader(part, bad, timeout_s=20))
    # star graph: the hub's 29 in-neighbours are chosen uniformly, also when the hub is remote
    star = gr.load_partition(parts["star_root"] / f"star_{world_size}", device="cpu", node_data=["label"])
    hub = torch.zeros(600, dtype=torch.int64)
    freq = np.zeros(30, dtype=np.int64)
    for batch in gr.DistNeighborLoader(star, hub, fanouts=[5], batch_size=200, node_data=None, seed=rank):
        freq += np.bincount(batch.n_id[batch.edge_index[0]].numpy(), minlength=30)
        assert np.array_equal(np.bincount(batch.edge_index[1].numpy(), minlength=batch.batch_size), np.full(batch.batch_size, 5))
    out["star"] = freq.tolist()
    if world_size == 2:
        # rank 1 stops after one batch (and stays silent): rank 0's next exchange fails in bounded time
        loader = gr.DistNeighborLoader(part, ids, fanouts=FANOUTS, batch_size=8, timeout_s=2)
        start = time.monotonic()
        try:
            for _ in loader:
                if rank == 1:
                    time.sleep(5)
                    break
            out["stalled"] = "no error"
        except Exception as exc:  # noqa: BLE001 - the message is what is checked
            out["stalled"] = f"{time.monotonic() - start:.1f}s {type(exc).__name__}: {exc}"
    return out


@pytest.mark.parametrize("world_size", [2, 4])
def test_distributed_sampling(cora_parts, world_size):
    results = run_distributed(_ranks_check, world_size, cora_parts, timeout_s=150)
    data = _cora()
    n = data["feat"].shape[0]
    for method, _, _ in LAYOUTS[world_size]:
        per_rank = [r["layouts"][method] for r in results]
        splits = [r["split"] for r in per_rank]
        # equal shares (differ by at most one), together exactly the selection, once each
        assert max(map(len, splits)) - min(map(len, splits)) <= 1
        assert sorted(sum(splits, [])) == list(range(0, n, 2))
        # one epoch's seeds over all ranks are exactly the split, once each; every rank ran the same batches
        assert all(sorted(r["seen"]) == r["split"] for r in per_rank)
        assert len({r["batches"] for r in per_rank}) == 1
        # owned ids are preferred: a rank keeps as many of its own as its share allows
        assert all(r["owned"] == min(r["owned_selected"], len(r["split"])) for r in per_rank)
        trains = [r["train"] for r in per_rank]
        assert sorted(sum(trains, [])) == np.flatnonzero(data["train_mask"]).tolist()
        assert max(map(len, trains)) - min(map(len, trains)) <= 1
        edges = [r["edges"] for r in per_rank]
        assert sorted(sum(edges, [])) == list(range(0, data["src"].size, 4))
        assert max(map(len, edges)) - min(map(len, edges)) <= 1
        assert all(r["collective_s"] > 0 for r in per_rank)
    runs = [r["empty_run"] for r in results]
    assert runs[0] == [0] * len(runs[1]) and all(len(r) == len(runs[1]) and sum(r) > 0 for r in runs[1:])
    for rank, r in enumerate(results):
        if rank == world_size - 1:
            assert r["bad"].startswith("InputError") and "seeds hold ids outside" in r["bad"], r["bad"]
        else:
            assert r["bad"].startswith("RankMismatchError") and "seeds hold ids outside" in r["bad"], r["bad"]
    if world_size == 2:
        seconds, _, message = results[0]["stalled"].partition("s ")
        assert float(seconds) < 5 and message.startswith("RankMismatchError") and "did not complete within 2 s" in message, message
    freq = np.sum([r["star"] for r in results], axis=0)
    assert freq[0] == 0 and freq[1:].sum() == 600 * world_size * 5
    assert _chi2(freq[1:]) < _chi2_critical(28)


# ---------------------------------------------------------------- the training example


def _example():
    return load_example("train_sage")


EXAMPLE_ARGS = ["--epochs", "10", "--seed", "0", "--quiet"]


def _train_rank(rank: int, world_size: int, parts: str) -> dict:
    return _example().main(["--parts", parts, *EXAMPLE_ARGS])


def test_train_sage_example_accuracy(tmp_path):
    """GraphSAGE on undirected Cora: 2 METIS partitions on 2 gloo ranks reach the one-process accuracy (-2 points) and 0.75."""
    example = _example()
    for num_parts in (1, 2):
        example.main(["--prepare", str(CORA), "--num-parts", str(num_parts), "--parts", str(tmp_path / f"cora_{num_parts}")])
    whole = example.main(["--parts", str(tmp_path / "cora_1"), *EXAMPLE_ARGS])
    (two, two_again) = run_distributed(_train_rank, 2, str(tmp_path / "cora_2"), timeout_s=120)
    assert whole["world_size"] == 1 and two["world_size"] == 2
    assert two["test_acc"] == two_again["test_acc"]  # every rank reports the same global figure
    assert two["test_acc"] >= 0.75 and two["test_acc"] >= whole["test_acc"] - 0.02, (two, whole)
    assert whole["test_acc"] >= 0.75, whole
