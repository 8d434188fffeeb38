"""disjoint=True (PyG's disjoint) in DistNeighborLoader and DistLinkNeighborLoader, exact against the input.

Real data: the repository's Cora (plain for node batches, with --add-reverse
for link batches) and its typed form, on 1 process and 2 gloo ranks. Every
batch is checked against the input: each node's seed is followed hop by hop
along the sampled edges (a node added at hop h is the source of an input
edge into a node of hop h - 1 of the same seed, so it is reachable from its
seed within h hops) and must be the seed `batch` names; no edge joins two
seeds' sub-graphs; a node is listed once per seed; every (seed, node) of a
hop got min(fanout, in-degree) distinct in-edges; rows are the input's. A
star graph shows that a node reached from many seeds is asked for once per
hop and drawn independently for each seed, also when its owner is remote.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from support.gloo_processes import error_text, run_distributed
from support.npz_arrays import npz_arrays
from test_runtime_hetero import FANOUTS as TYPED_FANOUTS
from test_runtime_hetero import check_batch as check_typed_batch
from test_runtime_link import _pair_set, _within
from test_runtime_sampler import _chi2, _chi2_critical

import gpart.runtime as gr
from gpart.runtime.loaders.node import unfused_loader
from gpart.runtime.sampling.kernels import KeyRelabeller, Relabeller

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"
HETERO = REPO / "sample_data" / "cora_hetero.npz"
FANOUTS = [4, 3]


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> dict:
    from gpart.pipeline.partition import partition_graph

    if not CORA.exists() or not HETERO.exists():
        pytest.skip("sample_data missing")
    root = tmp_path_factory.mktemp("disjoint_parts")
    out = {}
    for n, method, halo in ((1, "metis", 0), (2, "metis", 1)):
        out[("node", n)] = root / f"node_{n}"
        partition_graph(CORA, out[("node", n)], n, method, halo=halo)
    for n, method in ((1, "metis"), (2, "random")):
        out[("link", n)] = root / f"link_{n}"
        partition_graph(CORA, out[("link", n)], n, method, add_reverse=True)
        out[("typed", n)] = root / f"typed_{n}"
        partition_graph(HETERO, out[("typed", n)], n, "random")
    star = root / "star.npz"  # node 0 has in-edges from 1..29
    leaves = np.arange(1, 30)
    np.savez(star, src=np.concatenate([leaves, [0]]), dst=np.concatenate([np.zeros(29, np.int64), [1]]))
    for n in (1, 2):
        out[("star", n)] = root / f"star_{n}"
        partition_graph(star, out[("star", n)], n, "remainder")
    return out


# ---------------------------------------------------------------- checks


def seed_of_nodes(batch, complete: bool = True) -> np.ndarray:
    """Each node's seed (its position among the batch's seeds), followed hop by hop along the sampled edges: a hop's
    sources take their destination's seed. Asserts the hop structure and that no edge joins two seeds' nodes.
    complete=False: edges were dropped after sampling (exclude_seed_edges), so a node may have lost the edge it was
    reached by: its seed stays -1 and only the nodes followed are checked."""
    ei = batch.edge_index.numpy()
    seed = np.full(batch.n_id.numel(), -1, dtype=np.int64)
    seed[: batch.batch_size] = np.arange(batch.batch_size)
    first, at = 0, 0
    for hop, num_edges in enumerate(batch.num_sampled_edges):
        size, added = batch.num_sampled_nodes[hop], batch.num_sampled_nodes[hop + 1]
        src, dst = ei[0, at:at + num_edges], ei[1, at:at + num_edges]
        assert ((dst >= first) & (dst < first + size)).all()  # destinations: the hop's frontier
        assert (src < first + size + added).all()  # sources: listed before, or added by this hop
        first_reached = src >= first + size
        seed[src[first_reached]] = seed[dst[first_reached]]
        known = (seed[src] >= 0) & (seed[dst] >= 0)
        assert np.array_equal(seed[src][known], seed[dst][known]), hop  # no edge joins two seeds' sub-graphs
        first, at = first + size, at + num_edges
    assert not complete or (seed >= 0).all()  # every node was reached from a seed
    return seed


def check_disjoint(batch, fanouts: list[int], stored, indeg: np.ndarray, seed_batch: np.ndarray,
                   exact: bool = True) -> np.ndarray:
    """The disjoint invariants of a homogeneous batch; `stored(s, d, e_id)` checks the edges exist in the input.
    Returns each node's seed."""
    n_id, ei, e_id = batch.n_id.numpy(), batch.edge_index.numpy(), batch.e_id.numpy()
    assert batch.batch.dtype == torch.int64 and batch.batch.shape == batch.n_id.shape
    seed = seed_of_nodes(batch, complete=exact)
    known = seed >= 0
    assert np.array_equal(batch.batch.numpy()[known], seed_batch[seed[known]])
    assert np.unique((seed * (n_id.max(initial=0) + 1) + n_id)[known]).size == known.sum()  # a node once per seed
    stored(n_id[ei[0]], n_id[ei[1]], e_id)
    first, at = 0, 0
    for hop, fanout in enumerate(fanouts):  # every (seed, node) of the hop drew min(fanout, in-degree) distinct in-edges
        size, num_edges = batch.num_sampled_nodes[hop], batch.num_sampled_edges[hop]
        dst, eid = ei[1, at:at + num_edges], e_id[at:at + num_edges]
        got = np.bincount(dst - first, minlength=size)
        want = indeg[n_id[first:first + size]] if fanout < 0 else np.minimum(indeg[n_id[first:first + size]], fanout)
        assert np.array_equal(got, want) if exact else (got <= want).all(), hop
        assert np.unique(dst.astype(np.int64) * (e_id.max(initial=0) + 1) + eid).size == num_edges
        first, at = first + size, at + num_edges
    return seed


def _input_edges(data: dict):
    def stored(s, d, e_id):
        assert np.array_equal(data["src"][e_id], s) and np.array_equal(data["dst"][e_id], d)
    return stored


def _reverse_stored(data: dict):
    """Edges of a result made with --add-reverse: input ids keep their pair, the others are reverse copies."""
    n, num_input = data["feat"].shape[0], data["src"].size

    def stored(s, d, e_id):
        inp = e_id < num_input
        assert np.array_equal(data["src"][e_id[inp]], s[inp]) and np.array_equal(data["dst"][e_id[inp]], d[inp])
        assert _within(_pair_set(data["src"], data["dst"], n), d[~inp], s[~inp], n).all()
    return stored


def _counting_rounds(loader) -> list[tuple[int, int, int]]:
    """Record, per sampling request round of `loader`, (nodes asked, distinct nodes among them, draws)."""
    seen: list[tuple[int, int, int]] = []
    plain = loader.protocol.round

    def spy(frontier, keys, sample, draws=None):
        if sample is not None:
            seen.append((int(frontier.numel()), int(frontier.unique().numel()),
                         int(draws.sum()) if draws is not None else int(frontier.numel())))
        return plain(frontier, keys, sample, draws)
    loader.protocol.round = spy
    return seen


def node_batches(part, seeds, data: dict, fanouts=FANOUTS, batch_size: int = 64, **kwargs) -> dict:
    """Iterate a disjoint node loader over `seeds`, every batch checked; what was seen."""
    indeg = np.bincount(data["dst"], minlength=data["feat"].shape[0])
    loader = gr.DistNeighborLoader(part, seeds, fanouts=fanouts, batch_size=batch_size, disjoint=True, **kwargs)
    rounds = _counting_rounds(loader)
    seen, repeated, keys = [], 0, 0
    for batch in loader:
        n_id = batch.n_id.numpy()
        check_disjoint(batch, fanouts, _input_edges(data), indeg, np.arange(batch.batch_size))
        assert np.array_equal(batch.x.numpy(), data["feat"][n_id])
        assert np.array_equal(batch.y.numpy(), data["label"][n_id[: batch.batch_size]])
        seen += n_id[: batch.batch_size].tolist()
        repeated += n_id.size - np.unique(n_id).size
        keys += n_id.size - batch.num_sampled_nodes[-1]  # the keys that were sampled (all but the last hop's)
    if loader.protocol.exchange.active:  # every request round asks each node once ...
        assert all(asked == distinct for asked, distinct, _ in rounds)
    assert sum(d for _, _, d in rounds) == keys  # ... and draws it once per key
    return {"seen": seen, "repeated": repeated, "asked": sum(a for a, _, _ in rounds), "keys": keys, "batches": len(loader)}


def _signature(batch) -> list:
    return [getattr(batch, k).tolist() for k in ("n_id", "edge_index", "e_id", "batch", "x", "y")]


def seed_edge_batch(mode, num_pos: int, num_neg: int, ratio: int) -> np.ndarray:
    """PyG's disjoint link `batch` of the seeds: the pair's index modulo the positives (a triplet's negatives: its
    positive's)."""
    if mode == "triplet":
        pos = np.arange(num_pos)
        return np.concatenate([pos, pos, np.repeat(pos, ratio)])
    pairs = np.arange(num_pos + num_neg) % max(num_pos, 1)
    return np.concatenate([pairs, pairs])


def link_batches(part, seed_edges, data: dict, mode, ratio: int, exclude: bool, batch_size: int = 100) -> list[int]:
    """Iterate a disjoint link loader, every batch checked; the seed edge ids seen."""
    n = data["feat"].shape[0]
    pairs = _pair_set(data["src"], data["dst"], n)  # --add-reverse adds v -> u to every pair u -> v without one (SPEC 4.7)
    back = (pairs % n) * n + pairs // n
    indeg = np.bincount(np.concatenate([data["dst"], back[~np.isin(back, pairs)] % n]), minlength=n)
    loader = gr.DistLinkNeighborLoader(part, seed_edges, fanouts=FANOUTS, batch_size=batch_size, neg_sampling=mode,
                                       neg_ratio=ratio, exclude_seed_edges=exclude, disjoint=True)
    ids = []
    for batch in loader:
        b, n_id, eli = batch.input_id.numel(), batch.n_id.numpy(), batch.edge_label_index.numpy()
        num_neg = eli.shape[1] - b if mode == "binary" else 0
        check_disjoint(batch, FANOUTS, _reverse_stored(data), indeg, seed_edge_batch(mode, b, num_neg, ratio),
                       exact=not exclude)
        # the seeds are every endpoint, in order: the label indices point at them (PyG's disjoint arange)
        assert batch.batch_size == (2 * eli.shape[1] if mode != "triplet" else b * (2 + ratio))
        assert np.array_equal(eli.reshape(-1), np.arange(eli.size))
        e = batch.input_id.numpy()
        assert np.array_equal(n_id[eli[0, :b]], data["src"][e]) and np.array_equal(n_id[eli[1, :b]], data["dst"][e])
        if mode == "triplet":
            assert np.array_equal(batch.dst_neg_index.numpy().reshape(-1), np.arange(2 * b, batch.batch_size))
        if exclude:
            pairs = _pair_set(data["src"][e], data["dst"][e], n)
            s, d = n_id[batch.edge_index[0].numpy()], n_id[batch.edge_index[1].numpy()]
            assert not (_within(pairs, s, d, n) | _within(pairs, d, s, n)).any()
        assert np.array_equal(batch.x.numpy(), data["feat"][n_id])
        ids += e.tolist()
    return sorted(ids)


def typed_node_batches(part, seeds: torch.Tensor, data: dict) -> dict:
    """A typed disjoint loader over paper `seeds`, every batch checked (hetero checks, plus per-type batch vectors)."""
    loader = gr.DistNeighborLoader(part, {"paper": seeds}, fanouts=TYPED_FANOUTS, batch_size=40, disjoint=True, seed=2)
    seen, edges = [], 0
    for batch in loader:
        edges += check_typed_batch(batch, TYPED_FANOUTS, data)  # per (seed, node) and edge type: exact fanouts
        assert batch.batch["paper"][: batch.batch_size].tolist() == list(range(batch.batch_size))
        for (s, _, d), ei in batch.edge_index.items():  # no edge joins two seeds' sub-graphs
            assert torch.equal(batch.batch[s][ei[0]], batch.batch[d][ei[1]])
        for ntype, ids in batch.n_id.items():  # a node once per seed
            assert torch.unique(batch.batch[ntype] * 100_000 + ids).numel() == ids.numel()
        seen += batch.n_id["paper"][: batch.batch_size].tolist()
    return {"seen": sorted(seen), "edges": edges}


def star_draws(part, hubs: int = 200) -> dict:
    """`hubs` seeds that are all node 0 (in-edges from 1..29), fanout 5: one request for the hub, `hubs` draws."""
    loader = gr.DistNeighborLoader(part, torch.zeros(hubs, dtype=torch.int64), fanouts=[5], batch_size=hubs,
                                   node_data=None, labels=None, disjoint=True, shuffle=False)
    rounds = _counting_rounds(loader)
    batch = next(iter(loader))
    subsets = batch.n_id[batch.edge_index[0]].reshape(hubs, 5).numpy()  # edges are grouped by destination key
    assert np.array_equal(batch.edge_index[1].numpy(), np.repeat(np.arange(hubs), 5))
    assert all(len(set(row)) == 5 for row in subsets.tolist()) and (subsets >= 1).all()
    overlap = np.mean([len(set(a) & set(b)) for a, b in zip(subsets[:-1].tolist(), subsets[1:].tolist())])
    return {"freq": np.bincount(subsets.reshape(-1), minlength=30).tolist(), "overlap": float(overlap), "rounds": rounds}


def _check_star(got: dict, remote: bool, hubs: int = 200) -> None:
    # across partitions the hub is asked for once and drawn once per seed; on one, sampled once per seed
    assert got["rounds"] == [(1 if remote else hubs, 1, hubs)], got["rounds"]
    # independent draws: two seeds share 25/29 = 0.86 leaves on average (5 if the hub's draw were shared)
    assert got["overlap"] < 1.5, got["overlap"]
    freq = np.array(got["freq"])
    assert freq[0] == 0 and _chi2(freq[1:]) < _chi2_critical(28)


# ---------------------------------------------------------------- one process


def test_key_relabeller_matches_the_scratch_map():
    """KeyRelabeller (sorting, any key range) gives Relabeller's positions and new ids, first-appearance order."""
    gen = torch.Generator().manual_seed(5)
    for trial in range(100):
        n = int(torch.randint(1, 300, (1,), generator=gen))
        keyed, mapped = KeyRelabeller(), Relabeller(n, torch.device("cpu"))
        seeds = torch.randperm(n, generator=gen)[: int(torch.randint(0, n, (1,), generator=gen))]
        keyed.start(seeds), mapped.start(seeds)
        for hop in range(3):
            ids = torch.randint(0, n, (int(torch.randint(0, 200, (1,), generator=gen)),), generator=gen)
            got, want = keyed.add_unique(ids, final=hop == 2), mapped.add_unique(ids, final=hop == 2)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (trial, hop)
            assert keyed.size == mapped.size
    big = KeyRelabeller()  # keys far beyond any scratch map
    big.start(torch.tensor([5 << 50, 3]))
    pos, new = big.add_unique(torch.tensor([7 << 52, 3, 7 << 52, 5 << 50, 1]))
    assert pos.tolist() == [2, 1, 2, 0, 3] and new.tolist() == [7 << 52, 1]


def test_disjoint_node_batches_one_process(parts):
    data = npz_arrays(CORA)
    part = gr.load_partition(parts[("node", 1)], device="cpu")
    train = gr.node_split(part, "train_mask")
    got = node_batches(part, train, data)
    assert sorted(got["seen"]) == train.tolist() and got["repeated"] > 0  # seeds' sub-graphs do overlap on Cora
    # unfused_loader (rows after sampling) gives the same batches; -1 and replace keep their meaning per (seed, node)
    fused = gr.DistNeighborLoader(part, train, fanouts=FANOUTS, batch_size=64, disjoint=True, seed=4)
    plain = unfused_loader(part, train, fanouts=FANOUTS, batch_size=64, disjoint=True, seed=4)
    assert all(_signature(a) == _signature(b) for a, b in zip(fused, plain))
    node_batches(part, train[:60], data, fanouts=[-1, 2], batch_size=30)
    rep = next(iter(gr.DistNeighborLoader(part, train, fanouts=[3], batch_size=64, replace=True, disjoint=True)))
    indeg = np.bincount(data["dst"], minlength=data["feat"].shape[0])
    want = np.where(indeg[rep.n_id[:64].numpy()] > 0, 3, 0)
    assert np.array_equal(np.bincount(rep.edge_index[1].numpy(), minlength=64), want)
    # duplicate seeds are separate sub-graphs; not disjoint, nothing changes (no batch vector)
    twice = next(iter(gr.DistNeighborLoader(part, [7, 7], fanouts=FANOUTS, disjoint=True, shuffle=False)))
    assert twice.n_id[:2].tolist() == [7, 7] and twice.batch[:2].tolist() == [0, 1]
    assert next(iter(gr.DistNeighborLoader(part, train, fanouts=FANOUTS))).batch is None
    _check_star(star_draws(gr.load_partition(parts[("star", 1)], device="cpu", node_data=[])), remote=False)


def test_disjoint_to_pyg(parts):
    pytest.importorskip("torch_geometric")
    part = gr.load_partition(parts[("node", 1)], device="cpu")
    data = next(iter(gr.DistNeighborLoader(part, [1, 2, 3], fanouts=[2], disjoint=True, pyg=True)))
    assert data.batch.tolist()[:3] == [0, 1, 2] and data.batch.numel() == data.n_id.numel() == data.num_nodes
    link = gr.load_partition(parts[("link", 1)], device="cpu")
    data = next(iter(gr.DistLinkNeighborLoader(link, [0, 1], fanouts=[2], disjoint=True, neg_sampling="binary", pyg=True)))
    assert data.batch[:8].tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    assert data.edge_label_index.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    typed = gr.load_partition(parts[("typed", 1)], device="cpu")
    hetero = next(iter(gr.DistNeighborLoader(typed, {"paper": [0, 1]}, fanouts=TYPED_FANOUTS, disjoint=True, pyg=True)))
    assert hetero["paper"].batch[:2].tolist() == [0, 1] and hetero["word"].batch.numel() == hetero["word"].n_id.numel()


def test_disjoint_link_batches_one_process(parts):
    data = npz_arrays(CORA)
    part = gr.load_partition(parts[("link", 1)], device="cpu")
    train = gr.edge_split(part, torch.arange(0, data["src"].size, 5))
    for mode, ratio, exclude in ((None, 1, False), ("binary", 2, False), ("triplet", 2, True), ("binary", 1, True)):
        assert link_batches(part, train, data, mode, ratio, exclude) == train.tolist()


def test_disjoint_typed_one_process(parts):
    data = npz_arrays(HETERO)
    part = gr.load_partition(parts[("typed", 1)], device="cpu")
    train = torch.from_numpy(np.flatnonzero(data["paper/train_mask"]))
    got = typed_node_batches(part, train, data)
    assert got["seen"] == train.tolist() and got["edges"] > 0
    # unfused_loader reads the typed rows after sampling: the same batches
    fused, plain = (make(part, {"paper": train}, fanouts=TYPED_FANOUTS, batch_size=40, disjoint=True)
                    for make in (gr.DistNeighborLoader, unfused_loader))
    for a, b in zip(fused, plain):
        assert all(torch.equal(a.n_id[t], b.n_id[t]) and torch.equal(a.batch[t], b.batch[t]) for t in a.n_id)
        assert all(torch.equal(a.node_data[t][k], b.node_data[t][k]) for t in a.node_data for k in a.node_data[t])
    # typed link batches: label positions within each node type, as PyG's disjoint (two types, or one)
    for etype in (("word", "in", "paper"), ("paper", "cites", "paper")):
        loader = gr.DistLinkNeighborLoader(part, (etype, torch.arange(0, 600, 7)), fanouts=TYPED_FANOUTS, batch_size=30,
                                           neg_sampling="binary", disjoint=True)
        key = ":".join(etype)
        for batch in loader:
            b = batch.input_id.numel()
            eli, e = batch.edge_label_index, batch.input_id.numpy()
            pairs = torch.arange(2 * b)  # positives then as many negatives, per side
            assert torch.equal(eli, torch.stack([pairs, pairs if etype[0] != etype[2] else pairs + 2 * b]))
            assert np.array_equal(batch.n_id[etype[0]][eli[0, :b]].numpy(), data[f"{key}/src"][e])
            assert np.array_equal(batch.n_id[etype[2]][eli[1, :b]].numpy(), data[f"{key}/dst"][e])
            for t in {etype[0], etype[2]}:  # every seed's batch value: its pair modulo the positives
                sides = 2 if etype[0] != etype[2] else 4
                assert batch.batch[t][: sides * b].tolist() == list(range(b)) * sides
            for (s, _, d), ei in batch.edge_index.items():
                assert torch.equal(batch.batch[s][ei[0]], batch.batch[d][ei[1]])


# ---------------------------------------------------------------- two gloo ranks


def _ranks(rank: int, world_size: int, parts: dict) -> dict:
    data = npz_arrays(CORA)
    part = gr.load_partition(parts[("node", 2)], device="cpu")
    seeds = gr.node_split(part, torch.arange(0, data["feat"].shape[0], 3))
    out = {"node": node_batches(part, seeds, data, batch_size=48, seed=rank), "split": seeds.tolist()}
    fused = gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, batch_size=48, disjoint=True, seed=5)
    plain = unfused_loader(part, seeds, fanouts=FANOUTS, batch_size=48, disjoint=True, seed=5)
    out["fuse_equal"] = all(_signature(a) == _signature(b) for a, b in zip(fused, plain))
    link = gr.load_partition(parts[("link", 2)], device="cpu")
    train = gr.edge_split(link, torch.arange(0, data["src"].size, 6))
    out["link"] = {"train": train.tolist(), "binary": link_batches(link, train, data, "binary", 1, True),
                   "triplet": link_batches(link, train, data, "triplet", 2, False)}
    typed = gr.load_partition(parts[("typed", 2)], device="cpu")
    hetero = npz_arrays(HETERO)
    owned = typed.owned_ids("paper")
    out["typed"] = dict(typed_node_batches(typed, owned[typed.node_data[("paper", "train_mask")]], hetero))
    # the hub is owned by rank 0: rank 1 asks for it remotely
    out["star"] = star_draws(gr.load_partition(parts[("star", 2)], device="cpu", node_data=[]))
    # a rank that disagrees on disjoint fails both in bounded time, naming the setting
    out["mismatch"] = error_text(lambda: gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, disjoint=rank == 1,
                                                               timeout_s=20))
    return out


def test_disjoint_on_two_ranks(parts):
    results = run_distributed(_ranks, 2, parts, timeout_s=300)
    data = npz_arrays(CORA)
    assert sorted(sum((r["split"] for r in results), [])) == list(range(0, data["feat"].shape[0], 3))
    for r in results:
        node = r["node"]
        assert sorted(node["seen"]) == r["split"] and node["repeated"] > 0
        assert node["asked"] < node["keys"]  # deduplicated requests: fewer nodes asked than keys sampled
        assert r["fuse_equal"]
        assert r["link"]["binary"] == r["link"]["triplet"] == sorted(r["link"]["train"])
        assert r["typed"]["edges"] > 0
        _check_star(r["star"], remote=True)
        assert r["mismatch"].startswith(("InputError", "RankMismatchError")) and "disjoint" in r["mismatch"], r["mismatch"]
    assert len({r["node"]["batches"] for r in results}) == 1
    hetero = npz_arrays(HETERO)
    assert sorted(sum((r["typed"]["seen"] for r in results), [])) == np.flatnonzero(hetero["paper/train_mask"]).tolist()
