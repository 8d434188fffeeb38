"""`gpart info` and `gpart verify` of an export-feat directory (SPEC.md 5): the gpart.filelist exports in
it and its export-set folders, found by their `<name>.json` files (such a directory has no manifest.json),
and the commit records of interrupted exports."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpart.base.errors import GpartError, IntegrityError
from gpart.formats.filelist.commit_record import interrupted_exports
from gpart.formats.filelist.layout import FORMAT as FILELIST_FORMAT
from gpart.formats.filelist.reader import find_exports, open_filelist
from gpart.formats.files.names import parse_work_name
from gpart.inspection.kind import InspectedKind, PathLike, VerifyRequest
from gpart.inspection.view import Block, Column, Size, Table


class ExportsKind(InspectedKind):
    """A directory of export-feat exports."""

    formats = (FILELIST_FORMAT,)

    def recognises_unlisted(self, directory: Path) -> bool:
        return any(_export_files(directory))

    def info(self, directory: PathLike) -> dict[str, Any]:
        jsons, records = _export_files(directory)
        problems, _ = _interrupted_lines(records)
        if problems:
            raise IntegrityError(None, problems[0])
        exports = []
        for path in jsons:
            fl = open_filelist(path)
            exports.append({"name": fl.name, "dtype": fl.dtype, "shape": list(fl.shape), "files": len(fl.entries),
                            "bytes": sum(e.nbytes for e in fl.entries), "json": os.fspath(path)})
        return {"format": FILELIST_FORMAT, "directory": os.fspath(directory), "exports": exports}

    def info_view(self, summary: dict[str, Any]) -> list[Block]:
        columns = [Column(c, "right" if c in ("files", "size") else "left") for c in ("export", "dtype", "shape", "files", "size")]
        rows = [[e["name"], e["dtype"], "x".join(map(str, e["shape"])), str(e["files"]), Size(e["bytes"])] for e in summary["exports"]]
        return [Table(columns, rows, title=f"{summary['directory']}: {len(summary['exports'])} exports")]

    def verify(self, directory: PathLike, request: VerifyRequest) -> dict[str, Any]:
        request.refuse_input(directory, "holds export-feat exports")
        return verify_exports(directory)


def _export_files(directory: PathLike) -> tuple[list[Path], list[Path]]:
    """(`<name>.json` files of gpart.filelist exports, in `directory` and its export-set folders;
    commit records of interrupted ones) in `directory`; two empty lists when it holds neither (then
    it is not an export directory)."""
    jsons = find_exports(directory)
    records = interrupted_exports(directory)
    return (jsons, records) if jsons or records else ([], [])


def _interrupted_lines(records: list[Path]) -> tuple[list[str], list[str]]:
    """(problems, notes) for commit records of killed exports. Until its parts start moving, a
    record sits beside the old `<name>.json`, which is still intact (a note); once they move,
    the JSON is gone and only the record describes the export (a problem until completed)."""
    problems, notes = [], []
    for record in records:
        target = parse_work_name(record).target
        line = f"{record}: an export-feat commit of {target.name} was interrupted; the next export-feat writing to {record.parent} completes it"
        (notes if target.exists() else problems).append(line)
    return problems, notes


def verify_exports(directory: PathLike) -> dict[str, Any]:
    """Every export JSON in `directory` validated and every part file's size and CRC-32 checked."""
    jsons, records = _export_files(directory)
    problems, notes = _interrupted_lines(records)
    files = 0
    for path in jsons:
        try:
            fl = open_filelist(path)
        except GpartError as exc:
            problems.append(exc.one_line())
            continue
        files += len(fl.entries)
        problems += fl.verify()
    return {
        "path": os.fspath(directory),
        "directory": os.fspath(directory),
        "format": FILELIST_FORMAT,
        "ok": not problems,
        "problems": problems,
        "notes": notes,
        "checked": {"checksums": True, "invariants": False, "arrays": files},
    }
