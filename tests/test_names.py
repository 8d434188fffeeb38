"""Issue 15, finding 1: no name that reaches a path can leave the output directory.

Every name is checked by gpart.formats.files.names before anything is written;
the exploit of the issue (an `.npz` key `../../.../victim/x`) is a one-line
error with exit 2 and writes nothing anywhere.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_ckpt import make_run

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.cli.main import main
from gpart.formats.checkpoint.writer import write_shard
from gpart.formats.files.names import safe_name, safe_relpath
from gpart.pipeline.partition import partition_graph

CORA = Path(__file__).resolve().parents[1] / "sample_data" / "cora.npz"


def _one_error_line(capsys, path) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(err) == 1, err
    assert err[0].startswith(f"error: {path}"), err
    return err[0]


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", ".hidden", "-rf", "a/b", "", "a\nb", "x" * 201, "é", 7, None])
def test_safe_name_refuses_everything_outside_the_alphabet(bad):
    with pytest.raises(InputError):
        safe_name(bad)


def test_safe_relpath_checks_every_component():
    assert safe_relpath("part_0/node_data/feat.bin") == "part_0/node_data/feat.bin"
    for bad in ["part_0/../../x", "/abs", "a//b", "a/", "a/.b"]:
        with pytest.raises(InputError):
            safe_relpath(bad)


@pytest.mark.parametrize("storage", ["binary", "hdf5"])
def test_npz_key_with_dot_dot_is_refused_and_nothing_written(tmp_path, capsys, storage):
    victim = tmp_path / "victim"
    key = "../" * 40 + str(victim / "x").lstrip("/")
    np.savez(tmp_path / "evil.npz", src=np.array([0, 1]), dst=np.array([1, 2]), **{key: np.arange(3)})
    work = tmp_path / "work"
    work.mkdir()
    rc = main(["partition", str(tmp_path / "evil.npz"), "-p", "1", "--method", "range", "--format", storage, "-o", str(work / "out")])
    assert rc == 2
    assert "is not allowed" in _one_error_line(capsys, tmp_path / "evil.npz")
    assert not victim.exists()
    assert list(work.iterdir()) == []


def test_library_node_data_name_is_checked_by_the_writer(tmp_path):
    g = Graph.from_arrays(np.array([0, 1]), np.array([1, 2]), **{"../../escape": np.arange(3)})
    with pytest.raises(InputError, match="not allowed"):
        partition_graph(g, tmp_path / "out", 1, method="range")
    assert list(tmp_path.iterdir()) == []


def test_node_data_and_export_names_are_checked(tmp_path, capsys):
    npy = tmp_path / "x.npy"
    np.save(npy, np.zeros((2708, 2), np.float32))
    assert main(["partition", str(CORA), "-p", "1", "--method", "range", "--node-data", f"../up={npy}", "-o", str(tmp_path / "o")]) == 2
    assert "not allowed" in capsys.readouterr().err
    assert main(["export-feat", str(npy), "--name", "../../up", "-o", str(tmp_path / "wg")]) == 2
    assert "not allowed" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "wg").exists() and not (tmp_path.parent / "up.json").exists()


def test_embedding_and_state_names_are_checked(tmp_path):
    with pytest.raises(InputError, match="not allowed"):
        write_shard(tmp_path, "../emb", 0, 1, np.zeros((2, 2), np.float32))
    with pytest.raises(InputError, match="not allowed"):
        write_shard(tmp_path, "emb.../../s", 0, 1, np.zeros((2, 2), np.float32))
    assert list(tmp_path.iterdir()) == []


def test_manifest_names_outside_the_directory_are_refused(tmp_path, capsys):
    parts = tmp_path / "parts"
    assert main(["partition", str(CORA), "-p", "2", "--method", "range", "-o", str(parts), "-q"]) == 0
    capsys.readouterr()
    manifest = json.loads((parts / "manifest.json").read_text())
    manifest["partitions"][0]["arrays"]["indptr"]["file"] = "../../outside.bin"
    (parts / "manifest.json").write_text(json.dumps(manifest))
    assert main(["info", str(parts)]) == 2
    assert "not allowed" in _one_error_line(capsys, parts / "manifest.json")

    run = tmp_path / "run"
    make_run(run, 10, 2)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["tensors"][0]["shards"][0]["file"] = "../node_emb_part_0_of_2"
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert main(["info", str(run)]) == 2
    assert "not allowed" in _one_error_line(capsys, run / "manifest.json")

    wg = tmp_path / "wg"
    assert main(["export-feat", f"{CORA}:feat", "-o", str(wg), "-q"]) == 0
    capsys.readouterr()
    exported = json.loads((wg / "feat" / "feat.json").read_text())
    exported["files"][0]["file"] = "../feat_part_0_of_1"
    (wg / "feat" / "feat.json").write_text(json.dumps(exported))
    assert main(["verify", str(wg)]) == 1
    assert "not allowed" in capsys.readouterr().out
