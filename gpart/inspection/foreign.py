"""`gpart info` and `gpart verify` of what gpart writes for other systems: `gpart convert` outputs
(PyG, GLT, DGL partition layouts, SPEC.md 7) and `gpart export-ckpt` outputs (WholeGraph, DistDGL
checkpoint files, SPEC.md 6.7).

gpart never parses those files (pickles and torch.save archives among them); their
`manifest.json` lists each one with its size and CRC-32 (gpart.formats.foreign.listed_files), and
that list is what info summarises and verify checks.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Union

from gpart.base.errors import InputError, IntegrityError
from gpart.ckpt.foreign_export import EXPORT_FORMAT
from gpart.convert import CONVERT_FORMAT
from gpart.formats.files.manifest import MANIFEST_NAME, check_format, manifest_path, read_json
from gpart.formats.files.names import parse_work_name
from gpart.formats.foreign.listed_files import ListedFile, check_listed_file, read_listed_files

PathLike = Union[str, "os.PathLike[str]"]

# format -> the command that writes it
FOREIGN_FORMATS = {CONVERT_FORMAT: "convert", EXPORT_FORMAT: "export-ckpt"}
# manifest fields info passes on as they are, when of the right type (descriptive: nothing is read through them)
_FIELDS = {
    CONVERT_FORMAT: {"num_parts": int, "num_nodes": int, "num_edges": int, "node_data": dict, "edge_data": dict,
                     "labels": (dict, type(None)), "not_converted": list, "hetero": bool},
    EXPORT_FORMAT: {"world_size": int, "prefix": str, "optimizer": dict, "embeddings": list},
}


def _read(directory: PathLike, invalid_is_damage: bool) -> tuple[dict[str, Any], list[ListedFile]]:
    """(manifest, its files) of a convert or export-ckpt output; a manifest that does not describe one
    is an IntegrityError with `invalid_is_damage` (verify), an InputError otherwise (info)."""
    path = manifest_path(directory)
    try:
        manifest = check_format(read_json(path), path)
        if manifest["format"] not in FOREIGN_FORMATS:
            raise InputError(path, f"format {manifest['format']!r} is not a convert or export-ckpt output")
        if not isinstance(manifest.get("target"), str):
            raise InputError(path, "manifest has no 'target' string")
        return manifest, read_listed_files(manifest, path)
    except InputError as exc:
        if invalid_is_damage:
            raise IntegrityError(exc.path, f"manifest is invalid: {exc.problem}") from None
        raise


def _group(entry: ListedFile) -> str:
    """What a file belongs to: its rank (export-ckpt), else its top folder (convert: `part_<p>`, `part<p>`), else 'shared'."""
    if entry.rank is not None:
        return f"rank {entry.rank}"
    return entry.file.split("/", 1)[0] if "/" in entry.file else "shared"


def foreign_info(directory: PathLike) -> dict[str, Any]:
    """What a convert / export-ckpt output is (format, target, source, the manifest's figures) and its files:
    count and bytes in all and per group (rank of export-ckpt, partition folder of convert)."""
    manifest, files = _read(directory, invalid_is_damage=False)
    _check_listed_sizes(Path(directory), files)
    fmt = manifest["format"]
    groups: dict[str, list[int]] = {}
    for entry in files:
        count_bytes = groups.setdefault(_group(entry), [0, 0])
        count_bytes[0] += 1
        count_bytes[1] += entry.nbytes
    fields = {k: manifest[k] for k, kind in _FIELDS[fmt].items() if isinstance(manifest.get(k), kind)
              and not (kind is int and isinstance(manifest[k], bool))}
    return {
        "format": fmt,
        "version": manifest["version"],
        "directory": os.fspath(directory),
        "command": FOREIGN_FORMATS[fmt],
        "target": manifest["target"],
        "source": manifest["source"] if isinstance(manifest.get("source"), str) else None,
        "created_by": manifest["created_by"] if isinstance(manifest.get("created_by"), str) else None,
        "num_files": len(files),
        "bytes": sum(e.nbytes for e in files),
        "groups": [{"group": g, "files": n, "bytes": b} for g, (n, b) in groups.items()],
        **fields,
    }


def _check_listed_sizes(directory: Path, files: list[ListedFile]) -> None:
    """IntegrityError (one line, the first file) unless every listed file is present with its listed size:
    what info can check without reading the files (verify also checks their CRC-32)."""
    problems = [line for line in (check_listed_file(directory, e, checksum=False) for e in files) if line is not None]
    if problems:
        more = f" ({len(problems) - 1} more files differ from {MANIFEST_NAME})" if len(problems) > 1 else ""
        raise IntegrityError(None, problems[0] + more)


def _unlisted(directory: Path, listed: set[str]) -> list[str]:
    """Files under `directory` that the manifest does not list (besides itself); gpart's own hidden work
    names (a writer's leftovers, SPEC.md 9.2) are not counted."""
    found = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if parse_work_name(d) is None)
        for name in sorted(names):
            rel = (Path(root) / name).relative_to(directory).as_posix()
            if rel != MANIFEST_NAME and rel not in listed and parse_work_name(name) is None:
                found.append(rel)
    return found


def verify_foreign(directory: PathLike) -> dict[str, Any]:
    """Every file the manifest of a convert / export-ckpt output lists: present, its size, its CRC-32.
    Problems one line each, naming the file; files the manifest does not list are notes."""
    manifest, files = _read(directory, invalid_is_damage=True)
    directory = Path(directory)
    problems = [line for line in (check_listed_file(directory, e) for e in files) if line is not None]
    extra = _unlisted(directory, {e.file for e in files})
    shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
    notes = [f"{directory}: {len(extra)} file{'s' if len(extra) != 1 else ''} not listed in {MANIFEST_NAME}, not checked: {shown}"] if extra else []
    ranks = [e.rank for e in files if e.rank is not None]
    world = manifest.get("world_size")
    if ranks and isinstance(world, int) and max(ranks) >= world:
        problems.append(f"{directory / MANIFEST_NAME}: lists files of rank {max(ranks)}, but world_size is {world}")
    return {
        "path": os.fspath(directory),
        "directory": os.fspath(directory),
        "format": manifest["format"],
        "target": manifest["target"],
        "ok": not problems,
        "problems": problems,
        "notes": notes,
        "checked": {"checksums": True, "invariants": False, "arrays": len(files), "files": len(files)},
    }
