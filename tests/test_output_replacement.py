"""One rule for every command: what gpart wrote, of any kind, is replaced with --force and refused without it
in the same words; anything else is refused either way (formats/SPEC.md 9.4, gpart.formats.files.ownership)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.cli_run import run
from test_ckpt import make_run

from gpart.formats.files.commit import NOT_REPLACED, REPLACE_WITH_FORCE
from gpart.formats.files.ownership import is_export_output, is_gpart_output

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"
FEAT = f"{CORA}:feat"


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def info_kind(capsys, directory: Path) -> dict:
    rc, out, err = run(capsys, "info", directory, "--json")
    assert rc == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("ck") / "run"
    make_run(run_dir, 40, 2, row_shape=(4,), optimizer="none")
    return run_dir


# how each kind of gpart output is made, and a command of another kind that writes OUT
MAKERS = {
    "partition": lambda out, ck: ["partition", CORA, "--parts", 2, "--method", "random", "-o", out, "-q"],
    "chunks": lambda out, ck: ["chunk", CORA, "--chunks", 2, "-o", out, "-q"],
    "export-feat": lambda out, ck: ["export-feat", FEAT, "-o", out, "--files", 2, "--dtype", "float16", "-q"],
    "export-ckpt": lambda out, ck: ["export-ckpt", ck, "--to", "wholegraph", "-w", 2, "-o", out, "--prefix", "emb", "-q"],
    "gather-ckpt": lambda out, ck: ["gather-ckpt", ck, "-o", out, "-q"],
}
PAIRS = [("export-feat", "export-ckpt"), ("export-ckpt", "export-feat"), ("partition", "export-feat"), ("export-feat", "partition"),
         ("chunks", "gather-ckpt"), ("gather-ckpt", "chunks"), ("partition", "export-ckpt")]


@pytest.mark.parametrize("first,second", PAIRS)
def test_another_kind_of_gpart_result_is_replaced_only_with_force(first, second, tmp_path, capsys, ckpt):
    out = tmp_path / "out"
    assert run(capsys, *MAKERS[first](out, ckpt))[0] == 0
    assert is_gpart_output(out)
    before = snapshot(out)
    rc, _, err = run(capsys, *MAKERS[second](out, ckpt))
    assert rc == 2 and err.splitlines() == [f"error: {out}: {REPLACE_WITH_FORCE}"], err
    assert snapshot(out) == before
    rc, _, err = run(capsys, *MAKERS[second](out, ckpt), "--force")
    assert rc == 0, err
    fresh = tmp_path / "fresh"
    assert run(capsys, *MAKERS[second](fresh, ckpt))[0] == 0
    assert sorted(snapshot(out)) == sorted(snapshot(fresh))  # the old kind is gone whole: the files a first run writes
    if second != "chunks":  # gpart info does not read chunk directories
        info_kind(capsys, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "out"]  # no staging left behind


@pytest.mark.parametrize("command", sorted(MAKERS))
@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
def test_user_data_is_refused_with_and_without_force_in_the_same_words(command, force, tmp_path, capsys, ckpt):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    rc, _, err = run(capsys, *MAKERS[command](out, ckpt), *(["--force"] if force else []))
    if command == "export-feat":  # adds its set folder beside the user's files: nothing is replaced
        assert rc == 0 and (out / "notes.txt").read_text() == "precious" and (out / "feat").is_dir(), err
        return
    assert rc == 2 and err.splitlines() == [f"error: {out}: {NOT_REPLACED}"], err
    assert snapshot(out) == {"notes.txt": b"precious"}


def test_an_export_directory_with_a_file_of_the_users_is_the_users(tmp_path, capsys, ckpt):
    out = tmp_path / "wg"
    assert run(capsys, *MAKERS["export-feat"](out, ckpt))[0] == 0
    assert is_export_output(out)
    (out / "README.txt").write_text("mine")
    assert not is_gpart_output(out)
    rc, _, err = run(capsys, *MAKERS["export-ckpt"](out, ckpt), "--force")
    assert rc == 2 and NOT_REPLACED in err and (out / "README.txt").read_text() == "mine"


def test_readme_scenario_export_ckpt_over_export_feat(tmp_path, capsys, ckpt):
    """The README's two `-o wg/` commands once collided: export-ckpt refused export-feat's wg/ even with --force."""
    wg = tmp_path / "wg"
    assert run(capsys, "export-feat", FEAT, "-o", wg, "--files", 4, "--dtype", "float16", "-q")[0] == 0
    assert info_kind(capsys, wg)
    assert run(capsys, "export-ckpt", ckpt, "--to", "wholegraph", "-w", 2, "-o", wg, "--prefix", "emb", "-q", "--force")[0] == 0
    assert not (wg / "feat").exists() and (wg / "manifest.json").is_file()
    assert run(capsys, "verify", wg)[0] == 0


def test_what_counts_as_gpart_output(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    assert not is_gpart_output(d)  # empty: nothing to replace (check_output_dir writes into it)
    (d / "x_part_0_of_1").write_bytes(b"\0" * 4)
    assert not is_gpart_output(d)  # parts without any export's JSON
    (d / "x.json").write_text(json.dumps({"format": "not-gpart", "version": 1}))
    assert not is_gpart_output(d)
    (d / "x.json").write_text(json.dumps({"format": "gpart.filelist", "version": 1}))
    assert is_gpart_output(d)  # a flat-layout export
    (d / ".x.gpart-tmp-1-abcdef12").write_bytes(b"")  # hidden work entries are gpart's own
    assert is_gpart_output(d)
    (d / "sub").mkdir()
    assert not is_gpart_output(d)  # an empty folder is no export set
    (d / "sub" / "y.json").write_text(json.dumps({"format": "gpart.filelist", "version": 1}))
    assert is_gpart_output(d)
    (d / "sub" / "y.json").write_text("{broken")
    assert not is_gpart_output(d)
    (d / "sub" / "y.json").unlink()
    (d / "sub").rmdir()
    (d / "manifest.json").write_text("{}")
    np.save(d / "anything.npy", np.zeros(1))
    assert is_gpart_output(d)  # a result: its manifest decides (a damaged one is still replaced with --force)
