"""time= / seed_time= / temporal_strategy= on DistNeighborLoader and DistLinkNeighborLoader (PyG's time_attr).

Cora with a node time array `t` and an edge time array `edge_t` (continuous, no ties), partitioned into 1
and into 2 (random, no halo data: the halo's node times come from their owners). Over whole epochs: no
sampled edge is later than its seed's time (a node carries its seed's time through the hops), each
(seed, node) got min(fanout, allowed in-edges) edges, "last" takes the latest; seed_time defaults to the
seed node's own time; bad options are one line before the first batch on every rank; 2 gloo ranks give
the same allowed sets.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from support.gloo_processes import error_text, run_distributed

import gpart.runtime as gr
from gpart.base.errors import GpartError
from gpart.runtime.loaders.batch import Batch

CORA = Path(__file__).resolve().parents[1] / "sample_data" / "cora.npz"
FANOUTS = [4, 3]


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> dict:
    from gpart.pipeline.partition import partition_graph

    root = tmp_path_factory.mktemp("temporal_loaders")
    data = dict(np.load(CORA))
    rng = np.random.default_rng(5)
    data["t"] = rng.random(int(data["num_nodes"]))
    data["edge_t"] = rng.random(data["src"].size)
    path = root / "cora_t.npz"
    np.savez(path, **data)
    partition_graph(path, root / "one", 1, "metis")
    partition_graph(path, root / "two", 2, "random")
    return {"data": data, 1: root / "one", 2: root / "two"}


def _check_batches(pairs, data: dict, kind: str, strategy: str) -> int:
    """Every (batch, times) against the input graph, a node's seed time being times[batch.batch[node]]; returns the
    edges checked."""
    src, dst = torch.from_numpy(data["src"]), torch.from_numpy(data["dst"])
    node_t, edge_t = torch.from_numpy(data["t"]), torch.from_numpy(data["edge_t"])
    time_of_edge = node_t[src] if kind == "node" else edge_t
    checked = 0
    for b, seed_t in pairs:
        node_seed_t = seed_t[b.batch]  # each node carries its seed's time
        s, d = b.edge_index
        e_t = time_of_edge[b.e_id]
        assert torch.equal(src[b.e_id], b.n_id[s]) and torch.equal(dst[b.e_id], b.n_id[d])
        assert bool((e_t <= node_seed_t[d]).all()), "an edge later than its seed's time was drawn"
        assert torch.equal(b.batch[s], b.batch[d])  # disjoint: an edge stays in its seed's sub-graph
        # each destination node got min(fanout, allowed) in-edges: compare with the full graph
        got = torch.bincount(d, minlength=b.n_id.numel())
        sampled_nodes = torch.arange(b.n_id.numel())[: sum(b.num_sampled_nodes[:-1])]
        hop_of = torch.repeat_interleave(torch.arange(len(b.num_sampled_nodes)), torch.tensor(b.num_sampled_nodes))
        for v in sampled_nodes[:: max(1, sampled_nodes.numel() // 40)].tolist():  # a sample of nodes per batch
            g, t = int(b.n_id[v]), float(node_seed_t[v])
            allowed = int(((dst == g) & (time_of_edge <= t)).sum())
            assert int(got[v]) == min(FANOUTS[int(hop_of[v])], allowed)
            if strategy == "last" and allowed:
                mine = set(b.e_id[d == v].tolist())
                cands = torch.nonzero((dst == g) & (time_of_edge <= t)).reshape(-1)
                latest = cands[torch.argsort(time_of_edge[cands], descending=True)][: FANOUTS[int(hop_of[v])]]
                assert mine == set(latest.tolist())
        checked += int(s.numel())
    return checked


@pytest.mark.parametrize("kind", ["node", "edge"])
@pytest.mark.parametrize("strategy", ["uniform", "last"])
def test_no_sampled_edge_is_later_than_its_seed(graph, kind, strategy):
    part = gr.load_partition(graph[1], device="cpu")
    data = graph["data"]
    seeds = torch.arange(0, 2708, 5)
    times = torch.from_numpy(np.random.default_rng(7).random(seeds.numel()))
    name = "t" if kind == "node" else "edge_t"
    loader = gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, batch_size=64, node_data=None, labels=None,
                                   time=name, seed_time=times, temporal_strategy=strategy, disjoint=True, seed=3)
    assert _check_batches(_with_seed_times(loader, seeds, times), data, kind, strategy) > 1000


def test_seed_time_defaults_to_the_seed_nodes_time_and_reproduces(graph):
    part = gr.load_partition(graph[1], device="cpu")
    data = graph["data"]
    seeds = torch.arange(1, 2708, 9)

    def epoch():
        loader = gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, batch_size=50, node_data=None, labels=None,
                                       time="t", disjoint=True, seed=4)
        return list(loader)

    first = epoch()
    node_t = torch.from_numpy(data["t"])
    assert _check_batches([(b, node_t[b.n_id[: b.batch_size]]) for b in first], data, "node", "uniform") > 500
    again = epoch()
    assert all(torch.equal(a.edge_index, b.edge_index) and torch.equal(a.n_id, b.n_id) for a, b in zip(first, again))
    # the time filter is real: without it, later edges are drawn
    plain = gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, batch_size=50, node_data=None, labels=None,
                                  disjoint=True, seed=4)
    src = torch.from_numpy(data["src"])
    later = sum(int((node_t[src[b.e_id]] > node_t[b.n_id[: b.batch_size]][b.batch[b.edge_index[1]]]).sum()) for b in plain)
    assert later > 100


@pytest.mark.parametrize("settings, words", [
    ({"time": "t"}, "time= needs disjoint=True"),
    ({"time": "t", "disjoint": True, "temporal_strategy": "first"}, "temporal_strategy 'first' is not one of"),
    ({"time": "nope", "disjoint": True}, "time 'nope' is neither a node data nor an edge data array"),
    ({"time": "edge_t", "disjoint": True}, "seed_time is needed with edge times"),
    ({"time": "t", "disjoint": True, "seed_time": [0.5] * 3}, "seed_time has 3 entries, expected 10"),
    ({"time": "t", "disjoint": True, "seed_time": [float("nan")] * 10}, "seed_time holds NaN at entry 0"),
    ({"seed_time": [0.5] * 10, "disjoint": True}, "seed_time needs time="),
    ({"time": "t", "disjoint": True, "weight": "edge_t", "temporal_strategy": "last"}, "temporal_strategy must be 'uniform'"),
])
def test_bad_time_options_are_one_line_before_the_first_batch(graph, settings, words):
    part = gr.load_partition(graph[1], device="cpu")
    with pytest.raises(GpartError) as err:
        gr.DistNeighborLoader(part, torch.arange(10), fanouts=FANOUTS, node_data=None, labels=None, **settings)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_every_edge_its_own_time_builds_and_bounds_the_draws(graph):
    """No limit on distinct times: the index sorts by run, then by time rank (two stable sorts, no packed key), so
    edge times that are all distinct (Cora's 10,556 stored edges, 10,556 times) index and draw like any others."""
    part = gr.load_partition(graph[1], device="cpu")
    data = graph["data"]
    assert np.unique(data["edge_t"]).size == data["edge_t"].size
    seeds = torch.arange(0, 2708, 7)
    times = torch.from_numpy(np.random.default_rng(2).random(seeds.numel()))
    loader = gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, batch_size=64, node_data=None, labels=None,
                                   time="edge_t", seed_time=times, temporal_strategy="last", disjoint=True, seed=4)
    assert _check_batches(_with_seed_times(loader, seeds, times), data, "edge", "last") > 500


def test_nan_in_the_time_array_is_refused(graph, tmp_path):
    from gpart.pipeline.partition import partition_graph

    data = dict(graph["data"])
    data["t"] = data["t"].copy()
    data["t"][17] = np.nan
    np.savez(tmp_path / "nan.npz", **data)
    partition_graph(tmp_path / "nan.npz", tmp_path / "p", 1, "metis")
    part = gr.load_partition(tmp_path / "p", device="cpu")
    with pytest.raises(GpartError, match="node time 't' holds NaN"):
        gr.DistNeighborLoader(part, torch.arange(10), fanouts=FANOUTS, node_data=None, labels=None, time="t", disjoint=True)


def test_link_loader_samples_both_endpoints_at_the_links_time(graph):
    part = gr.load_partition(graph[1], device="cpu")
    data = graph["data"]
    eids = torch.arange(0, 5429, 11)
    link_t = torch.from_numpy(data["edge_t"])[eids]  # each link at its own time: that edge itself is allowed
    loader = gr.DistLinkNeighborLoader(part, eids, fanouts=FANOUTS, batch_size=40, neg_sampling="binary", node_data=None,
                                       time="edge_t", edge_label_time=link_t, temporal_strategy="last", disjoint=True,
                                       shuffle=False, seed=2)
    batches = list(loader)
    assert len(batches) == -(-eids.numel() // 40)
    # disjoint link batches: `batch` is each node's positive pair (negatives take a positive's), so its time
    pairs = [(b, link_t[k * 40:(k + 1) * 40]) for k, b in enumerate(batches)]
    assert _check_batches(pairs, data, "edge", "last") > 500


def test_link_loader_time_needs_edge_label_time(graph):
    part = gr.load_partition(graph[1], device="cpu")
    with pytest.raises(GpartError, match="edge_label_time is needed with edge times and with node times"):
        gr.DistLinkNeighborLoader(part, torch.arange(20), fanouts=FANOUTS, node_data=None, time="edge_t", disjoint=True)


def _two_ranks(rank: int, world: int, parts: str, data_t: list, kind: str) -> tuple:
    part = gr.load_partition(parts, device="cpu")
    seeds = torch.arange(rank, 2708, 4)
    name = "t" if kind == "node" else "edge_t"
    given = torch.linspace(0.2, 1.0, seeds.numel(), dtype=torch.float64) if kind == "edge" else None
    loader = gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, batch_size=64, node_data=None, labels=None, time=name,
                                   seed_time=given, temporal_strategy="last", disjoint=True, seed=1, timeout_s=60)
    # numpy: tensors would cross the result queue as shared-memory handles, one per tensor
    out = [(b.n_id.numpy(), b.batch_size, b.batch.numpy(), b.edge_index.numpy(), b.e_id.numpy(), b.num_sampled_nodes)
           for b in loader]
    bad = error_text(lambda: gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, node_data=None, labels=None, time=name,
                                                   seed_time=given, disjoint=rank == 0, timeout_s=20))
    return seeds.numpy(), None if given is None else given.numpy(), out, bad


@pytest.mark.parametrize("kind", ["node", "edge"])
def test_two_ranks_draw_the_latest_allowed_in_edges(graph, kind):
    """'last' with continuous times is one answer: across 2 ranks each (seed, node) gets exactly the latest allowed
    in-edges of the input graph; an option one rank gets wrong fails on both, in one line."""
    data = graph["data"]
    results = run_distributed(_two_ranks, 2, str(graph[2]), [], kind, timeout_s=240)
    node_t = torch.from_numpy(data["t"])
    for seeds, given, batches, bad in results:
        seeds = torch.from_numpy(seeds)
        times = torch.from_numpy(given) if given is not None else node_t[seeds]
        views = [Batch(*map(torch.from_numpy, (n_id,)), size, torch.from_numpy(edge_index), torch.from_numpy(e_id), sizes, [],
                       batch=torch.from_numpy(batch))
                 for n_id, size, batch, edge_index, e_id, sizes in batches]
        assert _check_batches(_with_seed_times(views, seeds, times), data, kind, "last") > 500
        assert "needs disjoint=True" in bad and "\n" not in bad


def _with_seed_times(batches, seeds: torch.Tensor, times: torch.Tensor) -> list:
    """(batch, its seeds' times in batch order): each seed id's given time (seeds distinct)."""
    by_seed = dict(zip(seeds.tolist(), times.tolist()))
    return [(b, torch.tensor([by_seed[int(g)] for g in b.n_id[: b.batch_size]], dtype=torch.float64)) for b in batches]


TYPED = CORA.with_name("cora_hetero.npz")
CITES, IN = ("paper", "cites", "paper"), ("word", "in", "paper")


@pytest.fixture(scope="module")
def typed_graph(tmp_path_factory) -> dict:
    from gpart.pipeline.partition import partition_graph

    root = tmp_path_factory.mktemp("temporal_typed")
    data = dict(np.load(TYPED))
    rng = np.random.default_rng(9)
    data["paper/t"] = rng.random(int(data["paper/num_nodes"]))
    data["word/t"] = rng.random(int(data["word/num_nodes"]))
    for etype in (CITES, IN, ("paper", "cited_by", "paper"), ("paper", "has", "word")):
        data[f"{':'.join(etype)}/edge_t"] = rng.random(data[f"{':'.join(etype)}/src"].size)
    np.savez(root / "typed_t.npz", **data)
    partition_graph(root / "typed_t.npz", root / "one", 1, "metis")
    partition_graph(root / "typed_t.npz", root / "two", 2, "random")
    return {"data": data, 1: root / "one", 2: root / "two"}


def _typed_run(part, kind: str, given) -> list:
    seeds = torch.arange(0, 2708, 7)
    name = "t" if kind == "node" else "edge_t"
    loader = gr.DistNeighborLoader(part, {"paper": seeds}, fanouts={CITES: [3, 2], IN: [3, 2]}, batch_size=64,
                                   node_data=None, labels=None, time=name, seed_time=given, temporal_strategy="last",
                                   disjoint=True, seed=5, timeout_s=60)
    return list(loader)


def _check_typed(batches, data: dict, kind: str, seeds: torch.Tensor, seed_t: torch.Tensor) -> int:
    """No sampled typed edge later than the time of the seed its destination belongs to; returns edges checked."""
    checked = 0
    by_seed = dict(zip(seeds.tolist(), seed_t.tolist()))
    for b in batches:
        times = torch.tensor([by_seed[int(g)] for g in b.n_id["paper"][: b.batch_size]], dtype=torch.float64)
        for etype, ei in b.edge_index.items():
            if not ei.numel():
                continue
            key = ":".join(etype)
            src = torch.from_numpy(data[f"{key}/src"])[b.e_id[etype]]
            assert torch.equal(src, b.n_id[etype[0]][ei[0]])
            e_t = torch.from_numpy(data[f"{etype[0]}/t"])[src] if kind == "node" else torch.from_numpy(data[f"{key}/edge_t"])[b.e_id[etype]]
            assert bool((e_t <= times[b.batch[etype[2]][ei[1]]]).all())
            checked += int(ei.shape[1])
    return checked


@pytest.mark.parametrize("kind", ["node", "edge"])
def test_typed_partitions_draw_no_later_edge(typed_graph, kind):
    part = gr.load_partition(typed_graph[1], device="cpu")
    data = typed_graph["data"]
    seeds = torch.arange(0, 2708, 7)
    given = torch.from_numpy(np.random.default_rng(3).random(seeds.numel())) if kind == "edge" else None
    batches = _typed_run(part, kind, given)
    seed_t = given if given is not None else torch.from_numpy(data["paper/t"])[seeds]
    assert _check_typed(batches, data, kind, seeds, seed_t) > 500


def _typed_two(rank: int, world: int, parts: str) -> tuple:
    part = gr.load_partition(parts, device="cpu")
    batches = _typed_run(part, "node", None)
    return [(b.batch_size, {t: v.numpy() for t, v in b.n_id.items()}, {e: v.numpy() for e, v in b.edge_index.items()},
             {e: v.numpy() for e, v in b.e_id.items()}, {t: v.numpy() for t, v in b.batch.items()}) for b in batches]


def test_typed_two_ranks_match_one_partition(typed_graph):
    """'last' with continuous times: 2 gloo ranks (every seed on both, node times gathered from the owners) give the
    one partition's (seed, edge) pairs per edge type over an epoch (the ranks' seed orders differ)."""
    def pairs(batches) -> dict:
        out: dict = {}
        for size, n_id, edge_index, e_id, batch in batches:
            seed_ids = n_id["paper"][:size]
            for etype, ei in edge_index.items():
                out.setdefault(etype, set()).update(zip(seed_ids[batch[etype[2]][ei[1]]].tolist(), e_id[etype].tolist()))
        return out

    one = _typed_run(gr.load_partition(typed_graph[1], device="cpu"), "node", None)
    want = pairs([(b.batch_size, b.n_id, b.edge_index, b.e_id, b.batch) for b in one])
    assert sum(len(v) for v in want.values()) > 500
    for rank_batches in run_distributed(_typed_two, 2, str(typed_graph[2]), timeout_s=240):
        assert pairs(rank_batches) == want


def test_time_and_weight_draw_by_weight_among_the_allowed(tmp_path):
    """A star whose in-edges have times 0..9 and weights 1..10 (edge 3 weight 0): a seed at time 5.5 draws one of
    edges 0..5 per draw, with probability w / sum(w) among them (chi-square), never a later or zero-weight edge."""
    from gpart.pipeline.partition import partition_graph

    n = 11
    arrays = {"src": np.arange(1, n), "dst": np.zeros(n - 1, dtype=np.int64), "num_nodes": np.int64(n),
              "edge_t": np.arange(n - 1, dtype=np.float64), "edge_w": np.arange(1, n, dtype=np.float64)}
    arrays["edge_w"][3] = 0.0
    np.savez(tmp_path / "star.npz", **arrays)
    partition_graph(tmp_path / "star.npz", tmp_path / "p", 1, "metis")
    part = gr.load_partition(tmp_path / "p", device="cpu")
    draws = 4000
    loader = gr.DistNeighborLoader(part, torch.zeros(draws, dtype=torch.int64), fanouts=[1], batch_size=draws,
                                   node_data=None, labels=None, time="edge_t", seed_time=torch.full((draws,), 5.5),
                                   weight="edge_w", disjoint=True, seed=8)
    (batch,) = list(loader)
    counts = torch.bincount(batch.e_id, minlength=n - 1).double()
    assert counts[6:].sum() == 0 and counts[3] == 0 and counts.sum() == draws
    w = torch.tensor([1.0, 2, 3, 0, 5, 6])
    expected = w / w.sum() * draws
    keep = expected > 0
    chi2 = float((((counts[:6] - expected) ** 2)[keep] / expected[keep]).sum())
    assert chi2 < 20.5  # 4 degrees of freedom: p ~ 0.0004
