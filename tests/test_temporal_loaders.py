"""Temporal sampling through the loaders (time=, seed_time=, temporal_strategy=, edge_label_time=): no sampled edge
is later than its seed's time over an epoch, "last" takes the latest, bad settings are one-line errors before the
first batch, epochs reproduce; the link loader samples both endpoints at the link's time; across two gloo ranks."""

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
    (dict(time="t", disjoint=False), "time needs disjoint=True"),
    (dict(time="t", temporal_strategy="latest"), "temporal_strategy 'latest' is not one of uniform, last"),
    (dict(time="nope"), "time 'nope': no such node or edge data"),
    (dict(time="t", seed_time=[1.0, 2.0]), "seed_time has 2 entries, expected 10"),
    (dict(time="t", seed_time=[float("nan")] * 10), "seed_time holds NaN at entry 0"),
    (dict(time="et"), "seed_time is needed with edge times 'et'"),
    (dict(seed_time=[1.0] * 10), "seed_time was given without time"),
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
    with pytest.raises(GpartError, match="edge_label_time has 3 entries, expected 600"):
        gr.DistLinkNeighborLoader(part, pairs, fanouts=[2], time="t", edge_label_time=[1.0, 2.0, 3.0], disjoint=True)
    with pytest.raises(GpartError, match="edge_label_time is needed"):
        gr.DistLinkNeighborLoader(part, pairs, fanouts=[2], time="t", disjoint=True)


def test_typed_partitions_are_refused_in_one_line(tmp_path):
    from gpart.pipeline.partition import partition_graph

    partition_graph(CORA.parent / "cora_hetero.npz", tmp_path / "typed", 1, "metis")
    part = gr.load_partition(tmp_path / "typed", device="cpu")
    ntype = part.node_types[0]
    with pytest.raises(GpartError, match="temporal sampling takes a homogeneous partition") as got:
        gr.DistNeighborLoader(part, {ntype: torch.arange(4)}, fanouts={et: [2] for et in part.edge_types},
                              time="t", seed_time=[1.0] * 4, disjoint=True)
    assert "\n" not in str(got.value)


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
    return {"edges": edges, "late": late, "remote": remote}


def test_two_gloo_ranks_sample_in_time_across_partitions(cora_timed):
    """Needs the protocol's seed_time across partitions (helper tdist): every rank's epoch has sampled edges, some
    from the other partition, and none later than its seed's time."""
    root, _, _ = cora_timed
    got = run_distributed(_two_rank_epoch, 2, root, timeout_s=180)
    assert all(g["edges"] > 1000 and g["late"] == 0 for g in got)
    assert sum(g["remote"] for g in got) > 0
