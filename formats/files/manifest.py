"""JSON manifests: written last and atomically, read back and validated first.

Every gpart artifact is a directory whose `manifest.json` names the format,
its version and every data file (SPEC.md, "Manifests"). The manifest is the
commit record: it is written only after the data files are fsynced, through a
temporary name and an atomic rename, so a directory without one is never a
result.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from gpart.base.errors import GpartError, InputError, OutputError
from gpart.formats.files.names import stale_work, work_name

MANIFEST_NAME = "manifest.json"


def fsync_dir(directory: os.PathLike | str) -> None:
    """Make a rename or file creation in `directory` durable (no-op where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json_atomic(path: os.PathLike | str, obj: Any) -> None:
    """Write JSON to `path` via a hidden temporary sibling, fsync, rename, fsync the directory."""
    write_bytes_atomic(path, json.dumps(obj, indent=1, sort_keys=False).encode() + b"\n")


def write_bytes_atomic(path: os.PathLike | str, data: bytes) -> None:
    """Write a small file whole or not at all: a hidden temporary sibling, fsync, rename, fsync the directory."""
    path = Path(path)
    tmp = work_name(path, "tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise OutputError(path, f"cannot write: {exc.strerror or exc}") from None
    fsync_dir(path.parent)


def write_manifest(directory: os.PathLike | str, manifest: dict[str, Any]) -> Path:
    """Commit a result: write `directory/manifest.json` atomically. Call after all data is written."""
    path = Path(directory) / MANIFEST_NAME
    write_json_atomic(path, manifest)
    return path


def read_json(path: os.PathLike | str) -> Any:
    path = Path(path)
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except IsADirectoryError:
        raise InputError(path, "is a directory, expected a JSON file") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not valid JSON: {exc}") from None


def interrupted_swap_of(directory: os.PathLike | str) -> Optional[Path]:
    """The previous result of the absent `directory`, left under a hidden name by a swap killed midway."""
    directory = Path(directory).absolute()
    if os.path.lexists(directory) or not directory.parent.is_dir():
        return None
    olds = [w.path for w in stale_work(directory.parent, directory.name) if w.kind == "old"]
    olds = [p for p in olds if (p / MANIFEST_NAME).exists()]
    return max(olds, key=lambda p: p.stat().st_mtime) if olds else None


def manifest_path(directory: os.PathLike | str, missing: type[GpartError] = InputError) -> Path:
    """`directory/manifest.json`; a missing one raises `missing` (IntegrityError where absence is damage)."""
    directory = Path(directory)
    if not directory.exists():
        old = interrupted_swap_of(directory)
        if old is not None:
            raise InputError(directory, f"no such directory; a --force replacement was interrupted and the previous result is complete at {old} (the next gpart run writing {directory.name} puts it back)")
        raise InputError(directory, "no such directory")
    if not directory.is_dir():
        raise InputError(directory, "not a directory")
    path = directory / MANIFEST_NAME
    if not path.exists():
        raise missing(directory, f"no {MANIFEST_NAME}: not a gpart result, or an incomplete or damaged one")
    return path


def read_manifest(
    directory: os.PathLike | str,
    expected_format: Optional[str] = None,
    supported_versions: tuple[int, ...] = (1,),
) -> dict[str, Any]:
    """Read and check `directory/manifest.json`: a JSON object of a known format and version."""
    path = manifest_path(directory)
    return check_format(read_json(path), path, expected_format, supported_versions)


def check_format(
    obj: Any,
    where: os.PathLike | str,
    expected_format: Optional[str] = None,
    supported_versions: tuple[int, ...] = (1,),
    what: str = "manifest",
) -> dict[str, Any]:
    """The one format/version check of a JSON description (a manifest, an export's `<name>.json`):
    a JSON object whose `format` is `expected_format` and whose `version` is supported."""
    prefix = f"{what} " if what else ""
    if not isinstance(obj, dict):
        raise InputError(where, f"{prefix}is not a JSON object" if what else "not a JSON object")
    fmt = obj.get("format")
    if what and not isinstance(fmt, str):
        raise InputError(where, f"{what} has no 'format' string")
    if expected_format is not None and fmt != expected_format:
        raise InputError(where, f"format is {fmt!r}, expected {expected_format!r}")
    version = obj.get("version")
    if version not in supported_versions:
        raise InputError(where, f"{fmt} version {version!r} is not supported (supported: {list(supported_versions)})")
    return obj


def require(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: os.PathLike | str) -> Any:
    """obj[key], checked to be of `kind`; a one-line InputError naming `where` otherwise."""
    if key not in obj:
        raise InputError(where, f"manifest lacks {key!r}")
    value = obj[key]
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        raise InputError(where, f"manifest field {key!r} has the wrong type ({type(value).__name__})")
    return value
