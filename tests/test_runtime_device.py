"""The loader's device path: hops as [columns, fanout] tables with one host synchronisation each.

With one partition on a GPU the loader samples every hop as a static-shape
table (gpart.runtime.sampling.kernels.sample_table) and relabels it through the
device-resident map in one step (Relabeller.add_masked), whose only host
synchronisation is the hop's sizes. The same code runs on the CPU when
`loader.sampler.table_hops` is set, which is how it is checked here: every batch exact
against the input (real data, Cora), draws uniform. On CUDA (skipped without
it) the default loader takes that path, from GPU memory and from pinned
host memory, and its batches pass the same checks.
"""

from __future__ import annotations

import math
from collections import Counter
from itertools import combinations

import numpy as np
import pytest
import torch
from test_runtime_sampler import _chi2, _chi2_critical, _cora, check_batch

import gpart.runtime as gr
from gpart.runtime.sampling.kernels import Relabeller, sample_table

FANOUTS = [4, 3]



def _batches(part, fanouts, table: bool, **kw) -> list:
    loader = gr.DistNeighborLoader(part, torch.arange(0, part.num_nodes, 3), fanouts=fanouts, batch_size=200, seed=2, **kw)
    loader.sampler.table_hops = table
    return list(loader)


def test_table_hops_on_cpu_give_exact_batches(cora_one):
    data = _cora()
    indeg = np.bincount(data["dst"], minlength=data["feat"].shape[0])
    part = gr.load_partition(cora_one, device="cpu")
    assert not gr.DistNeighborLoader(part, [0], fanouts=FANOUTS).sampler.table_hops  # the CPU default: compact hops
    tables = _batches(part, FANOUTS, True)
    compact = _batches(part, FANOUTS, False)
    assert len(tables) == len(compact) > 0
    for a, b in zip(tables, compact):
        check_batch(a, FANOUTS, data, indeg)
        assert torch.equal(a.n_id[: a.batch_size], b.n_id[: b.batch_size])  # the same seeds, other draws
        assert a.num_sampled_edges[0] == b.num_sampled_edges[0]  # min(fanout, in-degree) either way
    # with replacement: fanout draws for every node with in-edges; -1 (every in-edge) falls back to compact hops
    for batch in _batches(part, [3], True, replace=True):
        ei = batch.edge_index.numpy()
        got = np.bincount(ei[1], minlength=batch.batch_size)
        assert np.array_equal(got, np.where(indeg[batch.n_id[: batch.batch_size].numpy()] > 0, 3, 0))
    for batch in _batches(part, [-1, 2], True):
        check_batch(batch, [-1, 2], data, indeg)


def test_sample_table_uniform_and_padded():
    gen = torch.Generator().manual_seed(3)
    trials = 12000
    table = sample_table(torch.full((trials,), 10), torch.full((trials,), 6), 3, False, gen)
    subsets = Counter(tuple(sorted(row)) for row in (table - 10).tolist())
    assert set(subsets) == set(combinations(range(6), 3))
    assert _chi2(np.array(list(subsets.values()))) < _chi2_critical(19)
    small = sample_table(torch.tensor([0, 5, 9]), torch.tensor([2, 0, 3]), 3, False, gen)
    assert small.tolist() == [[0, 1, -1], [-1, -1, -1], [9, 10, 11]]
    drawn = sample_table(torch.tensor([4]).repeat(4000), torch.tensor([5]).repeat(4000), 2, True, gen)
    counts = np.bincount(drawn.reshape(-1).numpy() - 4, minlength=5)
    assert drawn.min() >= 4 and drawn.max() < 9 and _chi2(counts) < _chi2_critical(4)


def test_add_masked_equals_add_unique_on_the_valid_entries():
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 50, (300,), generator=gen)
    valid = torch.rand(300, generator=gen) > 0.3
    a, b = Relabeller(50, torch.device("cpu")), Relabeller(50, torch.device("cpu"))
    seeds = torch.tensor([7, 3, 11])
    a.start(seeds), b.start(seeds)
    pos, added, keep = a.add_masked(ids, valid)
    want_pos, want_added = b.add_unique(ids[valid])
    assert torch.equal(keep, torch.nonzero(valid).reshape(-1))
    assert torch.equal(pos, want_pos) and torch.equal(added, want_added) and a.size == b.size
    again = torch.tensor([3, 49, 7])  # a second hop sees the first hop's nodes listed
    assert torch.equal(a.add_masked(again, torch.ones(3, dtype=torch.bool))[0], b.add_unique(again)[0])
    a.reset()
    assert bool((a.slot == torch.iinfo(torch.int32).max).all())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_batches_pass_the_cpu_checks(cora_one):
    data = _cora()
    indeg = np.bincount(data["dst"], minlength=data["feat"].shape[0])
    for feature_device in (None, "cpu"):  # rows from GPU memory, then from pinned host memory
        part = gr.load_partition(cora_one, device="cuda", feature_device=feature_device)
        loader = gr.DistNeighborLoader(part, torch.arange(0, part.num_nodes, 3), fanouts=FANOUTS, batch_size=200, seed=2)
        assert loader.sampler.table_hops
        for batch in loader:
            assert batch.edge_index.is_cuda and batch.x.is_cuda and batch.y.is_cuda
            for name in ("n_id", "edge_index", "e_id", "x", "y"):
                setattr(batch, name, getattr(batch, name).cpu())
            batch.node_data = {k: v.cpu() for k, v in batch.node_data.items()}
            check_batch(batch, FANOUTS, data, indeg)
    assert math.isfinite(float(loader.stats["total_s"]))


def test_sample_and_present_are_the_loaders_batches(cora_one):
    """What a link loader or layer-wise inference reuses: loader.sample(seeds, generator) then loader.present."""
    data = _cora()
    indeg = np.bincount(data["dst"], minlength=data["feat"].shape[0])
    part = gr.load_partition(cora_one, device="cpu")
    loader = gr.DistNeighborLoader(part, torch.arange(0, 600, 3), fanouts=FANOUTS, batch_size=50, shuffle=False, seed=1)
    first = next(iter(loader))
    loader.set_epoch(0)
    again = loader.present(loader.sample(torch.arange(0, 150, 3), loader.epochs.generator(1)))
    check_batch(again, FANOUTS, data, indeg)
    assert all(torch.equal(getattr(first, k), getattr(again, k)) for k in ("n_id", "edge_index", "e_id", "x", "y"))


def _fields(batch) -> list:
    return [batch.n_id, batch.edge_index, batch.e_id, batch.x, batch.y, torch.tensor(batch.num_sampled_nodes),
            torch.tensor(batch.num_sampled_edges)]


def _same(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(_fields(a), _fields(b)))


def test_table_and_compact_hops_reproduce_what_the_docstring_promises(cora_one):
    """gpart.runtime.loaders.node, 'What reproduces', path by path, on the same seeds and (seed, epoch, rank)."""
    data = _cora()
    indeg = np.bincount(data["dst"], minlength=data["feat"].shape[0])
    part = gr.load_partition(cora_one, device="cpu")
    for replace in (False, True):
        tables, compact = _batches(part, FANOUTS, True, replace=replace), _batches(part, FANOUTS, False, replace=replace)
        # each strategy: the same loader again gives identical batches
        assert all(map(_same, tables, _batches(part, FANOUTS, True, replace=replace)))
        assert all(map(_same, compact, _batches(part, FANOUTS, False, replace=replace)))
        assert len(tables) == len(compact) > 0
        differ = 0
        for a, b in zip(tables, compact):
            # the same seeds in the same order, the same first-hop in-edge count per seed ...
            assert torch.equal(a.n_id[: a.batch_size], b.n_id[: b.batch_size]) and torch.equal(a.y, b.y)
            first = [torch.bincount(x.edge_index[1, : x.num_sampled_edges[0]], minlength=x.batch_size) for x in (a, b)]
            seed_deg = indeg[a.n_id[: a.batch_size].numpy()]
            want = np.where(seed_deg > 0, FANOUTS[0], 0) if replace else np.minimum(seed_deg, FANOUTS[0])
            assert np.array_equal(first[0].numpy(), want) and torch.equal(first[0], first[1])
            differ += not _same(a, b)
        assert differ > 0  # ... and other neighbours: the strategies draw differently
    # where no hop draws (every fanout at least every in-degree), both give identical batches
    wide = [int(indeg.max()), int(indeg.max())]
    tables, compact = _batches(part, wide, True), _batches(part, wide, False)
    assert len(tables) == len(compact) > 0 and all(map(_same, tables, compact))
    # and another epoch or seed gives other batches on either path
    loader = gr.DistNeighborLoader(part, torch.arange(0, part.num_nodes, 3), fanouts=FANOUTS, batch_size=200, seed=2)
    loader.sampler.table_hops = True
    loader.set_epoch(1)
    assert not all(map(_same, loader, _batches(part, FANOUTS, True)))


def test_a_sampler_passed_in_is_the_one_used(cora_one):
    """sampler=: the hop strategy chosen on a LocalSampler of the caller's gives that strategy's batches; a sampler
    taking another number of hops than the fanouts is refused in one line."""
    from gpart.base.errors import InputError
    from gpart.runtime.sampling.neighbor_sampler import LocalSampler

    part = gr.load_partition(cora_one, device="cpu")
    mine = LocalSampler(part, [[f] for f in FANOUTS], table_hops=True)
    loader = gr.DistNeighborLoader(part, torch.arange(0, part.num_nodes, 3), fanouts=FANOUTS, batch_size=200, seed=2,
                                   sampler=mine)
    assert loader.sampler is mine and all(map(_same, loader, _batches(part, FANOUTS, True)))
    with pytest.raises(InputError, match="the sampler takes 1 hops, the fanouts 2"):
        gr.DistNeighborLoader(part, [0], fanouts=FANOUTS, sampler=LocalSampler(part, [[4]]))
