"""Typed (heterogeneous) inputs in bounded memory (SPEC.md 4.6 and 8): the bounded pass writes the in-memory pass's bytes."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from support.memcap import available, run_capped

from gpart.inspection.result import verify
from gpart.pipeline import typed as hetero_module
from gpart.pipeline import write_result as partition_module
from gpart.pipeline.partition import partition_graph

REPO = Path(__file__).resolve().parents[1]
CORA_HETERO = REPO / "sample_data" / "cora_hetero.npz"
METHODS = ["remainder", "random", "range", "assignment", "stream"]
# The capped run: 25M int64 edges (400 MB of src/dst over 3 edge types) under a 200 MB cap.
CAP_BYTES = 256 << 20  # gpart.base.memory.FIXED_BYTES: the pipeline's own floor (interpreter, numpy, chunk buffers)
CAPPED_EDGES = 17_000_000  # 272 MB of int64 src and dst, past the cap


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def write_typed_npz(path: Path, nodes: dict[str, int], edges: dict[str, int], seed: int = 0, edge_data: bool = True) -> Path:
    """An uncompressed typed .npz (members memory-map), written one member at a time: node types `nodes`
    (with a float32 `feat` on the first two), edge types `edges` ("s:r:d" -> count) with uniform endpoints,
    a float32 [E, 2] `weight` on the first edge type and an int64 `stamp` on the last (with `edge_data`)."""
    rng = np.random.default_rng(seed)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        def member(key: str, arr: np.ndarray) -> None:
            with zf.open(f"{key}.npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.asarray(arr), allow_pickle=False)

        for i, (ntype, n) in enumerate(nodes.items()):
            member(f"{ntype}/num_nodes", np.int64(n))
            if i < 2:
                member(f"{ntype}/feat", rng.standard_normal((n, 4), dtype=np.float32))
        for i, (etype, count) in enumerate(edges.items()):
            s, _, d = etype.split(":")
            member(f"{etype}/src", rng.integers(0, nodes[s], count, dtype=np.int64))
            member(f"{etype}/dst", rng.integers(0, nodes[d], count, dtype=np.int64))
            if edge_data and i == 0:
                member(f"{etype}/weight", rng.random((count, 2), dtype=np.float32))
            if edge_data and i == len(edges) - 1:
                member(f"{etype}/stamp", np.arange(count, dtype=np.int64) * 7)
    return path


@pytest.fixture(scope="module")
def graphs(tmp_path_factory) -> dict[str, Path]:
    path = tmp_path_factory.mktemp("typed") / "gen.npz"
    write_typed_npz(path, {"item": 400, "shop": 90, "user": 700},
                    {"user:buys:item": 6000, "item:sold_in:shop": 2500, "user:follows:user": 5000})
    return {"cora": CORA_HETERO, "gen": path}


def options(method: str, graph: Path, tmp_path: Path) -> dict:
    if method != "assignment":
        return {}
    from gpart.formats.input.typed import read_hetero_graph

    total = sum(read_hetero_graph(graph).num_nodes.values())
    owner = ((np.arange(total) * 5 + 1) % 3).astype(np.int32)
    np.save(tmp_path / "owner.npy", owner)
    return {"assignment": str(tmp_path / "owner.npy")}


def just_bounded(graph: Path, num_parts: int) -> int:
    """A memory limit just below the in-memory pass's estimate: the bounded pass runs, and the per-type
    repair after `stream` (which needs less) still fits, so both runs take the same book."""
    from gpart.engines.symmetric import symmetric_bytes
    from gpart.formats.input.typed import read_hetero_graph
    from gpart.pipeline.memory_plan import in_memory_bytes, layout_threads

    hg = read_hetero_graph(graph)
    n, e = sum(hg.num_nodes.values()), sum(hg.num_edges(t) for t in hg.edge_types)
    limit = in_memory_bytes(n, e, num_parts) - 1
    assert layout_threads(n, e, num_parts, limit) == 0 and symmetric_bytes(e) <= limit
    return limit


@pytest.mark.parametrize("name", ["cora", "gen"])
@pytest.mark.parametrize("halo", [0, 1])
@pytest.mark.parametrize("method", METHODS)
def test_bounded_typed_output_is_byte_identical(tmp_path, monkeypatch, graphs, name, halo, method):
    graph = graphs[name]
    kwargs = dict(storage="binary", halo=halo, **options(method, graph, tmp_path))
    memory = partition_graph(graph, tmp_path / "memory", 3, method, max_memory="1TB", **kwargs)
    expected = tree_bytes(tmp_path / "memory")
    streamed = []

    def spy(*args, **kw):  # proves the bounded pass ran: its typed edge writer is called once per partition
        streamed.append(args[1])
        return write_typed_edges(*args, **kw)

    write_typed_edges = hetero_module.write_typed_edges
    monkeypatch.setattr(hetero_module, "write_typed_edges", spy)
    monkeypatch.setattr(partition_module, "block_edges_for", lambda limit: 97)  # many blocks per partition
    out = tmp_path / "bounded"
    bounded = partition_graph(graph, out, 3, method, max_memory=just_bounded(graph, 3), **kwargs)
    assert streamed == [0, 1, 2]
    assert bounded == memory
    assert tree_bytes(out) == expected
    report = verify(out, graph=graph)
    assert report["ok"], report["problems"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no scratch left


def test_bounded_typed_hdf5_is_byte_identical(tmp_path, monkeypatch, graphs):
    """HDF5 places datasets at their first write: the typed edge data arrays are written one after another."""
    graph = graphs["gen"]
    memory = partition_graph(graph, tmp_path / "memory", 2, "random", storage="hdf5", halo=1, max_memory="1TB")
    monkeypatch.setattr(partition_module, "block_edges_for", lambda limit: 97)
    bounded = partition_graph(graph, tmp_path / "bounded", 2, "random", storage="hdf5", halo=1, max_memory="1MB")
    assert bounded == memory and tree_bytes(tmp_path / "bounded") == tree_bytes(tmp_path / "memory")


def test_typed_node_arrays_past_max_memory_stop_up_front(tmp_path, graphs):
    from gpart.base.errors import InputError

    with pytest.raises(InputError, match="too small for the node arrays"):
        partition_graph(graphs["gen"], tmp_path / "out", 2, "remainder", max_memory="10KB")
    assert list(tmp_path.iterdir()) == []


def test_typed_partition_under_a_memory_cap_smaller_than_the_edges(tmp_path_factory):
    """The typed edge arrays are past the cap; the capped run takes the bounded pass, finishes and verifies."""
    reason = available()
    if reason:
        pytest.skip(f"memory cap not possible here: {reason}")
    root = tmp_path_factory.mktemp("typed_capped")
    counts = {"user:buys:item": CAPPED_EDGES * 2 // 5, "item:bought_by:user": CAPPED_EDGES // 5}
    counts["user:follows:user"] = CAPPED_EDGES - sum(counts.values())
    graph = write_typed_npz(root / "typed.npz", {"item": 50_000, "user": 250_000}, counts)
    edge_bytes = 2 * 8 * CAPPED_EDGES  # int64 src and dst of every edge type
    assert edge_bytes > CAP_BYTES
    out = root / "out"
    gpart = str(Path(sys.executable).with_name("gpart"))
    run = run_capped([gpart, "partition", str(graph), "--parts", "8", "--method", "remainder",
                      "--max-memory", str(CAP_BYTES * 3 // 4), "-o", str(out), "--json"], CAP_BYTES, timeout=300)
    assert run.returncode == 0 and not run.oom_killed, run.stderr[-2000:]
    assert json.loads(run.stdout)["num_edges"] == CAPPED_EDGES
    manifest = json.loads((out / "manifest.json").read_text())
    assert sum(sum(p["hetero"]["num_edges"]) for p in manifest["partitions"]) == CAPPED_EDGES
    check = subprocess.run([gpart, "verify", str(out)], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stderr[-2000:]


def test_type_repair_is_skipped_past_max_memory():
    """`stream` runs in bounded memory; the per-type repair after it holds the symmetric adjacency, so past
    --max-memory it keeps the book and says so (params.repair.skipped) instead of running out of memory."""
    from gpart.base.graph import Graph
    from gpart.formats.partition.book import ArrayBook
    from gpart.partition_methods.typed_runs import repair_types

    n = 40
    src = np.arange(n, dtype=np.int64)
    g = Graph(n, src, (src + 1) % n)  # a ring
    masks = {"ntype_a": np.arange(n) < 20, "ntype_b": np.arange(n) >= 20}
    owner = np.where(np.arange(n) < 20, 0, 1).astype(np.int32)  # type a all in part 0, b all in part 1: balance 2.0
    book = ArrayBook(owner, 2)
    kept, params = repair_types(g, book, {}, masks, max_memory=1 << 20)
    assert kept is book and params["repair"]["skipped"] and params["repair"]["before"] == {"ntype_a": 2.0, "ntype_b": 2.0}
    repaired, params = repair_types(g, book, {}, masks)
    assert params["repair"]["moved"] > 0 and max(params["repair"]["after"].values()) <= 1.10
