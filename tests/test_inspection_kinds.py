"""A kind of directory for `gpart info` / `gpart verify` is one InspectedKind plus one registration:
a kind defined and registered here is recognised, summarised, drawn and checked through the CLI,
as the built-in kinds are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpart.ckpt.foreign_export import EXPORT_FORMAT
from gpart.cli.main import cli
from gpart.convert import CONVERT_FORMAT
from gpart.formats.checkpoint.entries import FORMAT as CHECKPOINT_FORMAT
from gpart.formats.filelist.layout import FORMAT as FILELIST_FORMAT
from gpart.formats.partition.writer import FORMAT as PARTITION_FORMAT
from gpart.inspection import registry
from gpart.inspection.kind import InspectedKind, PathLike, VerifyRequest
from gpart.inspection.view import Block, Column, Line, Size, Table

NOTES_FORMAT = "example.notes"


class NotesKind(InspectedKind):
    """A directory of text notes whose manifest lists each note's size; without a manifest, any `*.note` files."""

    formats = (NOTES_FORMAT,)

    def recognises_unlisted(self, directory: Path) -> bool:
        return any(directory.glob("*.note"))

    def _listed(self, directory: PathLike) -> dict[str, int]:
        manifest = Path(directory) / "manifest.json"
        if manifest.exists():
            return json.loads(manifest.read_text())["notes"]
        return {p.name: p.stat().st_size for p in sorted(Path(directory).glob("*.note"))}

    def info(self, directory: PathLike) -> dict[str, Any]:
        notes = [{"name": name, "bytes": size} for name, size in self._listed(directory).items()]
        return {"format": NOTES_FORMAT, "directory": str(directory), "notes": notes}

    def info_view(self, summary: dict[str, Any]) -> list[Block]:
        rows = [[n["name"], Size(n["bytes"])] for n in summary["notes"]]
        total = sum(n["bytes"] for n in summary["notes"])
        return [Table([Column("note"), Column("size", "right")], rows, title=f"{len(rows)} notes"),
                Line(("all notes: ", Size(total)), unbroken=True)]

    def verify(self, directory: PathLike, request: VerifyRequest) -> dict[str, Any]:
        request.refuse_input(directory, "holds notes")
        listed = self._listed(directory)
        problems = []
        for name, size in listed.items():
            path = Path(directory) / name
            if not path.exists():
                problems.append(f"{path}: missing")
            elif path.stat().st_size != size:
                problems.append(f"{path}: {path.stat().st_size} bytes, the manifest says {size}")
        return {"path": str(directory), "directory": str(directory), "format": NOTES_FORMAT, "ok": not problems,
                "problems": problems, "notes": [], "checked": {"checksums": True, "invariants": False, "files": len(listed)}}


@pytest.fixture
def notes_kind(monkeypatch) -> NotesKind:
    """NotesKind registered after the built-in kinds, for this test only."""
    monkeypatch.setattr(registry, "KINDS", list(registry.KINDS))
    kind = NotesKind()
    registry.register(kind)
    return kind


@pytest.fixture
def notes(tmp_path) -> Path:
    directory = tmp_path / "notes"
    directory.mkdir()
    (directory / "a.note").write_text("x" * 1536)
    (directory / "b.note").write_text("hello")
    (directory / "manifest.json").write_text(json.dumps({"format": NOTES_FORMAT, "version": 1, "notes": {"a.note": 1536, "b.note": 5}}))
    return directory


def test_info_draws_what_the_registered_kind_describes(notes_kind, notes):
    res = CliRunner().invoke(cli, ["info", str(notes)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].strip() == "2 notes"
    assert any("a.note" in line and "1.5 KiB" in line for line in lines)  # sizes in the CLI's human units
    assert any("b.note" in line and "5 B" in line for line in lines)
    assert lines[-1] == "all notes: 1.5 KiB"

    res = CliRunner().invoke(cli, ["info", str(notes), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == notes_kind.info(notes)


def test_verify_reports_the_kinds_checks_with_the_usual_exit_codes(notes_kind, notes):
    res = CliRunner().invoke(cli, ["verify", str(notes)])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"OK {notes}: checksums (2 files)"

    res = CliRunner().invoke(cli, ["verify", str(notes), "--graph", "g.npz"])
    assert res.exit_code == 2
    assert res.stderr.strip() == f"error: {notes}: holds notes: --graph, --node-data and --edge-data apply to partition results"

    (notes / "b.note").write_text("hello, world")
    res = CliRunner().invoke(cli, ["verify", str(notes), "--json"])
    assert res.exit_code == 1
    report = json.loads(res.stdout)
    assert not report["ok"] and report["problems"] == [f"{notes / 'b.note'}: 12 bytes, the manifest says 5"]
    assert res.stderr.strip() == f"error: {notes}: damaged: 1 problem found"
    res = CliRunner().invoke(cli, ["verify", str(notes)])
    assert res.exit_code == 1
    assert f"damaged {notes / 'b.note'}: 12 bytes" in res.output and f"FAILED {notes}: 1 problems" in res.output


def test_a_directory_without_manifest_is_recognised_by_its_files(notes_kind, notes):
    (notes / "manifest.json").unlink()
    res = CliRunner().invoke(cli, ["info", str(notes), "--json"])
    assert res.exit_code == 0, res.output
    assert [n["name"] for n in json.loads(res.stdout)["notes"]] == ["a.note", "b.note"]
    assert CliRunner().invoke(cli, ["verify", str(notes)]).exit_code == 0


def test_unregistered_format_is_refused_naming_the_known_ones(notes, monkeypatch):
    known = ", ".join([PARTITION_FORMAT, CHECKPOINT_FORMAT, FILELIST_FORMAT, CONVERT_FORMAT, EXPORT_FORMAT])
    assert ", ".join(registry.known_formats()) == known
    res = CliRunner().invoke(cli, ["info", str(notes)])
    assert res.exit_code == 2
    assert res.stderr.strip() == (f"error: {notes / 'manifest.json'}: format {NOTES_FORMAT!r} is none that gpart info and verify read ({known})")
    monkeypatch.setattr(registry, "KINDS", list(registry.KINDS))
    registry.register(NotesKind())
    assert registry.known_formats()[-1] == NOTES_FORMAT
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(NotesKind())
