"""`gpart convert`: partition results in PyG's and GLT's partition layouts (SPEC.md section 7).

PyG's own loaders (LocalGraphStore / LocalFeatureStore.from_partition) read the
converted Cora and email-Enron partitions, and every edge and feature row must
come back. GLT and DGL do not install with this torch: here their files are
checked against the layouts their sources document (torch.load(weights_only=True)
for tensors; the pickles this test's own run wrote with pickle), and in venvs
where they install (benchmarks/check_glt_convert.py, check_dgl_convert.py) the
same tests below load them with GLT's DistDataset.load and DGL's load_partition.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from support.public_data import ENRON
from test_ckpt import _expect_error, no_output, run

from gpart.formats.input.readers import read_graph

ROOT = Path(__file__).resolve().parents[1]
CORA = ROOT / "sample_data" / "cora.npz"


@pytest.fixture(scope="module")
def cora_parts(tmp_path_factory):
    d = tmp_path_factory.mktemp("cora")
    assert run("partition", CORA, "--parts", 3, "-o", d / "parts", "-q") == 0
    return d / "parts"


def check_pyg(root: Path, graph, num_parts: int) -> None:
    """Load every partition with PyG's own stores; together they must hold every edge and node row once."""
    import torch
    from torch_geometric.distributed import LocalFeatureStore, LocalGraphStore

    src, dst = np.asarray(graph.src, np.int64), np.asarray(graph.dst, np.int64)
    seen_edges = np.zeros(src.size, dtype=np.int64)
    seen_nodes = np.zeros(graph.num_nodes, dtype=np.int64)
    node_map = torch.load(root / "node_map.pt", weights_only=True).numpy()
    edge_map = torch.load(root / "edge_map.pt", weights_only=True).numpy()
    for p in range(num_parts):
        gs = LocalGraphStore.from_partition(str(root), p)
        fs = LocalFeatureStore.from_partition(str(root), p)
        assert gs.num_partitions == num_parts and gs.partition_idx == p and not gs.meta["is_hetero"]
        (attr,) = gs.get_all_edge_attrs()
        assert attr.size == (graph.num_nodes, graph.num_nodes)
        row, col = gs.get_edge_index(attr).numpy()
        eid = gs.get_edge_id(attr).numpy()
        assert np.array_equal(src[eid], row) and np.array_equal(dst[eid], col)
        assert np.all(np.diff(col) >= 0)  # META says is_sorted: by destination
        assert np.all(node_map[col] == p) and np.all(edge_map[eid] == p)
        seen_edges[eid] += 1
        gid = fs.get_global_id(None).numpy()
        assert np.all(node_map[gid] == p)
        seen_nodes[gid] += 1
        if "feat" in graph.node_data:
            x = fs.get_tensor(group_name=None, attr_name="x").numpy()
            assert np.array_equal(x, np.asarray(graph.node_data["feat"])[gid])
            y = fs.get_tensor(group_name=None, attr_name="y").numpy()
            assert np.array_equal(y, np.asarray(graph.node_data["label"])[gid])
            mask = fs.get_tensor(group_name=None, attr_name="train_mask").numpy()
            assert np.array_equal(mask, np.asarray(graph.node_data["train_mask"])[gid])
    assert np.all(seen_edges == 1) and np.all(seen_nodes == 1)
    meta = json.loads((root / "META.json").read_text())
    assert meta == {"num_parts": num_parts, "node_types": None, "edge_types": None, "node_offset": None, "is_hetero": False, "is_sorted": True}


def test_pyg_loads_converted_cora(cora_parts, tmp_path):
    pytest.importorskip("torch_geometric")
    assert run("convert", cora_parts, "--to", "pyg", "-o", tmp_path / "pyg", "-q") == 0
    check_pyg(tmp_path / "pyg", read_graph(CORA), 3)
    summary = json.loads((tmp_path / "pyg" / "manifest.json").read_text())
    assert summary["node_data"] == {"feat": "x", "label": "y", "train_mask": "train_mask", "val_mask": "val_mask", "test_mask": "test_mask"}
    assert summary["not_converted"] == []


def test_pyg_loads_converted_enron_with_edge_data(tmp_path):
    pytest.importorskip("torch_geometric")
    import torch
    from torch_geometric.distributed import LocalFeatureStore

    g = read_graph(ENRON)
    weight = (np.arange(g.src.size, dtype=np.float32) * 0.5).reshape(-1, 1)
    np.save(tmp_path / "w.npy", weight)
    assert run("partition", ENRON, "--parts", 4, "--method", "random", "--edge-data", f"edge_w={tmp_path / 'w.npy'}", "-o", tmp_path / "parts", "-q") == 0
    assert run("convert", tmp_path / "parts", "--to", "pyg", "--rename", "edge_w=edge_attr", "-o", tmp_path / "pyg", "-q") == 0
    check_pyg(tmp_path / "pyg", g, 4)
    for p in range(4):
        fs = LocalFeatureStore.from_partition(str(tmp_path / "pyg"), p)
        eid = fs.get_global_id((None, None)).numpy()
        attr = fs.get_tensor(group_name=(None, None), attr_name="edge_attr")
        assert attr.dtype == torch.float32 and np.array_equal(attr.numpy(), weight[eid])
    # the same partitions for GLT, with the edge array as GLT's edge features
    assert run("convert", tmp_path / "parts", "--to", "glt", "--edge-feat", "edge_w", "-o", tmp_path / "glt", "-q") == 0
    seen = np.zeros(g.src.size, dtype=np.int64)
    for p in range(4):
        eids = torch.load(tmp_path / "glt" / f"part{p}" / "graph" / "eids.pt", weights_only=True).numpy()
        assert np.array_equal(read_pickled_pieces(tmp_path / "glt" / f"part{p}" / "edge_feat" / "ids.pkl"), eids)
        assert np.array_equal(read_pickled_pieces(tmp_path / "glt" / f"part{p}" / "edge_feat" / "feats.pkl"), weight[eids])
        assert not (tmp_path / "glt" / f"part{p}" / "node_feat").exists()  # Enron has no node arrays
        seen[eids] += 1
    assert np.all(seen == 1)


def read_pickled_pieces(path: Path) -> np.ndarray:
    """GLT's load_and_concatenate_tensors: pickled tensors until EOF, concatenated (files this test's run wrote)."""
    import torch

    pieces = []
    with open(path, "rb") as fh:
        while True:
            try:
                pieces.append(pickle.load(fh))
            except EOFError:
                break
    assert pieces and all(isinstance(t, torch.Tensor) for t in pieces)
    return torch.cat(pieces).numpy()


def test_glt_layout_of_converted_cora(cora_parts, tmp_path, monkeypatch):
    from gpart.formats.foreign import glt

    monkeypatch.setattr(glt, "PIECE_BYTES", 1 << 20)  # several pieces per feature file
    import torch

    assert run("convert", cora_parts, "--to", "glt", "-o", tmp_path / "glt", "-q") == 0
    root, g = tmp_path / "glt", read_graph(CORA)
    with open(root / "META", "rb") as fh:  # a pickle this test's own run just wrote
        assert pickle.load(fh) == {"num_parts": 3, "data_cls": "homo", "node_types": None, "edge_types": None}
    load = lambda p: torch.load(p, weights_only=True).numpy()  # noqa: E731
    node_pb, edge_pb = load(root / "node_pb.pt"), load(root / "edge_pb.pt")
    assert node_pb.shape == (g.num_nodes,) and edge_pb.shape == (g.src.size,)
    seen = np.zeros(g.src.size, dtype=np.int64)
    feat = np.asarray(g.node_data["feat"])
    for p in range(3):
        rows, cols, eids = (load(root / f"part{p}" / "graph" / f"{k}.pt") for k in ("rows", "cols", "eids"))
        assert np.array_equal(np.asarray(g.src)[eids], rows) and np.array_equal(np.asarray(g.dst)[eids], cols)
        assert np.all(node_pb[cols] == p) and np.all(edge_pb[eids] == p)  # by_dst: GLT's edge_dir="in"
        seen[eids] += 1
        ids = read_pickled_pieces(root / f"part{p}" / "node_feat" / "ids.pkl")
        assert ids.dtype == np.int64 and np.all(node_pb[ids] == p) and ids.size == np.count_nonzero(node_pb == p)
        assert np.array_equal(read_pickled_pieces(root / f"part{p}" / "node_feat" / "feats.pkl"), feat[ids])
        assert not (root / f"part{p}" / "edge_feat").exists()
    assert np.all(seen == 1)
    assert np.array_equal(load(root / "label.pt"), np.asarray(g.node_data["label"]))
    summary = json.loads((root / "manifest.json").read_text())
    assert summary["not_converted"] == ["train_mask", "val_mask", "test_mask"]


def test_convert_errors(cora_parts, tmp_path, capsys):
    assert run("partition", CORA, "--parts", 2, "--halo", 1, "-o", tmp_path / "halo", "-q") == 0
    _expect_error(capsys, tmp_path / "o1", "convert", tmp_path / "halo", "--to", "pyg", "-o", tmp_path / "o1", match="halo")
    _expect_error(capsys, tmp_path / "o2", "convert", cora_parts, "--to", "pyg", "--rename", "label=x", "-o", tmp_path / "o2", match="both be key 'x'")
    _expect_error(capsys, tmp_path / "o3", "convert", cora_parts, "--to", "pyg", "--rename", "nope=x", "-o", tmp_path / "o3", match="'nope'")
    _expect_error(capsys, tmp_path / "o4", "convert", cora_parts, "--to", "glt", "--node-feat", "nope", "-o", tmp_path / "o4", match="no node array 'nope'")
    _expect_error(capsys, tmp_path / "o5", "convert", tmp_path / "missing", "--to", "glt", "-o", tmp_path / "o5", match="missing")
    assert run("convert", cora_parts, "--to", "graphbolt", "-o", tmp_path / "o6") == 2  # not a target: refused by the CLI
    assert "'graphbolt' is not one of 'pyg', 'glt', 'dgl'" in capsys.readouterr().err and no_output(tmp_path / "o6")
    (tmp_path / "o7").mkdir()
    (tmp_path / "o7" / "mine.txt").write_text("keep")
    _expect_error(capsys, tmp_path / "o7x", "convert", cora_parts, "--to", "pyg", "-o", tmp_path / "o7", match="not a gpart result")
    assert (tmp_path / "o7" / "mine.txt").read_text() == "keep"


def _load_check(name: str):
    """benchmarks/<name>.py as a module: the checks that load converted files with DGL / GLT themselves."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DGL_HERE = _load_check("check_dgl_convert").available()


@pytest.mark.skipif(DGL_HERE, reason="dgl is importable here")
def test_dgl_target_without_dgl_says_how_to_get_it(cora_parts, tmp_path, capsys):
    err = _expect_error(capsys, tmp_path / "d", "convert", cora_parts, "--to", "dgl", "-o", tmp_path / "d", match="needs the dgl package importable")
    assert "torch==2.2.1" in err and "dgl==2.1.0" in err


@pytest.mark.parametrize("system", ["dgl", "glt"])
@pytest.mark.parametrize("graph", [CORA, ENRON], ids=["cora", "enron"])
def test_own_loader_reproduces_every_edge_and_row(system, graph, tmp_path):
    """DGL's load_partition / GLT's DistDataset.load on converted partitions, where those packages import."""
    check = _load_check(f"check_{system}_convert")
    if not check.available():
        pytest.skip(f"needs {system} (a separate venv with its own torch; see benchmarks/check_{system}_convert.py)")
    assert check.convert_and_check(graph, tmp_path)["edges"] == read_graph(graph).src.size


@pytest.mark.skipif(not DGL_HERE, reason="needs dgl (a separate venv with torch <= 2.2.1; see benchmarks/check_dgl_convert.py)")
def test_dgl_distgraph_and_sparse_adam_resume_from_gpart_files(tmp_path):
    result = _load_check("check_dgl_convert").check_standalone(CORA, tmp_path)
    assert result["sampled_edges"] > 0


@pytest.mark.parametrize("target", ["pyg", "glt"])
def test_hdf5_and_binary_results_convert_to_the_same_bytes(cora_parts, tmp_path, target):
    """The converters read partitions through PartitionReader, so HDF5 storage gives byte-identical files."""
    assert run("partition", CORA, "--parts", 3, "--format", "hdf5", "-o", tmp_path / "h5", "-q") == 0
    assert run("convert", cora_parts, "--to", target, "-o", tmp_path / "a", "-q") == 0
    assert run("convert", tmp_path / "h5", "--to", target, "-o", tmp_path / "b", "-q") == 0
    a = json.loads((tmp_path / "a" / "manifest.json").read_text())["files"]
    b = json.loads((tmp_path / "b" / "manifest.json").read_text())["files"]
    assert [f["file"] for f in a] == [f["file"] for f in b] and len(a) > 10
    for f in a:
        if f["file"].endswith(".pkl"):  # a pickled tensor embeds storage addresses: compare the tensors
            assert np.array_equal(read_pickled_pieces(tmp_path / "a" / f["file"]), read_pickled_pieces(tmp_path / "b" / f["file"]))
        else:
            assert (tmp_path / "a" / f["file"]).read_bytes() == (tmp_path / "b" / f["file"]).read_bytes(), f["file"]


def test_a_new_target_is_one_class_and_one_registration(cora_parts, tmp_path, monkeypatch):
    """A target defined and registered here (the owned node ids of each partition, one .npy per partition)
    is offered by `gpart convert --to`, its help and its manifest with no other change."""
    from click.testing import CliRunner

    from gpart.cli.main import cli
    from gpart.convert import registry
    from gpart.convert.partition_pass import each_partition, partition_edges
    from gpart.convert.target import ConvertPlan, ConvertTarget
    from gpart.formats.foreign.torch_files import file_entry

    class OwnedIds(ConvertTarget):
        name = "owned-ids"

        def plan(self, reader, options, where):
            return ConvertPlan(node={}, edge={}, skipped=reader.node_data_names() + reader.edge_data_names())

        def write(self, reader, plan, stage, progress, options):
            def write_part(p):
                np.save(stage / f"owned_{p}.npy", partition_edges(reader, p).owned)
                return [file_entry(stage / f"owned_{p}.npy")]

            return each_partition(reader, progress, "converting to owned-ids", write_part)

    monkeypatch.setattr(registry.REGISTRY, "entries", dict(registry.REGISTRY.entries))  # the registration below ends with this test
    registry.register(OwnedIds())
    runner = CliRunner()
    assert "--to [pyg|glt|dgl|owned-ids]" in runner.invoke(cli, ["convert", "--help"]).output
    res = runner.invoke(cli, ["convert", str(cora_parts), "--to", "owned-ids", "-o", str(tmp_path / "ids"), "-q"])
    assert res.exit_code == 0, res.output
    owned = [np.load(tmp_path / "ids" / f"owned_{p}.npy") for p in range(3)]
    assert np.array_equal(np.sort(np.concatenate(owned)), np.arange(read_graph(CORA).num_nodes))
    summary = json.loads((tmp_path / "ids" / "manifest.json").read_text())
    assert summary["format"] == "gpart.convert" and summary["target"] == "owned-ids"
    assert [f["file"] for f in summary["files"]] == [f"owned_{p}.npy" for p in range(3)]
    assert summary["not_converted"] == ["feat", "label", "train_mask", "val_mask", "test_mask"]
    # not typed: a typed result is refused with the one line the built-in homogeneous targets give
    assert run("partition", ROOT / "sample_data" / "cora_hetero.npz", "--parts", 2, "-o", tmp_path / "typed", "-q") == 0
    res = runner.invoke(cli, ["convert", str(tmp_path / "typed"), "--to", "owned-ids", "-o", str(tmp_path / "t")])
    assert res.exit_code == 2 and "convert --to owned-ids handles homogeneous results only (typed ones convert --to pyg or --to glt or --to dgl)" in res.output
