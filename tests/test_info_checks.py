"""`gpart info` (issue 42): it says when what it reads does not match its manifest (a file of another size, a
missing file, an HDF5 dataset of another shape or dtype: one error line naming it, exit 1; no data read, so a
flipped byte is `gpart verify`'s), its halo figures agree with each other, and `--plot FILE.png` draws a
partition result (skipped without matplotlib; without it the request is one error line).
"""

from __future__ import annotations

import builtins
import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from support.cli_run import run
from test_ckpt import make_run

from gpart.cli.main import main

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"
HETERO = REPO / "sample_data" / "cora_hetero.npz"
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, Path]:
    """Cora in 3 parts (binary, --halo 0 and 1; HDF5), the typed Cora graph, a PyG conversion and a checkpoint."""
    root = tmp_path_factory.mktemp("info_checks")
    make_run(root / "run", 200, 2, (8,), "float32", "adagrad", name="node_emb")
    commands = [
        ["partition", CORA, "-p", "3", "--method", "random", "-o", root / "binary", "-q"],
        ["partition", CORA, "-p", "3", "--method", "random", "--halo", "1", "-o", root / "halo1", "-q"],
        ["partition", CORA, "-p", "3", "--method", "random", "--format", "hdf5", "-o", root / "hdf5", "-q"],
        ["partition", HETERO, "-p", "2", "--method", "random", "-o", root / "typed", "-q"],
        ["convert", root / "binary", "--to", "pyg", "-o", root / "pyg", "-q"],
        ["export-ckpt", root / "run", "--to", "wholegraph", "-w", "2", "-o", root / "wholegraph", "-q"],
    ]
    for args in commands:
        assert main([str(a) for a in args]) == 0, args
    return {p.name: p for p in root.iterdir()}


def _copy(results: dict[str, Path], name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(results[name], tmp_path / name))


def _grow(path: Path) -> None:
    with open(path, "ab") as fh:
        fh.write(b"\0" * 8)


# ------------------------------------------------------------------ what is stored against the manifest


@pytest.mark.parametrize("name, victim", [("binary", "part_1/node_data/feat.bin"), ("binary", "book/owner.bin"),
                                          ("typed", "part_0/indices.bin"), ("pyg", "part_1/graph.pt"),
                                          ("wholegraph", "node_emb_state_sum_part_1_of_2")])
def test_info_exits_1_naming_a_file_of_another_size_or_a_missing_one(results, tmp_path, capsys, name, victim):
    d = _copy(results, name, tmp_path)
    assert run(capsys, "info", d)[0] == 0
    size = (d / victim).stat().st_size
    _grow(d / victim)
    rc, out, err = run(capsys, "info", d)
    assert rc == 1 and out == "", (out, err)
    assert err.splitlines() == [f"error: {d / victim}: size {size + 8} bytes, " + err.split(", ", 1)[1].rstrip("\n")]
    assert "manifest" in err and f"says {size}" in err
    (d / victim).unlink()
    rc, out, err = run(capsys, "info", d, "--json")
    assert rc == 1 and out == "" and len(err.splitlines()) == 1 and f"{d / victim}: file" in err and "missing" in err


def test_info_exits_1_on_an_hdf5_dataset_of_another_shape_or_dtype(results, tmp_path, capsys):
    import h5py

    d = _copy(results, "hdf5", tmp_path)
    with h5py.File(d / "partitions.h5", "r+") as h5:
        data = h5["part_2/node_data/label"][()]
        del h5["part_2/node_data/label"]
        h5["part_2/node_data/label"] = data[:-1]
    rc, _, err = run(capsys, "info", d)
    assert rc == 1 and err.splitlines() == [
        f"error: {d / 'partitions.h5'}:/part_2/node_data/label: dataset is int64 [{len(data) - 1}], manifest says int64 [{len(data)}]"]
    with h5py.File(d / "partitions.h5", "r+") as h5:
        del h5["part_2/node_data/label"]
        h5["part_2/node_data/label"] = data.astype("int32")
    rc, _, err = run(capsys, "info", d)
    assert rc == 1 and "part_2/node_data/label: dataset is int32" in err and len(err.splitlines()) == 1


def test_info_exits_1_on_a_truncated_hdf5_file(results, tmp_path, capsys):
    d = _copy(results, "hdf5", tmp_path)
    h5 = d / "partitions.h5"
    with open(h5, "r+b") as fh:
        fh.truncate(h5.stat().st_size - 4096)
    rc, _, err = run(capsys, "info", d)
    assert rc == 1 and len(err.splitlines()) == 1 and str(h5) in err, err


def test_a_flipped_byte_is_left_to_verify(results, tmp_path, capsys):
    """info reads no data (documented): the sizes hold, so it passes; verify finds the byte (exit 1)."""
    d = _copy(results, "binary", tmp_path)
    feat = d / "part_0" / "node_data" / "feat.bin"
    raw = bytearray(feat.read_bytes())
    raw[10] ^= 0x20
    feat.write_bytes(bytes(raw))
    assert run(capsys, "info", d)[0] == 0
    rc, _, err = run(capsys, "verify", d)
    assert rc == 1 and "damaged" in err


# ------------------------------------------------------------------ halo figures


@pytest.mark.parametrize("name, halo", [("binary", 0), ("halo1", 1)])
def test_halo_figures_agree(results, capsys, name, halo):
    """The title says whether halo nodes' data rows are stored (the manifest's `halo`), never a count beside the
    halo column's counts; the column's total is the sum of the partitions' halo nodes, the ratio theirs over N."""
    rc, text, _ = run(capsys, "info", results[name], "--json")
    summary = json.loads(text)
    halos = [p["num_halo"] for p in summary["partitions"]]
    assert rc == 0 and summary["halo"] == halo and sum(halos) > 0
    assert summary["stats"]["halo_ratio"] == pytest.approx(sum(halos) / summary["num_nodes"])
    rc, text, _ = run(capsys, "info", results[name])
    flat = " ".join(text.split())
    assert rc == 0 and ", halo 0" not in flat and ", halo 1" not in flat  # the old title: a flag read as a count
    assert ("node data of owned and halo nodes (--halo 1)" if halo else "node data of owned nodes only (--halo 0)") in flat
    rows = [[c.strip() for c in line.strip().strip("│").split("│")] for line in text.splitlines() if line.startswith("│")]
    assert [r[2] for r in rows] == [f"{h:,}" for h in halos] + [f"{sum(halos):,}"]  # part, owned, halo, ...; "all" last


# ------------------------------------------------------------------ --plot


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib is not installed (gpart info --plot needs it)")
@pytest.mark.parametrize("name", ["binary", "hdf5", "typed"])
def test_plot_writes_a_png_of_the_partition_figures(results, tmp_path, capsys, name):
    out = tmp_path / "parts.png"
    rc, text, err = run(capsys, "info", results[name], "--plot", out)
    assert rc == 0 and err == "", err
    data = out.read_bytes()
    assert len(data) > 10_000 and data.startswith(PNG_SIGNATURE)
    assert f"wrote {out}" in " ".join(text.split())
    assert [p.name for p in tmp_path.iterdir()] == ["parts.png"]  # no temporary left beside it
    rc, text, _ = run(capsys, "info", results[name], "--plot", tmp_path / "again.svg", "--json")
    summary = json.loads(text)
    figures = summary["plot"]
    assert rc == 0 and (tmp_path / "again.svg").read_bytes().lstrip().startswith(b"<?xml")
    assert sum(figures["cut_edges"]) == summary["stats"]["edge_cut"]  # counted from the topology, as the manifest's total
    assert figures["halo"] == [p["num_halo"] for p in summary["partitions"]]
    assert figures["in_edges"] == [p["num_edges"] for p in summary["partitions"]]
    assert figures["owned"] == [p["num_owned"] for p in summary["partitions"]]


def test_plot_errors_are_one_line_and_write_nothing(results, tmp_path, capsys):
    cases = [
        (["info", results["binary"], "--plot", tmp_path / "parts.gif"], 2, "cannot tell the picture format from the name"),
        (["info", results["binary"], "--plot", tmp_path / "none" / "parts.png"], 2, "does not exist"),
        (["info", results["pyg"], "--plot", tmp_path / "parts.png"], 2, "is not a partition result"),
    ]
    for args, code, message in cases:
        rc, out, err = run(capsys, *args)
        assert rc == code and len(err.splitlines()) == 1 and message in err, (args, err)
    assert list(tmp_path.iterdir()) == []


def test_plot_without_matplotlib_is_one_line(results, tmp_path, capsys, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    rc, out, err = run(capsys, "info", results["binary"], "--plot", tmp_path / "parts.png")
    assert rc == 2 and out == "" and err.splitlines() == [
        "error: a picture needs matplotlib, which is not installed (pip install matplotlib)"]
    assert list(tmp_path.iterdir()) == []
