"""The `files` list of the manifests written beside another system's files (SPEC.md 6.7 and 7.1).

`gpart convert` (`format: "gpart.convert"`) and `gpart export-ckpt`
(`format: "gpart.ckpt-export"`) write files in PyG's, GLT's, DGL's,
WholeGraph's or DistDGL's layout, which gpart never parses, plus a
`manifest.json` that lists each of them as `{file, bytes, crc32}` (with
`rank` for export-ckpt). This module reads that list back and checks a file
against its entry, for `gpart info` and `gpart verify`; the writers' side is
gpart.formats.foreign.torch_files.file_entry and the checkpoint shard entries.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from gpart.base.errors import GpartError, InputError, short_repr
from gpart.bytes.crc import file_crc32
from gpart.formats.files.arrays import inside
from gpart.formats.files.manifest import MANIFEST_NAME
from gpart.formats.files.names import safe_relpath

CRC_DIGITS = 8


@dataclass(frozen=True)
class ListedFile:
    """One entry of a manifest's `files` list: a path relative to the result, its size and CRC-32."""

    file: str
    nbytes: int
    crc32: int
    rank: Optional[int] = None  # export-ckpt: the rank that loads the file


def _count(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _listed_file(obj: Any, index: int, where: Path) -> ListedFile:
    if not isinstance(obj, dict):
        raise InputError(where, f"files[{index}] is not an object: {short_repr(obj)}")
    name = safe_relpath(obj.get("file"), f"files[{index}].file", where)
    nbytes, crc = _count(obj.get("bytes")), obj.get("crc32")
    if nbytes is None:
        raise InputError(where, f"files[{index}] ({name}): 'bytes' is not a non-negative integer: {short_repr(obj.get('bytes'))}")
    if not (isinstance(crc, str) and len(crc) == CRC_DIGITS and all(c in "0123456789abcdef" for c in crc)):
        raise InputError(where, f"files[{index}] ({name}): 'crc32' is not {CRC_DIGITS} lowercase hex digits: {short_repr(crc)}")
    rank = obj.get("rank")
    if rank is not None and _count(rank) is None:
        raise InputError(where, f"files[{index}] ({name}): 'rank' is not a non-negative integer: {short_repr(rank)}")
    return ListedFile(name, nbytes, int(crc, 16), rank)


def read_listed_files(manifest: dict[str, Any], where: os.PathLike | str) -> list[ListedFile]:
    """The manifest's `files`, each entry checked (a safe relative path, bytes, 8-hex-digit crc32, optional
    rank) and listed once; a one-line InputError naming `where` (the manifest) otherwise."""
    where = Path(where)
    files = manifest.get("files")
    if not isinstance(files, list):
        raise InputError(where, "manifest lacks a 'files' list")
    entries = [_listed_file(obj, i, where) for i, obj in enumerate(files)]
    seen: set[str] = set()
    for e in entries:
        if e.file in seen or e.file == MANIFEST_NAME:
            raise InputError(where, f"files lists {e.file} twice" if e.file in seen else f"files lists {MANIFEST_NAME} itself")
        seen.add(e.file)
    return entries


def check_listed_file(directory: os.PathLike | str, entry: ListedFile, checksum: bool = True) -> Optional[str]:
    """None when `directory/entry.file` is present, inside `directory`, of the listed size and (with
    `checksum`) CRC-32; otherwise the one-line problem, naming the file."""
    try:
        path = inside(directory, entry.file)
        size = path.stat().st_size
    except GpartError as exc:  # a symbolic link leading out of the result
        return exc.one_line()
    except FileNotFoundError:
        return f"{Path(directory) / entry.file}: file listed in {MANIFEST_NAME} is missing"
    except OSError as exc:
        return f"{Path(directory) / entry.file}: cannot read: {exc.strerror or exc}"
    if not path.is_file():
        return f"{path}: is not a regular file"
    if size != entry.nbytes:
        return f"{path}: size {size} bytes, {MANIFEST_NAME} says {entry.nbytes}"
    if checksum:
        try:
            actual = file_crc32(path)
        except GpartError as exc:  # unreadable
            return exc.one_line()
        if actual != entry.crc32:
            return f"{path}: checksum mismatch: crc32 {actual:08x}, {MANIFEST_NAME} says {entry.crc32:08x}"
    return None
