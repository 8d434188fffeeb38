"""`gpart convert --to pyg` of typed results (SPEC.md 7.5).

PyG's own loaders (LocalGraphStore / LocalFeatureStore.from_partition) read
the converted typed Cora; through PyG's per-type maps every input edge of
every type must come back once, in its destination's partition, with its
typed endpoints, and every node row must be the input's. The feature lookup
DistNeighborSampler uses (`get_tensor_from_global_id` with typed ids) must
return each node's own row.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_ckpt import _expect_error, no_output, run

from gpart.formats.partition.reader import PartitionReader

pytest.importorskip("torch_geometric")

ROOT = Path(__file__).resolve().parents[1]
CORA_HETERO = ROOT / "sample_data" / "cora_hetero.npz"
CITES = ("paper", "cites", "paper")
HAS = ("paper", "has", "word")


@pytest.fixture(scope="module")
def typed_npz(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    """Typed Cora plus two edge arrays (cites: `weight`; has: `edge_feat`, PyG's `edge_attr`)."""
    with np.load(CORA_HETERO) as z:
        arrays = {k: z[k] for k in z.files}
    rng = np.random.default_rng(7)
    arrays["paper:cites:paper/weight"] = rng.random((arrays["paper:cites:paper/src"].size, 2), dtype=np.float32)
    arrays["paper:has:word/edge_feat"] = rng.integers(0, 100, arrays["paper:has:word/src"].size).astype(np.int16)
    path = tmp_path_factory.mktemp("typed") / "cora_typed.npz"
    np.savez(path, **arrays)
    return path, arrays


def etypes(arrays: dict[str, np.ndarray]) -> list[tuple[str, str, str]]:
    return sorted(tuple(k.split("/")[0].split(":")) for k in arrays if k.endswith("/src"))


def check_pyg_hetero(root: Path, parts: Path, arrays: dict[str, np.ndarray], num_parts: int) -> None:
    """Load every partition with PyG's stores and hold them to the typed input and gpart's book."""
    import torch
    from torch_geometric.distributed import LocalFeatureStore, LocalGraphStore

    ntypes = sorted(k.split("/")[0] for k in arrays if k.endswith("/num_nodes"))
    counts = {t: int(arrays[f"{t}/num_nodes"]) for t in ntypes}
    offsets = dict(zip(ntypes, np.concatenate([[0], np.cumsum([counts[t] for t in ntypes])])[:-1].tolist()))
    owner = np.asarray(PartitionReader(parts).book().owner_array)
    meta = json.loads((root / "META.json").read_text())
    assert meta == {"num_parts": num_parts, "node_types": ntypes, "edge_types": [list(e) for e in etypes(arrays)],
                    "node_offset": [offsets[t] for t in ntypes], "is_hetero": True, "is_sorted": True}
    seen_edges = {e: np.zeros(arrays[f"{':'.join(e)}/src"].size, dtype=np.int64) for e in etypes(arrays)}
    seen_nodes = {t: np.zeros(counts[t], dtype=np.int64) for t in ntypes}
    for p in range(num_parts):
        gs, fs = LocalGraphStore.from_partition(str(root), p), LocalFeatureStore.from_partition(str(root), p)
        assert gs.meta["is_hetero"] and gs.num_partitions == num_parts and gs.partition_idx == p
        for t in ntypes:  # PyG's node map of each type is gpart's book over that type's erased ids
            assert np.array_equal(gs.node_pb[t].numpy(), owner[offsets[t]: offsets[t] + counts[t]])
        assert {a.edge_type for a in gs.get_all_edge_attrs()} == set(etypes(arrays))
        for e in etypes(arrays):
            key = ":".join(e)
            row, col = gs.get_edge_index(edge_type=e, layout="coo").numpy()
            eid = gs.get_edge_id(edge_type=e, layout="coo").numpy()
            assert np.array_equal(arrays[f"{key}/src"][eid], row) and np.array_equal(arrays[f"{key}/dst"][eid], col)
            assert np.all(np.diff(col) >= 0)  # is_sorted: by destination within the type
            assert np.all(gs.node_pb[e[2]][col].numpy() == p) and np.all(gs.edge_pb[e][eid].numpy() == p)
            seen_edges[e][eid] += 1
            for name in ("weight", "edge_feat"):
                if f"{key}/{name}" in arrays and eid.size:
                    pyg_key = "edge_attr" if name == "edge_feat" else name
                    assert np.array_equal(fs.get_global_id(e).numpy(), eid)
                    assert np.array_equal(fs.get_tensor(group_name=e, attr_name=pyg_key).numpy(), arrays[f"{key}/{name}"][eid])
        for t in ntypes:
            gid = fs.get_global_id(t).numpy()
            assert np.all(np.diff(gid) > 0) and np.all(gs.node_pb[t][gid].numpy() == p)
            seen_nodes[t][gid] += 1
            for name, pyg_key in (("feat", "x"), ("label", "y"), ("train_mask", "train_mask")):
                if f"{t}/{name}" in arrays:
                    assert np.array_equal(fs.get_tensor(group_name=t, attr_name=pyg_key).numpy(), arrays[f"{t}/{name}"][gid])
            if f"{t}/feat" in arrays:  # the sampler's lookup: typed ids, in any order, give their own rows
                ask = torch.from_numpy(gid[::-1].copy())
                got = fs.get_tensor_from_global_id(group_name=t, attr_name="x", index=ask).numpy()
                assert np.array_equal(got, arrays[f"{t}/feat"][gid[::-1]])
    assert all(np.all(s == 1) for s in seen_edges.values()), "every typed edge stored exactly once"
    assert all(np.all(s == 1) for s in seen_nodes.values()), "every typed node owned exactly once"


@pytest.mark.parametrize("method,halo,parts", [("random", 0, 2), ("metis", 1, 3), ("remainder", 0, 3)])
def test_pyg_loads_converted_typed_cora(typed_npz, tmp_path, method, halo, parts):
    npz, arrays = typed_npz
    assert run("partition", npz, "--parts", parts, "--method", method, "--halo", halo, "-o", tmp_path / "parts", "-q") == 0
    assert run("convert", tmp_path / "parts", "--to", "pyg", "-o", tmp_path / "pyg", "-q") == 0
    check_pyg_hetero(tmp_path / "pyg", tmp_path / "parts", arrays, parts)
    summary = json.loads((tmp_path / "pyg" / "manifest.json").read_text())
    assert summary["hetero"] is True and summary["num_edges"] == sum(arrays[f"{':'.join(e)}/src"].size for e in etypes(arrays))
    assert summary["node_data"]["paper"] == {"feat": "x", "label": "y", "train_mask": "train_mask", "val_mask": "val_mask", "test_mask": "test_mask"}
    assert summary["node_data"]["word"] == {} and summary["edge_data"]["paper:has:word"] == {"edge_feat": "edge_attr"}
    assert not list((tmp_path / "pyg").glob(".*.scratch"))


def test_rename_and_hdf5_give_the_same_bytes(typed_npz, tmp_path):
    npz, arrays = typed_npz
    for storage in ("binary", "hdf5"):
        assert run("partition", npz, "--parts", 2, "--format", storage, "-o", tmp_path / storage, "-q") == 0
        assert run("convert", tmp_path / storage, "--to", "pyg", "--rename", "weight=edge_attr", "-o", tmp_path / f"pyg_{storage}", "-q") == 0
    a = json.loads((tmp_path / "pyg_binary" / "manifest.json").read_text())["files"]
    b = json.loads((tmp_path / "pyg_hdf5" / "manifest.json").read_text())["files"]
    assert [f["file"] for f in a] == [f["file"] for f in b]
    for f in a:
        assert (tmp_path / "pyg_binary" / f["file"]).read_bytes() == (tmp_path / "pyg_hdf5" / f["file"]).read_bytes(), f["file"]
    from torch_geometric.distributed import LocalFeatureStore

    fs = LocalFeatureStore.from_partition(str(tmp_path / "pyg_binary"), 0)
    eid = fs.get_global_id(CITES).numpy()
    assert np.array_equal(fs.get_tensor(group_name=CITES, attr_name="edge_attr").numpy(), arrays["paper:cites:paper/weight"][eid])


def test_typed_convert_errors(typed_npz, tmp_path, capsys):
    npz, _ = typed_npz
    assert run("partition", npz, "--parts", 2, "-o", tmp_path / "parts", "-q") == 0
    _expect_error(capsys, tmp_path / "o1", "convert", tmp_path / "parts", "--to", "pyg", "--rename", "nope=x", "-o", tmp_path / "o1", match="'nope'")
    _expect_error(capsys, tmp_path / "o2", "convert", tmp_path / "parts", "--to", "pyg", "--rename", "label=x", "-o", tmp_path / "o2",
                  match="two 'paper' node arrays would both be key 'x'")
    (tmp_path / "notparts").mkdir()
    (tmp_path / "notparts" / "x.txt").write_text("hello")
    _expect_error(capsys, tmp_path / "o3", "convert", tmp_path / "notparts", "--to", "pyg", "-o", tmp_path / "o3", match="notparts")
    # damaged edge types (same size, so only the conversion can see it): refused, nothing written
    et = tmp_path / "parts" / "part_1" / "edge_type.bin"
    et.write_bytes(bytes(et.stat().st_size))
    _expect_error(capsys, tmp_path / "o4", "convert", tmp_path / "parts", "--to", "pyg", "-o", tmp_path / "o4", match="outside their type's range")


def test_edge_types_sharing_a_map_file_are_refused(tmp_path, capsys):
    """PyG names an edge map file s__r__d: ('a_', 'b', 'c') and ('a', '_b', 'c') would both be a___b__c.pt."""
    src = np.array([0, 1], dtype=np.int64)
    np.savez(tmp_path / "g.npz", **{"a/num_nodes": np.int64(2), "a_/num_nodes": np.int64(2), "c/num_nodes": np.int64(2),
                                    "a_:b:c/src": src, "a_:b:c/dst": src, "a:_b:c/src": src, "a:_b:c/dst": src})
    assert run("partition", tmp_path / "g.npz", "--parts", 2, "--method", "remainder", "-o", tmp_path / "parts", "-q") == 0
    err = _expect_error(capsys, tmp_path / "o", "convert", tmp_path / "parts", "--to", "pyg", "-o", tmp_path / "o", match="a___b__c.pt")
    assert "'a:_b:c'" in err and "'a_:b:c'" in err
    assert no_output(tmp_path / "o")
