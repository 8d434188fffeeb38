"""The streaming refinement of `--method stream` (gpart.engines.stream_refine, issue 20).

On the SNAP social graphs of tests/data/public: more
passes (restreaming, then refinement) never cut more than fewer, the
refinement cuts less than the best restreaming pass, and every share
stays within the bound; the repair by steps
(`tighten`) brings a random assignment within the bound and the refinement
lowers its cut. Pairwise swaps fix what full parts block. Under a cgroup
memory cap smaller than the edge arrays, `gpart partition --method stream`
finishes with a verified, balanced result.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.memcap import available, run_capped
from support.public_data import PUBLIC_DATA
from support.synthetic import write_powerlaw_npz

from gpart.base.graph import Graph
from gpart.base.memory import FIXED_BYTES
from gpart.engines import stream as stream_module
from gpart.engines import stream_refine
from gpart.engines.balance import BALANCE_BOUND, balances, in_degrees, train_mask
from gpart.engines.spill import bucket_rows
from gpart.engines.spilled_graph import SpilledGraph, both_directions
from gpart.engines.stream import BALANCE_SLACK, DEFAULT_IMBALANCE, PASSES, stream_book
from gpart.engines.stream_refine import refine, tighten, worst_balance
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.input.readers import read_graph
from gpart.pipeline.assign import assign

DATA = PUBLIC_DATA
GRAPHS = {
    "facebook": DATA / "facebook-combined" / "facebook_combined.txt.gz",
    "enron": DATA / "email-enron" / "email-Enron.txt.gz",
}
_read: dict[str, Graph] = {}


def graph_of(name: str, ids: str = "as read") -> Graph:
    path = GRAPHS[name]
    if not path.exists():
        pytest.fail(f"{path} is missing: the public graphs ship in tests/data/public (a broken checkout)")
    if name not in _read:
        _read[name] = read_graph(path)
    graph = _read[name]
    if ids == "permuted":  # ids that carry no locality
        relabel = np.random.default_rng(0).permutation(graph.num_nodes)
        graph = Graph(graph.num_nodes, relabel[np.asarray(graph.src)], relabel[np.asarray(graph.dst)], {}, source=graph.source)
    return graph


def cut_of(graph: Graph, owner: np.ndarray) -> float:
    src, dst = np.asarray(graph.src), np.asarray(graph.dst)
    return np.count_nonzero(owner[src] != owner[dst]) / graph.num_edges


# ids without locality are covered by test_stream_against_random_and_the_default (facebook's permuted case here
# took 10 s of the suite for no path of its own)
# email-Enron's runs take 6 s each: its default count (the facebook case runs it) left out
@pytest.mark.parametrize("name,ids,counts", [("facebook", "as read", (4, 12, PASSES)), ("enron", "as read", (4, 12))])
def test_more_passes_never_cut_more_refinement_included(name, ids, counts):
    """8 parts, 4 / 12 / PASSES passes in all (restreaming stalls or ends at RESTREAM_PASSES, refinement
    takes the rest): the cut never rises, it is the lowest of the kept run's recorded cuts, the refinement
    lowers it below the best restreaming pass, and every share stays within the bound."""
    graph = graph_of(name, ids)
    cuts, restreamed = [], []
    for passes in counts:
        book, params = stream_book(graph, 8, passes=passes)
        owner = book.owner_array
        cuts.append(cut_of(graph, owner))
        kept = params["start"]
        restreamed.append(min(params["pass_cuts"][kept]))
        recorded = params["refine_cuts"][kept]
        assert len(params["pass_cuts"][kept]) + len(recorded) - 1 <= passes, params
        assert cuts[-1] == pytest.approx(min(recorded + [restreamed[-1]]), abs=1e-6), (recorded, cuts)
        for key, value in balances(owner, 8, in_degrees(graph), train_mask(graph)).items():
            assert value is None or value <= 1 + DEFAULT_IMBALANCE + BALANCE_SLACK, (key, value)
    assert all(later <= earlier for earlier, later in zip(cuts, cuts[1:])), cuts
    assert cuts[-1] < restreamed[-1], (cuts, restreamed)  # the refinement does something on these graphs


# 8 parts, each method at its defaults: the stream within 1.09 + BALANCE_SLACK (gpart.engines.stream.DEFAULT_IMBALANCE), the
# default within its 1.10 bound. Measured cut / the default's: facebook 1.105, ids permuted 1.01; email-Enron 1.00,
# 0.94. Held to METIS's 3% (the stream's default before), the stream cut 1.29x on facebook, where the default held
# to 1.03 itself cuts 1.24-1.26x its own cut at 1.10: the 1.25 compares the two at one bound.
TO_DEFAULT = 1.25


@pytest.mark.parametrize("name,ids", [("facebook", "as read"), ("facebook", "permuted"), ("enron", "as read"),
                                      ("enron", "permuted")])
def test_stream_against_random_and_the_default(name, ids):
    """8 parts at the stream's defaults: at most 0.85 x random's cut (7/8) and TO_DEFAULT x the default's."""
    graph = graph_of(name, ids)
    cut = cut_of(graph, stream_book(graph, 8)[0].owner_array)
    assert cut <= 0.85 * 7 / 8, cut
    try:
        import kaminpar  # noqa: F401  (the default's backend; the METIS fallback alone would be another baseline)
    except ImportError as exc:
        pytest.skip(f"kaminpar wheel unavailable on this platform: {exc}")
    default = cut_of(graph, assign(graph, 8, "balanced").book.owner_array)
    assert cut <= TO_DEFAULT * default, (cut, default)


def test_edges_in_memory_or_on_disk_give_the_same_book(monkeypatch):
    """Within a quarter of the budget the spilled edges stay in memory (gpart.engines.stream.RESIDENT_SHARE); the
    book and every recorded cut are those of the run that reads them from disk, placement, clusters, restreaming
    and refinement included."""
    resident = []

    def bucketed(*args, **kwargs):
        buckets = bucket_rows(*args, **kwargs)
        resident.append(buckets.resident is not None)
        return buckets

    monkeypatch.setattr(stream_module, "bucket_rows", bucketed)
    graph = read_graph(Path(__file__).resolve().parents[1] / "sample_data" / "cora.npz")  # a second each
    on_disk = stream_book(graph, 8, passes=10, max_memory=FIXED_BYTES + 16 * graph.num_edges)  # 4 x 16 B an edge needed
    in_memory = stream_book(graph, 8, passes=10)
    assert resident == [False, True]
    assert np.array_equal(on_disk[0].owner_array, in_memory[0].owner_array)
    assert on_disk[1] == in_memory[1] and on_disk[1]["refine_cuts"][on_disk[1]["start"]][1:], on_disk[1]


def buckets_of(scratch: ScratchDir, graph: Graph, block: int):
    """The spilled edges as gpart.engines.stream keeps them: both directions, bucketed by the node's block."""
    return bucket_rows(scratch, graph.num_edges, -(-graph.num_nodes // block),
                       both_directions(graph, block, np.dtype(np.int32)), {"node": np.int32, "neighbour": np.int32})


def test_tighten_and_refine_a_random_assignment():
    """Facebook, ids permuted, 8 parts, from random owners (in-edges past 1.03): `tighten` brings every share
    within 1.03, the refinement keeps it there and lowers the cut to well under random's."""
    graph = graph_of("facebook", "permuted")
    n, parts, block = graph.num_nodes, 8, 64
    shares = np.column_stack([np.ones(n), in_degrees(graph)])
    start = np.random.default_rng(1).integers(0, parts, n).astype(np.int32)
    assert worst_balance(start, shares, parts) > 1.03
    with ScratchDir() as scratch:
        buckets = buckets_of(scratch, graph, block)
        spilled = SpilledGraph(buckets, shares, parts, block, 0.03, graph.num_edges)
        tight = tighten(spilled, start)
        refined, cuts, _ = refine(spilled, tight, lambda owner, cut: (0.0, cut))
    assert worst_balance(tight, shares, parts) <= 1.03 + 1e-9
    assert worst_balance(refined, shares, parts) <= 1.03 + 1e-9
    assert cuts[0] == pytest.approx(cut_of(graph, tight)) and cut_of(graph, refined) == pytest.approx(min(cuts))
    assert cut_of(graph, refined) < min(cut_of(graph, tight), 0.5 * cut_of(graph, start)), cuts


def test_swaps_fix_what_full_parts_block(monkeypatch):
    """Two 4-cliques, one node of each in the other's part, parts full (imbalance 0): no single move fits,
    the refinement swaps the two and cuts nothing (every node free to move: in a pass that holds one of
    the two in place, there is nothing to do, and two such passes end the refinement)."""
    monkeypatch.setattr(stream_refine, "ACTIVE", 1.0)
    pairs = [(u, v) for base in (0, 4) for u in range(base, base + 4) for v in range(u + 1, base + 4)]
    src, dst = (np.array(side, dtype=np.int64) for side in zip(*pairs))
    graph = Graph(8, src, dst, {})
    owner = np.array([0, 0, 0, 1, 1, 1, 1, 0], dtype=np.int32)
    shares = np.ones((8, 1))
    with ScratchDir() as scratch:
        buckets = buckets_of(scratch, graph, 64)
        refined, cuts, _ = refine(SpilledGraph(buckets, shares, 2, 64, 0.0, graph.num_edges), owner, lambda owner, cut: (0.0, cut))
    assert cuts[0] == pytest.approx(6 / 12) and cut_of(graph, refined) == 0.0, cuts
    assert np.bincount(refined, minlength=2).tolist() == [4, 4]


def test_the_graph_of_clusters_keeps_its_heaviest_pairs_symmetric_and_bounded():
    """Where clusters are dense in edges, METIS gets at most `most` pairs of clusters: the heaviest, both directions
    of each, every one where there are fewer."""
    from gpart.engines.stream_cluster_graph import heaviest_pairs

    rng = np.random.default_rng(3)
    n = 700
    weights = rng.integers(0, 40, (n, n)).astype(np.int32)
    weights = np.triu(weights, 1) + np.triu(weights, 1).T
    dense = weights.ravel()
    assert np.array_equal(heaviest_pairs(dense, dense.size), np.flatnonzero(dense))
    assert heaviest_pairs(np.zeros(n * n, dtype=np.int32), 10).size == 0  # clusters with no rows between them
    heaviest = heaviest_pairs(dense, 10)  # more than 10 cells weigh the most: those, and no lighter one
    assert heaviest.size > 10 and np.array_equal(heaviest, np.flatnonzero(dense == dense.max()))
    for most in (100_000, 30_000):
        kept = heaviest_pairs(dense, most)
        assert 0 < kept.size <= most and np.all(np.diff(kept) > 0)
        assert np.array_equal(np.sort((kept % n) * n + kept // n), kept)  # every pair with its mirror
        lightest = dense[kept].min()
        assert np.count_nonzero(dense > lightest) <= most < np.count_nonzero(dense >= lightest - 1)


def test_a_failed_metis_on_the_clusters_is_recorded(monkeypatch):
    """Where METIS on the graph of clusters fails (its child killed at a memory cap, a pymetis without
    multi-constraint METIS) the clusters are packed greedily and the manifest params say so, instead of a
    weaker result passing unseen; a run where METIS works records nothing."""
    from gpart.engines import stream_cluster_graph

    graph = read_graph(Path(__file__).resolve().parents[1] / "sample_data" / "cora.npz")
    assert "clusters_packed" not in stream_book(graph, 4, passes=2)[1]

    def killed(*args, **kwargs):
        raise RuntimeError("the worker process was killed by SIGKILL")

    monkeypatch.setattr(stream_cluster_graph, "part_graph_multiconstraint", killed)
    book, params = stream_book(graph, 4, passes=2)
    assert params["clusters_packed"] == ["METIS on the graph of clusters failed (the worker process was killed by "
                                         "SIGKILL); clusters packed greedily"], params
    for key, value in balances(book.owner_array, 4, in_degrees(graph), train_mask(graph)).items():
        assert value is None or value <= 1 + DEFAULT_IMBALANCE + BALANCE_SLACK, (key, value)


CAP_BYTES = 256 << 20  # gpart.base.memory.FIXED_BYTES: the pipeline's own floor (interpreter, numpy, chunk buffers)
CAPPED_NODES, CAPPED_EDGES = 500_000, 17_000_000


def test_stream_under_a_memory_cap_smaller_than_the_edges(tmp_path_factory):
    """The edge arrays (int64 src and dst, 272 MB) are past the cap (256 MiB); `gpart partition --method stream
    --max-memory` finishes in it, its METIS child included (the edges spilled to scratch files; the output
    written by the bounded pipeline), the output verifies and is balanced, and it cuts less than random.

    A Chung-Lu graph has little to cut: 0.848 against random's 0.875 at 8 parts (peak RSS 211 MiB uncapped)."""
    reason = available()
    if reason:
        pytest.skip(f"memory cap not possible here: {reason}")
    graph = tmp_path_factory.getbasetemp() / "stream-capped.npz"
    if not graph.exists():
        write_powerlaw_npz(graph, CAPPED_NODES, CAPPED_EDGES, 0, 0)
    assert 2 * 8 * CAPPED_EDGES > CAP_BYTES
    out = tmp_path_factory.mktemp("stream-capped") / "out"
    gpart = str(Path(sys.executable).with_name("gpart"))
    # 10 passes: restreaming then at least two of refinement, whose memory is counted; not the 20 of the default
    run = run_capped([gpart, "partition", str(graph), "--parts", "8", "--method", "stream", "--max-memory", str(CAP_BYTES),
                      "--passes", "10", "-o", str(out), "--json"], CAP_BYTES, timeout=900)
    assert run.returncode == 0 and not run.oom_killed, run.stderr[-2000:]
    assert json.loads(run.stdout)["num_edges"] == CAPPED_EDGES
    check = subprocess.run([gpart, "verify", str(out), "--graph", str(graph)], capture_output=True, text=True, timeout=600)
    assert check.returncode == 0, check.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    stats, params = manifest["stats"], manifest["params"]
    for key in ("node_balance", "edge_balance", "train_balance"):
        assert stats[key] <= BALANCE_BOUND, (key, stats[key])
    assert stats["edge_cut_ratio"] < 0.98 * 7 / 8, stats
    assert params["refine_cuts"][params["start"]], params
