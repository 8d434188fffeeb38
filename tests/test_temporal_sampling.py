"""Temporal draws (gpart.runtime.sampling.temporal): no edge later than its seed's time, "last" takes the
latest, "uniform" is uniform among the allowed, bad times are one-line errors, draws reproduce."""

import numpy as np
import pytest
import torch

import gpart.runtime as gr
from gpart.base.errors import InputError
from gpart.runtime.sampling.neighbor_sampler import LocalSampler
from gpart.runtime.sampling.temporal import TemporalIndex, check_temporal_options, check_times, resolve_seed_time, sample_temporal_segments, temporal_index


def _star(n: int):
    """One column with in-edges from sources 0..n-1 at positions 0..n-1; the candidate times are the positions."""
    return torch.tensor([0]), torch.tensor([n]), TemporalIndex(torch.arange(n, dtype=torch.float64), torch.tensor([0, n]))


def test_no_sampled_edge_is_later_than_its_seed_on_cora(cora_one):
    part = gr.load_partition(cora_one, device="cpu")
    node_time = torch.from_numpy(np.random.default_rng(0).integers(0, 50, part.num_nodes)).to(torch.float64)
    for strategy in ("uniform", "last"):
        sampler = LocalSampler(part, [[15], [10]])
        sampler.temporal = (temporal_index(part, node_time=node_time), strategy)
        gen = torch.Generator().manual_seed(1)
        drawn = 0
        for first in range(0, part.num_nodes, 300):
            cols = torch.arange(first, min(first + 300, part.num_nodes))
            col_time = resolve_seed_time(cols, None, node_time)
            counts, src, _ = sampler.sample(cols, 0, gen, col_time)
            seed_of = torch.repeat_interleave(col_time, counts)
            assert bool((node_time[src] <= seed_of).all())
            drawn += src.numel()
            # the allowed in-edges number at least the counts (fanout or all the allowed ones)
            start, end = part.indptr[cols], part.indptr[cols + 1]
            allowed = torch.tensor([int((node_time[part.indices[s:e]] <= t).sum()) for s, e, t in
                                    zip(start.tolist(), end.tolist(), col_time.tolist())])
            assert torch.equal(counts, torch.clamp(allowed, max=15))
        assert drawn > 1000


def test_carried_sources_and_edge_ids_give_the_same_draws_as_the_partitions(cora_one):
    """An index carrying the sources and edge ids in its sorted order (temporal_index's, int32 here) reads them
    directly; one without reads the partition's through perm: the same draws, both strategies, with times that tie."""
    part = gr.load_partition(cora_one, device="cpu")
    node_time = torch.from_numpy(np.random.default_rng(2).integers(0, 20, part.num_nodes)).to(torch.float64)
    carried = temporal_index(part, node_time=node_time)
    assert carried.sources.dtype == torch.int32 and carried.edge_ids.dtype == torch.int32
    bare = TemporalIndex(carried.times[carried.ranks.to(torch.int64)][torch.argsort(carried.perm.to(torch.int64))],
                         part.indptr)
    assert bare.sources is None and torch.equal(bare.perm, carried.perm)
    cols = torch.arange(part.num_nodes)
    col_time = resolve_seed_time(cols, None, node_time)
    for strategy in ("uniform", "last"):
        got = []
        for index in (carried, bare):
            sampler = LocalSampler(part, [[5]])
            sampler.temporal = (index, strategy)
            got.append(sampler.sample(cols, 0, torch.Generator().manual_seed(4), col_time))
        assert all(torch.equal(a, b) and a.dtype == b.dtype == torch.int64 for a, b in zip(*got))
        assert got[0][1].numel() > 1000


@pytest.mark.parametrize("rounds", ["numpy", "torch"])
@pytest.mark.parametrize("distinct", [3, 1000, None], ids=["few-times", "many-times", "all-distinct"])
def test_allowed_counts_match_a_direct_count(distinct, rounds, monkeypatch):
    """TemporalIndex.allowed (a binary search within each run) against counting every run's candidates directly:
    runs of 0 to 300 candidates, times with few or many distinct values, queries before, between and after them;
    its rounds through numpy (the CPU's) and through torch (CUDA's)."""
    import gpart.runtime.sampling.temporal as temporal

    monkeypatch.setattr(temporal, "NUMPY_ROUNDS", rounds == "numpy")
    gen = torch.Generator().manual_seed(distinct or 7)
    sizes = torch.randint(0, 300, (400,), generator=gen)
    sizes[:5] = torch.tensor([0, 1, 2, 299, 0])
    bounds = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(sizes, 0)])
    n = int(bounds[-1])
    cand = torch.rand(n, generator=gen, dtype=torch.float64)
    if distinct is not None:
        cand = torch.floor(cand * distinct)
    index = TemporalIndex(cand, bounds)
    runs = torch.randint(0, 400, (3000,), generator=gen)
    start, deg = bounds[runs], sizes[runs]
    seg_time = torch.rand(3000, generator=gen, dtype=torch.float64) * 1.2 * (distinct or 1) - 0.1
    got = index.allowed(start, deg, seg_time)
    expected = [int((cand[int(s):int(s) + int(d)] <= t).sum()) for s, d, t in zip(start, deg, seg_time)]
    assert got.tolist() == expected
    # within each run the sorted order holds the times ascending, equal times in position order
    for r in range(0, 400, 37):
        s, e = int(bounds[r]), int(bounds[r + 1])
        perm = index.perm[s:e]
        assert bool((perm >= s).all() and (perm < e).all())
        assert torch.equal(cand[perm], torch.sort(cand[s:e], stable=True).values)
        ties = cand[perm][1:] == cand[perm][:-1]
        assert bool((perm[1:][ties] > perm[:-1][ties]).all())


def test_last_takes_the_latest_allowed_with_ties_broken_by_position():
    start, deg, _ = _star(10)
    cand = TemporalIndex(torch.tensor([5., 1., 7., 7., 2., 9., 3., 7., 0., 4.]), torch.tensor([0, 10]))
    picks = sample_temporal_segments(start, deg, torch.tensor([7.]), cand, 3, "last")
    assert picks.counts.tolist() == [3] and picks.positions.tolist() == [7, 3, 2]
    # several segments at once, with their own times and an empty one
    cand = TemporalIndex(torch.tensor([5., 1., 7., 7., 2., 9., 3., 7., 0., 4.]), torch.tensor([0, 5, 10]))
    picks = sample_temporal_segments(torch.tensor([0, 5, 3]), torch.tensor([5, 5, 0]), torch.tensor([4., 100., 0.]),
                                     cand, 2, "last")
    assert picks.counts.tolist() == [2, 2, 0] and picks.positions.tolist() == [4, 1, 5, 7]


def test_uniform_is_uniform_among_the_allowed_neighbours():
    start, deg, cand = _star(20)
    gen = torch.Generator().manual_seed(3)
    hits = torch.zeros(20, dtype=torch.int64)
    trials = 6000
    for _ in range(trials // 200):  # 200 copies of the star per call: a batch of segments, as a hop draws them
        picks = sample_temporal_segments(start.repeat(200), deg.repeat(200), torch.full((200,), 11.), cand, 3,
                                         "uniform", gen)
        assert bool((picks.counts == 3).all())
        hits += torch.bincount(picks.positions, minlength=20)
    assert int(hits[12:].sum()) == 0  # times 12..19 are later than the seed's 11
    expected = trials * 3 / 12
    chi2 = float(((hits[:12].double() - expected) ** 2 / expected).sum())
    assert chi2 < 31.3  # 11 degrees of freedom, p = 0.001


def test_draws_reproduce_with_the_same_generator_seed():
    start, deg, cand = _star(50)
    runs = [sample_temporal_segments(start.repeat(30), deg.repeat(30), torch.arange(30, dtype=torch.float64) + 10, cand,
                                     5, "uniform", torch.Generator().manual_seed(7)).positions for _ in range(2)]
    assert torch.equal(*runs)


def test_disjoint_is_required_and_the_strategy_checked():
    with pytest.raises(InputError, match="needs disjoint=True"):
        check_temporal_options(False, "uniform")
    with pytest.raises(InputError, match="'latest' is not one of uniform, last"):
        check_temporal_options(True, "latest")
    check_temporal_options(True, "last")


def test_bad_times_are_one_line_errors():
    for bad, msg in [(None, "node time 't' is missing"), ([1.0, 2.0], "has 2 entries, expected 3"),
                     ([1.0, float("nan"), 2.0], "holds NaN at entry 1"), ([[1.0, 2.0, 3.0]], "must be a 1-D real array")]:
        with pytest.raises(InputError, match=msg) as got:
            check_times(bad, 3, "node time 't'")
        assert "\n" not in str(got.value)
    with pytest.raises(InputError, match="seed_time has 1 entries, expected 2"):
        resolve_seed_time(torch.tensor([0, 1]), [5.0], torch.zeros(3))
    with pytest.raises(InputError, match="seed_time is needed with edge times"):
        resolve_seed_time(torch.tensor([0, 1]), None, None)
    assert resolve_seed_time(torch.tensor([2, 0]), None, torch.tensor([1., 2., 3.])).tolist() == [3., 1.]


def test_two_hop_disjoint_batches_inherit_the_seed_time(cora_one):
    """Through the loader's protocol (disjoint, one partition): every edge of both hops is no later than the time of
    the seed its nodes belong to, the seed times given per seed (not the seed nodes' own times)."""
    part = gr.load_partition(cora_one, device="cpu")
    node_time = torch.from_numpy(np.random.default_rng(4).integers(0, 100, part.num_nodes)).to(torch.float64)
    loader = gr.DistNeighborLoader(part, torch.arange(part.num_nodes), fanouts=[15, 10], disjoint=True, labels=None)
    loader.sampler.temporal = (temporal_index(part, node_time=node_time), "uniform")
    gen = torch.Generator().manual_seed(5)
    edges = 0
    for first in range(0, part.num_nodes, 500):
        seeds = torch.arange(first, min(first + 500, part.num_nodes))
        seed_time = torch.from_numpy(np.random.default_rng(first).integers(0, 100, seeds.numel())).to(torch.float64)
        got = loader.protocol.sample(seeds, gen, seed_time=seed_time)
        src, dst = got.edge_index
        assert torch.equal(got.batch[src], got.batch[dst]) and got.num_sampled_edges[1] > 0
        assert bool((node_time[got.n_id[src]] <= seed_time[got.batch[dst]]).all())
        edges += int(src.numel())
    assert edges > 2000
    with pytest.raises(InputError, match="seed_time needs disjoint and sampler.temporal set"):
        gr.DistNeighborLoader(part, [0], fanouts=[2], labels=None).protocol.sample(
            torch.tensor([0]), gen, seed_time=torch.tensor([1.0]))


def test_edge_times_bound_every_sampled_edge(cora_one):
    """Edge times (one per global edge id): each sampled edge's own time is no later than its seed's time."""
    part = gr.load_partition(cora_one, device="cpu")
    edge_time = torch.from_numpy(np.random.default_rng(6).random(part.num_edges))
    loader = gr.DistNeighborLoader(part, torch.arange(part.num_nodes), fanouts=[5, 5], disjoint=True, labels=None)
    loader.sampler.temporal = (temporal_index(part, edge_time=edge_time), "last")
    seeds = torch.arange(0, part.num_nodes, 2)
    seed_time = torch.from_numpy(np.random.default_rng(7).random(seeds.numel()))
    got = loader.protocol.sample(seeds, torch.Generator().manual_seed(0), seed_time=seed_time)
    assert got.num_edges > 500
    assert bool((edge_time[got.e_id] <= seed_time[got.batch[got.edge_index[1]]]).all())
