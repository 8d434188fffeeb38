"""Fixed-capacity table hops (gpart.runtime.sampling.table_hops) and their draws, on the CPU.

The torch-op draw and the fused Triton kernel (under TRITON_INTERPRET=1; skipped
without triton) are held to the same checks: every table row exact (min(deg,
fanout) distinct in-edges of its column, the rest padding) and each subset
equally likely (chi-square). A padded batch trimmed is the compact batch of the
same generator state; the device path's ops and host synchronisations per batch
are counted (gpart.runtime.sampling.op_count) for [15, 10, 5] at batch 1024.
"""

from __future__ import annotations

from collections import Counter
from itertools import combinations
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_runtime_sampler import _chi2, _chi2_critical, _cora, check_batch

import gpart.runtime as gr
from gpart.runtime.sampling import fused_floyd
from gpart.runtime.sampling.op_count import OpCounter
from gpart.runtime.sampling.table_draws import HopTable, RoundStreams, TableConstants, TorchFloyd
from gpart.runtime.sampling.table_hops import trim


def _csc(degrees: list[int]) -> SimpleNamespace:
    deg = torch.tensor(degrees, dtype=torch.int64)
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), deg.cumsum(0)])
    n = len(degrees)
    return SimpleNamespace(indptr=indptr, indices=torch.arange(int(deg.sum())) * 7 % n, num_nodes=n, device=torch.device("cpu"))


@pytest.fixture(params=["torch", "fused"])
def draw_of(request, monkeypatch):
    """(csc -> draw): the torch-op draw, or the fused kernel run by Triton's interpreter."""
    if request.param == "torch":
        return lambda part, hops=1: TorchFloyd(part, TableConstants(part.num_nodes, part.device), hops)
    if not fused_floyd.available():
        pytest.skip("triton is not installed")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return lambda part, hops=1: fused_floyd.FusedFloyd(part, hops)


def _draw_table(draw, part, cols: list[int], k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    size = len(cols) * k
    out = HopTable.of(torch.empty(size, dtype=torch.int64), torch.empty(size, dtype=torch.int64),
                      torch.empty(size, dtype=torch.bool), len(cols), k)
    draw(torch.tensor(cols), 0, k, torch.Generator().manual_seed(seed), out)
    return out.pos.view(len(cols), k).numpy(), out.src.view(len(cols), k).numpy()


def test_draws_are_exact(draw_of):
    degrees = [0, 1, 3, 4, 5, 9, 40, 2, 4]
    part = _csc(degrees)
    cols = list(range(len(degrees))) + [len(degrees), len(degrees) + 1]  # the two padding ids last
    pos, src = _draw_table(draw_of(part), part, cols, 4, seed=1)
    indptr, indices = part.indptr.numpy(), part.indices.numpy()
    for row, col in enumerate(cols):
        deg = degrees[col] if col < len(degrees) else 0
        valid = src[row] != part.num_nodes
        assert valid.sum() == min(deg, 4)
        taken = pos[row][valid]
        assert len(set(taken.tolist())) == taken.size  # no in-edge twice
        assert ((taken >= indptr[col]) & (taken < indptr[col] + deg)).all() if deg else taken.size == 0
        assert np.array_equal(src[row][valid], indices[taken]) and (pos[row][~valid] == 0).all()
        if col < len(degrees) and deg <= 4:  # every in-edge, in order
            assert np.array_equal(taken, np.arange(indptr[col], indptr[col] + deg))


def test_draws_are_uniform_and_reproducible(draw_of):
    trials = 6000
    part = _csc([6] * trials)
    draw = draw_of(part)
    pos, _ = _draw_table(draw, part, list(range(trials)), 3, seed=5)  # fixed: the 0.1% point is exceeded 1 time in 1000
    subsets = Counter(tuple(sorted(row)) for row in (pos - part.indptr.numpy()[:trials, None]).tolist())
    assert set(subsets) == set(combinations(range(6), 3))
    assert _chi2(np.array(list(subsets.values()))) < _chi2_critical(19)
    again, _ = _draw_table(draw, part, list(range(trials)), 3, seed=5)
    other, _ = _draw_table(draw, part, list(range(trials)), 3, seed=4)
    assert np.array_equal(pos, again) and not np.array_equal(pos, other)


def _protocol(part, fanouts, fused: bool = False, node_data=("feat",)):
    loader = gr.DistNeighborLoader(part, torch.arange(part.num_nodes), fanouts=fanouts, batch_size=64,
                                   node_data=list(node_data), labels="label" if node_data else None)
    loader.sampler.table_hops, loader.sampler.fused = True, fused
    assert loader.protocol.table_batches()
    return loader.protocol


@pytest.mark.parametrize("fused", [False, True])
def test_padded_batches_trim_to_the_compact_batches(cora_one, fused, monkeypatch):
    if fused:
        if not fused_floyd.available():
            pytest.skip("triton is not installed")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    data = _cora()
    indeg = np.bincount(data["dst"], minlength=data["feat"].shape[0])
    part = gr.load_partition(cora_one, device="cpu")
    fanouts = [5, 3]
    protocol = _protocol(part, fanouts, fused)
    for start, size in ((0, 200), (600, 200), (900, 37)):  # two shapes, the first one's buffers reused
        seeds = torch.randperm(part.num_nodes, generator=torch.Generator().manual_seed(start))[:size]
        compact = protocol.sample(seeds, torch.Generator().manual_seed(start))
        padded = protocol.sample_padded(seeds, torch.Generator().manual_seed(start))
        total = sum(compact.num_sampled_nodes)
        assert (padded.n_id[total:] == part.num_nodes + 1).all()
        assert total <= padded.n_id.numel() <= min(sum(padded.node_caps), part.num_nodes + max(padded.node_caps[1:-1], default=0))
        assert padded.edge_index.shape[1] == sum(padded.edge_caps) == padded.valid.numel()
        assert (padded.edge_index[0][~padded.valid] == -1).all()
        trimmed = trim(padded)
        for name in ("n_id", "edge_index", "e_id", "y"):
            assert torch.equal(getattr(trimmed, name), getattr(compact, name)), name
        assert torch.equal(trimmed.node_data["feat"], compact.node_data["feat"])
        assert trimmed.num_sampled_nodes == compact.num_sampled_nodes and trimmed.num_sampled_edges == compact.num_sampled_edges
        batch = SimpleNamespace(
            n_id=compact.n_id, batch_size=compact.batch_size, edge_index=compact.edge_index, e_id=compact.e_id,
            num_sampled_nodes=compact.num_sampled_nodes, num_sampled_edges=compact.num_sampled_edges,
            x=compact.node_data["feat"], y=compact.y, node_data=compact.node_data, batch=None)
        check_batch(batch, fanouts, data, indeg)


def test_the_loader_yields_padded_batches(cora_one):
    part = gr.load_partition(cora_one, device="cpu")
    seeds = torch.arange(0, part.num_nodes, 3)
    padded = [b.trim() for b in gr.DistNeighborLoader(part, seeds, fanouts=[4, 3], batch_size=200, seed=2, padded=True)]
    loader = gr.DistNeighborLoader(part, seeds, fanouts=[4, 3], batch_size=200, seed=2)
    loader.sampler.table_hops = True
    compact = list(loader)
    assert len(padded) == len(compact) > 1
    for a, b in zip(padded, compact):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index) and torch.equal(a.e_id, b.e_id)
        assert torch.equal(a.node_data["feat"], b.x) and torch.equal(a.y, b.y)
    # batches prepared ahead keep their buffers: every padded batch held at once trims to the same compact batch
    ahead = list(gr.DistNeighborLoader(part, seeds, fanouts=[4, 3], batch_size=200, seed=2, padded=True, prefetch=2))
    for a, b in zip([p.trim() for p in ahead[-4:]], compact[-4:]):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
    from gpart.base.errors import InputError

    with pytest.raises(InputError, match="padded batches need one partition"):
        gr.DistNeighborLoader(part, seeds, fanouts=[-1, 3], padded=True)


def _count(run) -> OpCounter:
    with OpCounter() as count:
        run()
    return count


@pytest.mark.parametrize("fused", [False, True])
def test_ops_and_synchronisations_per_batch(cora_one, fused, monkeypatch):
    """The CPU proxy of the device path: [15, 10, 5] at batch 1024, topology only (as the issue counted 213 ops and
    3 synchronisations): at most 90 ops and 1 synchronisation compact, none padded; the fused kernel counts as one."""
    if fused:
        if not fused_floyd.available():
            pytest.skip("triton is not installed")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    part = gr.load_partition(cora_one, device="cpu")
    protocol = _protocol(part, [15, 10, 5], fused, node_data=())
    # the count does not depend on the batch size; the interpreter's time does
    seeds, gen = torch.randperm(part.num_nodes)[:128 if fused else 1024], torch.Generator().manual_seed(0)
    for _ in range(3):  # warm: the first batch at the guaranteed capacities, then both sets at the learned ones
        protocol.sample(seeds, gen)
    for _ in range(2):  # and both sets at the guaranteed capacities, which padded batches take
        protocol.sample_padded(seeds, gen)
    compact, padded = _count(lambda: protocol.sample(seeds, gen)), _count(lambda: protocol.sample_padded(seeds, gen))
    assert compact.syncs == 1 and compact.syncs_by_name["tolist"] == 1 and padded.syncs == 0
    assert compact.ops <= 90 and padded.ops < compact.ops
    if fused:
        assert compact.by_name["fused_floyd"] == 3 and compact.ops <= 60


def test_round_streams_do_not_depend_on_the_columns():
    """Column c's numbers are the same whatever the count of columns (what learned capacities rest on), every round's
    row its own, and another generator state gives others."""
    streams = RoundStreams(2)
    streams.reseed(torch.Generator().manual_seed(3))
    wide, narrow = np.empty((5, 1000)), np.empty((5, 37))
    streams.fill(1, wide)
    streams.fill(1, narrow)
    assert np.array_equal(wide[:, :37], narrow) and ((wide >= 0) & (wide < 1)).all()
    assert not np.array_equal(wide[0], wide[1]) and abs(wide.mean() - 0.5) < 0.02
    other = np.empty((5, 37))
    streams.fill(0, other)
    assert not np.array_equal(other, narrow)
    streams.reseed(torch.Generator().manual_seed(4))
    streams.fill(1, other)
    assert not np.array_equal(other, narrow)


@pytest.mark.parametrize("fused", [False, True])
def test_learned_capacities_give_the_guaranteed_batches(cora_one, fused, monkeypatch):
    """Compact batches at learned capacities, and after a frontier outgrew them (run again), equal the padded batches
    of the same generator state at the guaranteed capacities, and their hops run below those capacities."""
    if fused:
        if not fused_floyd.available():
            pytest.skip("triton is not installed")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    part = gr.load_partition(cora_one, device="cpu")
    protocol = _protocol(part, [4, 3, 2], fused)
    tables = protocol._padded_batches().tables
    assert tables.draw.capacity_free
    ran: list[list[int]] = []
    run_into = tables.run_into
    monkeypatch.setattr(tables, "run_into", lambda buf, seeds, gen: ran.append(buf.caps) or run_into(buf, seeds, gen))
    for batch in range(8):
        seeds = torch.randperm(part.num_nodes, generator=torch.Generator().manual_seed(batch))[:400]
        if batch == 5:  # learned capacities far too small: the batch outgrows them and runs again
            tables._seen[400] = [1, 1]
            del tables._learned[400]
        ran.clear()
        compact = protocol.sample(seeds, torch.Generator().manual_seed(batch))
        guaranteed = tables.guaranteed_caps(400)
        assert ran[0] == guaranteed if batch == 0 else all(a < b for a, b in zip(ran[0][1:-1], guaranteed[1:-1]))
        assert len(ran) == (2 if batch == 5 else 1) and (batch != 5 or ran[1] == guaranteed)
        padded = trim(protocol.sample_padded(seeds, torch.Generator().manual_seed(batch), rows=False))
        for name in ("n_id", "edge_index", "e_id"):
            assert torch.equal(getattr(compact, name), getattr(padded, name)), (batch, name)
        assert compact.num_sampled_nodes == padded.num_sampled_nodes
    assert tables._seen[400][0] > 1  # learned again from the batches that ran


def _trimmed_fields(padded) -> list:
    batch = trim(padded)
    return [batch.n_id, batch.edge_index, batch.e_id, batch.node_data["feat"], batch.y,
            torch.tensor(batch.num_sampled_nodes), torch.tensor(batch.num_sampled_edges)]


@pytest.mark.skipif(not torch.cuda.is_available() or not fused_floyd.available(), reason="needs CUDA and triton")
def test_cuda_graph_replay_equals_eager(cora_one):
    """A padded batch replayed from a CUDA graph (hops, relabelling, row gathers) equals the eager batch of the same
    generator state, shape after shape, and its draws pass the exactness checks."""
    data = _cora()
    indeg = np.bincount(data["dst"], minlength=data["feat"].shape[0])
    part = gr.load_partition(cora_one, device="cuda")
    protocol = _protocol(part, [5, 3], fused=True)
    for size in (200, 37, 200):
        seeds = torch.randperm(part.num_nodes, generator=torch.Generator().manual_seed(size))[:size].cuda()
        protocol.replay = False
        eager = [t.clone() for t in _trimmed_fields(protocol.sample_padded(seeds, torch.Generator("cuda").manual_seed(size)))]
        protocol.replay = True
        for _ in range(3):  # captured, then replayed from each of the shape's graphs
            replayed = _trimmed_fields(protocol.sample_padded(seeds, torch.Generator("cuda").manual_seed(size)))
            assert all(torch.equal(a, b) for a, b in zip(eager, replayed))
        n_id, ei, e_id, feat, y, nodes, edges = (t.cpu() for t in replayed)
        check_batch(SimpleNamespace(n_id=n_id, batch_size=size, edge_index=ei, e_id=e_id, num_sampled_nodes=nodes.tolist(),
                                    num_sampled_edges=edges.tolist(), x=feat, y=y, node_data={"feat": feat}, batch=None),
                    [5, 3], data, indeg)
    assert protocol._padded._replay is not None and not protocol._padded._replay.failed
