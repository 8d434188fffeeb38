"""Work directories (staging, scratch) that must not outlive an interrupted command.

A writer makes its directory and then hands its removal to a `with` block or
an ExitStack. A termination signal can land between the two: the directory
exists and no cleanup is registered for it. The generator or object that
made it then waits for garbage collection, which the exception chains of an
interrupted run can postpone past exit. So each such directory is recorded
here as it is made (both inside one gpart.base.errors.uninterrupted()
section) and released when its owner removes or commits it; the command
line removes what is left after an interruption (`remove_abandoned`).
"""

from __future__ import annotations

import shutil
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Collection, Iterator

_held: dict[Path, int] = {}  # directory -> the thread that made it


def hold(path: Path) -> None:
    """Record `path`, just made by the calling thread; make it and call this inside one
    `gpart.base.errors.uninterrupted()` section, so a signal never lands between the two."""
    _held[path] = threading.get_ident()


def release(path: Path) -> None:
    """`path` was removed or committed by its owner: no longer ours to clean up."""
    _held.pop(path, None)


def remove_abandoned(keep: Collection[Path] = ()) -> list[Path]:
    """Remove the calling thread's recorded directories but `keep` (after an interruption: no owner will);
    return them."""
    me = threading.get_ident()
    mine = [path for path, owner in list(_held.items()) if owner == me and path not in keep]
    for path in mine:
        shutil.rmtree(path, ignore_errors=True)
        release(path)
    return mine


@contextmanager
def abandoned_removed() -> Iterator[None]:
    """Around one command: what the calling thread records meanwhile and its owner never released is
    removed at the end; directories recorded before (a caller's own) are left alone."""
    before = set(_held)
    try:
        yield
    finally:
        remove_abandoned(keep=before)
