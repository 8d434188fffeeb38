"""OGB dataset folders (SPEC.md 3.10): a small generated one, sample_data's Cora written in OGB's layout and
partitioned, then verified against cora.npz, the numpy layout of ogbn-papers100M, and one line per bad folder."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
from support.cli_run import run

from gpart.base.errors import InputError
from gpart.formats.input.options import GraphInput, ReadOptions
from gpart.formats.input.readers import read_graph

CORA = Path(__file__).resolve().parents[1] / "sample_data" / "cora.npz"


def csv_gz(path: Path, values: np.ndarray, fmt: str = "%d") -> None:
    """Headerless CSV as OGB ships it (pandas to_csv(header=False, index=False), gzip)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb") as fh:
        np.savetxt(fh, values.reshape(values.shape[0], -1), fmt=fmt, delimiter=",")


def write_ogb(folder: Path, src, dst, num_nodes: int, node: Optional[dict] = None, masks: Optional[dict] = None,
              split: str = "time", float_format: str = "%.9g") -> Path:
    raw = folder / "raw"
    csv_gz(raw / "edge.csv.gz", np.stack([src, dst], axis=1))
    csv_gz(raw / "num-node-list.csv.gz", np.array([num_nodes]))
    csv_gz(raw / "num-edge-list.csv.gz", np.array([len(src)]))
    for file, values in (node or {}).items():
        csv_gz(raw / file, values, float_format if values.dtype.kind == "f" else "%d")
    for stem, mask in (masks or {}).items():
        csv_gz(folder / "split" / split / f"{stem}.csv.gz", np.flatnonzero(mask))
    (folder / "RELEASE_v1.txt").write_text("# Release note\n")
    return folder


@pytest.fixture
def small(tmp_path: Path) -> tuple[Path, dict]:
    rng = np.random.default_rng(7)
    n = 50
    src, dst = rng.integers(0, n, 300), rng.integers(0, n, 300)
    feat = rng.standard_normal((n, 6)).astype(np.float32)
    label = rng.integers(0, 5, (n, 1))
    year = rng.integers(1990, 2020, (n, 1))
    edge_feat = rng.integers(0, 3, (300, 2))
    order = rng.permutation(n)
    masks = {"train": np.isin(np.arange(n), order[:30]), "valid": np.isin(np.arange(n), order[30:40]),
             "test": np.isin(np.arange(n), order[40:])}
    folder = write_ogb(tmp_path / "ogbn_small", src, dst, n,
                       {"node-feat.csv.gz": feat, "node-label.csv.gz": label, "node_year.csv.gz": year,
                        "edge-feat.csv.gz": edge_feat}, masks)
    return folder, {"src": src, "dst": dst, "feat": feat, "label": label[:, 0], "year": year[:, 0],
                    "edge_feat": edge_feat, "masks": masks, "n": n}


def error_of(path, **options) -> str:
    with pytest.raises(InputError) as info:
        read_graph(GraphInput(path, ReadOptions(**options)) if options else path)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_small_folder(small) -> None:
    folder, want = small
    g = read_graph(folder)
    assert g.input_format == "ogb" and g.num_nodes == want["n"] and g.source == str(folder)
    assert g.src.tolist() == want["src"].tolist() and g.dst.tolist() == want["dst"].tolist()
    assert np.array_equal(g.node_data["feat"], want["feat"]) and g.node_data["feat"].dtype == np.float32
    assert g.node_data["label"].dtype == np.int64 and g.node_data["label"].tolist() == want["label"].tolist()
    assert g.node_data["year"].tolist() == want["year"].tolist()
    assert g.edge_data["edge_feat"].shape == (300, 2) and np.array_equal(g.edge_data["edge_feat"], want["edge_feat"])
    for stem, name in (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask")):
        assert g.node_data[name].dtype == np.bool_ and np.array_equal(g.node_data[name], want["masks"][stem])
    g.check()


def test_splits_chosen(small) -> None:
    folder, want = small
    assert "train_mask" not in read_graph(GraphInput(folder, ReadOptions(split="none"))).node_data
    shutil.copytree(folder / "split" / "time", folder / "split" / "random")
    assert error_of(folder) == f"{folder / 'split'}: several splits (random, time): choose one with --split NAME (or --split none)"
    assert read_graph(GraphInput(folder, ReadOptions(split="random"))).node_data["val_mask"].sum() == 10
    assert error_of(folder, split="year").startswith(f"{folder / 'split' / 'year'}: no such split (the dataset has: random, time)")


def test_cora_in_ogb_layout_partitioned_and_verified_against_npz(tmp_path: Path, capsys) -> None:
    if not CORA.exists():
        pytest.skip("sample_data/cora.npz not built yet")
    with np.load(CORA) as z:
        cora = {k: z[k] for k in z.files}
    folder = write_ogb(tmp_path / "ogbn_cora", cora["src"], cora["dst"], int(cora["num_nodes"]),
                       {"node-feat.csv.gz": cora["feat"], "node-label.csv.gz": cora["label"]},
                       {"train": cora["train_mask"], "valid": cora["val_mask"], "test": cora["test_mask"]},
                       float_format="%.1f")  # "0.0": a file of bare integers would be read as int64, as OGB reads it
    g = read_graph(folder)
    for key in ("feat", "label", "train_mask", "val_mask", "test_mask"):
        assert g.node_data[key].dtype == cora[key].dtype and np.array_equal(g.node_data[key], cora[key]), key
    out = {}
    for name, source in (("ogb", folder), ("npz", CORA)):
        rc, stdout, err = run(capsys, "partition", source, "--parts", "3", "--method", "metis", "--halo", "1",
                              "-o", tmp_path / name, "--json")
        assert rc == 0, err
        out[name] = json.loads(stdout)
    rc, stdout, err = run(capsys, "verify", tmp_path / "ogb", "--graph", CORA)
    assert rc == 0 and stdout.startswith("OK") and "reconstruction" in stdout, stdout + err
    assert out["ogb"]["stats"] == out["npz"]["stats"] and out["ogb"]["partitions"] == out["npz"]["partitions"]
    manifest = json.loads((tmp_path / "ogb" / "manifest.json").read_text())
    assert manifest["graph"]["input_format"] == "ogb"


def test_binary_layout(tmp_path: Path) -> None:
    folder = tmp_path / "ogbn_papers_tiny"
    (folder / "raw").mkdir(parents=True)
    edge_index = np.array([[0, 1, 2, 3], [1, 2, 3, 0]])
    feat = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.savez(folder / "raw" / "data.npz", edge_index=edge_index, num_nodes_list=np.array([4]),
             num_edges_list=np.array([4]), node_feat=feat, node_year=np.array([[2000], [2001], [2002], [2003]]))
    np.savez(folder / "raw" / "node-label.npz", node_label=np.array([[1.0], [np.nan], [3.0], [0.0]], dtype=np.float32))
    csv_gz(folder / "split" / "time" / "train.csv.gz", np.array([0, 2]))
    csv_gz(folder / "split" / "time" / "valid.csv.gz", np.array([3]))
    csv_gz(folder / "split" / "time" / "test.csv.gz", np.array([1]))
    g = read_graph(folder)
    assert g.src.tolist() == [0, 1, 2, 3] and g.dst.tolist() == [1, 2, 3, 0] and g.num_nodes == 4
    assert np.array_equal(g.node_data["feat"], feat) and g.node_data["year"].tolist() == [2000, 2001, 2002, 2003]
    assert np.isnan(g.node_data["label"][1]) and g.node_data["label"].shape == (4,)
    assert g.node_data["train_mask"].tolist() == [True, False, True, False]
    np.savez(folder / "raw" / "data.npz", edge_index=np.array([[0, 9], [1, 2]]), num_nodes_list=np.array([4]),
             num_edges_list=np.array([2]))
    assert error_of(folder) == f"{folder / 'raw' / 'data.npz'}: edge 1: node id 9 >= the dataset's 4 nodes (num-node-list)"


def rewrite(path: Path, text: str) -> None:
    with gzip.open(path, "wt") as fh:
        fh.write(text)


def test_bad_folders_one_line(small) -> None:
    folder, want = small
    raw = folder / "raw"
    cases = [
        ("edge.csv.gz", "0,1\n" * 299 + "1,50\n", "edge 299: node id 50 >= the dataset's 50 nodes (num-node-list)"),
        ("edge.csv.gz", "0,1\n1,x\n", "line 2: target id (column 1) 'x' is not an integer"),
        ("num-edge-list.csv.gz", "7\n", None),
        ("num-node-list.csv.gz", "50\n60\n", "2 graphs: a graph-property dataset (ogbg-*); gpart partitions one graph"),
        ("num-node-list.csv.gz", "5.5\n", "expected one integer per line (the nodes of each graph)"),
        ("node-feat.csv.gz", "1.0,2.0\n", "1 rows, the graph has 50 nodes"),
        ("node-label.csv.gz", "1\n2\nabc\n", "line 3, column 1: 'abc' is not a number"),
        ("node_year.csv.gz", "1,2\n3\n", "line 2: the number of columns changed from 2 to 1"),
        ("edge-feat.csv.gz", "1\n", "1 rows, the graph has 300 edges"),
    ]
    for name, text, expected in cases:
        saved = (raw / name).read_bytes()
        rewrite(raw / name, text)
        message = error_of(folder)
        if expected is None:  # the edge count disagrees with the file
            assert message == f"{raw / 'edge.csv.gz'}: 300 edges, raw/num-edge-list.csv.gz says 7", message
        else:
            assert message == f"{raw / name}: {expected}", message
        (raw / name).write_bytes(saved)
    (raw / "node-feat.csv.gz").write_bytes((raw / "node-feat.csv.gz").read_bytes()[:-20])
    assert "corrupt or truncated compressed text" in error_of(folder)


def test_bad_splits_and_layouts(small, tmp_path: Path) -> None:
    folder, want = small
    test = folder / "split" / "time" / "test.csv.gz"
    rewrite(test, "3\n50\n")
    assert error_of(folder) == f"{test}: line 2: node id 50 outside 0..49"
    test.unlink()
    assert error_of(folder) == f"{test}: no such file"
    for stem in ("train", "valid"):
        (folder / "split" / "time" / f"{stem}.csv.gz").unlink()
    (folder / "split" / "time" / "train.pt").write_bytes(b"")
    assert "link-prediction splits of edges, which gpart does not read: pass --split none" in error_of(folder)
    assert read_graph(GraphInput(folder, ReadOptions(split="none"))).num_edges == 300
    (folder / "raw" / "num-node-list.csv.gz").unlink()
    assert error_of(folder).startswith(f"{folder / 'raw' / 'num-node-list.csv.gz'}: no such file")
    hetero = tmp_path / "ogbn_mag"
    (hetero / "raw" / "relations").mkdir(parents=True)
    rewrite(hetero / "raw" / "edge.csv.gz", "0,1\n")
    assert "a heterogeneous OGB dataset (raw/relations/)" in error_of(hetero)
    assert error_of(tmp_path / "ogbn_small" / "raw").endswith("or an OGB dataset folder (with raw/edge.csv.gz)")
    assert error_of(tmp_path).endswith("(with raw/edge.csv.gz): it holds the OGB dataset folders ogbn_mag, ogbn_small, give one")


def test_cli_split_option(small, tmp_path: Path, capsys) -> None:
    folder, want = small
    rc, out, err = run(capsys, "partition", folder, "--split", "none", "--parts", "2", "-o", tmp_path / "p", "--json")
    assert rc == 0, err
    rc, out, err = run(capsys, "partition", folder, "--split", "nope", "--parts", "2", "-o", tmp_path / "q")
    assert rc == 2 and err.count("\n") == 1 and "no such split" in err and not (tmp_path / "q").exists()


def test_numbers_dtype_as_ogb_reads_them(tmp_path: Path, monkeypatch) -> None:
    import gpart.formats.input.numeric_csv as numeric_csv

    ints = tmp_path / "ints.csv.gz"
    rewrite(ints, "1,2\n3,4\n")
    assert numeric_csv.read_numeric_csv(ints).dtype == np.int64
    later = tmp_path / "later.csv.gz"
    rewrite(later, "1,2\n" * 50 + "3,4.5\n")
    monkeypatch.setattr(numeric_csv, "SNIFF_BYTES", 16)  # the decimal value lies past the sniffed start
    values = numeric_csv.read_numeric_csv(later)
    assert values.dtype == np.float32 and values.shape == (51, 2) and values[50, 1] == 4.5
    nan = tmp_path / "nan.csv.gz"
    rewrite(nan, "1\nnan\n2\n")
    assert np.isnan(numeric_csv.read_numeric_csv(nan)[1, 0])
    bad = tmp_path / "bad.csv.gz"
    rewrite(bad, "1,2\n" * 50 + "3,x\n")
    with pytest.raises(InputError, match=r"line 51, column 2: 'x' is not a number"):
        numeric_csv.read_numeric_csv(bad)
