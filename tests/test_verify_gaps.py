"""Issue 15, findings 6, 7 and part of 9: verify checks every artifact gpart writes, damaged
input is refused on the way instead of being re-certified, damage exits 1, -q prints nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_ckpt import make_run

from gpart.cli.main import main

CORA = Path(__file__).resolve().parents[1] / "sample_data" / "cora.npz"


def run(*args) -> int:
    return main([str(a) for a in args])


def flip(path: Path, offset: int = 3) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0x01]))


def test_gathered_tensor_json_is_verified(tmp_path, capsys):
    make_run(tmp_path / "run", 40, 3)
    assert run("gather-ckpt", tmp_path / "run", "-o", tmp_path / "full", "-q") == 0
    assert run("verify", tmp_path / "full", "-q") == 0
    (tmp_path / "full" / "node_emb.json").write_text("{broken")
    capsys.readouterr()
    assert run("verify", tmp_path / "full") == 1
    assert "node_emb.json: not valid JSON" in capsys.readouterr().out
    # valid JSON that disagrees with the manifest is damage too
    make_run(tmp_path / "run2", 40, 3)
    assert run("gather-ckpt", tmp_path / "run2", "-o", tmp_path / "full2", "-q") == 0
    side = json.loads((tmp_path / "full2" / "node_emb.step.json").read_text())
    side["files"][0]["crc32"] = "00000000"
    (tmp_path / "full2" / "node_emb.step.json").write_text(json.dumps(side))
    assert run("verify", tmp_path / "full2", "-q") == 1


def test_shard_entry_without_crc_is_refused(tmp_path, capsys):
    make_run(tmp_path / "run", 40, 2)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    del manifest["tensors"][0]["shards"][1]["crc32"]
    (tmp_path / "run" / "manifest.json").write_text(json.dumps(manifest))
    flip(tmp_path / "run" / "node_emb_part_1_of_2")
    capsys.readouterr()
    assert run("verify", tmp_path / "run") == 1
    assert "crc32" in capsys.readouterr().err
    assert run("gather-ckpt", tmp_path / "run", "-o", tmp_path / "full", "--verify", "-q") == 2
    assert not (tmp_path / "full").exists()


def test_verify_and_info_understand_export_feat_output(tmp_path, capsys):
    wg = tmp_path / "wg"
    assert run("export-feat", f"{CORA}:feat", "-o", wg, "--files", "3", "-q") == 0
    assert run("export-feat", f"{CORA}:label", "-o", wg, "-q") == 0
    capsys.readouterr()
    assert run("verify", wg) == 0
    assert "OK" in capsys.readouterr().out
    assert run("info", wg, "--json") == 0
    names = [e["name"] for e in json.loads(capsys.readouterr().out)["exports"]]
    assert names == ["feat", "label"]
    flip(wg / "feat" / "feat_part_1_of_3", 100)
    assert run("verify", wg) == 1
    out = capsys.readouterr().out
    assert "feat_part_1_of_3: checksum mismatch" in out and "label" not in out


@pytest.mark.parametrize("command", ["gather", "scatter"])
def test_remainder_gather_and_scatter_refuse_damaged_input(tmp_path, capsys, command):
    make_run(tmp_path / "run", 203, 4)
    flip(tmp_path / "run" / "node_emb.exp_avg_part_2_of_4", 17)
    out = tmp_path / "out"
    args = ["gather-ckpt", tmp_path / "run", "-o", out] if command == "gather" else ["scatter-ckpt", tmp_path / "run", "-o", out, "-w", "3"]
    capsys.readouterr()
    assert run(*args, "-q") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "node_emb.exp_avg_part_2_of_4: checksum mismatch" in err[0] and "input is damaged" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_scatter_of_a_damaged_gathered_file_is_refused(tmp_path, capsys):
    make_run(tmp_path / "run", 203, 2)
    assert run("gather-ckpt", tmp_path / "run", "-o", tmp_path / "full", "-q") == 0
    flip(tmp_path / "full" / "node_emb_part_0_of_1", 40)
    assert run("scatter-ckpt", tmp_path / "full", "-o", tmp_path / "r4", "-w", "4", "--policy", "remainder", "-q") == 1
    assert "input is damaged" in capsys.readouterr().err
    assert not (tmp_path / "r4").exists()


@pytest.mark.parametrize("halo", ["0", "1"])
def test_export_feat_partdir_refuses_damaged_input(tmp_path, capsys, halo):
    parts = tmp_path / "parts"
    assert run("partition", CORA, "-p", "3", "--method", "range", "--halo", halo, "-o", parts, "-q") == 0
    assert run("export-feat", parts, "-o", tmp_path / "ok", "-q") == 0
    size = (parts / "part_2" / "node_data" / "feat.bin").stat().st_size
    flip(parts / "part_2" / "node_data" / "feat.bin", size - 5)  # the last (halo, if any) row
    capsys.readouterr()
    assert run("export-feat", parts, "-o", tmp_path / "bad", "-q") == 1
    assert "part_2/node_data/feat.bin: checksum mismatch" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_missing_shard_is_damage_exit_1(tmp_path, capsys):
    make_run(tmp_path / "run", 30, 3)
    (tmp_path / "run" / "node_emb_part_1_of_3").unlink()
    assert run("info", tmp_path / "run") == 1
    assert run("gather-ckpt", tmp_path / "run", "-o", tmp_path / "o", "-q") == 1
    assert "is missing" in capsys.readouterr().err


def test_quiet_prints_nothing_on_success(tmp_path, capsys):
    make_run(tmp_path / "run", 30, 3)
    commands = [
        ("partition", CORA, "-p", "2", "--method", "range", "-o", tmp_path / "p", "-q"),
        ("export-feat", f"{CORA}:feat", "-o", tmp_path / "wg", "-q"),
        ("gather-ckpt", tmp_path / "run", "-o", tmp_path / "full", "-q"),
        ("scatter-ckpt", tmp_path / "full", "-o", tmp_path / "r2", "-w", "2", "-q"),
        ("verify", tmp_path / "p", "-q"),
    ]
    for args in commands:
        capsys.readouterr()
        assert run(*args) == 0
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err == "", args
