"""Staged output directories: a result appears complete, under its name, or not at all.

Writers build their result in a hidden sibling directory
(`.<name>.gpart-staging-<pid>-<hex>`), write the manifest last, then swap it
into place. A failed or killed run leaves at most a hidden staging directory,
never a directory that looks complete under the result's name; an existing
result is replaced only with `force`, and only after the new one is complete.

The swap never leaves the name absent where the OS can exchange two names
atomically (Linux renameat2 RENAME_EXCHANGE): the new result and the old one
trade places in one step, and the old one is then removed under its hidden
name. Elsewhere the old result is first renamed to `.<name>.gpart-old-<pid>-<hex>`;
a kill between the two renames leaves it there, the next run writing to the
same name puts it back (sweep_stale_work), and `info`/`verify` name it.
Work entries of dead processes are removed by the next run in the same place
(SPEC.md section 9.2).
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from gpart.base.errors import GpartError, OutputError, uninterrupted
from gpart.base.work_paths import hold, release
from gpart.formats.files.manifest import fsync_dir
from gpart.formats.files.names import stale_work, work_name
from gpart.formats.files.ownership import has_manifest, is_gpart_output

# The words of both answers, the same for every command (SPEC.md 9.4)
REPLACE_WITH_FORCE = "already exists (a gpart result); use --force to replace it"
NOT_REPLACED = "is a non-empty directory that is not a gpart result; refusing to replace it (--force replaces only gpart results)"


def check_output_dir(out: os.PathLike | str, force: bool, inputs: Sequence[os.PathLike | str] = (),
                     is_result: Callable[[Path], bool] = is_gpart_output) -> Path:
    """Refuse an output that would overwrite the user's data; return it as an absolute Path.

    This is where every command decides whether it may replace a directory.
    A symlink to a directory stands for that directory (the result replaces
    the link's target; the link stays). Stale work of dead processes for this
    name is swept first, so an interrupted swap's old result is back in place
    before the checks below look at it. `is_result` tells what `force` may
    replace from user data (default: anything gpart wrote, of any kind,
    gpart.formats.files.ownership); the user's data is refused with or without `force`.
    """
    out = Path(out).absolute()
    if out.is_symlink() and out.is_dir():
        out = out.resolve()
    for inp in inputs:
        inp = Path(inp).absolute()
        if inp == out or out in inp.parents:
            raise OutputError(out, f"output directory would contain or replace the input {inp}")
    if out.parent.is_dir():
        sweep_stale_work(out.parent, out.name)
    if out.exists():
        if not out.is_dir():
            raise OutputError(out, "exists and is not a directory")
        entries = [p for p in out.iterdir()]
        if entries:
            if not is_result(out):
                raise OutputError(out, NOT_REPLACED)
            if not force:
                raise OutputError(out, REPLACE_WITH_FORCE)
    parent = out.parent
    if not parent.exists():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(parent, f"cannot create directory: {exc.strerror or exc}") from None
    if not os.access(parent, os.W_OK):
        raise OutputError(parent, "directory is not writable")
    return out


@contextmanager
def staged_output(out: os.PathLike | str, force: bool = False, inputs: Sequence[os.PathLike | str] = (),
                  is_result: Callable[[Path], bool] = is_gpart_output, is_complete: Callable[[Path], bool] = has_manifest) -> Iterator[Path]:
    """Yield a fresh staging directory; on success move it to `out`, on failure remove it.

    The caller writes every data file and then the manifest (formats.manifest.write_manifest)
    into the staging directory before leaving the block; `is_complete` says whether it did
    (default: a manifest), `is_result` which existing `out` force may replace (check_output_dir).
    """
    out = check_output_dir(out, force, inputs, is_result)
    stage = work_name(out, "staging")
    with uninterrupted():  # a signal before the caller takes charge: the command line removes it (work_paths)
        try:
            stage.mkdir()
        except OSError as exc:
            raise OutputError(out.parent, f"cannot create directory: {exc.strerror or exc}") from None
        hold(stage)
    try:
        yield stage
        if not is_complete(stage):
            raise RuntimeError(f"writer for {out} finished without writing its manifest")
        with uninterrupted():
            _swap_into_place(stage, out)
    except GpartError as exc:
        shutil.rmtree(stage, ignore_errors=True)
        if exc.path is not None and Path(exc.path).is_relative_to(stage):
            # name the file as the user knows it (OUT/...), not by the hidden staging name
            exc.path = os.fspath(out / Path(exc.path).relative_to(stage))
        raise
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    finally:
        release(stage)


def _swap_into_place(stage: Path, out: Path) -> None:
    """Move the complete `stage` to `out`, replacing a previous result there."""
    try:
        if out.exists() and not any(out.iterdir()):
            out.rmdir()
        if not out.exists():
            os.rename(stage, out)
            old = None
        elif exchange_names(stage, out):
            old = stage  # now holds the previous result; a kill before its removal leaves stale work
        else:
            old = work_name(out, "old")
            os.rename(out, old)
            try:
                os.rename(stage, out)
            except OSError:
                os.rename(old, out)
                raise
    except OSError as exc:
        raise OutputError(out, f"cannot move result into place: {exc.strerror or exc}") from None
    fsync_dir(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# --------------------------------------------------------------------------- rename exchange

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_renameat2: object = None


def _load_renameat2():
    global _renameat2
    if _renameat2 is None:
        try:
            fn = ctypes.CDLL(None, use_errno=True).renameat2
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            fn.restype = ctypes.c_int
            _renameat2 = fn
        except (AttributeError, OSError):
            _renameat2 = False
    return _renameat2


def exchange_names(a: os.PathLike | str, b: os.PathLike | str) -> bool:
    """Atomically swap the names `a` and `b` (both exist); False where the OS or the file
    system cannot, so the caller falls back to two renames. Other failures raise OSError."""
    fn = _load_renameat2()
    if not fn:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), os.fspath(a))


# --------------------------------------------------------------------------- leftovers


def sweep_stale_work(directory: os.PathLike | str, target_name: Optional[str] = None) -> list[Path]:
    """Clean up after dead processes in `directory` (for `target_name` only, if given).

    An old result whose name is absent (a swap killed between its renames) is
    renamed back; every other stale staging, old or temporary entry is removed.
    Export commit records (`next`) and their temporaries are left to
    gpart.formats.filelist.layout, which rolls them forward. Returns what was restored or removed.
    """
    stale = stale_work(directory, target_name)
    records = {w.pid for w in stale if w.kind == "next"}
    done = []
    for work in sorted(stale, key=lambda w: w.kind != "old"):  # restore old results first
        if work.kind == "next" or (work.kind == "tmp" and work.pid in records):
            continue
        if work.kind == "old" and not os.path.lexists(work.target):
            try:
                os.rename(work.path, work.target)
                done.append(work.target)
                continue
            except OSError:
                pass
        if remove_path(work.path):
            done.append(work.path)
    if done:
        fsync_dir(directory)
    return done


def remove_path(path: Path) -> bool:
    """Remove a file, link or directory tree; False if it was not there or could not be removed."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        return True
    except OSError:
        return False
