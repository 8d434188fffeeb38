"""Weighted neighbour sampling (gpart.runtime.sampling.weighted): draws follow the weights, with and without
replacement, on a star and on Cora, in one process and across 2 gloo ranks; bad weight arrays are one line."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from support.gloo_processes import run_distributed

import gpart.runtime as gr
from gpart.base.errors import GpartError
from gpart.runtime.sampling.alias_table import OWN_BITS, AliasTable
from gpart.runtime.sampling.neighbor_sampler import LocalSampler
from gpart.runtime.sampling.weighted import SegmentWeights

CORA = Path(__file__).resolve().parents[1] / "sample_data" / "cora.npz"
STAR = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 10.0], dtype=torch.float64)  # one hub's in-edges, one of weight 0


def _chi_square_z(observed: np.ndarray, expected: np.ndarray, dof: int = 0) -> float:
    """The Wilson-Hilferty normal score of Pearson's statistic (`dof` degrees of freedom, default k - 1): ~N(0, 1)
    when the draws follow `expected`."""
    stat = float(((observed - expected) ** 2 / expected).sum())
    k = dof or observed.size - 1
    return ((stat / k) ** (1 / 3) - (1 - 2 / (9 * k))) / math.sqrt(2 / (9 * k))


def _tables(weights: torch.Tensor, alias: bool) -> SegmentWeights:
    """The weights of one segment (one CSC run) drawn through alias tables, or through the searched prefix."""
    return SegmentWeights(weights, torch.tensor([0, weights.numel()]) if alias else None)


def _star_draws(fanout: int, replace: bool, trials: int = 40000, seed: int = 0,
                alias: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    weights = _tables(STAR, alias)
    start = torch.zeros(trials, dtype=torch.int64)
    deg = torch.full((trials,), STAR.numel(), dtype=torch.int64)
    picks = weights.sample_segments(start, deg, fanout, replace, torch.Generator().manual_seed(seed))
    return picks.counts, picks.positions


def _inclusion(weights: list[float], k: int) -> np.ndarray:
    """Exact probability that each item is among k drawn one by one without replacement, by weight (brute force)."""
    out = np.zeros(len(weights))
    positive = [i for i, w in enumerate(weights) if w > 0]
    for seq in itertools.permutations(positive, k):
        p, left = 1.0, sum(weights)
        for i in seq:
            p, left = p * weights[i] / left, left - weights[i]
        out[list(seq)] += p
    return out


@pytest.mark.parametrize("alias", [True, False], ids=["alias", "searched"])
@pytest.mark.parametrize("replace", [True, False])
def test_star_single_draws_follow_the_weights(replace, alias):
    counts, positions = _star_draws(1, replace, alias=alias)
    assert torch.equal(counts, torch.ones_like(counts))
    seen = np.bincount(positions.numpy(), minlength=STAR.numel())
    assert seen[0] == 0  # zero weight never drawn
    expected = (STAR / STAR.sum()).numpy()[1:] * positions.numel()
    assert abs(_chi_square_z(seen[1:], expected)) < 4.5


def test_whole_runs_with_replacement_skip_empty_and_weightless_runs():
    """Draws with replacement from whole runs (alias tables, segments in any order and repeated): empty runs (the
    last stored one too) and a run of weight 0 take nothing, every other takes `fanout` draws by its weights."""
    deg = torch.tensor([0, 3, 5, 0, 4, 1, 0])
    weights = torch.tensor([1.0, 2.0, 5.0, 0, 0, 0, 0, 0, 3.0, 0, 2.0, 1.0, 7.0], dtype=torch.float64)
    runs = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(deg, 0)])
    order = torch.tensor([6, 1, 0, 2, 4, 3, 5, 1])  # the empty last run (start = every stored edge) first
    start, size = runs[:-1][order], deg[order]
    picks = SegmentWeights(weights, runs).sample_segments(start, size, 5000, True, torch.Generator().manual_seed(3))
    assert picks.counts.tolist() == [0, 5000, 0, 0, 5000, 0, 5000, 5000]
    got = picks.positions.view(-1, 5000)  # grouped by segment: runs 1, 4, 5, 1
    for row, run in zip(got, (1, 4, 5, 1)):
        first, end = int(runs[run]), int(runs[run + 1])
        w = weights[first:end]
        assert bool(((row >= first) & (row < end)).all()) and bool((weights[row] > 0).all())
        if end - first > 1:
            seen = np.bincount(row.numpy() - first, minlength=end - first)[w.numpy() > 0]
            expected = (w[w > 0] / w.sum()).numpy() * row.numel()
            assert abs(_chi_square_z(seen, expected)) < 4.5


@pytest.mark.parametrize("fanout", [2, 3])
def test_star_without_replacement_matches_exact_inclusion(fanout):
    trials = 40000
    counts, positions = _star_draws(fanout, False, trials, seed=fanout)
    assert torch.equal(counts, torch.full_like(counts, fanout))
    rows = positions.reshape(trials, fanout)
    assert bool((rows[:, 1:] != rows[:, :1]).all()) and bool((rows[:, -1:] != rows[:, :-1]).all())  # distinct per draw
    seen = np.bincount(positions.numpy(), minlength=STAR.numel())
    exact = _inclusion(STAR.tolist(), fanout)
    assert seen[0] == 0 and exact[0] == 0
    # inclusion of each item is a binomial count over the trials
    z = (seen[1:] - trials * exact[1:]) / np.sqrt(trials * exact[1:] * (1 - exact[1:]))
    assert np.abs(z).max() < 4.5, (seen, trials * exact)


@pytest.mark.parametrize("scale", [1e-300, 1e-40, 1e300], ids=["tiny", "below-float32", "huge"])
@pytest.mark.parametrize("alias", [True, False], ids=["alias", "searched"])
def test_any_scale_of_weights_draws_the_same(scale, alias):
    """Weights near 1e-300 or 1e300 (float64 edge data) draw as their ratios say, with and without replacement:
    the tables hold each weight over its run's heaviest, so no sum overflows and no float32 key is all +inf or 0."""
    weights = _tables(STAR * scale, alias)
    trials, gen = 20000, torch.Generator().manual_seed(5)
    start = torch.zeros(trials, dtype=torch.int64)
    deg = torch.full((trials,), STAR.numel(), dtype=torch.int64)
    single = weights.sample_segments(start, deg, 1, True, gen).positions
    seen = np.bincount(single.numpy(), minlength=STAR.numel())
    assert seen[0] == 0
    assert abs(_chi_square_z(seen[1:], (STAR / STAR.sum()).numpy()[1:] * trials)) < 4.5
    picks = weights.sample_segments(start, deg, 3, False, gen).positions
    seen = np.bincount(picks.numpy(), minlength=STAR.numel())
    exact = _inclusion(STAR.tolist(), 3)
    z = (seen[1:] - trials * exact[1:]) / np.sqrt(trials * exact[1:] * (1 - exact[1:]))
    assert seen[0] == 0 and np.abs(z).max() < 4.5, (seen, trials * exact)


HUB = torch.tensor([0.0, 1, 2, 3, 0, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 0, 7, 8, 9, 10], dtype=torch.float64)
SKEWED = torch.tensor([1000.0] + [1.0] * 15 + [0.0] * 2 + [500.0, 3.0], dtype=torch.float64)


@pytest.mark.parametrize("alias", [True, False], ids=["alias", "searched"])
@pytest.mark.parametrize("weights", [HUB, SKEWED], ids=["hub", "skewed"])
def test_wide_segments_drawn_from_a_stream_match_exact_inclusion(weights, alias):
    """A hub with more than WIDE x fanout positive edges draws from a stream of i.i.d. draws (the skewed one mostly
    falls back to keys for the rest after STREAM_ROUNDS, by one integer sort of packed keys): each edge's inclusion
    frequency matches the exact one-by-one probability; zero weights never; distinct per draw."""
    from gpart.runtime.sampling.weighted import WIDE

    fanout, trials = 3, 30000
    assert int((weights > 0).sum()) > WIDE * fanout
    start = torch.tensor([0, 0, 0]).repeat(trials // 3)
    picks = _tables(weights, alias).sample_segments(start, torch.full_like(start, weights.numel()), fanout, False,
                                                    torch.Generator().manual_seed(3))
    assert torch.equal(picks.counts, torch.full_like(picks.counts, fanout))
    rows = picks.positions.reshape(trials, fanout)
    assert bool((rows[:, 0] != rows[:, 1]).all() & (rows[:, 1] != rows[:, 2]).all() & (rows[:, 0] != rows[:, 2]).all())
    seen = np.bincount(picks.positions.numpy(), minlength=weights.numel())
    exact = _inclusion(weights.tolist(), fanout)
    assert all(seen[i] == 0 for i in range(weights.numel()) if weights[i] == 0)
    live = exact > 0
    z = (seen[live] - trials * exact[live]) / np.sqrt(trials * exact[live] * (1 - exact[live]) + 1e-12)
    assert np.abs(z).max() < 4.5, (seen, trials * exact)


@pytest.mark.parametrize("alias", [True, False], ids=["alias", "searched"])
def test_hubs_of_weight_zero_or_few_positive_edges(alias):
    """Hubs (more than WIDE x fanout in-edges) with no positive weight take nothing (an alias table's run of weight 0
    draws one past its end, which the stream never keeps), and those with fewer positive edges than the fanout
    take every one of them; a hub between two of them draws as usual."""
    from gpart.runtime.sampling.weighted import WIDE

    fanout = 3
    hub = WIDE * fanout + 5
    few = torch.zeros(hub, dtype=torch.float64)
    few[[2, 9]] = torch.tensor([4.0, 1.0], dtype=torch.float64)
    w = torch.cat([torch.zeros(hub, dtype=torch.float64), HUB, few])
    runs = torch.tensor([0, hub, hub + HUB.numel(), 2 * hub + HUB.numel()])
    weights = SegmentWeights(w, runs if alias else None)
    start, deg = runs[:-1].repeat(50), (runs[1:] - runs[:-1]).repeat(50)
    picks = weights.sample_segments(start, deg, fanout, False, torch.Generator().manual_seed(6))
    assert picks.counts.tolist() == [0, fanout, 2] * 50
    rows = picks.positions.split(picks.counts.tolist())
    assert all(sorted(r.tolist()) == [hub + HUB.numel() + 2, hub + HUB.numel() + 9] for r in rows[2::3])
    assert all(len(set(r.tolist())) == fanout and bool((w[r] > 0).all()) for r in rows[1::3])


def test_narrow_and_wide_segments_keep_segment_order():
    """Mixed segments: each segment's picks lie in its own range, in segment order, with min(positive, fanout) each."""
    weights = SegmentWeights(torch.cat([HUB, STAR, HUB]))
    start = torch.tensor([0, 20, 26, 0, 20])
    deg = torch.tensor([20, 6, 20, 20, 6])
    picks = weights.sample_segments(start, deg, 3, False, torch.Generator().manual_seed(4))
    assert picks.counts.tolist() == [3, 3, 3, 3, 3]
    for i, seg in enumerate(picks.positions.reshape(5, 3)):
        assert bool(((seg >= start[i]) & (seg < start[i] + deg[i])).all())


@pytest.mark.parametrize("alias", [True, False], ids=["alias", "searched"])
def test_star_replacement_draws_are_independent_per_slot(alias):
    counts, positions = _star_draws(4, True, trials=20000, seed=7, alias=alias)
    assert torch.equal(counts, torch.full_like(counts, 4))
    seen = np.bincount(positions.numpy(), minlength=STAR.numel())
    assert seen[0] == 0
    assert abs(_chi_square_z(seen[1:], (STAR / STAR.sum()).numpy()[1:] * positions.numel())) < 4.5


@pytest.mark.parametrize("alias", [True, False], ids=["alias", "searched"])
def test_few_positive_edges_take_them_all_and_all_zero_takes_none(alias):
    start, deg = torch.tensor([0, 4, 6]), torch.tensor([4, 2, 1])
    weights = SegmentWeights(torch.tensor([0.0, 5.0, 0.0, 1.0, 0.0, 0.0, 2.0]), torch.tensor([0, 4, 6, 7]) if alias else None)
    for replace in (False, True):
        picks = weights.sample_segments(start, deg, 3, replace, torch.Generator().manual_seed(1))
        if replace:
            assert picks.counts.tolist() == [3, 0, 3]
            assert set(picks.positions[:3].tolist()) <= {1, 3} and picks.positions[3:].tolist() == [6, 6, 6]
        else:
            assert picks.counts.tolist() == [2, 0, 1]
            assert sorted(picks.positions[:2].tolist()) == [1, 3] and picks.positions[2:].tolist() == [6]
    every = weights.sample_segments(start, deg, -1, False, None)
    assert every.counts.tolist() == [2, 0, 1]


def _alias_probabilities(table: AliasTable, runs: torch.Tensor) -> torch.Tensor:
    """The probability of each position implied by alias tables: own threshold / C of its slot, plus the remainder of
    every slot aliasing it, over the run's slots."""
    n = table.packed.numel()
    own = torch.bitwise_and(table.packed, (1 << OWN_BITS) - 1).to(torch.float64) / (1 << table.unit_bits)
    run = torch.searchsorted(runs, torch.arange(n), right=True) - 1
    first, size = runs[run], (runs[run + 1] - runs[run]).to(torch.float64)
    alias = first + torch.bitwise_right_shift(table.packed, OWN_BITS)
    total = torch.zeros(runs.numel() - 1, dtype=torch.float64).index_add_(0, run, own)[run]  # 0: a run of weight 0
    dead = total == 0
    assert bool(((alias >= first) & (alias < runs[run + 1]))[~dead].all())  # every alias within its own run
    assert bool((alias[dead] == runs[run + 1][dead]).all())  # a run of weight 0 draws one past its end
    alias = torch.where(dead, first, alias)
    return torch.zeros(n, dtype=torch.float64).index_add_(0, torch.arange(n), own / size).index_add_(0, alias, (1 - own) / size)


@pytest.mark.parametrize("case", ["random", "skewed", "equal", "long run"])
def test_alias_tables_give_each_position_its_weight_share(case, monkeypatch):
    """Built in pieces of whole runs (a 1000-position piece cuts between runs), the tables give every position of a
    run probability w / total to within 1e-9, zero weights exactly 0; runs of total 0 draw one past their end."""
    import gpart.runtime.sampling.alias_table as alias_table

    monkeypatch.setattr(alias_table, "PIECE", 1000)
    gen = torch.Generator().manual_seed(11)
    sizes = torch.randint(0, 40, (400,), generator=gen)
    if case == "long run":
        sizes[7] = 5000
    runs = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(sizes, 0)])
    w = torch.rand(int(runs[-1]), generator=gen, dtype=torch.float64) ** (8 if case == "skewed" else 1)
    w[torch.rand(w.shape, generator=gen) < 0.2] = 0.0
    w[runs[10]:runs[11]] = 0.0  # a run of total 0
    if case == "equal":
        w[:] = 1.0
    p = _alias_probabilities(AliasTable(w, runs), runs)
    run = torch.searchsorted(runs, torch.arange(w.numel()), right=True) - 1
    total = torch.zeros(sizes.numel(), dtype=torch.float64).index_add_(0, run, w)[run]
    live = total > 0
    assert float((p[live] - w[live] / total[live]).abs().max()) < 1e-9
    assert bool((p[live & (w == 0)] == 0).all())


@pytest.fixture(scope="module")
def cora_weighted(tmp_path_factory):
    """Cora partitioned once in 1 and once in 2 parts with edge data "w": integer weights 0..3 (a quarter zero)."""
    from gpart.pipeline.partition import partition_graph

    root = tmp_path_factory.mktemp("weighted")
    with np.load(CORA, allow_pickle=False) as z:
        num_edges = z["src"].size
    w = np.random.default_rng(5).integers(0, 4, num_edges).astype(np.float32)
    np.save(root / "w.npy", w)
    partition_graph(CORA, root / "one", 1, "metis", edge_data={"w": str(root / "w.npy")})
    partition_graph(CORA, root / "two", 2, "metis", edge_data={"w": str(root / "w.npy")})
    return root, w


@pytest.mark.parametrize("replace", [True, False])
def test_cora_single_draws_follow_the_weights(cora_weighted, replace):
    root, _ = cora_weighted
    part = gr.load_partition(root / "one", device="cpu")
    sampler = LocalSampler(part, [[1]], replace, weight="w")
    w = part.edge_data["w"].to(torch.float64)
    cols = torch.arange(part.num_owned).repeat(40)
    counts, _, _ = sampler.sample(cols, 0, torch.Generator().manual_seed(3))
    picks = sampler.weights.sample_segments(torch.index_select(part.indptr, 0, cols),
                                            torch.index_select(part.indptr, 0, cols + 1) - torch.index_select(part.indptr, 0, cols),
                                            1, replace, torch.Generator().manual_seed(3))
    assert torch.equal(picks.counts, counts)
    seen = np.bincount(picks.positions.numpy(), minlength=w.numel())
    assert seen[(w == 0).numpy()].sum() == 0
    # one multinomial of 40 draws per column over its positive-weight edges: sum over columns of (edges - 1) dof
    col_of = torch.repeat_interleave(torch.arange(part.num_owned), part.indptr[1:] - part.indptr[:-1])
    col_total = torch.zeros(part.num_owned, dtype=torch.float64).index_add_(0, col_of, w)
    positive = (w > 0).numpy()
    expected = (40 * w / torch.index_select(col_total, 0, col_of).clamp(min=1e-300)).numpy()
    dof = int(positive.sum()) - int((col_total > 0).sum())
    assert dof > 1000
    assert abs(_chi_square_z(seen[positive], expected[positive], dof)) < 4.5


def _batches(part, weight_input: np.ndarray, **settings) -> list[tuple[torch.Tensor, torch.Tensor]]:
    ids = part.owned_ids_of(part.node_types[0])[:300]
    loader = gr.DistNeighborLoader(part, ids, fanouts=[5, 3], batch_size=64, weight="w", node_data=[], labels=None, **settings)
    out = [(b.n_id.clone(), b.e_id.clone()) for b in loader]
    for _, e_id in out:
        assert bool((torch.from_numpy(weight_input)[e_id] > 0).all())  # no zero-weight edge is ever drawn
    return out


@pytest.mark.parametrize("replace", [True, False])
def test_loader_one_partition_reproducible_and_zero_free(cora_weighted, replace):
    root, w = cora_weighted
    part = gr.load_partition(root / "one", device="cpu")
    first, again = _batches(part, w, replace=replace), _batches(part, w, replace=replace)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, again))
    assert sum(e.numel() for _, e in first) > 0


def _two_ranks(rank: int, world_size: int, path: str, w: np.ndarray) -> list:
    part = gr.load_partition(path, device="cpu")
    out = []
    for replace in (False, True):
        first, again = _batches(part, w, replace=replace), _batches(part, w, replace=replace)
        assert all(torch.equal(a[1], b[1]) for a, b in zip(first, again))
        out.append(sum(e.numel() for _, e in first))
    return out


def test_loader_two_gloo_ranks(cora_weighted):
    root, w = cora_weighted
    edges = run_distributed(_two_ranks, 2, str(root / "two"), w, timeout_s=120.0)
    assert all(min(per_rank) > 0 for per_rank in edges)


def test_link_loader_takes_weights(cora_weighted):
    root, w = cora_weighted
    part = gr.load_partition(root / "one", device="cpu")
    with np.load(CORA, allow_pickle=False) as z:
        pairs = torch.from_numpy(np.stack([z["src"][:200], z["dst"][:200]]).astype(np.int64))
    loader = gr.DistLinkNeighborLoader(part, pairs, fanouts=[4, 2], batch_size=50, weight="w", node_data=[])
    for batch in loader:
        assert bool((torch.from_numpy(w)[batch.e_id] > 0).all())


@pytest.mark.parametrize("bad, message", [
    (None, "no such edge data"),
    (torch.tensor([1.0, float("nan")]), "holds NaN"),
    (torch.tensor([1.0, float("inf")]), "infinite"),
    (torch.tensor([1.0, -2.0]), "negative"),
    ("short", "rows, the partition stores"),
])
def test_bad_weight_arrays_are_one_line(cora_weighted, bad, message):
    root, _ = cora_weighted
    part = gr.load_partition(root / "one", device="cpu")
    n = part.indices.numel()
    if isinstance(bad, torch.Tensor):
        part.edge_data["bad"] = torch.ones(n).index_copy_(0, torch.tensor([0, n - 1]), bad.float())
    elif bad == "short":
        part.edge_data["bad"] = torch.ones(n - 1)
    with pytest.raises(GpartError) as err:
        gr.DistNeighborLoader(part, torch.arange(10), fanouts=[3], weight="bad")
    text = str(err.value)
    assert message in text and "\n" not in text and str(part.directory) in text


def test_padded_and_own_sampler_are_refused_with_weights(cora_weighted):
    root, _ = cora_weighted
    part = gr.load_partition(root / "one", device="cpu")
    with pytest.raises(GpartError, match="no weight"):
        gr.DistNeighborLoader(part, torch.arange(10), fanouts=[3], weight="w", padded=True)
    with pytest.raises(GpartError, match="pass weight to its LocalSampler"):
        gr.DistNeighborLoader(part, torch.arange(10), fanouts=[3], weight="w", sampler=LocalSampler(part, [[3]]))


def test_typed_partitions_without_the_array_are_refused_in_one_line(tmp_path):
    from gpart.pipeline.partition import partition_graph

    partition_graph(CORA.parent / "cora_hetero.npz", tmp_path / "typed", 1, "metis")
    part = gr.load_partition(tmp_path / "typed", device="cpu")
    seeds = {part.node_types[0]: torch.arange(5)}
    fanouts = {tuple(e): [2] for e in part.edge_types}
    with pytest.raises(GpartError, match="has no such edge data") as err:
        gr.DistNeighborLoader(part, seeds, fanouts=fanouts, weight="w")
    assert "\n" not in str(err.value) and str(err.value).count(str(tmp_path / "typed")) == 1


HETERO = CORA.with_name("cora_hetero.npz")
HETERO_TYPES = [("paper", "cites", "paper"), ("paper", "cited_by", "paper"), ("paper", "has", "word"), ("word", "in", "paper")]


@pytest.fixture(scope="module")
def typed_weighted(tmp_path_factory):
    """cora_hetero with edge data `edge_w` on every edge type (integers 0..3: a quarter zero), in 1 and 2 partitions."""
    from gpart.pipeline.partition import partition_graph

    root = tmp_path_factory.mktemp("typed_weighted")
    data = dict(np.load(HETERO))
    rng = np.random.default_rng(6)
    for etype in HETERO_TYPES:
        data[f"{':'.join(etype)}/edge_w"] = rng.integers(0, 4, data[f"{':'.join(etype)}/src"].size).astype(np.float32)
    np.savez(root / "typed.npz", **data)
    for n in (1, 2):
        partition_graph(root / "typed.npz", root / f"p{n}", n, "random")
    return root, data


def _typed_batches(parts, fanouts, seed: int = 0) -> list:
    part = gr.load_partition(parts, device="cpu")
    loader = gr.DistNeighborLoader(part, {"paper": torch.arange(0, 2708, 5)}, fanouts=fanouts, batch_size=100,
                                   node_data=None, labels=None, weight="edge_w", seed=seed, shuffle=False, timeout_s=60)
    return list(loader)


def _typed_edges(batches, data) -> dict:
    """Per edge type: (typed edge ids drawn, their weights in the input)."""
    out = {}
    for b in batches:
        for etype, e in b.e_id.items():
            w = torch.from_numpy(data[f"{':'.join(etype)}/edge_w"])[e]
            got = out.setdefault(etype, ([], []))
            got[0].append(e), got[1].append(w)
    return {k: (torch.cat(v[0]), torch.cat(v[1])) for k, v in out.items()}


def test_typed_weighted_draws_never_take_zero_weight_edges(typed_weighted):
    """Unequal fanouts in one hop (one draw per fanout, weighted): no zero-weight edge of any type over an epoch."""
    root, data = typed_weighted
    edges = _typed_edges(_typed_batches(root / "p1", {HETERO_TYPES[0]: [3, 2], HETERO_TYPES[3]: [2, 1]}), data)
    assert sum(e.numel() for e, _ in edges.values()) > 500
    for etype, (_, w) in edges.items():
        assert bool((w > 0).all()), etype


def _typed_all(rank: int, world: int, parts: str) -> list:
    batches = _typed_batches(parts, {HETERO_TYPES[0]: [-1], HETERO_TYPES[3]: [-1]})
    return [{":".join(t): e.numpy() for t, e in b.e_id.items()} for b in batches]


def test_typed_weighted_fanout_all_takes_every_positive_edge_on_two_ranks(typed_weighted):
    """fanout -1 takes exactly the positive-weight in-edges of each seed, per type: on one partition and on 2 gloo
    ranks (the owners draw from their own arrays)."""
    root, data = typed_weighted
    one = _typed_batches(root / "p1", {HETERO_TYPES[0]: [-1], HETERO_TYPES[3]: [-1]})
    seeds = torch.arange(0, 2708, 5)
    for etype in (HETERO_TYPES[0], HETERO_TYPES[3]):
        key = ":".join(etype)
        dst, w = torch.from_numpy(data[f"{key}/dst"]), torch.from_numpy(data[f"{key}/edge_w"])
        want = set(torch.nonzero(torch.isin(dst, seeds) & (w > 0)).reshape(-1).tolist())
        assert set(torch.cat([b.e_id[etype] for b in one]).tolist()) == want
    for rank_batches in run_distributed(_typed_all, 2, str(root / "p2"), timeout_s=240):
        for key in (":".join(HETERO_TYPES[0]), ":".join(HETERO_TYPES[3])):
            got = set(np.concatenate([b[key] for b in rank_batches]).tolist())
            dst, w = data[f"{key}/dst"], data[f"{key}/edge_w"]
            assert got == set(np.nonzero(np.isin(dst, seeds.numpy()) & (w > 0))[0].tolist())


def test_typed_weight_missing_for_an_edge_type_is_one_line(typed_weighted, tmp_path):
    from gpart.pipeline.partition import partition_graph

    _, data = typed_weighted
    partial = {k: v for k, v in data.items() if not k.startswith("word:in:paper/edge_w")}
    np.savez(tmp_path / "partial.npz", **partial)
    partition_graph(tmp_path / "partial.npz", tmp_path / "p", 1, "random")
    part = gr.load_partition(tmp_path / "p", device="cpu")
    with pytest.raises(GpartError, match="edge type word:in:paper has no such edge data"):
        gr.DistNeighborLoader(part, {"paper": torch.arange(10)}, fanouts={HETERO_TYPES[0]: [2]}, node_data=None,
                              labels=None, weight="edge_w")
