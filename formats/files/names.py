"""The one alphabet for every name that becomes part of a path (SPEC.md section 9.1).

Array keys of an input `.npz`, `--name`, `--node-data NAME=`, embedding and
state names, export prefixes, and every file or dataset name read back from
a manifest pass through `safe_name` (one component) or `safe_relpath` (a
relative path of such components) before any file is opened or created. A
name outside the alphabet is a one-line InputError naming the file it came
from, raised before anything is written, so no name can climb out of the
output directory (`../`), start at the root, hide itself (leading `.`), pose
as an option (leading `-`) or carry control characters.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from gpart.base.errors import InputError

# Letters, digits, '_', '.', '-'; not starting with '.' or '-'; at most 200 bytes
# (file systems allow 255 and writers append suffixes such as `_part_12_of_64.tmp`).
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,199}$")
NAME_RULE = "use letters, digits, '_', '.', '-' (not starting with '.' or '-'; at most 200 characters)"


def is_safe_name(name: Any) -> bool:
    return isinstance(name, str) and NAME_RE.match(name) is not None


def safe_name(name: Any, what: str = "name", where: Optional[os.PathLike | str] = None) -> str:
    """`name` if it is one path component of the allowed alphabet; a one-line InputError otherwise."""
    if not is_safe_name(name):
        raise InputError(where, f"{what} {name!r} is not allowed: {NAME_RULE}")
    return name


def safe_relpath(path: Any, what: str = "file name", where: Optional[os.PathLike | str] = None) -> str:
    """`path` if it is a relative '/'-separated path whose every component is a safe name."""
    if not isinstance(path, str) or not path or not all(is_safe_name(part) for part in path.split("/")):
        raise InputError(where, f"{what} {path!r} is not allowed: each '/'-separated part must {NAME_RULE}")
    return path


# --------------------------------------------------------------------------- hidden work names

# Writers work under hidden siblings of their target, `.<target>.gpart-<kind>-<pid>-<hex>`:
#   staging  a result being built (a directory)         old   a replaced result being removed
#   tmp      a file being written                        next  an export's commit record (filelist)
# The pid lets a later run tell the leftovers of a dead process from the work of a live one. A staging name may
# carry `-scratch-<id>`: a scratch directory beside it (SPEC.md 4.6), a killed run's leftover swept the same way.
WORK_KINDS = ("staging", "old", "tmp", "next")
_WORK_RE = re.compile(r"^\.(?P<target>.+)\.gpart-(?P<kind>staging|old|tmp|next)-(?P<pid>[0-9]+)-(?P<token>[0-9a-f]{8})"
                      r"(?:-scratch-[A-Za-z0-9_-]+)?$")


@dataclass(frozen=True)
class WorkName:
    """A parsed hidden work name: where it lies, what it is for and which process made it."""

    path: Path
    target: Path
    kind: str
    pid: int
    token: str


def work_name(target: os.PathLike | str, kind: str, token: Optional[str] = None) -> Path:
    """The hidden sibling of `target` this process uses as `kind` (a fresh token unless given)."""
    if kind not in WORK_KINDS:
        raise ValueError(f"unknown work kind {kind!r}")
    target = Path(target)
    return target.parent / f".{target.name}.gpart-{kind}-{os.getpid()}-{token or uuid.uuid4().hex[:8]}"


def parse_work_name(path: os.PathLike | str) -> Optional[WorkName]:
    path = Path(path)
    m = _WORK_RE.match(path.name)
    if m is None:
        return None
    return WorkName(path, path.parent / m["target"], m["kind"], int(m["pid"]), m["token"])


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host (a process we may not signal exists too)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return True
    return True


def stale_work(directory: os.PathLike | str, target_name: Optional[str] = None) -> list[WorkName]:
    """Hidden work entries in `directory` (of `target_name` only, if given) left by dead processes."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = []
    for name in names:
        work = parse_work_name(Path(directory) / name)
        if work is None or (target_name is not None and work.target.name != target_name):
            continue
        if not process_alive(work.pid):
            found.append(work)
    return found
