"""More epoch-level checks of the loaders' temporal keywords (beside tests/test_temporal_loaders.py): given seed times
follow the seeds through the shuffle, "last" takes the latest allowed in-edges (against a brute-force count), time
arrays of the wrong length are one-line errors, rows fetched after sampling give the same batches, binary negatives
sample at their positive's time, and two gloo ranks (homogeneous with links, typed) draw nothing later than the seed."""

from pathlib import Path

import numpy as np
import pytest
import torch
from support.gloo_processes import run_distributed

import gpart.runtime as gr
from gpart.base.errors import GpartError

CORA = Path(__file__).resolve().parents[1] / "sample_data" / "cora.npz"


@pytest.fixture(scope="module")
def cora_timed(tmp_path_factory):
    """Cora in 1 and 2 partitions with node times "t" (integers 0..99) and edge times "et" (floats in [0, 1))."""
    from gpart.pipeline.partition import partition_graph

    root = tmp_path_factory.mktemp("timed")
    with np.load(CORA, allow_pickle=False) as z:
        num_nodes, num_edges = int(z["num_nodes"]), z["src"].size
    t = np.random.default_rng(1).integers(0, 100, num_nodes).astype(np.float64)
    et = np.random.default_rng(2).random(num_edges)
    np.save(root / "t.npy", t)
    np.save(root / "et.npy", et)
    for name, parts in (("one", 1), ("two", 2)):
        partition_graph(CORA, root / name, parts, "metis", node_data={"t": str(root / "t.npy")},
                        edge_data={"et": str(root / "et.npy")})
    return root, torch.from_numpy(t), torch.from_numpy(et)


def _epoch_edges_in_time(loader, node_time, seed_time_of) -> int:
    """Checks every batch of one epoch: every sampled edge's source is no later than the time of its node's seed."""
    edges = 0
    for b in loader:
        src, dst = b.edge_index
        seeds_t = seed_time_of(b)
        assert bool((node_time[b.n_id[src]] <= seeds_t[b.batch[dst]]).all())
        assert torch.equal(b.batch[src], b.batch[dst])
        edges += int(src.numel())
    return edges


def test_node_times_bound_every_sampled_edge_over_an_epoch(cora_timed):
    root, t, _ = cora_timed
    part = gr.load_partition(root / "one", device="cpu")
    ids = torch.arange(0, part.num_nodes, 3)
    seed_time = torch.from_numpy(np.random.default_rng(3).integers(20, 100, ids.numel())).double()
    # a batch's seeds are the first batch_size nodes; each seed's time is looked up by its id (ids are distinct)
    time_of_id = torch.full((part.num_nodes,), -1.0, dtype=torch.float64).index_copy_(0, ids, seed_time)
    for strategy in ("uniform", "last"):
        loader = gr.DistNeighborLoader(part, ids, fanouts=[5, 3], batch_size=128, time="t", seed_time=seed_time,
                                       temporal_strategy=strategy, disjoint=True)
        edges = _epoch_edges_in_time(loader, t, lambda b: time_of_id[b.n_id[: b.batch_size]])
        assert edges > 1000
    # the default seed time is the seed's own node time
    loader = gr.DistNeighborLoader(part, ids, fanouts=[5, 3], batch_size=256, time="t", disjoint=True)
    assert _epoch_edges_in_time(loader, t, lambda b: t[b.n_id[: b.batch_size]]) > 1000


def test_last_takes_the_latest_allowed_in_edges(cora_timed):
    root, t, _ = cora_timed
    part = gr.load_partition(root / "one", device="cpu")
    ids = torch.arange(part.num_nodes)
    loader = gr.DistNeighborLoader(part, ids, fanouts=[2], batch_size=4096, time="t", temporal_strategy="last",
                                   disjoint=True, shuffle=False, seed_time=torch.full((ids.numel(),), 50.0))
    (b,) = list(loader)
    src, dst = b.edge_index
    # per seed: the sampled sources' times are the two largest among the in-neighbours with time <= 50
    indptr, indices = part.indptr, part.indices
    seed_of = b.n_id[dst]
    checked = 0
    for node in torch.unique(seed_of)[:300].tolist():
        cand = torch.sort(t[indices[indptr[node]:indptr[node + 1]]], descending=True).values
        cand = cand[cand <= 50][:2]
        got = torch.sort(t[b.n_id[src[seed_of == node]]], descending=True).values
        assert torch.equal(got, cand)
        checked += 1
    assert checked == 300


def test_edge_times_and_reproducible_epochs(cora_timed):
    root, _, et = cora_timed
    part = gr.load_partition(root / "one", device="cpu")
    ids = torch.arange(0, part.num_nodes, 2)
    seed_time = torch.from_numpy(np.random.default_rng(4).random(ids.numel()))

    def epoch(seed: int) -> list:
        loader = gr.DistNeighborLoader(part, ids, fanouts=[4, 4], batch_size=200, time="et", seed_time=seed_time,
                                       disjoint=True, seed=seed)
        time_of_id = torch.zeros(part.num_nodes, dtype=torch.float64).index_copy_(0, ids, seed_time)
        out = []
        for b in loader:
            seed_t = time_of_id[b.n_id[: b.batch_size]]
            assert bool((et[b.e_id] <= seed_t[b.batch[b.edge_index[1]]]).all())
            out.append((b.n_id, b.e_id))
        return out

    first, again, other = epoch(0), epoch(0), epoch(1)
    assert sum(int(e.numel()) for _, e in first) > 1000
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, again))
    assert any(not torch.equal(a[1], b[1]) for a, b in zip(first, other))


@pytest.mark.parametrize("settings, message", [
    (dict(time="t", disjoint=False), "time= needs disjoint=True"),
    (dict(time="t", temporal_strategy="latest"), "temporal_strategy 'latest' is not one of uniform, last"),
    (dict(time="nope"), "time 'nope' is neither a node data nor an edge data array"),
    (dict(time="t", seed_time=[1.0, 2.0]), "seed_time has 2 entries, expected 10"),
    (dict(time="t", seed_time=[float("nan")] * 10), "seed_time holds NaN at entry 0"),
    (dict(time="et"), "seed_time is needed with edge times"),
    (dict(seed_time=[1.0] * 10), "seed_time needs time="),
])
def test_bad_temporal_settings_are_one_line_errors(cora_timed, settings, message):
    root, _, _ = cora_timed
    part = gr.load_partition(root / "one", device="cpu")
    settings = {"disjoint": True, **settings}
    with pytest.raises(GpartError, match=message) as got:
        gr.DistNeighborLoader(part, torch.arange(10), fanouts=[2], **settings)
    assert "\n" not in str(got.value)


def test_wrong_length_and_nan_node_times_are_one_line_errors(cora_timed):
    root, _, _ = cora_timed
    part = gr.load_partition(root / "one", device="cpu")
    part.node_data["short"] = torch.zeros(part.num_nodes - 1)
    part.node_data["nan"] = torch.zeros(part.num_nodes).index_fill_(0, torch.tensor([7]), float("nan"))
    for name, message in (("short", "has 2707 entries, expected 2708"), ("nan", "holds NaN at entry 7")):
        with pytest.raises(GpartError, match=message) as got:
            gr.DistNeighborLoader(part, torch.arange(10), fanouts=[2], time=name, disjoint=True)
        assert "\n" not in str(got.value)


def test_link_loader_samples_both_endpoints_at_the_link_time(cora_timed):
    root, t, _ = cora_timed
    part = gr.load_partition(root / "one", device="cpu")
    pairs = torch.stack([torch.arange(0, 600), torch.arange(600, 1200)])
    link_time = torch.from_numpy(np.random.default_rng(5).integers(10, 100, 600)).double()
    loader = gr.DistLinkNeighborLoader(part, pairs, fanouts=[5, 3], batch_size=100, neg_sampling="binary", time="t",
                                       edge_label_time=link_time, disjoint=True)
    time_of_src = torch.zeros(part.num_nodes, dtype=torch.float64).index_copy_(0, pairs[0], link_time)
    edges = 0
    for b in loader:
        src, dst = b.edge_index
        num_pos = int((b.edge_label == 1).sum())
        pos_src = b.n_id[b.edge_label_index[0, :num_pos]]
        batch_time = time_of_src[pos_src]  # `batch` is the pair index modulo the positives: the positive's time
        assert bool((t[b.n_id[src]] <= batch_time[b.batch[dst]]).all())
        edges += int(src.numel())
    assert edges > 2000
    # triplet negatives: every node of a positive's sub-graphs (its source, destination and negatives) at its time
    loader = gr.DistLinkNeighborLoader(part, pairs, fanouts=[5, 3], batch_size=100, neg_sampling="triplet", neg_ratio=2,
                                       time="t", edge_label_time=link_time, disjoint=True, temporal_strategy="last")
    edges = 0
    for b in loader:
        src, dst = b.edge_index
        batch_time = time_of_src[b.n_id[b.src_index]]
        assert bool((t[b.n_id[src]] <= batch_time[b.batch[dst]]).all())
        edges += int(src.numel())
    assert edges > 2000
    with pytest.raises(GpartError, match="edge_label_time has 3 entries, expected 600"):
        gr.DistLinkNeighborLoader(part, pairs, fanouts=[2], time="t", edge_label_time=[1.0, 2.0, 3.0], disjoint=True)
    with pytest.raises(GpartError, match="edge_label_time is needed"):
        gr.DistLinkNeighborLoader(part, pairs, fanouts=[2], time="t", disjoint=True)


@pytest.fixture(scope="module")
def hetero_timed(tmp_path_factory):
    """cora_hetero (paper, word) with node times "t" for both node types, in one partition."""
    from gpart.pipeline.partition import partition_graph

    root = tmp_path_factory.mktemp("typed_timed")
    with np.load(CORA.parent / "cora_hetero.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    times = {nt: np.random.default_rng(9 + i).integers(0, 100, int(arrays[f"{nt}/num_nodes"])).astype(np.float64)
             for i, nt in enumerate(("paper", "word"))}
    np.savez(root / "hetero.npz", **arrays, **{f"{nt}/t": v for nt, v in times.items()})
    partition_graph(root / "hetero.npz", root / "typed", 1, "metis")
    partition_graph(root / "hetero.npz", root / "typed_two", 2, "metis")
    return root / "typed", {nt: torch.from_numpy(v) for nt, v in times.items()}


def test_typed_node_times_bound_every_sampled_edge(hetero_timed):
    path, times = hetero_timed
    part = gr.load_partition(path, device="cpu")
    fanouts = {etype: [3, 2] for etype in part.edge_types}
    ids = torch.arange(0, 2708, 5)
    seed_time = torch.from_numpy(np.random.default_rng(11).integers(30, 100, ids.numel())).double()
    time_of_id = torch.zeros(2708, dtype=torch.float64).index_copy_(0, ids, seed_time)
    edges = 0
    for strategy in ("uniform", "last"):
        loader = gr.DistNeighborLoader(part, {"paper": ids}, fanouts=fanouts, batch_size=100, time="t",
                                       seed_time=seed_time, temporal_strategy=strategy, disjoint=True)
        for b in loader:
            seed_t = time_of_id[b.n_id["paper"][: b.batch_size]]
            for (s, _, d), ei in b.edge_index.items():
                src_t = times[s][b.n_id[s][ei[0]]]
                assert bool((src_t <= seed_t[b.batch[d][ei[1]]]).all())
                assert torch.equal(b.batch[s][ei[0]], b.batch[d][ei[1]])
                edges += int(ei.shape[1])
    assert edges > 2000
    with pytest.raises(GpartError, match="one fanout per hop") as got:
        gr.DistNeighborLoader(part, {"paper": ids}, fanouts={**fanouts, part.edge_types[0]: [4, 2]}, time="t",
                              disjoint=True)
    assert "\n" not in str(got.value)
    with pytest.raises(GpartError, match="node time 'word/t' is missing"):
        part.node_data.pop(("word", "t"))
        gr.DistNeighborLoader(part, {"paper": ids}, fanouts=fanouts, time="t", disjoint=True)


def _two_rank_epoch(rank: int, world_size: int, root) -> dict:
    part = gr.load_partition(root / "two", device="cpu")
    t = torch.from_numpy(np.load(root / "t.npy"))
    owned = part.node_ids[: part.num_owned].to(torch.int64)
    loader = gr.DistNeighborLoader(part, owned, fanouts=[4, 3], batch_size=256, time="t", disjoint=True, timeout_s=30)
    edges, late, remote = 0, 0, 0
    for b in loader:
        src, dst = b.edge_index
        seed_t = t[b.n_id[: b.batch_size]]
        late += int((t[b.n_id[src]] > seed_t[b.batch[dst]]).sum())
        remote += int((part.local_rows(b.n_id[src]) < 0).sum())
        edges += int(src.numel())
    # links between owned nodes and the next ones, at the source's time: both endpoints sample no later than it
    pairs = torch.stack([owned[:300], owned[1:301]])
    link = gr.DistLinkNeighborLoader(part, pairs, fanouts=[3, 2], batch_size=100, neg_sampling="binary", time="t",
                                     edge_label_time=t[pairs[0]], disjoint=True, timeout_s=30)
    for b in link:
        num_pos = int((b.edge_label == 1).sum())
        pair_t = t[b.n_id[b.edge_label_index[0, :num_pos]]]
        src, dst = b.edge_index
        late += int((t[b.n_id[src]] > pair_t[b.batch[dst]]).sum())
        edges += int(src.numel())
    return {"edges": edges, "late": late, "remote": remote}


def _two_rank_typed(rank: int, world_size: int, path, times) -> dict:
    part = gr.load_partition(path, device="cpu")
    owned = part.owned_ids("paper")
    loader = gr.DistNeighborLoader(part, {"paper": owned}, fanouts={et: [3, 2] for et in part.edge_types},
                                   batch_size=128, time="t", temporal_strategy="last", disjoint=True, timeout_s=30)
    edges, late = 0, 0
    for b in loader:
        seed_t = times["paper"][b.n_id["paper"][: b.batch_size]]
        for (s, _, d), ei in b.edge_index.items():
            late += int((times[s][b.n_id[s][ei[0]]] > seed_t[b.batch[d][ei[1]]]).sum())
            edges += int(ei.shape[1])
    return {"edges": edges, "late": late}


def test_two_gloo_ranks_sample_in_time_across_partitions(cora_timed):
    """Needs the protocol's seed_time across partitions (helper tdist): every rank's epoch has sampled edges, some
    from the other partition, and none later than its seed's time."""
    root, _, _ = cora_timed
    got = run_distributed(_two_rank_epoch, 2, root, timeout_s=180)
    assert all(g["edges"] > 1000 and g["late"] == 0 for g in got)
    assert sum(g["remote"] for g in got) > 0


def test_two_gloo_ranks_sample_typed_graphs_in_time(hetero_timed):
    """As above on a typed partition (node times per node type, gathered per type at build)."""
    path, times = hetero_timed
    got = run_distributed(_two_rank_typed, 2, path.parent / "typed_two", times, timeout_s=180)
    assert all(g["edges"] > 1000 and g["late"] == 0 for g in got)


def test_rows_fetched_after_sampling_give_the_same_temporal_batches(cora_timed):
    from gpart.runtime.loaders.node import unfused_loader

    root, _, _ = cora_timed
    part = gr.load_partition(root / "one", device="cpu")
    settings = dict(fanouts=[4, 2], batch_size=300, time="t", temporal_strategy="last", disjoint=True, seed=3)
    fused = list(gr.DistNeighborLoader(part, torch.arange(0, 2708, 2), **settings))
    unfused = list(unfused_loader(part, torch.arange(0, 2708, 2), **settings))
    assert len(fused) == len(unfused) > 1
    for a, b in zip(fused, unfused):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.e_id, b.e_id) and torch.equal(a.x, b.x)


def test_typed_time_arrays_of_the_wrong_length_are_one_line_errors(hetero_timed):
    path, _ = hetero_timed
    part = gr.load_partition(path, device="cpu")
    fanouts = {etype: [2] for etype in part.edge_types}
    part.node_data[("paper", "short")] = torch.zeros(5)
    part.node_data[("word", "short")] = torch.zeros(part.num_nodes_of("word"))
    etype = part.edge_types[0]
    for other in part.edge_types:
        part.edge_data[(other, "eshort")] = torch.zeros(int((part.edge_type == part.edge_types.index(other)).sum()))
    part.edge_data[(etype, "eshort")] = torch.zeros(3)
    for name, seed_time, message in (("short", None, "node time 'paper/short' has 5 entries, expected 2708"),
                                     ("eshort", [1.0] * 4, "has 3 entries, expected")):
        with pytest.raises(GpartError, match=message) as got:
            gr.DistNeighborLoader(part, {"paper": torch.arange(4)}, fanouts=fanouts, time=name, seed_time=seed_time,
                                  disjoint=True)
        assert "\n" not in str(got.value)
