"""`gpart verify --graph` with an input that is not the one the result was made from names the input as
the wrong side (exit 3), apart from a damaged result (exit 1): counts first, before the result is read;
differences found with an intact result are `mismatch` lines, not damage."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from support.cli_run import run

from gpart.base.errors import InputMismatchError
from gpart.cli.main import main
from gpart.inspection.result import verify

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data"
CORA, HETERO = SAMPLE / "cora.npz", SAMPLE / "cora_hetero.npz"


def _cora_edited(path: Path, edit) -> Path:
    with np.load(CORA, allow_pickle=False) as z:
        arrays = {k: z[k].copy() for k in z.files}
    edit(arrays)
    np.savez(path, **arrays)
    return path


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("mismatch") / "parts"
    assert main(["partition", str(CORA), "-p", "3", "--method", "random", "-o", str(out), "-q"]) == 0
    return out


def _flip(path: Path, at: int = 8) -> None:
    with open(path, "r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0xFF]))


def test_other_counts_are_refused_before_the_result_is_read(parts, capsys, tmp_path):
    fewer = _cora_edited(tmp_path / "fewer.npz", lambda a: a.update(src=a["src"][:-1], dst=a["dst"][:-1]))
    damaged = shutil.copytree(parts, tmp_path / "damaged")
    _flip(damaged / "part_0" / "indices.bin")  # damage that the count check must not need to read
    for result in (parts, damaged):
        rc, out, err = run(capsys, "verify", result, "--graph", fewer)
        assert rc == 3 and out == ""
        assert err == (f"error: {fewer}: is not the graph {result} was made from: it has 2,708 nodes and 5,428 edges, the result's "
                       f"input 2,708 and 5,429 ({CORA}); the result itself was not checked\n")
    with pytest.raises(InputMismatchError):
        verify(parts, fewer)


def test_other_contents_with_an_intact_result_are_a_mismatch(parts, capsys, tmp_path):
    def edit(a):
        a["feat"][7, 3] += 1.0
    other = _cora_edited(tmp_path / "other_feat.npz", edit)
    rc, out, err = run(capsys, "verify", parts, "--graph", other)
    assert rc == 3 and len(err.splitlines()) == 1
    assert err.startswith(f"error: {other}: differs from the input {parts} was made from ({CORA}) (1 difference); "
                          "the result's checksums and invariants hold")
    assert "differs " in out and "node_data/feat: 1 rows differ from the input's" in out and "damaged" not in out
    report = verify(parts, other)
    assert not report["ok"] and report["problems"] == [] and len(report["mismatch"]) == 1 and report["made_from"] == str(CORA)
    assert run(capsys, "verify", parts, "--graph", CORA)[0] == 0


def test_a_damaged_result_is_damage_whichever_graph_is_given(parts, capsys, tmp_path):
    damaged = shutil.copytree(parts, tmp_path / "damaged")
    feat = json.loads((damaged / "manifest.json").read_text())["partitions"][1]["arrays"]["node_data/feat"]["file"]
    _flip(damaged / feat)

    def edit(a):
        a["src"][0] = (a["src"][0] + 7) % 2708
    moved = _cora_edited(tmp_path / "moved.npz", edit)
    for graph in (CORA, moved):
        rc, out, err = run(capsys, "verify", damaged, "--graph", graph)
        assert rc == 1 and err == f"error: {damaged}: damaged: 1 problem found\n" and f"damaged {damaged / feat}: checksum" in out


def test_typed_results_name_the_input_too(capsys, tmp_path):
    out = tmp_path / "hparts"
    assert main(["partition", str(HETERO), "-p", "2", "-o", str(out), "-q"]) == 0
    with np.load(HETERO, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    fewer = tmp_path / "fewer.npz"
    np.savez(fewer, **{k: (v[:-1] if k.startswith("paper:cites:paper/") else v) for k, v in arrays.items()})
    rc, text, err = run(capsys, "verify", out, "--graph", fewer)
    assert rc == 3 and text == "" and err.startswith(f"error: {fewer}: is not the graph {out} was made from: it has 4,141 nodes and 109,289 edges")
    assert run(capsys, "verify", out, "--graph", HETERO)[0] == 0
