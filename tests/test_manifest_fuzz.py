"""Issue 15, finding 8: mutated manifests give one-line errors, never a traceback.

Each example takes a real manifest (a partition result, a sharded and a
gathered checkpoint, an export), mutates it (drop, add or retype a key at
any depth, replace a value with a hostile path, a huge or negative number,
a wrong container) and runs `gpart info` and `gpart verify` through main():
the only acceptable outcomes are exit 0 (the mutation was harmless), or exit
1 or 2 with exactly one `error:` line on stderr.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ckpt import make_run

from gpart.cli.main import main

CORA = Path(__file__).resolve().parents[1] / "sample_data" / "cora.npz"

HOSTILE = st.one_of(
    st.sampled_from(["x", "", "../../etc/passwd", "/etc/passwd", "a/../../b", ".hidden", "-rf", "\x00", "é" * 3]),
    st.sampled_from([10**12, -1, 2**63, 0, 1.5, float("inf"), True, None]),
    st.sampled_from([[1, 2], [], {}, {"a": 1}, [[]], ["x"]]),
    st.text(max_size=8),
    st.integers(),
)


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path in a JSON value."""
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:4]):
            out += _paths(v, prefix + (i,))
    return out


def _mutate(obj: Any, data: st.DataObject) -> Any:
    obj = copy.deepcopy(obj)
    for _ in range(data.draw(st.integers(1, 3))):
        paths = [p for p in _paths(obj) if p]
        if not paths:
            break
        path = data.draw(st.sampled_from(paths))
        parent = obj
        for key in path[:-1]:
            parent = parent[key]
        action = data.draw(st.sampled_from(["replace", "delete", "add"]))
        # a copy of the drawn value: sampled_from hands out the same list/dict objects every
        # time, and a later mutation must not change (or nest) the strategy's own constants
        if action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[data.draw(st.sampled_from(["file", "crc32", "bytes", "dataset", "shape", "zz"]))] = copy.deepcopy(data.draw(HOSTILE))
        else:
            parent[path[-1]] = copy.deepcopy(data.draw(HOSTILE))
    return obj


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    base = tmp_path_factory.mktemp("fuzz")
    assert main(["partition", str(CORA), "-p", "2", "--method", "range", "-o", str(base / "parts"), "-q"]) == 0
    assert main(["partition", str(CORA), "-p", "2", "--method", "random", "--format", "hdf5", "-o", str(base / "h5"), "-q"]) == 0
    make_run(base / "run", 40, 3)
    assert main(["gather-ckpt", str(base / "run"), "-o", str(base / "full"), "-q"]) == 0
    assert main(["export-feat", f"{CORA}:label", "-o", str(base / "wg"), "--files", "2", "-q"]) == 0
    return {
        "partition": (base / "parts", "manifest.json"),
        "hdf5": (base / "h5", "manifest.json"),
        "checkpoint": (base / "run", "manifest.json"),
        "gathered": (base / "full", "manifest.json"),
        "export": (base / "wg", "label/label.json"),
    }


@pytest.mark.parametrize("kind", ["partition", "hdf5", "checkpoint", "gathered", "export"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_manifest_gives_one_line_or_nothing(artifacts, tmp_path_factory, capsys, kind, data):
    source, manifest_name = artifacts[kind]
    work = tmp_path_factory.mktemp("case") / source.name
    shutil.copytree(source, work)
    original = json.loads((source / manifest_name).read_text())
    (work / manifest_name).write_text(json.dumps(_mutate(original, data)))
    for command in ("info", "verify"):
        capsys.readouterr()
        rc = main([command, str(work)])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc in (0, 1, 2)
        if rc:
            assert len(err) == 1 and err[0].startswith("error: "), err
    shutil.rmtree(work.parent)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_the_reported_manifests_give_one_line(artifacts, tmp_path, capsys):
    parts = tmp_path / "parts"
    shutil.copytree(artifacts["partition"][0], parts)
    manifest = json.loads((parts / "manifest.json").read_text())
    manifest["partitions"][0]["arrays"]["indptr"]["bytes"] = "x"
    (parts / "manifest.json").write_text(json.dumps(manifest))
    assert main(["info", str(parts)]) == 2
    assert "malformed array entry" in _one_line(capsys)
    assert main(["verify", str(parts)]) == 1
    assert "malformed array entry" in _one_line(capsys)

    full = tmp_path / "full"
    shutil.copytree(artifacts["gathered"][0], full)
    manifest = json.loads((full / "manifest.json").read_text())
    manifest["embeddings"][0]["source_policy"] = [1, 2]
    (full / "manifest.json").write_text(json.dumps(manifest))
    assert main(["info", str(full)]) == 2
    assert "source_policy [1, 2] is not a sharding policy" in _one_line(capsys)
    assert main(["verify", str(full)]) == 1
    assert "source_policy" in _one_line(capsys)

    export = tmp_path / "wg"  # a file entry without rows (hypothesis found it: an IndexError before)
    shutil.copytree(artifacts["export"][0], export)
    listing = export / artifacts["export"][1]
    manifest = json.loads(listing.read_text())
    manifest["files"][-1]["shape"] = []
    del manifest["files"][-1]["bytes"]
    listing.write_text(json.dumps(manifest))
    assert main(["info", str(export)]) == 2
    assert "has no rows" in _one_line(capsys)


def test_huge_num_nodes_is_refused_before_allocating(tmp_path, capsys):
    import numpy as np

    np.savez(tmp_path / "g.npz", src=np.array([0, 1]), dst=np.array([1, 2]), num_nodes=np.int64(10**12))
    assert main(["partition", str(tmp_path / "g.npz"), "-p", "2", "--method", "range", "-o", str(tmp_path / "out")]) == 2
    assert "'num_nodes' is 1000000000000" in _one_line(capsys)
    assert not (tmp_path / "out").exists()


def test_infinite_shard_rank_gives_one_line(artifacts, tmp_path, capsys):
    # Found by the fuzz test above: float('inf') (JSON "Infinity") made int() raise OverflowError.
    run = tmp_path / "run"
    shutil.copytree(artifacts["checkpoint"][0], run)
    text = (run / "manifest.json").read_text()
    manifest = json.loads(text)
    manifest["tensors"][0]["shards"][0]["rank"] = float("inf")
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert main(["info", str(run)]) == 2
    assert "malformed shard entry" in _one_line(capsys)


def test_null_stats_figures_are_derived_or_left_out(tmp_path, capsys):
    """A found example: `stats.halo_ratio` or `stats.edge_cut` set to null made `gpart info` raise a TypeError."""
    out = tmp_path / "parts"
    assert main(["partition", str(CORA), "-p", "2", "--method", "range", "-o", str(out), "-q"]) == 0
    m = json.loads((out / "manifest.json").read_text())
    m["stats"]["halo_ratio"] = None
    m["stats"]["edge_cut"] = None
    (out / "manifest.json").write_text(json.dumps(m))
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "edge cut" not in text and "node balance" in text


def test_unhashable_optimizer_type_is_one_line(tmp_path, capsys):
    """A found example: a list as `optimizer.type` made `gpart info` raise a TypeError (unhashable type)."""
    run = tmp_path / "run"
    make_run(run, 40, 3)
    assert main(["gather-ckpt", str(run), "-o", str(tmp_path / "full"), "-q"]) == 0
    path = tmp_path / "full" / "manifest.json"
    m = json.loads(path.read_text())
    m["optimizer"]["type"] = ["adam"]
    path.write_text(json.dumps(m))
    capsys.readouterr()
    assert main(["info", str(tmp_path / "full")]) != 0
    err = capsys.readouterr().err
    assert "optimizer type ['adam'] unknown" in err and len(err.strip().splitlines()) == 1


def test_train_count_missing_from_one_partition(tmp_path, capsys):
    """A found example: `num_train` dropped from one partition only made `gpart info` raise a KeyError."""
    out = tmp_path / "parts"
    assert main(["partition", str(CORA), "-p", "2", "--method", "range", "-o", str(out), "-q"]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert all("num_train" in p for p in m["partitions"])
    del m["partitions"][1]["num_train"]
    (out / "manifest.json").write_text(json.dumps(m))
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if "owned" in line and "halo/owned" in line)
    assert "train" not in header  # no column of partial counts
