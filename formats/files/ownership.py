"""Which directories gpart wrote: the ones `--force` may replace (SPEC.md 9.4).

Every command that writes a directory asks `check_output_dir`
(gpart.formats.files.commit), and it asks `is_gpart_output` here: a
directory gpart wrote, of any kind, is replaced with `--force` and refused
without it; anything else that is not empty is the user's and is refused
either way. Two shapes are gpart's:

- a result: the directory holds `manifest.json` (partitions, chunks,
  checkpoints, gathered checkpoints, `convert` and `export-ckpt` outputs);
- export-feat's output (SPEC.md 5.5): no manifest, and every visible entry is
  an export set's folder or a file of a flat-layout export, with at least one
  export's `<name>.json`. A file of the user's among them makes the directory
  the user's.

A JSON is gpart's when its `format` starts with `gpart.` (every format gpart
writes is named so).
"""

from __future__ import annotations

import re
from pathlib import Path

from gpart.base.errors import GpartError
from gpart.formats.files.manifest import MANIFEST_NAME, read_json

GPART_FORMAT_PREFIX = "gpart."
PART_FILE_RE = re.compile(r".+_part_[0-9]+_of_[0-9]+")


def has_manifest(directory: Path) -> bool:
    """Whether `directory` holds a result's manifest: what makes a directory a gpart result."""
    return (directory / MANIFEST_NAME).exists()


def is_gpart_json(path: Path) -> bool:
    """Whether `path` is a JSON object that names a gpart format."""
    try:
        obj = read_json(path)
    except GpartError:
        return False
    return isinstance(obj, dict) and isinstance(obj.get("format"), str) and obj["format"].startswith(GPART_FORMAT_PREFIX)


def _visible(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if not p.name.startswith(".")]  # hidden: gpart's own work entries


def _is_export_file(path: Path) -> bool:
    """A file of a flat-layout export: its `<name>.json`, or one of its parts."""
    if path.is_symlink() or not path.is_file():
        return False
    return is_gpart_json(path) if path.suffix == ".json" else PART_FILE_RE.fullmatch(path.name) is not None


def _holds_only_exports(directory: Path) -> bool:
    """Every visible entry of `directory` is an export's file, and one of them is an export's JSON."""
    entries = _visible(directory)
    return all(_is_export_file(p) for p in entries) and any(p.suffix == ".json" for p in entries)


def is_export_output(directory: Path) -> bool:
    """Whether `directory` is export-feat's output: export set folders and flat-layout exports only."""
    entries = _visible(directory)
    if not entries:
        return False
    folders = [p for p in entries if p.is_dir() and not p.is_symlink()]
    files = [p for p in entries if p not in folders]
    return all(_holds_only_exports(f) for f in folders) and all(_is_export_file(p) for p in files) \
        and (bool(folders) or any(p.suffix == ".json" for p in files))


def is_gpart_output(directory: Path) -> bool:
    """Whether gpart wrote `directory` (a result with a manifest, or export-feat's output): what --force may replace."""
    return has_manifest(directory) or is_export_output(directory)
