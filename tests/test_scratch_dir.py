"""--scratch-dir: every scratch file of a partition run (the compressed adjacency, its levels, the bounded write
pass, reverse copies, a distributed rank's shuffled rows) goes there instead of beside the output, the result is
the same bytes, and a directory that cannot take them is one line before any work."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from support.cli_run import run
from support.gloo_processes import run_distributed

import gpart.formats.files.scratch as scratch_module
from gpart.base.errors import GpartError
from gpart.formats.input.chunked import write_chunked
from gpart.pipeline.partition import partition_graph

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"


@pytest.fixture
def scratch_parents(monkeypatch) -> list[Path]:
    """The parent directory of every ScratchDir entered (None: the temporary directory)."""
    parents: list[Path] = []
    enter = scratch_module.ScratchDir.__enter__

    def recorded(self):
        out = enter(self)
        parents.append(out.path.parent)
        return out

    monkeypatch.setattr(scratch_module.ScratchDir, "__enter__", recorded)
    return parents


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _same_result(a: Path, b: Path) -> None:
    left, right = _files(a), _files(b)
    assert left.keys() == right.keys()
    for name in left:
        if name != "manifest.json":
            assert left[name] == right[name], name
    manifests = [json.loads((side / "manifest.json").read_text()) for side in (a, b)]
    for manifest in manifests:  # every byte but the measured seconds of each try
        for tried in manifest["params"].get("tried", []):
            tried.pop("seconds", None)
    assert manifests[0] == manifests[1]


def test_the_compressed_path_and_the_bounded_write_pass_spill_into_the_scratch_dir(tmp_path, scratch_parents):
    pytest.importorskip("kaminpar", reason="KaMinPar has wheels for Linux x86_64 only")
    from test_compressed_partition import compressed_limit, rmat_graph

    graph = rmat_graph(20000, 200000, seed=2)
    limit = compressed_limit(graph.num_nodes, graph.num_edges)
    (tmp_path / "out").mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    plain = partition_graph(graph, tmp_path / "out" / "plain", 4, max_memory=limit)
    beside = list(scratch_parents)
    scratch_parents.clear()
    spilled = partition_graph(graph, tmp_path / "out" / "spilled", 4, max_memory=limit, scratch_dir=scratch)
    assert plain["params"]["adjacency"] == spilled["params"]["adjacency"] == "compressed"
    assert tmp_path / "out" in beside  # without the flag: beside the output
    assert scratch_parents and scratch in scratch_parents
    assert all(p == scratch or scratch in p.parents for p in scratch_parents), scratch_parents
    _same_result(tmp_path / "out" / "plain", tmp_path / "out" / "spilled")
    assert list(scratch.iterdir()) == []  # removed when the run ended


def test_the_bounded_write_pass_and_reverse_copies_spill_there_too(tmp_path, scratch_parents, monkeypatch):
    monkeypatch.setattr("gpart.pipeline.write_result.layout_threads", lambda *a: 0)  # the bounded pass, whatever fits
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (tmp_path / "out").mkdir()
    for name, where in (("plain", None), ("spilled", scratch)):
        scratch_parents.clear()
        partition_graph(CORA, tmp_path / "out" / name, 4, "random", add_reverse=True, scratch_dir=where)
        assert len(scratch_parents) == 3  # the input's (a chunked input's joined chunks), the reverse copies, the write pass
        assert set(scratch_parents) == {tmp_path / "out" if where is None else scratch}
    _same_result(tmp_path / "out" / "plain", tmp_path / "out" / "spilled")
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("problem", ["missing", "file"])
def test_a_scratch_dir_that_cannot_take_files_is_one_line_before_any_work(tmp_path, capsys, problem):
    where = tmp_path / "nowhere"
    if problem == "file":
        where.write_text("a file, not a directory")
    rc, out, err = run(capsys, "partition", CORA, "--parts", "2", "-o", tmp_path / "out", "--scratch-dir", where)
    assert rc != 0
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and str(where) in lines[0], err
    assert ("does not exist" if problem == "missing" else "not a directory") in lines[0]
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir()] == (["nowhere"] if problem == "file" else [])


def test_a_scratch_dir_without_write_permission_is_refused(tmp_path, monkeypatch):
    where = tmp_path / "ro"
    where.mkdir(mode=0o500)
    monkeypatch.setattr(scratch_module.os, "access", lambda path, mode: False)  # as for a user who is not root
    with pytest.raises(GpartError, match="not writable") as refused:
        partition_graph(CORA, tmp_path / "out", 2, "random", scratch_dir=where)
    assert str(where) in refused.value.one_line() and not (tmp_path / "out").exists()


def _distributed(rank: int, world_size: int, chunks: str, out: str, scratch: str) -> tuple[str, list[str]]:
    from gpart.distributed.partition_chunks import partition_chunks

    parents: list[str] = []
    enter = scratch_module.ScratchDir.__enter__

    def recorded(self):
        entered = enter(self)
        parents.append(str(entered.path.parent))
        return entered

    scratch_module.ScratchDir.__enter__ = recorded
    mine = Path(scratch) / f"host{rank}"  # each rank its own directory, as on its own machine
    try:
        partition_chunks(chunks, out, 4, "random", timeout_s=60, scratch_dir=str(mine))
    except GpartError as exc:
        return exc.one_line(), parents
    return "ok", parents


def test_distributed_ranks_spill_into_their_own_scratch_dirs_and_agree_on_a_missing_one(tmp_path):
    from gpart.base.graph import Graph

    rng = np.random.default_rng(0)
    graph = Graph.from_arrays(rng.integers(0, 3000, 30000), rng.integers(0, 3000, 30000), 3000)
    write_chunked(graph, tmp_path / "chunks", 3)
    scratch = tmp_path / "scratch"
    (scratch / "host0").mkdir(parents=True)  # rank 1's is missing: both ranks stop, naming it
    results = run_distributed(_distributed, 2, str(tmp_path / "chunks"), str(tmp_path / "dist"), str(scratch), timeout_s=120)
    assert "host1" in results[1][0] and "does not exist" in results[1][0], results
    assert "host1" in results[0][0] or "rank 1" in results[0][0], results
    assert not (tmp_path / "dist").exists()
    (scratch / "host1").mkdir()
    results = run_distributed(_distributed, 2, str(tmp_path / "chunks"), str(tmp_path / "dist"), str(scratch), timeout_s=120)
    for rank, (outcome, parents) in enumerate(results):
        assert outcome == "ok" and parents == [str(scratch / f"host{rank}")], results
    partition_graph(tmp_path / "chunks", tmp_path / "single", 4, "random")
    _same_result(tmp_path / "single", tmp_path / "dist")
    assert list((scratch / "host0").iterdir()) == [] and list((scratch / "host1").iterdir()) == []


def test_too_little_scratch_disk_for_the_compressed_path_is_one_line_before_any_work(tmp_path, monkeypatch, scratch_parents):
    pytest.importorskip("kaminpar", reason="KaMinPar has wheels for Linux x86_64 only")
    from collections import namedtuple

    from test_compressed_partition import compressed_limit, rmat_graph

    from gpart.base.errors import OutputError
    from gpart.engines.symmetric_file import least_scratch_bytes

    graph = rmat_graph(20000, 200000, seed=2)
    need = least_scratch_bytes(graph.num_nodes, graph.num_edges)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(scratch_module.shutil, "disk_usage", lambda path: usage(need * 4, need * 3, need - 1))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(OutputError) as refused:
        partition_graph(graph, tmp_path / "out", 4, max_memory=compressed_limit(graph.num_nodes, graph.num_edges),
                        scratch_dir=scratch)
    line = refused.value.one_line()
    assert "\n" not in line and str(scratch) in line and "--scratch-dir" in line and "GiB" in line, line
    assert len(scratch_parents) == 1 and list(scratch.iterdir()) == []  # the input's scratch only, removed
    assert not (tmp_path / "out").exists()
    monkeypatch.setattr(scratch_module.shutil, "disk_usage", lambda path: usage(need * 4, need * 3, need))
    assert partition_graph(graph, tmp_path / "out", 4, max_memory=compressed_limit(graph.num_nodes, graph.num_edges),
                           scratch_dir=scratch)["params"]["adjacency"] == "compressed"


def _short_of_disk(rank: int, world_size: int, chunks: str, out: str, limit: int) -> str:
    from collections import namedtuple

    from gpart.distributed.partition_chunks import partition_chunks

    usage = namedtuple("usage", "total used free")
    scratch_module.shutil.disk_usage = lambda path: usage(1 << 40, 1 << 40, 1 << 20)  # 1 MiB free on every disk
    try:
        partition_chunks(chunks, out, 4, None, timeout_s=60, max_memory=limit)
    except GpartError as exc:
        return exc.one_line()
    return "no error"


def test_rank_0_without_scratch_disk_for_the_gathered_graph_stops_every_rank_before_the_gather(tmp_path):
    pytest.importorskip("kaminpar", reason="KaMinPar has wheels for Linux x86_64 only")
    from test_compressed_partition import compressed_limit, rmat_graph

    graph = rmat_graph(20000, 200000, seed=5)
    write_chunked(graph, tmp_path / "chunks", 3)
    limit = compressed_limit(graph.num_nodes, graph.num_edges)
    results = run_distributed(_short_of_disk, 2, str(tmp_path / "chunks"), str(tmp_path / "dist"), limit, timeout_s=120)
    assert "gathered edges" in results[0] and "--scratch-dir" in results[0] and "\n" not in results[0], results
    assert "gathered edges" in results[1], results  # the other rank quotes rank 0's error
    assert not (tmp_path / "dist").exists()


def test_a_killed_runs_scratch_beside_the_output_is_swept_by_the_next_run(tmp_path):
    """A SIGKILLed run leaves its scratch directories (`.<out>.gpart-staging-<pid>-<id>-scratch-<id>`, a distributed
    rank's with its rank); the next run writing there removes those of dead processes, not of live ones."""
    import subprocess
    import sys

    from gpart.formats.files.commit import sweep_stale_work

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    left = [tmp_path / f".out.gpart-staging-{pid}-0123abcd-scratch-k2_x9q", tmp_path / f".out.gpart-staging-{pid}-0123abcd-scratch-1-ab_c"]
    alive = tmp_path / f".out.gpart-staging-{os.getpid()}-0123abcd-scratch-zz"
    for path in (*left, alive):
        (path / "0001-src").parent.mkdir()
        (path / "0001-src").write_bytes(b"x" * 64)
    assert sorted(sweep_stale_work(tmp_path, "out")) == sorted(left)
    assert [p.name for p in tmp_path.iterdir()] == [alive.name]
