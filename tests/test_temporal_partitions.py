"""Temporal draws across partitions (gpart.runtime.sampling.disjoint_round): 2 gloo ranks against the input graph.

Cora in 2 partitions (random, no halo: most rows travel) and in 1, node times and edge times
(continuous: no ties, so "last" is one answer whatever the partitioning).
Every batch of the 2 ranks: no sampled edge later than its seed's time, each
(seed, node) of a hop got min(fanout, in-edges allowed at its seed's time)
edges, rows are the input's; "last" equals a brute-force reference on the
full graph and, edge for edge, the one-partition batch; "uniform" over many
draws covers exactly the allowed in-edges; a batch makes as many collectives
with time as without. Seeds repeat nodes, with the same time and with
different times, so a request round sees (node, time) pairs of one node.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from support.gloo_processes import error_text, run_distributed
from support.npz_arrays import npz_arrays

import gpart.runtime as gr
from gpart.runtime.sampling.temporal import temporal_index

CORA = Path(__file__).resolve().parents[1] / "sample_data" / "cora.npz"
HETERO = CORA.with_name("cora_hetero.npz")
FANOUTS = [4, 3]
BATCH = 48


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> dict:
    from gpart.pipeline.partition import partition_graph

    if not CORA.exists() or not HETERO.exists():
        pytest.skip("sample_data missing")
    root = tmp_path_factory.mktemp("temporal_parts")
    partition_graph(CORA, root / "one", 1, "metis")
    partition_graph(CORA, root / "two", 2, "random")  # no halo: most rows travel
    for n in (1, 2):
        partition_graph(HETERO, root / f"typed_{n}", n, "random")
    return {1: root / "one", 2: root / "two", "typed_1": root / "typed_1", "typed_2": root / "typed_2"}


def _times(data: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(node times over global ids, edge times over global edge ids): continuous, no ties."""
    rng = np.random.default_rng(11)
    return torch.from_numpy(rng.random(data["feat"].shape[0])), torch.from_numpy(rng.random(data["src"].size))


def _seeds(data: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Every third node at one of 19 times, then 40 of them again: 20 at their first time, 20 at another."""
    seeds = np.arange(0, data["feat"].shape[0], 3)
    times = np.random.default_rng(12).integers(1, 20, seeds.size) / 20  # coarse: seeds of a batch share times
    seeds = np.concatenate([seeds, seeds[:40]])
    times = np.concatenate([times, times[:20], times[20:40] * 0.5])
    return torch.from_numpy(seeds), torch.from_numpy(times)


def _batches(rank: int, world: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's batches of the seed list (interleaved), the seed times with them."""
    seeds, times = _seeds(npz_arrays(CORA))
    mine = torch.arange(rank, seeds.numel(), world)
    return [(seeds[mine[i:i + BATCH]], times[mine[i:i + BATCH]]) for i in range(0, mine.numel(), BATCH)]


def _loader(part, data: dict, kind: str, strategy: str, fanouts=FANOUTS):
    node_time, edge_time = _times(data)
    loader = gr.DistNeighborLoader(part, torch.tensor([0]), fanouts=fanouts, disjoint=True, timeout_s=60)
    times = {"node_time": node_time} if kind == "node" else {"edge_time": edge_time}
    loader.sampler.temporal = (temporal_index(part, **times), strategy)
    return loader


def _edges(got) -> np.ndarray:
    """The batch's edges as sorted rows (hop, seed, source, destination, edge id) on global ids."""
    hop = np.repeat(np.arange(len(got.num_sampled_edges)), got.num_sampled_edges)
    src, dst = got.edge_index.numpy()
    n_id, batch = got.n_id.numpy(), got.batch.numpy()
    rows = np.stack([hop, batch[dst], n_id[src], n_id[dst], got.e_id.numpy()], 1)
    return rows[np.lexsort(rows.T[::-1])]


def _sample_all(part, data: dict, kind: str, strategy: str, batches, gen_seed: int, rounds=None) -> list:
    loader = _loader(part, data, kind, strategy)
    if rounds is not None:
        _spy(loader.protocol, rounds)
    gen = torch.Generator().manual_seed(gen_seed)
    out = []
    for seeds, seed_time in batches:
        got = loader.protocol.sample(seeds, gen, seed_time=seed_time)
        out.append({"edges": _edges(got), "sizes": got.num_sampled_nodes, "n_id": got.n_id.numpy(),
                    "batch": got.batch.numpy(), "x": got.node_data["feat"].numpy(), "y": got.y.numpy(),
                    "seeds": seeds.numpy(), "seed_time": seed_time.numpy()})
    return out


def _spy(protocol, rounds: list) -> None:
    """Record, per sampling round, (requests, distinct nodes among them, requests that bring rows, draws)."""
    plain = protocol.round

    def spy(frontier, keys, sample, draws=None, into=None, rowless=None):
        if sample is not None and protocol.exchange.active:
            rowed = frontier.numel() if rowless is None else int((~rowless).sum())
            rounds.append((frontier.numel(), frontier.unique().numel(), rowed, int(draws.sum())))
        return plain(frontier, keys, sample, draws, into, rowless)
    protocol.round = spy


def _ranks(rank: int, world: int, parts: dict) -> dict:
    data = npz_arrays(CORA)
    part = gr.load_partition(parts[2], device="cpu")
    batches = _batches(rank, world)
    out = {"rounds": []}
    out.update((f"{kind}/{strategy}", _sample_all(part, data, kind, strategy, batches, rank, out["rounds"]))
               for kind in ("node", "edge") for strategy in ("uniform", "last"))
    # "uniform" repeated over a few seeds: the union of the draws
    few = (torch.tensor([rank * 7, 100 + rank, 2000 + rank]), torch.tensor([0.6, 0.8, 0.9], dtype=torch.float64))
    loader = _loader(part, data, "node", "uniform", fanouts=[2])
    gen = torch.Generator().manual_seed(3)
    out["repeated"] = np.unique(np.concatenate([_edges(loader.protocol.sample(few[0], gen, seed_time=few[1]))
                                                for _ in range(60)]), axis=0)
    out["few"] = few[0].numpy(), few[1].numpy()
    out["collectives"] = _collectives(part, data, batches[0])
    out["typed"] = _typed(gr.load_partition(parts["typed_2"], device="cpu"), rank, world)
    out["errors"] = _refusals(part, data)
    out["one_sided"] = _one_sided(part, data, rank, batches[0])
    return out


def _one_sided(part, data: dict, rank: int, batch) -> list[np.ndarray]:
    """Batches where rank 1 has no seeds (with an empty seed_time, then with none): it still serves rank 0."""
    loader = _loader(part, data, "edge", "uniform")
    seeds, seed_time = batch if rank == 0 else (batch[0][:0], batch[1][:0])
    got = [loader.protocol.sample(seeds, torch.Generator(), seed_time=seed_time)]
    got.append(loader.protocol.sample(seeds, torch.Generator(), seed_time=seed_time if rank == 0 else None))
    return [_edges(g) for g in got] + [seed_time.numpy()]


def _typed(part, rank: int, world: int) -> list[dict]:
    """Typed batches (erased ids; node times over erased ids, paper seeds) with "last": per batch the edges and
    what to check them with."""
    fanouts = {etype: [3, 2] for etype in part.edge_types}  # temporal draws take one fanout per hop
    loader = gr.DistNeighborLoader(part, {"paper": [0]}, fanouts=fanouts, disjoint=True, timeout_s=60)
    node_time = torch.from_numpy(np.random.default_rng(13).random(part.num_nodes))
    loader.sampler.temporal = (temporal_index(part, node_time=node_time), "last")
    seeds, times = _seeds(npz_arrays(CORA))  # the papers are the plain graph's nodes
    mine = torch.arange(rank, seeds.numel(), world)
    out, gen = [], torch.Generator()
    for at in range(0, mine.numel(), 4 * BATCH):
        got = loader.protocol.sample(seeds[mine[at:at + 4 * BATCH]], gen, seed_time=times[mine[at:at + 4 * BATCH]])
        out.append({"edges": _edges(got), "n_id": got.n_id.numpy(), "x": got.node_data[("paper", "feat")].numpy(),
                    "seed_time": times[mine[at:at + 4 * BATCH]].numpy(), "node_time": node_time.numpy()})
    return out


def _collectives(part, data: dict, batch) -> dict:
    """(collectives, host reads) of one batch with and without time, and with an unbounded hop (fanout -1)."""
    out = {}
    for fanouts in (FANOUTS, [-1, 2]):
        for timed in (False, True):
            loader = _loader(part, data, "node", "uniform", fanouts=fanouts)
            if not timed:
                loader.sampler.temporal = None
            stats = loader.protocol.exchange.stats
            before = (stats["collectives"], stats["host_syncs"])
            loader.protocol.sample(batch[0], torch.Generator(), seed_time=batch[1] if timed else None)
            out[(str(fanouts), timed)] = (stats["collectives"] - before[0], stats["host_syncs"] - before[1])
    return out


def _refusals(part, data: dict) -> list[str]:
    """Refused on every rank before any collective (no hang), in one line."""
    seeds, gen = part.node_ids[:4].to(torch.int64), torch.Generator()
    plain = gr.DistNeighborLoader(part, [0], fanouts=[2], timeout_s=20)
    plain.sampler.temporal = _loader(part, data, "node", "last").sampler.temporal
    timed = _loader(part, data, "node", "last")
    return [error_text(lambda: plain.protocol.sample(seeds, gen, seed_time=torch.zeros(4))),
            error_text(lambda: timed.protocol.sample(seeds, gen)),
            error_text(lambda: timed.protocol.sample(seeds, gen, seed_time=torch.zeros(3)))]


# ---------------------------------------------------------------- the reference on the full graph


class Reference:
    """The input graph's in-edges with their times (node times: the source's; edge times: the edge's)."""

    def __init__(self, data: dict, kind: str):
        node_time, edge_time = (t.numpy() for t in _times(data))
        src, dst = data["src"].astype(np.int64), data["dst"].astype(np.int64)
        self.time = node_time[src] if kind == "node" else edge_time
        self.src, self.dst = src, dst
        self.by_dst = np.lexsort((self.time, dst))  # in-edges of each node, oldest first
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=data["feat"].shape[0]))])

    def allowed(self, nodes: np.ndarray, times: np.ndarray) -> np.ndarray:
        """How many in-edges of each node have time <= its time."""
        return np.array([int((self.time[self.by_dst[self.indptr[v]:self.indptr[v + 1]]] <= t).sum())
                         for v, t in zip(nodes.tolist(), times.tolist())], dtype=np.int64)

    def last(self, node: int, t: float, k: int) -> set[int]:
        """The edge ids of the k latest in-edges of `node` no later than t."""
        run = self.by_dst[self.indptr[node]:self.indptr[node + 1]]
        run = run[self.time[run] <= t]
        return set(run[len(run) - k:].tolist()) if k < len(run) else set(run.tolist())


def _check_batch(b: dict, ref: Reference, data: dict) -> None:
    edges, seed_time = b["edges"], b["seed_time"]
    hop, seed, src, dst, eid = edges.T
    assert np.array_equal(data["src"][eid], src) and np.array_equal(data["dst"][eid], dst)  # input edges
    assert (ref.time[eid] <= seed_time[seed]).all()  # never later than the seed
    assert np.array_equal(b["x"], data["feat"][b["n_id"]]) and np.array_equal(b["y"], data["label"][b["seeds"]])
    # each (seed, node) of a hop's frontier: min(fanout, allowed) edges
    sizes, start = b["sizes"], 0
    for h, fanout in enumerate(FANOUTS):
        keys = np.arange(start, start + sizes[h])
        start += sizes[h]
        nodes, seeds = b["n_id"][keys], b["batch"][keys]
        got = np.zeros(keys.size, dtype=np.int64)
        key_of = {(s, v): i for i, (s, v) in enumerate(zip(seeds.tolist(), nodes.tolist()))}
        assert len(key_of) == keys.size  # a node once per seed
        for s, d in zip(seed[hop == h].tolist(), dst[hop == h].tolist()):
            got[key_of[(s, d)]] += 1
        assert np.array_equal(got, np.minimum(ref.allowed(nodes, seed_time[seeds]), fanout))


@pytest.fixture(scope="module")
def two_ranks(parts) -> list[dict]:
    return run_distributed(_ranks, 2, parts, timeout_s=300)


def test_no_edge_later_than_its_seed_and_every_key_gets_its_allowed_count(two_ranks):
    data = npz_arrays(CORA)
    for kind in ("node", "edge"):
        ref = Reference(data, kind)
        for strategy in ("uniform", "last"):
            batches = [b for r in two_ranks for b in r[f"{kind}/{strategy}"]]
            for b in batches:
                _check_batch(b, ref, data)
            assert sum(len(b["edges"]) for b in batches) > 1500


def test_a_node_is_asked_once_per_time_and_its_rows_travel_once(two_ranks):
    """Each round asks each (node, time) pair once and draws it once per key; a node asked at several times
    brings its rows with one request only."""
    data = npz_arrays(CORA)
    for r in two_ranks:
        rounds = np.array(r["rounds"])
        requests, distinct, rowed, draws = rounds.T
        assert (rowed == distinct).all() and (requests > distinct).any()  # several times of one node, rows once
        keys = sum(len(b["n_id"]) - b["sizes"][-1] for kind in ("node", "edge") for strategy in ("uniform", "last")
                   for b in r[f"{kind}/{strategy}"])
        assert draws.sum() == keys and (draws > requests).any()  # keys of one node at one time: one request
    assert data["feat"].shape[0] > 0


def test_last_is_the_one_partition_batch_and_the_brute_force(two_ranks, parts):
    """Continuous times have no ties, so "last" is one answer: the 2 ranks' batches are the one partition's, edge
    for edge, and a seed's first hop is its latest allowed in-edges on the full graph."""
    data = npz_arrays(CORA)
    one = gr.load_partition(parts[1], device="cpu")
    for kind in ("node", "edge"):
        ref = Reference(data, kind)
        for rank, r in enumerate(two_ranks):
            got = r[f"{kind}/last"]
            local = _sample_all(one, data, kind, "last", _batches(rank, 2), 9)
            assert len(got) == len(local) > 5
            for b, a in zip(got, local):
                assert np.array_equal(b["edges"], a["edges"])
            for b in got[:3]:
                first = b["edges"][b["edges"][:, 0] == 0]
                for i, (node, t) in enumerate(zip(b["seeds"].tolist(), b["seed_time"].tolist())):
                    assert set(first[first[:, 1] == i, 4].tolist()) == ref.last(node, t, FANOUTS[0])


def test_uniform_draws_cover_exactly_the_allowed_in_edges(two_ranks):
    """60 draws of fanout 2 for a few seeds: the union of the draws is the seed's allowed in-edges."""
    ref = Reference(npz_arrays(CORA), "node")
    covered = 0
    for r in two_ranks:
        seeds, times = r["few"]
        first = r["repeated"][r["repeated"][:, 0] == 0]
        for i, (node, t) in enumerate(zip(seeds.tolist(), times.tolist())):
            allowed = ref.last(node, t, 10**9)
            assert set(first[first[:, 1] == i, 4].tolist()) == allowed
            covered += len(allowed)
    assert covered > 6


def test_a_batch_makes_as_many_collectives_with_time_as_without(two_ranks):
    for r in two_ranks:
        got = r["collectives"]
        for fanouts, calls in ((str(FANOUTS), 3 * 3), (str([-1, 2]), 3 * 3 + 1)):
            assert got[(fanouts, True)] == got[(fanouts, False)]
            assert got[(fanouts, True)][0] == calls  # 3 per hop, a round of rows, 1 for an unbounded hop's edges


def test_typed_batches_across_partitions(two_ranks, parts):
    """Typed (erased ids): no edge later than its seed, the papers' rows the input's, and "last" the one
    partition's batch edge for edge."""
    feat = npz_arrays(HETERO)["paper/feat"]
    one = gr.load_partition(parts["typed_1"], device="cpu")
    for rank, r in enumerate(two_ranks):
        local = _typed(one, rank, 2)
        assert len(r["typed"]) == len(local) > 1
        for b, a in zip(r["typed"], local):
            hop, seed, src, dst, eid = b["edges"].T
            assert (b["node_time"][src] <= b["seed_time"][seed]).all() and len(src) > 500
            papers = b["n_id"][b["n_id"] < feat.shape[0]]  # the paper type's erased ids come first
            assert np.array_equal(b["x"], feat[papers])
            assert np.array_equal(b["edges"], a["edges"])


def test_a_rank_without_seeds_keeps_serving(two_ranks):
    ref = Reference(npz_arrays(CORA), "edge")
    *first, seed_time = two_ranks[0]["one_sided"]
    for edges in first:
        assert len(edges) > 50 and (ref.time[edges[:, 4]] <= seed_time[edges[:, 1]]).all()
    assert all(len(edges) == 0 for edges in two_ranks[1]["one_sided"])


def test_refusals_are_one_line_on_every_rank(two_ranks):
    for r in two_ranks:
        assert r["errors"] == ["InputError: seed_time needs disjoint and sampler.temporal set",
                               "InputError: seed_time is needed: sampler.temporal is set and the draws ask other "
                               "partitions",
                               "InputError: seed_time has 3 entries for 4 seeds"]
