"""The exchange between partitions per batch, on 2 gloo ranks: how many collectives, how many host reads of sizes
and data-dependent shapes (each a host synchronisation on CUDA), and the same batches whichever way the edges
travel (in the answers, or in a round of their own).

Per sampling hop: a count table, the requests, the answers with the edges in slots sized by the fanout (a fourth
collective for a hop without a bound, fanout -1); the last hop's rows: 3 more. Host reads of sizes: 3 per sampling
round (the count table, the owner's edges per requester, the requester's edges per owner), 1 per round of rows alone.
"""

from __future__ import annotations

import hashlib

import pytest
import torch

import gpart.runtime as gr
from gpart.runtime.sampling import round_sizes
from tests.support.gloo_processes import run_distributed
from tests.support.sync_count import OpCounter
from tests.test_runtime_sampler import cora_parts  # noqa: F401 - the fixture

CASES = [([4, 3], 3 * 2 + 3, 3 * 2 + 1), ([15, 10, 5], 3 * 3 + 3, 3 * 3 + 1), ([-1, 2], 4 + 3 + 3, 3 * 2 + 1)]


def _digest(loader) -> tuple[str, int]:
    h = hashlib.sha256()
    batches = 0
    for batch in loader:
        batches += 1
        for key in ("n_id", "edge_index", "e_id", "x", "y"):
            h.update(getattr(batch, key).contiguous().numpy().tobytes())
    return h.hexdigest(), batches


def _counted(loader) -> dict:
    """One epoch with the round's ops counted (the owner's sampler and the hop loop's relabelling left out)."""
    counter = OpCounter()
    protocol = loader.protocol
    sample, round_ = protocol.sampler.sample, protocol.round

    def paused_sample(*args, **kwargs):
        with counter.paused():
            return sample(*args, **kwargs)

    def counted_round(*args, **kwargs):
        with counter:
            return round_(*args, **kwargs)

    protocol.sampler.sample, protocol.round = paused_sample, counted_round
    before = dict(loader.stats)
    digest, batches = _digest(loader)
    return {"digest": digest, "batches": batches, "syncs": counter.syncs, "ops": dict(counter.by_name),
            "collectives": loader.stats["collectives"] - before["collectives"],
            "host_syncs": loader.stats["host_syncs"] - before["host_syncs"]}


def _ranks(rank: int, world_size: int, parts: str) -> dict:
    part = gr.load_partition(parts, device="cpu")
    ids = gr.node_split(part, torch.arange(0, part.num_nodes, 2))
    out = {}
    for fanouts, _, _ in CASES:
        loader = gr.DistNeighborLoader(part, ids, fanouts=fanouts, batch_size=64, seed=4)
        got = _counted(loader)
        # the same batches with every hop's edges in a round of their own (no slots)
        saved = round_sizes.MAX_EDGE_SLOTS
        round_sizes.MAX_EDGE_SLOTS = 0
        try:
            plain = gr.DistNeighborLoader(part, ids, fanouts=fanouts, batch_size=64, seed=4)
            got["unbounded"] = _counted(plain)
        finally:
            round_sizes.MAX_EDGE_SLOTS = saved
        out[str(fanouts)] = got
    return out


@pytest.mark.parametrize("method", ["metis", "random"])
def test_collectives_and_host_reads_per_batch(cora_parts, method):  # noqa: F811 - the fixture
    results = run_distributed(_ranks, 2, str(cora_parts[(2, method)]), timeout_s=300)
    for fanouts, collectives, host_reads in CASES:
        hops = len(fanouts)
        for got in (r[str(fanouts)] for r in results):
            n = got["batches"]
            assert n > 0
            assert got["collectives"] == n * collectives, (fanouts, got)
            assert got["host_syncs"] == n * host_reads, (fanouts, got)
            # data-dependent shapes in the rounds: per round the owner's flagged rows (1 masked_select), the nodes
            # asked for rows alone (1, rows round only), and in the first hop's round, whose frontier is the seeds
            # as given, the held and the answered rows' positions (2 nonzero); later frontiers list their held
            # nodes first (grouped_rows), so their rows need no positions
            assert got["syncs"] == n * (hops + 4), (fanouts, got["syncs"] / n, got["ops"])
            plain = got["unbounded"]
            assert plain["digest"] == got["digest"]
            assert plain["collectives"] == n * (4 * hops + 3) and plain["host_syncs"] == got["host_syncs"]
