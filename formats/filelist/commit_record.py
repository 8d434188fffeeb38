"""Commit records of file-list exports in the flat layout (gpart before issue 26 wrote every
export's parts and JSON straight into OUT): the commit point of such an export, rolled
forward by the next writer in the directory when a run was killed after it
(`recover_exports`). New exports are committed by their set's swap (filelist_sets)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpart.base.errors import GpartError, IntegrityError, OutputError, short_repr
from gpart.formats.filelist.layout import json_file_name, validate_manifest
from gpart.formats.files.commit import remove_path
from gpart.formats.files.manifest import fsync_dir, read_json, write_json_atomic
from gpart.formats.files.names import parse_work_name, safe_name, stale_work

COMMIT_RECORD_FORMAT = "gpart.filelist-commit"


def roll_forward(record_path: Path, record: dict[str, Any]) -> None:
    """Carry out a commit record: old JSON out, parts in, new JSON, stale parts removed, record removed.
    Every step can be repeated, so a run killed anywhere in here is finished by the next one."""
    directory = record_path.parent
    manifest = record["export"]
    json_path = directory / json_file_name(manifest["name"])
    try:
        if os.path.lexists(json_path):
            json_path.unlink()
        for temp, final in record["moves"]:
            if (directory / temp).exists():
                os.replace(directory / temp, directory / final)
        fsync_dir(directory)
    except OSError as exc:
        raise OutputError(json_path, f"cannot move parts into place: {exc.strerror or exc}") from None
    write_json_atomic(json_path, manifest)
    for name in record["remove"]:
        remove_path(directory / name)
    remove_path(record_path)
    fsync_dir(directory)


def read_commit_record(path: Path) -> dict[str, Any]:
    """A commit record, checked: every name in it is a plain safe name."""
    obj = read_json(path)
    try:
        if obj.get("format") != COMMIT_RECORD_FORMAT:
            raise ValueError("not a commit record")
        validate_manifest(obj["export"], path)
        if any(len(move) != 2 for move in obj["moves"]):
            raise ValueError("moves must be pairs")
        temps = [temp for temp, _ in obj["moves"]]
        finals = [final for _, final in obj["moves"]] + list(obj["remove"])
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as exc:
        raise IntegrityError(path, f"damaged commit record: {exc}") from None
    for name in finals:
        safe_name(name, "file in commit record", path)
    for temp in temps:  # hidden work names of this directory, nothing else
        work = parse_work_name(path.parent / temp) if isinstance(temp, str) and "/" not in temp else None
        if work is None or work.kind != "tmp":
            raise IntegrityError(path, f"damaged commit record: {short_repr(temp)} is not a temporary part name")
    return obj


def recover_exports(directory: os.PathLike | str) -> list[str]:
    """Finish the export commits that killed runs left in `directory`; return the export names."""
    done = []
    for work in stale_work(directory):
        if work.kind != "next":
            continue
        record = read_commit_record(work.path)
        roll_forward(work.path, record)
        done.append(record["export"]["name"])
    return done


def interrupted_exports(directory: os.PathLike | str) -> list[Path]:
    """Commit records of exports whose run was killed before finishing (the next export-feat completes them)."""
    return [w.path for w in stale_work(directory) if w.kind == "next"]


def files_of_old_export(json_path: Path) -> list[Path]:
    """Part files an existing export names (best effort: a damaged JSON names none)."""
    try:
        obj = read_json(json_path)
        return [json_path.parent / Path(str(f["file"])).name for f in obj.get("files", [])]
    except (GpartError, TypeError, KeyError, AttributeError):
        return []
