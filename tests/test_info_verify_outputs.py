"""`gpart info` and `gpart verify` of what gpart writes for other systems: `convert --to pyg|glt` outputs
(SPEC.md 7) and `export-ckpt --to wholegraph|distdgl` outputs (6.7), read through their manifests' file lists."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from support.cli_run import run
from test_ckpt import make_run

from gpart.cli.main import main

CORA = Path(__file__).resolve().parents[1] / "sample_data" / "cora.npz"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, Path]:
    """Cora in 3 partitions converted to PyG's and GLT's layouts; a 2-rank Adagrad checkpoint exported to WholeGraph
    (3 ranks) and DistDGL (2 ranks)."""
    root = tmp_path_factory.mktemp("outputs")
    commands = [
        ["partition", CORA, "-p", "3", "--method", "random", "-o", root / "parts", "-q"],
        ["convert", root / "parts", "--to", "pyg", "-o", root / "pyg", "-q"],
        ["convert", root / "parts", "--to", "glt", "-o", root / "glt", "-q"],
        ["export-ckpt", root / "run", "--to", "wholegraph", "-w", "3", "-o", root / "wholegraph", "-q"],
        ["export-ckpt", root / "run", "--to", "distdgl", "-w", "2", "-o", root / "distdgl", "-q"],
    ]
    make_run(root / "run", 1000, 2, (16,), "float32", "adagrad", name="node_emb")
    for args in commands:
        assert main([str(a) for a in args]) == 0, args
    return {name: root / name for name in ("parts", "run", "pyg", "glt", "wholegraph", "distdgl")}


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("name, command, groups", [
    ("pyg", "convert", {"part_0": 3, "part_1": 3, "part_2": 3, "shared": 3}),
    ("glt", "convert", {"part0": 5, "part1": 5, "part2": 5, "shared": 4}),
    ("wholegraph", "export-ckpt", {"rank 0": 2, "rank 1": 2, "rank 2": 2}),
    ("distdgl", "export-ckpt", {"rank 0": 2, "rank 1": 2}),
])
def test_info_summarises_the_output(outputs, capsys, name, command, groups):
    out = outputs[name]
    rc, text, err = run(capsys, "info", out, "--json")
    assert rc == 0, err
    summary = json.loads(text)
    manifest = json.loads((out / "manifest.json").read_text())
    on_disk = sum(p.stat().st_size for p in out.rglob("*") if p.is_file() and p.name != "manifest.json")
    assert summary["command"] == command and summary["target"] == name and summary["source"] == manifest["source"]
    assert summary["bytes"] == on_disk and summary["num_files"] == len(manifest["files"])
    assert {g["group"]: g["files"] for g in summary["groups"]} == groups
    if command == "convert":
        assert (summary["num_parts"], summary["num_nodes"], summary["num_edges"]) == (3, 2708, 5429)
    else:
        assert summary["world_size"] == len(groups) and summary["optimizer"]["type"] == "adagrad"
        assert summary["embeddings"][0]["num_rows"] == 1000
    rc, text, _ = run(capsys, "info", out)  # the table: what it is, from where
    assert rc == 0 and f"gpart {command} --to {name}" in text and manifest["source"] in text


@pytest.mark.parametrize("name", ["pyg", "glt", "wholegraph", "distdgl"])
def test_verify_passes_an_intact_output(outputs, capsys, name):
    rc, text, err = run(capsys, "verify", outputs[name])
    files = len(json.loads((outputs[name] / "manifest.json").read_text())["files"])
    assert rc == 0 and err == "" and text.strip() == f"OK {outputs[name]}: checksums ({files} files)"


@pytest.mark.parametrize("name", ["pyg", "distdgl"])
def test_verify_names_each_damaged_file(outputs, capsys, tmp_path, name):
    out = _copy(outputs[name], tmp_path / name)
    files = [e["file"] for e in json.loads((out / "manifest.json").read_text())["files"]]
    flipped, truncated, removed = files[0], files[1], files[2]
    with open(out / flipped, "r+b") as fh:
        fh.seek(40)
        byte = fh.read(1)
        fh.seek(40)
        fh.write(bytes([byte[0] ^ 0xFF]))
    os.truncate(out / truncated, (out / truncated).stat().st_size - 1)
    (out / removed).unlink()
    (out / "notes.txt").write_text("mine")
    rc, text, err = run(capsys, "verify", out, "--json")
    report = json.loads(text)
    assert rc == 1 and err.splitlines() == [f"error: {out}: damaged: 3 problems found"]
    size = (out / truncated).stat().st_size
    crc = json.loads((out / "manifest.json").read_text())["files"][0]["crc32"]
    problems = dict(line.split(": ", 1) for line in report["problems"])  # one line per damaged file, naming it
    assert set(problems) == {str(out / flipped), str(out / truncated), str(out / removed)}
    assert problems[str(out / flipped)].startswith("checksum mismatch: crc32 ") and problems[str(out / flipped)].endswith(f"manifest.json says {crc}")
    assert problems[str(out / truncated)] == f"size {size} bytes, manifest.json says {size + 1}"
    assert problems[str(out / removed)] == "file listed in manifest.json is missing"
    assert report["notes"] == [f"{out}: 1 file not listed in manifest.json, not checked: notes.txt"]


def test_a_file_behind_a_symbolic_link_is_refused(outputs, capsys, tmp_path):
    out = _copy(outputs["pyg"], tmp_path / "pyg")
    target = tmp_path / "elsewhere.pt"
    (out / "node_map.pt").rename(target)
    (out / "node_map.pt").symlink_to(target)
    rc, text, _ = run(capsys, "verify", out, "--json")
    assert rc == 1 and "symbolic link" in " ".join(json.loads(text)["problems"])


@pytest.mark.parametrize("edit, problem", [
    (lambda m: m["files"][0].update(crc32="xyz"), "'crc32' is not 8 lowercase hex digits"),
    (lambda m: m["files"][0].update(file="../outside.pt"), "is not allowed"),
    (lambda m: m["files"].append(dict(m["files"][0])), "twice"),
    (lambda m: m.pop("files"), "lacks a 'files' list"),
])
def test_a_malformed_manifest_is_damage_for_verify_and_bad_input_for_info(outputs, capsys, tmp_path, edit, problem):
    out = _copy(outputs["glt"], tmp_path / "glt")
    manifest = json.loads((out / "manifest.json").read_text())
    edit(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest))
    for command, code in (("verify", 1), ("info", 2)):
        rc, text, err = run(capsys, command, out)
        assert rc == code and text == "" and len(err.splitlines()) == 1, (command, err)
        assert err.startswith(f"error: {out / 'manifest.json'}: ") and problem in err, err


def test_graph_options_apply_to_partition_results_only(outputs, capsys):
    rc, _, err = run(capsys, "verify", outputs["pyg"], "--graph", CORA)
    assert rc == 2 and err == f"error: {outputs['pyg']}: is a `gpart convert` output: --graph, --node-data and --edge-data apply to partition results\n"


def test_a_typed_conversion(capsys, tmp_path):
    hetero = CORA.parent / "cora_hetero.npz"
    assert main(["partition", str(hetero), "-p", "2", "-o", str(tmp_path / "hparts"), "-q"]) == 0
    assert main(["convert", str(tmp_path / "hparts"), "--to", "pyg", "-o", str(tmp_path / "hpyg"), "-q"]) == 0
    rc, text, _ = run(capsys, "info", tmp_path / "hpyg", "--json")
    summary = json.loads(text)
    assert rc == 0 and summary["hetero"] is True and summary["node_data"]["paper"]["feat"] == "x"
    assert {"part_0", "part_1", "node_map", "edge_map"} <= {g["group"] for g in summary["groups"]}
    rc, text, _ = run(capsys, "info", tmp_path / "hpyg")
    assert rc == 0 and "paper/feat -> x" in text and "typed" in text
    assert run(capsys, "verify", tmp_path / "hpyg")[0] == 0
