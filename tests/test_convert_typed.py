"""`gpart convert --to glt` and `--to dgl` of typed results (SPEC.md 7.6, 7.7).

GLT and DGL do not install with this torch. Here the GLT files of typed Cora
and of a generated typed graph are held to the layout GLT 0.2.4's loader reads
(torch.load(weights_only=True) for tensors; the pickles this test's own run
wrote with pickle), and the refusals are checked; where GLT / DGL import
(their venvs, benchmarks/check_glt_convert.py and check_dgl_convert.py) the
same inputs are loaded by DistDataset(edge_dir="in").load and
dgl.distributed.load_partition, every typed edge and data row found.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from test_ckpt import _expect_error, no_output, run
from test_convert import _load_check, read_pickled_pieces

from gpart.base.errors import InputError
from gpart.formats.input.typed import read_hetero_graph
from gpart.formats.partition.reader import PartitionReader
from gpart.formats.partition.typed import HeteroMeta

CHECKS = {system: _load_check(f"check_{system}_convert") for system in ("dgl", "glt")}
GENERATED_EDGES = 20_000


@pytest.fixture(scope="module")
def typed_graphs(tmp_path_factory) -> list[tuple[str, Path]]:
    """Typed Cora and a generated typed graph, edge arrays added (benchmarks/interop_common.typed_inputs)."""
    return CHECKS["glt"].typed_inputs(tmp_path_factory.mktemp("typed"), GENERATED_EDGES)


def _glt_type_dir(etype) -> str:
    return "__".join(etype)


@pytest.mark.parametrize("which", [0, 1], ids=["cora", "generated"])
@pytest.mark.parametrize("halo", [0, 1])
def test_glt_typed_layout(typed_graphs, tmp_path, which, halo):
    _, npz = typed_graphs[which]
    assert run("partition", npz, "--parts", 3, "--halo", halo, "-o", tmp_path / "parts", "-q") == 0
    assert run("convert", tmp_path / "parts", "--to", "glt", "-o", tmp_path / "glt", "-q") == 0
    import torch

    g, root = read_hetero_graph(npz), tmp_path / "glt"
    load = lambda path: torch.load(path, weights_only=True).numpy()  # noqa: E731
    with open(root / "META", "rb") as fh:  # a pickle this test's own run just wrote
        assert pickle.load(fh) == {"num_parts": 3, "data_cls": "hetero", "node_types": g.node_types, "edge_types": g.edge_types}
    owner = np.asarray(PartitionReader(tmp_path / "parts").book().owner_array)
    offsets = dict(zip(g.node_types, g.node_offsets()[:-1].tolist()))
    node_pb = {t: load(root / "node_pb" / f"{t}.pt") for t in g.node_types}
    for t in g.node_types:
        assert np.array_equal(node_pb[t], owner[offsets[t]: offsets[t] + g.num_nodes[t]])
    for e in g.edge_types:
        src, dst = (np.asarray(x) for x in g.edges[e])
        edge_pb = load(root / "edge_pb" / f"{_glt_type_dir(e)}.pt")
        seen = np.zeros(src.size, np.int64)
        for p in range(3):
            d = root / f"part{p}" / "graph" / _glt_type_dir(e)
            rows, cols, eids = (load(d / f"{k}.pt") for k in ("rows", "cols", "eids"))  # every type's folder, even empty
            assert np.array_equal(src[eids], rows) and np.array_equal(dst[eids], cols)
            assert np.all(node_pb[e[2]][cols] == p) and np.all(edge_pb[eids] == p)
            seen[eids] += 1
            feat_dir = root / f"part{p}" / "edge_feat" / _glt_type_dir(e)
            if "edge_feat" in g.edge_data.get(e, {}) and eids.size:
                assert np.array_equal(read_pickled_pieces(feat_dir / "ids.pkl"), eids)
                assert np.array_equal(read_pickled_pieces(feat_dir / "feats.pkl"), np.asarray(g.edge_data[e]["edge_feat"])[eids])
            else:
                assert not feat_dir.exists()
        assert np.all(seen == 1), e
    for t in g.node_types:
        for p in range(3):
            feat_dir = root / f"part{p}" / "node_feat" / t
            if "feat" in g.node_data.get(t, {}):
                ids = read_pickled_pieces(feat_dir / "ids.pkl")
                assert np.array_equal(ids, np.flatnonzero(node_pb[t] == p))  # owned rows only, also with halo 1
                assert np.array_equal(read_pickled_pieces(feat_dir / "feats.pkl"), np.asarray(g.node_data[t]["feat"])[ids])
            else:
                assert not feat_dir.exists()
        if "label" in g.node_data.get(t, {}):
            assert np.array_equal(load(root / "label" / f"{t}.pt"), np.asarray(g.node_data[t]["label"]))
    summary = json.loads((root / "manifest.json").read_text())
    assert summary["hetero"] is True and not list(root.glob(".*.scratch"))
    if which == 0:
        assert summary["labels"] == {"paper": "label"} and summary["node_data"] == {"paper": {"feat": "feats"}, "word": {}}
        assert summary["not_converted"] == ["paper/train_mask", "paper/val_mask", "paper/test_mask", "paper:has:word/weight"]


@pytest.mark.parametrize("system", ["dgl", "glt"])
@pytest.mark.parametrize("which", [0, 1], ids=["cora", "generated"])
def test_own_loader_finds_every_typed_edge_and_row(typed_graphs, tmp_path, system, which):
    """DGL's load_partition / GLT's DistDataset.load on typed conversions, where those packages import."""
    check = CHECKS[system]
    if not check.available():
        pytest.skip(f"needs {system} (a separate venv with its own torch; see benchmarks/check_{system}_convert.py)")
    _, npz = typed_graphs[which]
    g = read_hetero_graph(npz)
    assert check.convert_and_check_typed(npz, tmp_path)["edges"] == sum(g.num_edges(e) for e in g.edge_types)


def test_typed_refusals(typed_graphs, tmp_path, capsys):
    _, cora = typed_graphs[0]
    assert run("partition", cora, "--parts", 2, "-o", tmp_path / "parts", "-q") == 0
    parts = tmp_path / "parts"
    for option, what in (("--node-feat", "node"), ("--edge-feat", "edge"), ("--label", "node")):
        _expect_error(capsys, tmp_path / "o", "convert", parts, "--to", "glt", option, "nope", "-o", tmp_path / "o",
                      match=f"has no {what} array 'nope'")
        assert no_output(tmp_path / "o")
    _expect_error(capsys, tmp_path / "o", "convert", parts, "--to", "glt", "--node-feat", "label", "-o", tmp_path / "o",
                  match="cannot be both the features and the labels")
    if not CHECKS["dgl"].available():  # a typed result now goes to DGL too: without dgl, the line says how to get it
        err = _expect_error(capsys, tmp_path / "d", "convert", parts, "--to", "dgl", "-o", tmp_path / "d", match="needs the dgl package importable")
        assert "dgl==2.1.0" in err and no_output(tmp_path / "d")
    # GLT names folders s__r__d as PyG names its map files: two edge types sharing one are refused
    src = np.array([0, 1], dtype=np.int64)
    np.savez(tmp_path / "g.npz", **{"a/num_nodes": np.int64(2), "a_/num_nodes": np.int64(2), "c/num_nodes": np.int64(2),
                                    "a_:b:c/src": src, "a_:b:c/dst": src, "a:_b:c/src": src, "a:_b:c/dst": src})
    assert run("partition", tmp_path / "g.npz", "--parts", 2, "--method", "remainder", "-o", tmp_path / "p2", "-q") == 0
    err = _expect_error(capsys, tmp_path / "o", "convert", tmp_path / "p2", "--to", "glt", "-o", tmp_path / "o", match="GLT's folders")
    assert "a___b__c" in err and no_output(tmp_path / "o")


def test_glt_refuses_a_partition_without_edges_of_a_type(tmp_path, capsys):
    """GLT 0.2.4's DistDataset.load fails on an edge type (or a homogeneous partition) without edges: refused, one line."""
    four = np.arange(4, dtype=np.int64)
    np.savez(tmp_path / "t.npz", **{"user/num_nodes": np.int64(4), "item/num_nodes": np.int64(2), "user:buys:item/src": four,
                                    "user:buys:item/dst": np.zeros(4, np.int64), "user:knows:user/src": four, "user:knows:user/dst": four[::-1]})
    np.savez(tmp_path / "h.npz", src=four, dst=np.zeros(4, np.int64), num_nodes=np.int64(4))
    for name, what in (("t", "partition 1 stores no edges of type 'user:buys:item'"), ("h", "partition 1 stores no edges, which")):
        assert run("partition", tmp_path / f"{name}.npz", "--parts", 2, "--method", "remainder", "-o", tmp_path / name, "-q") == 0
        _expect_error(capsys, tmp_path / "o", "convert", tmp_path / name, "--to", "glt", "-o", tmp_path / "o", match=what)
        assert no_output(tmp_path / "o")
        assert run("convert", tmp_path / name, "--to", "pyg", "-o", tmp_path / f"{name}_pyg", "-q") == 0  # PyG holds it


def test_dgl_refuses_more_node_types_than_int16_holds():
    """DGL keeps node type indices as int16: a result with 32768 node types is refused before anything is written."""
    from gpart.convert.dgl_target import DglTarget
    from gpart.convert.target import ConvertOptions

    n = 32768
    meta = HeteroMeta([f"t{i}" for i in range(n)], [1] * n, [], [], {f"t{i}": {} for i in range(n)}, {})
    with pytest.raises(InputError, match="32768 node types; DGL keeps node type indices as int16"):
        DglTarget().plan_typed(meta, ConvertOptions(), "parts")
