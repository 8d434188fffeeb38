"""The compressed path of the default and kaminpar (SPEC.md 4.6): the symmetric adjacency built on disk in
bounded memory and read by KaMinPar compressed, chosen by itself past the in-memory path's memory; the same
kind of result as the in-memory path, the same bytes on two ranks, one-line refusals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from support.cli_run import run
from support.gloo_processes import run_distributed
from support.synthetic import rmat_graph

from gpart.base.errors import GpartError, InputError
from gpart.base.graph import Graph
from gpart.base.memory import FIXED_BYTES
from gpart.engines.symmetric import symmetric_csr
from gpart.engines.symmetric_file import symmetric_parhip
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.input.chunked import write_chunked
from gpart.formats.input.readers import read_graph
from gpart.partition_methods.balanced_method import BalancedMethod
from gpart.partition_methods.memory import (
    assign_bytes,
    check_assign_memory,
    coarsened_kaminpar_memory,
    compressed_bytes,
    least_compressed_bytes,
    needs_lean_preset,
    own_preset_bytes,
    runs_compressed,
)
from gpart.pipeline.partition import partition_graph

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"
kaminpar = pytest.importorskip("kaminpar", reason="KaMinPar has wheels for Linux x86_64 only")
METHOD = BalancedMethod()


def compressed_limit(num_nodes: int, num_edges: int, lean: bool = False) -> int:
    """A --max-memory where the default goes compressed: between the compressed path's need with the default's own
    preset and the in-memory path's; `lean`: between the memory-lean preset's need and the own preset's (only
    terapart fits)."""
    own = own_preset_bytes(METHOD, num_nodes, num_edges)
    low, high = (compressed_bytes(METHOD, num_nodes, num_edges), own) if lean else (own, assign_bytes(METHOD, num_edges))
    assert low < high
    limit = (low + high) // 2
    assert runs_compressed(METHOD, num_nodes, num_edges, limit) and needs_lean_preset(METHOD, num_nodes, num_edges, limit) == lean
    return limit


@pytest.mark.parametrize("buckets", [1, 7])
def test_on_disk_adjacency_is_the_in_memory_one(buckets, monkeypatch):
    import gpart.engines.symmetric_file as symmetric_file

    rng = np.random.default_rng(3)
    n, e = 3000, 40000
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    src[:50] = dst[:50]  # self-loops, dropped
    src[50:100], dst[50:100] = src[100:150], dst[100:150]  # repeats, dropped
    graph = Graph.from_arrays(src, dst, n)
    monkeypatch.setattr(symmetric_file, "MIN_BUCKET_ENTRIES", 1)
    budget = 2 * e * symmetric_file.BUCKET_BYTES_PER_ENTRY // buckets
    xadj, adjncy = symmetric_csr(graph)
    with ScratchDir() as scratch:
        on_disk, built_xadj = symmetric_parhip(graph, scratch, budget)
        assert np.array_equal(built_xadj, xadj)
        assert np.array_equal(np.asarray(on_disk.adjacency()), adjncy)
        header = np.fromfile(on_disk.path, dtype="<u8", count=3 + n + 1)
        assert header[1] == n and header[2] == adjncy.shape[0]
        assert np.array_equal(header[3:], on_disk.adjncy_at + 4 * xadj)  # byte offsets of each list
        assert on_disk.path.stat().st_size == on_disk.nbytes
        assert len(list(on_disk.path.parent.iterdir())) == 1  # the buckets are gone


def test_the_renumbered_copy_replaces_the_symmetric_file(monkeypatch):
    """Where the ids look random, the breadth-first copy KaMinPar reads is the only adjacency left on disk: xadj and
    adjncy are the copy's (the in-memory graph relabelled by the order), and a balance repair on it gives owners
    by input id that hold the bound with a cut like the repair on the input ids'."""
    import gpart.engines.locality_order as locality
    from gpart.base.progress import NullProgress
    from gpart.engines.refine import edge_cut, repair_balance
    from gpart.partition_methods.adjacency import symmetric_adjacency

    monkeypatch.setattr(locality, "CACHED_ENTRIES", 0)  # renumber a small graph too
    graph = rmat_graph(3000, 30000)
    xadj, adjncy = symmetric_csr(graph)
    with symmetric_adjacency(graph, True, None, None, NullProgress()) as adj:
        assert adj.renumbered and adj.order is not None and adj.on_disk is not None
        assert [p.name.split("-", 1)[1] for p in adj.on_disk.path.parent.iterdir()] == ["renumbered.parhip"]
        new_id = np.empty(graph.num_nodes, dtype=np.int64)
        new_id[adj.order] = np.arange(graph.num_nodes)
        assert np.array_equal(np.diff(adj.xadj), np.diff(xadj)[adj.order])
        rows = np.repeat(np.arange(graph.num_nodes), np.diff(adj.xadj))
        expected = np.sort(new_id[np.repeat(np.arange(graph.num_nodes), np.diff(xadj))] << 32 | new_id[adjncy])
        assert np.array_equal(np.sort(rows << 32 | np.asarray(adj.adjncy, dtype=np.int64)), expected)

        owner = (np.random.default_rng(1).random(graph.num_nodes) < 0.3).astype(np.int32)  # part 0 holds 70%
        shares = np.ones((graph.num_nodes, 1))
        repaired = adj.repair_balance(owner, shares, 2, 1.05)
        by_input_ids = repair_balance(owner, shares, 2, 1.05, xadj, adjncy)
    assert np.bincount(repaired, minlength=2).max() <= 1.05 * graph.num_nodes / 2
    assert np.all(repaired[owner == 1] == 1)  # only the overloaded part gave nodes away
    cut, cut_by_input_ids = edge_cut(repaired, graph.src, graph.dst), edge_cut(by_input_ids, graph.src, graph.dst)
    assert cut <= 1.05 * cut_by_input_ids


@pytest.mark.parametrize("parts, lean", [(4, False), (8, False), (8, True)])
def test_compressed_default_against_the_in_memory_default(tmp_path, capsys, parts, lean):
    """The compressed default keeps its own preset (fast) where that fits --max-memory, and takes the memory-lean
    terapart where only it fits; either way the balances, the cut within 5% and verify --graph hold."""
    graph = rmat_graph(20000, 200000)
    limit = compressed_limit(graph.num_nodes, graph.num_edges, lean)
    memory = partition_graph(graph, tmp_path / "memory", parts)
    compressed = partition_graph(graph, tmp_path / "compressed", parts, max_memory=limit)
    assert "adjacency" not in memory["params"] and compressed["params"]["adjacency"] == "compressed"
    assert compressed["params"]["backend_params"]["preset"] == ("terapart" if lean else "fast")
    assert memory["params"]["backend_params"]["preset"] == "fast"
    assert [t["weighting"] for t in compressed["params"]["tried"] if "repaired" not in t] == ["even", "in_edges"]
    for key in ("node_balance", "edge_balance", "train_balance"):
        assert compressed["stats"][key] <= 1.10
    assert compressed["stats"]["edge_cut_ratio"] <= 1.05 * memory["stats"]["edge_cut_ratio"]
    np.savez(tmp_path / "graph.npz", src=graph.src, dst=graph.dst, num_nodes=graph.num_nodes,
             train_mask=graph.node_data["train_mask"])
    rc, _, err = run(capsys, "verify", tmp_path / "compressed", "--graph", tmp_path / "graph.npz")
    assert rc == 0, err
    assert not [p for p in tmp_path.iterdir() if ".gpart-" in p.name]  # scratch removed


def test_compressed_kaminpar_on_the_sample_graph(tmp_path, capsys, monkeypatch):
    from gpart.partition_methods.kaminpar_method import KaminparMethod

    graph = read_graph(CORA)  # 2 edges per node: the compressed path's node arrays outweigh the in-memory adjacency
    monkeypatch.setattr(KaminparMethod, "compressed_bytes_per_node", 8)
    limit = FIXED_BYTES + 100 * graph.num_edges - 1
    memory = partition_graph(CORA, tmp_path / "memory", 4, "kaminpar", seed=1)
    compressed = partition_graph(CORA, tmp_path / "compressed", 4, "kaminpar", seed=1, max_memory=limit)
    assert compressed["params"]["adjacency"] == "compressed" and "adjacency" not in memory["params"]
    assert compressed["stats"]["edge_cut_ratio"] <= 1.05 * memory["stats"]["edge_cut_ratio"] + 0.01
    assert compressed["stats"]["node_balance"] <= 1.03 + 4 / graph.num_nodes * 4
    rc, _, err = run(capsys, "verify", tmp_path / "compressed", "--graph", CORA)
    assert rc == 0, err


def test_the_default_chooses_the_path_by_itself():
    n, e = 10**6, 10**7
    assert not runs_compressed(METHOD, n, e, assign_bytes(METHOD, e))
    assert runs_compressed(METHOD, n, e, assign_bytes(METHOD, e) - 1)
    assert not runs_compressed(METHOD, n, e, None)  # no limit known: in memory


def test_too_little_memory_even_compressed_is_one_line_before_any_work(tmp_path, capsys):
    graph = rmat_graph(20000, 200000)
    path = tmp_path / "rmat.npz"
    np.savez(path, src=graph.src, dst=graph.dst, num_nodes=graph.num_nodes)
    need = least_compressed_bytes(METHOD, graph.num_nodes, graph.num_edges)
    with pytest.raises(InputError) as caught:
        check_assign_memory(METHOD, graph.num_edges, need - 1, str(path), ["stream"], graph.num_nodes)
    assert "even compressed" in str(caught.value) and "--max-memory" in str(caught.value)
    rc, out, err = run(capsys, "partition", path, "--parts", "4", "-o", tmp_path / "out", "--max-memory", str(need - 1))
    assert rc == 2 and not out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "even compressed" in lines[0] and f"{-(-need // 2**20)}MiB" in lines[0], err
    assert not (tmp_path / "out").exists()


def test_a_preset_that_holds_more_than_the_lean_one_coarsens_on_disk_instead_of_stopping(tmp_path, capsys,
                                                                                          monkeypatch):
    """Where only the memory-lean preset would hold the whole graph, --preset fast runs on levels coarsened on disk
    until fast's estimate holds the coarsest (here: half the entries); without --preset, terapart takes the whole
    graph as before."""
    from gpart.engines import kaminpar as kaminpar_engine

    graph = rmat_graph(20000, 200000)
    path = tmp_path / "rmat.npz"
    np.savez(path, src=graph.src, dst=graph.dst, num_nodes=graph.num_nodes)
    limit = compressed_limit(graph.num_nodes, graph.num_edges, lean=True)
    assert coarsened_kaminpar_memory(METHOD, graph.num_nodes, graph.num_edges, limit, "fast") is not None
    assert coarsened_kaminpar_memory(METHOD, graph.num_nodes, graph.num_edges, limit, "terapart") is None
    assert coarsened_kaminpar_memory(METHOD, graph.num_nodes, graph.num_edges, limit) is None
    entries = symmetric_csr(graph)[1].shape[0]
    monkeypatch.setattr(kaminpar_engine, "kaminpar_fits",
                        lambda nodes, adjacency, memory, lean=True: lean or adjacency <= entries // 2)
    for preset, coarsened in (("fast", True), (None, False)):
        out = tmp_path / f"out-{preset}"
        rc, printed, err = run(capsys, "partition", path, "--parts", "4", "-o", out, "--max-memory", str(limit), "--json",
                               *(["--preset", preset] if preset else []))
        assert rc == 0, err
        result = json.loads(printed)
        params = result["params"]["backend_params"]
        assert params["preset"] == (preset or "terapart")
        levels = params.get("disk_levels", [])
        assert bool(levels) == coarsened and (not levels or levels[-1]["entries"] <= entries // 2)
        assert result["stats"]["node_balance"] <= 1.10 and result["stats"]["edge_balance"] <= 1.10
        assert run(capsys, "verify", out, "--graph", path)[0] == 0


def _distributed(rank: int, world_size: int, chunks: str, out: str, limit: int):
    from gpart.distributed.partition_chunks import partition_chunks

    partition_chunks(chunks, out, 4, None, max_message=1 << 16, timeout_s=60, max_memory=limit)


def test_two_ranks_without_a_raw_gather_write_the_single_machine_bytes(tmp_path):
    graph = rmat_graph(20000, 200000, seed=5)
    write_chunked(graph, tmp_path / "chunks", 3)
    limit = compressed_limit(graph.num_nodes, graph.num_edges)
    single = partition_graph(tmp_path / "chunks", tmp_path / "single", 4, max_memory=limit)
    assert single["params"]["adjacency"] == "compressed"
    run_distributed(_distributed, 2, str(tmp_path / "chunks"), str(tmp_path / "dist"), limit, timeout_s=180)
    files = sorted(p.relative_to(tmp_path / "single") for p in (tmp_path / "single").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "dist") for p in (tmp_path / "dist").rglob("*") if p.is_file())
    for f in files:
        if f.name != "manifest.json":
            assert (tmp_path / "single" / f).read_bytes() == (tmp_path / "dist" / f).read_bytes(), f
    manifests = [json.loads((tmp_path / side / "manifest.json").read_text()) for side in ("single", "dist")]
    for manifest in manifests:  # every byte but the measured seconds of each try
        for tried in manifest["params"]["tried"]:
            tried.pop("seconds", None)
    assert manifests[0] == manifests[1]
    assert not [p for p in tmp_path.iterdir() if ".gpart-" in p.name]


def test_capped_default_takes_the_compressed_path(tmp_path):
    from support import memcap

    reason = memcap.available()
    if reason:
        pytest.skip(f"no memory cgroup: {reason}")
    sys.path.insert(0, str(REPO / "benchmarks"))
    from scale_graphs import make

    make("geometric", tmp_path / "geo.npz", 200_000, 2_000_000)
    cap = 700 << 20  # the in-memory default needs about 100 bytes per edge (466 MiB) on top of FIXED_BYTES
    limit = FIXED_BYTES + 100 * 2_000_000 - 1
    gpart = str(Path(sys.executable).with_name("gpart"))
    result = memcap.run_capped([gpart, "partition", str(tmp_path / "geo.npz"), "--parts", "8", "-o", str(tmp_path / "out"),
                                "--max-memory", str(limit), "--json"], cap, timeout=600)
    assert result.returncode == 0 and not result.oom_killed, result.stderr[-2000:]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["params"]["adjacency"] == "compressed"
    assert max(manifest["stats"]["node_balance"], manifest["stats"]["edge_balance"]) <= 1.10
    assert result.group_peak <= cap


def _refused(rank: int, world_size: int, chunks: str, out: str, limit: int) -> str:
    from gpart.base.errors import GpartError
    from gpart.distributed.partition_chunks import partition_chunks

    try:
        partition_chunks(chunks, out, 4, None, max_message=1 << 16, timeout_s=60, max_memory=limit)
    except GpartError as exc:
        return exc.one_line()
    return "no error"


def test_two_ranks_refuse_in_one_line_before_gathering(tmp_path):
    graph = rmat_graph(20000, 200000, seed=5)
    write_chunked(graph, tmp_path / "chunks", 3)
    need = least_compressed_bytes(METHOD, graph.num_nodes, graph.num_edges)
    results = run_distributed(_refused, 2, str(tmp_path / "chunks"), str(tmp_path / "dist"), need - 1, timeout_s=180)
    assert "even compressed" in results[0] and "\n" not in results[0], results
    assert "even compressed" in results[1], results  # the other rank quotes rank 0's error
    assert not (tmp_path / "dist").exists()


def test_a_failed_kaminpar_on_the_compressed_path_never_falls_back_to_metis(tmp_path, monkeypatch):
    import gpart.partition_methods.balanced_method as balanced

    def killed(*args, **kwargs):
        raise RuntimeError("the worker process was killed by SIGKILL")

    monkeypatch.setattr(balanced, "kaminpar_partitions", killed)
    monkeypatch.setattr(balanced, "metis_book", lambda *a, **k: pytest.fail("METIS ran on the compressed path"))
    graph = rmat_graph(20000, 200000)
    with pytest.raises(GpartError) as caught:
        partition_graph(graph, tmp_path / "out", 4, max_memory=compressed_limit(graph.num_nodes, graph.num_edges))
    assert "KaMinPar failed on the compressed path (the worker process was killed by SIGKILL)" in str(caught.value)
    assert not (tmp_path / "out").exists()


def _resident_bytes(path: Path) -> int:
    """Bytes of `path` in the page cache (util-linux fincore)."""
    import shutil
    import subprocess

    if shutil.which("fincore") is None:
        pytest.skip("fincore (util-linux) is not installed")
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "-o", "RES", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return int(out.strip())


def test_the_parhip_files_leave_no_pages_behind(tmp_path):
    """The symmetric file, its renumbered copy and the weights written into it are written back and dropped from
    the page cache as they are written (a memory cgroup counts dirty pages): none of them is resident after."""
    from gpart.engines.locality_order import locality_order
    from gpart.engines.parhip_file import renumbered_file

    graph = rmat_graph(20000, 200000, seed=3)
    with ScratchDir(tmp_path) as scratch:
        source, xadj = symmetric_parhip(graph, scratch, 1 << 16)  # several buckets
        assert _resident_bytes(source.path) == 0
        order = locality_order(xadj, source.adjacency())
        order = np.random.default_rng(0).permutation(graph.num_nodes) if order is None else order
        copy = renumbered_file(source, xadj, order, scratch.file("renumbered.parhip", source.nbytes))
        assert _resident_bytes(copy.path) == 0
        copy.write_weights(np.arange(graph.num_nodes, dtype=np.int64), order)
        assert _resident_bytes(copy.path) == 0
        weights = np.fromfile(copy.path, dtype="<i8", offset=copy.weights_at)
        assert np.array_equal(weights, order)  # node order[i]'s weight at i


def test_rank_0_gathers_edges_into_files_without_dirty_pages(tmp_path):
    """Edges placed run by run in any order land at their ids, with none of their pages left in the page cache;
    in memory they land the same."""
    from gpart.distributed.gather import _GatheredEdges

    rng = np.random.default_rng(1)
    num_edges = 300_000
    src, dst = rng.integers(0, 1 << 40, num_edges), rng.integers(0, 1 << 40, num_edges)
    runs = np.array_split(np.arange(num_edges), 7)
    with ScratchDir(tmp_path) as scratch:
        for where in (scratch, None):
            edges = _GatheredEdges(num_edges, where)
            for part in (runs[4], np.concatenate([runs[0], runs[6]]), runs[2], np.concatenate([runs[5], runs[1], runs[3]])):
                shuffled = rng.permutation(part)
                edges.place(shuffled, src[shuffled], dst[shuffled])
            if where is not None:
                assert [_resident_bytes(p) for p in edges.paths] == [0, 0]
            got_src, got_dst = edges.arrays()
            assert np.array_equal(got_src, src) and np.array_equal(got_dst, dst)
            assert edges.src.size == 0 and edges.dst.size == 0  # let go of: the caller's del frees them


def test_the_rounds_fit_every_ranks_budget():
    """Each rank's message in a round is --max-message, or less where some rank's budget calls for it (a rank holds
    about world + 4 of them at once): the least of what the ranks ask, agreed by all."""
    from types import SimpleNamespace

    from gpart.distributed.partition_job import MIN_ROUND_BYTES, ROUND_SHARE, round_bytes

    asked: list[int] = []

    def comm(world: int):
        def all_reduce(values, op):
            assert op == "min"
            asked.append(int(values[0]))
            return np.array([min(asked)])
        return SimpleNamespace(world=world, all_reduce=all_reduce)

    assert round_bytes(comm(4), 256 << 20, 0) == 256 << 20  # a rank without a say asks for --max-message
    asked.clear()
    assert round_bytes(comm(4), 256 << 20, 4 << 30) == (4 << 30) // (ROUND_SHARE * 8)  # 64 MiB: 8 of them in 1/8
    asked.clear()
    assert round_bytes(comm(2), 1 << 20, 4 << 30) == 1 << 20  # --max-message below it stays
    asked.clear()
    assert round_bytes(comm(64), 256 << 20, 1 << 30) == MIN_ROUND_BYTES  # never below the floor
    asked.clear()
    round_bytes(comm(4), 256 << 20, 1 << 40)
    assert round_bytes(comm(4), 256 << 20, 2 << 30) == (2 << 30) // (ROUND_SHARE * 8)  # the smallest budget decides
