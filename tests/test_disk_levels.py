"""The levels coarsened on disk (gpart.engines.disk_levels): clusters, the graph of clusters, refinement, and the
compressed default that uses them where KaMinPar would not hold the graph, on real graphs (tests/data/public)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from gpart.base.graph import Graph
from gpart.cli.main import main
from gpart.engines.disk_clusters import disk_clusters
from gpart.engines.disk_graph import DiskGraph
from gpart.engines.disk_levels import coarsen, partition_levels
from gpart.engines.disk_refine import disk_refine
from gpart.engines.symmetric import symmetric_csr
from gpart.engines.symmetric_file import symmetric_parhip
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.input.readers import read_graph
from gpart.partition_methods.balanced_method import BalancedMethod
from gpart.partition_methods.memory import (
    COARSEST_KAMINPAR_BYTES,
    check_assign_memory,
    coarsened_kaminpar_memory,
    compressed_bytes,
    least_compressed_bytes,
)
from gpart.pipeline.partition import partition_graph

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "public"
ENRON = DATA / "email-enron" / "email-Enron.txt.gz"
FACEBOOK = DATA / "facebook-combined" / "facebook_combined.txt.gz"
_read: dict[Path, Graph] = {}


def graph_of(path: Path) -> Graph:
    if path not in _read:
        _read[path] = read_graph(path)
    return _read[path]


def two_weightings(xadj: np.ndarray) -> np.ndarray:
    """[n, 2]: unit weights and 1 + degree (the default's two kinds: nodes, and edges)."""
    degree = np.diff(xadj)
    return np.stack([np.ones_like(degree), 1 + degree], axis=1).astype(np.int64)


def cut_of(xadj: np.ndarray, adjncy: np.ndarray, owner: np.ndarray, weights=None) -> int:
    rows = np.repeat(np.arange(xadj.shape[0] - 1), np.diff(xadj))
    cut = owner[rows] != owner[np.asarray(adjncy, dtype=np.int64)]
    return int(cut.sum() if weights is None else np.asarray(weights)[cut].sum())


def test_clusters_stay_within_every_limit_and_are_numbered_by_first_node():
    graph = graph_of(ENRON)
    with ScratchDir() as scratch:
        file, xadj = symmetric_parhip(graph, scratch, 1 << 24)
        weights = two_weightings(xadj)
        limit = np.array([200, 4000])
        cluster, count = disk_clusters(DiskGraph.open(file), weights, limit, seed=0)
        assert cluster.shape == (graph.num_nodes,) and count == int(cluster.max()) + 1
        assert count < 0.5 * graph.num_nodes  # the clustering shrinks the graph
        firsts = np.unique(cluster, return_index=True)[1]
        assert np.all(np.diff(firsts) > 0)  # cluster c's first node comes before cluster c+1's
        sizes = np.bincount(cluster)
        for j in range(2):
            summed = np.bincount(cluster, weights=weights[:, j])
            assert np.all((summed <= limit[j]) | (sizes == 1)), j
        again, _ = disk_clusters(DiskGraph.open(file), weights, limit, seed=0)
        assert np.array_equal(again, cluster)  # seeded


def test_clusters_and_refinement_do_not_depend_on_the_thread_count(monkeypatch):
    """Ranges are proposed two at a time from the same state and applied in order: one thread or two, the same."""
    import functools

    import gpart.engines.disk_clusters as clusters_module
    import gpart.engines.disk_refine as refine_module
    from gpart.engines.disk_graph import pass_in_batches

    graph = graph_of(FACEBOOK)
    with ScratchDir() as scratch:
        file, xadj = symmetric_parhip(graph, scratch, 1 << 24)
        disk = DiskGraph.open(file)
        weights = two_weightings(xadj)
        start = (np.arange(graph.num_nodes) * 7 % 4).astype(np.int32)
        results = []
        for threads in (2, 1):
            one = functools.partial(pass_in_batches, threads=threads)
            monkeypatch.setattr(clusters_module, "pass_in_batches", one)
            monkeypatch.setattr(refine_module, "pass_in_batches", one)
            cluster, _ = disk_clusters(disk, weights, np.array([50, 3000]), seed=2)
            owner = disk_refine(disk, start, weights[:, 1], 4, int(weights[:, 1].sum() * 1.05 / 4), seed=2)
            results.append((cluster, owner))
        assert np.array_equal(results[0][0], results[1][0]) and np.array_equal(results[0][1], results[1][1])


def reference_contraction(xadj, adjncy, edge_weights, cluster, count):
    """The graph of clusters in memory: each cluster's sorted neighbour list and summed edge weights."""
    rows = np.repeat(np.arange(xadj.shape[0] - 1), np.diff(xadj))
    cu, cv = cluster[rows].astype(np.int64), cluster[np.asarray(adjncy, dtype=np.int64)].astype(np.int64)
    w = np.ones(cu.shape[0], dtype=np.int64) if edge_weights is None else np.asarray(edge_weights, dtype=np.int64)
    between = cu != cv
    keys, inverse = np.unique(cu[between] * count + cv[between], return_inverse=True)
    sums = np.bincount(inverse, weights=w[between]).astype(np.int64)
    coarse_xadj = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // count, minlength=count), out=coarse_xadj[1:])
    return coarse_xadj, keys % count, sums


@pytest.mark.parametrize("bucket_budget", [1 << 30, 1 << 16])
def test_the_graph_of_clusters_on_disk_is_the_one_in_memory(bucket_budget, monkeypatch):
    import gpart.engines.coarse_file as coarse_module

    monkeypatch.setattr(coarse_module, "MIN_BUCKET_ENTRIES", 1)
    reserved = []  # disk reserved for the coarse file and its edge weights: as written, not per fine entry
    real_file, real_reserve = ScratchDir.file, coarse_module.reserve

    def file_of(self, name, nbytes):
        reserved.extend([nbytes] if name.startswith("coarse") else [])
        return real_file(self, name, nbytes)

    def reserve(fd, offset, nbytes, path):
        reserved.append(nbytes)
        real_reserve(fd, offset, nbytes, path)

    monkeypatch.setattr(ScratchDir, "file", file_of)
    monkeypatch.setattr(coarse_module, "reserve", reserve)
    graph = graph_of(FACEBOOK)
    with ScratchDir() as scratch:
        file, xadj = symmetric_parhip(graph, scratch, 1 << 24)
        level, level_xadj, weights = file, xadj, two_weightings(xadj)
        for _ in range(2):  # the second level reads an edge-weighted file
            reserved.clear()
            disk = DiskGraph.open(level)
            cluster, count = disk_clusters(disk, weights, np.array([40, 2000]), seed=1)
            coarse, coarse_weights = coarse_module.coarse_file(disk, cluster, count, weights, scratch, bucket_budget)
            want_xadj, want_adjncy, want_weights = reference_contraction(level_xadj, level.adjacency(), level.edge_weights(),
                                                                         cluster, count)
            got = DiskGraph.open(coarse)
            assert np.array_equal(got.xadj, want_xadj)
            assert np.array_equal(np.asarray(coarse.adjacency()), want_adjncy)
            assert np.array_equal(np.asarray(coarse.edge_weights()), want_weights)
            expected = np.zeros((count, 2), dtype=np.int64)
            np.add.at(expected, cluster, weights)
            assert np.array_equal(coarse_weights, expected)
            assert np.array_equal(coarse.vertex_weights(), expected[:, 0])
            assert coarse.path.stat().st_size == coarse.nbytes
            assert sum(reserved) <= coarse.nbytes + 4 * coarse.num_entries
            header = np.fromfile(coarse.path, dtype="<u8", count=3)
            assert int(header[0]) & 1 == 0  # edge weights present (ParHiP flag bit 1 clear)
            level, level_xadj, weights = coarse, want_xadj, coarse_weights


def test_refinement_lowers_the_cut_and_keeps_parts_within_the_bound():
    graph = graph_of(ENRON)
    xadj, adjncy = symmetric_csr(graph)
    parts = 8
    rng = np.random.default_rng(0)
    start = np.argsort(rng.random(graph.num_nodes)) % parts  # balanced and random: nearly every edge cut
    weights = np.ones(graph.num_nodes, dtype=np.int64)
    bound = int(1.03 * np.ceil(graph.num_nodes / parts))
    with ScratchDir() as scratch:
        file, _ = symmetric_parhip(graph, scratch, 1 << 24)
        owner = disk_refine(DiskGraph.open(file), start.astype(np.int32), weights, parts, bound, seed=0)
    assert cut_of(xadj, adjncy, owner) < 0.7 * cut_of(xadj, adjncy, start)
    assert np.bincount(owner, minlength=parts).max() <= bound


def test_a_partition_of_the_coarsened_levels_is_as_good_as_kaminpar_on_the_whole_graph():
    pytest.importorskip("kaminpar", reason="KaMinPar has wheels for Linux x86_64 only")
    from gpart.engines.kaminpar_process import compressed_owner

    graph = graph_of(ENRON)
    parts, tolerance = 8, 0.03
    with ScratchDir() as scratch:
        file, xadj = symmetric_parhip(graph, scratch, 1 << 24)
        file.write_weights(None)
        whole = compressed_owner(str(file.path), "fast", 1, 0, parts, tolerance, file.num_nodes)

        def kaminpar_on(coarse):
            return compressed_owner(str(coarse.path), "fast", 1, 0, parts, tolerance, coarse.num_nodes)

        weights = two_weightings(xadj)
        levels = coarsen(file, weights, [tolerance, tolerance], parts, 0, lambda n, m: m < file.num_entries // 4, scratch,
                         1 << 20)
        assert levels.levels and levels.coarsest.num_entries < file.num_entries // 4
        for column in range(2):
            owner = partition_levels(levels, column, parts, tolerance, 0, kaminpar_on)
            loads = np.bincount(owner, weights=weights[:, column], minlength=parts)
            assert loads.max() <= (1 + tolerance) * np.ceil(weights[:, column].sum() / parts) + weights[:, column].max()
        adjncy = file.adjacency()
        owner = partition_levels(levels, 0, parts, tolerance, 0, kaminpar_on)
        assert cut_of(xadj, adjncy, owner) <= 1.10 * cut_of(xadj, adjncy, whole)


def rmat_graph(num_nodes: int, num_edges: int, seed: int = 0) -> Graph:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from scale_graphs import rmat_chunks

    pieces = list(rmat_chunks(num_nodes, num_edges, seed))
    return Graph.from_arrays(np.concatenate([s for s, _ in pieces]), np.concatenate([d for _, d in pieces]), num_nodes)


def test_the_default_coarsens_on_disk_where_kaminpar_would_not_fit(tmp_path, capsys, monkeypatch):
    """Forced by a KaMinPar share that holds half the graph: the default builds levels on disk once for
    both weightings, records them, and its partition keeps the bound, the in-memory cut within 5% and verify."""
    pytest.importorskip("kaminpar", reason="KaMinPar has wheels for Linux x86_64 only")
    import gpart.engines.kaminpar as kaminpar_engine
    import gpart.partition_methods.balanced_method as balanced

    graph = rmat_graph(20000, 200000)
    path = tmp_path / "rmat.npz"
    np.savez(path, src=graph.src, dst=graph.dst, num_nodes=graph.num_nodes)
    entries = symmetric_csr(graph)[1].shape[0]
    monkeypatch.setattr(balanced, "coarsened_kaminpar_memory", lambda *args: 1 << 30)
    monkeypatch.setattr(kaminpar_engine, "kaminpar_fits", lambda nodes, adjacency, memory, lean=True: adjacency <= entries // 2)
    memory = partition_graph(graph, tmp_path / "memory", 8)
    limit = (least_compressed_bytes(balanced.BalancedMethod, graph.num_nodes, graph.num_edges) +
             compressed_bytes(balanced.BalancedMethod, graph.num_nodes, graph.num_edges)) // 2
    assert main(["partition", str(path), "--parts", "8", "-o", str(tmp_path / "disk"), "--max-memory", str(limit),
                 "--json"]) == 0
    import json

    result = json.loads(capsys.readouterr().out)
    levels = result["params"]["backend_params"]["disk_levels"]
    assert len(levels) >= 2 and levels[-1]["entries"] <= entries // 2
    assert all(a["nodes"] > b["nodes"] for a, b in zip(levels, levels[1:]))
    for key in ("node_balance", "edge_balance"):
        assert result["stats"][key] <= 1.10
    assert result["stats"]["edge_cut_ratio"] <= 1.05 * memory["stats"]["edge_cut_ratio"]
    assert main(["verify", str(tmp_path / "disk"), "--graph", str(path)]) == 0
    assert not [p for p in tmp_path.iterdir() if ".gpart-" in p.name]  # scratch removed, levels included


def test_the_planner_counts_on_coarsening_where_kaminpar_on_the_whole_graph_would_not_fit(tmp_path):
    method = BalancedMethod
    n, e = 12_000_000, 120_000_000
    whole = compressed_bytes(method, n, e)
    least = least_compressed_bytes(method, n, e)
    assert least < whole
    assert coarsened_kaminpar_memory(method, n, e, whole) is None  # KaMinPar holds the whole graph: no levels
    share = coarsened_kaminpar_memory(method, n, e, 3 << 30)
    assert share is not None and COARSEST_KAMINPAR_BYTES <= share < 3 << 30
    check_assign_memory(method, e, least, "big.npz", ["stream"], n)  # fits by coarsening: no refusal
    with pytest.raises(Exception) as caught:
        check_assign_memory(method, e, least - 1, "big.npz", ["stream"], n)
    message = str(caught.value)
    assert "even compressed" in message and f"{-(-least // 2**20)}MiB" in message and "\n" not in message
