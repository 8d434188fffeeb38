"""Scratch files: preallocated, memory-mapped work arrays on disk, removed on every exit path.

A mapped file that cannot grow because the disk is full kills the process
with SIGBUS when a page is first written; so every scratch file is
preallocated with posix_fallocate before it is mapped, and a full disk
becomes an `OutputError` naming the file. The directory (and everything in
it) is removed when the `ScratchDir` block ends, whether by success, error
or KeyboardInterrupt. SPEC.md section 4.6
describes what the partition pipeline keeps here.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Optional, Union

import numpy as np

from gpart.base.errors import OutputError, uninterrupted
from gpart.base.work_paths import hold, release
from gpart.bytes.reader import drop_pages
from gpart.bytes.sink import map_new_file, preallocate, pwrite_all
from gpart.bytes.written_pages import drop_written

PathLike = Union[str, "os.PathLike[str]"]
CONCAT_BLOCK_BYTES = 16 << 20  # bytes per write of ScratchDir.concatenated: bounds its temporaries


def checked_parent(parent: PathLike) -> Path:
    """`parent` as a directory scratch directories can be made in (e.g. --scratch-dir), checked before any work:
    OutputError, one line, where it is missing, not a directory or not writable."""
    path = Path(parent)
    if not path.is_dir():
        raise OutputError(path, "scratch directory does not exist" if not path.exists() else "scratch path is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise OutputError(path, "scratch directory is not writable")
    return path


def check_free_disk(parent: Optional[PathLike], need: int, what: str) -> None:
    """Stop before any work where the disk of `parent` (None: the temporary directory) has less than `need` bytes
    free for `what`: OutputError, one line, naming the directory, the bytes and --scratch-dir."""
    where = Path(tempfile.gettempdir()) if parent is None else Path(parent)
    try:
        free = shutil.disk_usage(where).free
    except OSError:  # cannot tell: the preallocation still stops a full disk with one line
        return
    if free < need:
        raise OutputError(where, f"{what} needs about {need / 2**30:.1f} GiB of scratch disk here, "
                                 f"{free / 2**30:.1f} GiB is free; free some or point --scratch-dir at a larger disk")


class ScratchDir:
    """A private temporary directory for scratch arrays; use as a context manager."""

    def __init__(self, parent: Optional[PathLike] = None, prefix: str = ".gpart-scratch-"):
        self._parent = None if parent is None else Path(parent)
        self._prefix = prefix
        self.path: Optional[Path] = None
        self._count = 0
        self._fds: list[int] = []
        self._appended: list[AppendedArray] = []

    def __enter__(self) -> "ScratchDir":
        parent = self._parent if self._parent is not None else Path(tempfile.gettempdir())
        with uninterrupted():  # a signal before `with` takes charge: the command line removes it (work_paths)
            try:
                self.path = Path(tempfile.mkdtemp(prefix=self._prefix, dir=parent))
            except OSError as exc:
                raise OutputError(parent, f"cannot create a scratch directory: {exc.strerror or exc}") from None
            hold(self.path)
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        for values in self._appended:  # a reader stopped by bad input never finished them: their fds would outlive the files
            values.close()
        self._appended = []
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            release(self.path)
            self.path = None

    def file(self, name: str, nbytes: int) -> Path:
        """A new file of exactly `nbytes` bytes, its blocks allocated on disk."""
        path = self._new_path(name)
        preallocate(path, nbytes)
        return path

    def _new_path(self, name: str) -> Path:
        assert self.path is not None, "ScratchDir used outside its with-block"
        self._count += 1
        return self.path / f"{self._count:04d}-{name}"

    def open_file(self, name: str, nbytes: int) -> int:
        """A new preallocated scratch file, open for reading and writing (closed when the block ends)."""
        path = self.file(name, nbytes)
        fd = os.open(path, os.O_RDWR)
        self._fds.append(fd)
        return fd

    def concatenated(self, name: str, pieces: Iterable[np.ndarray], dtype: Union[str, np.dtype],
                     shape: tuple[int, ...]) -> np.ndarray:
        """`pieces` (arrays of `shape[1:]` rows, `shape[0]` rows in all) one after another in a new scratch file,
        mapped read-only: the rows cost page cache, which a memory cgroup reclaims, not anonymous memory. Each
        piece is written in blocks of about CONCAT_BLOCK_BYTES, its written pages dropped as it goes and the
        piece's own mapped pages after it."""
        dtype = np.dtype(dtype)
        row_bytes = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
        path = self.file(name, shape[0] * row_bytes)
        fd = os.open(path, os.O_RDWR)
        try:
            at = 0
            for piece in pieces:
                step = max(1, CONCAT_BLOCK_BYTES // max(row_bytes, 1))
                for start in range(0, piece.shape[0], step):
                    block = np.ascontiguousarray(piece[start:start + step], dtype=dtype)
                    pwrite_all(fd, block, at)
                    drop_written(fd, at, block.nbytes)
                    at += block.nbytes
                drop_pages(piece)
            if at != shape[0] * row_bytes:
                raise ValueError(f"{name}: the pieces hold {at // max(row_bytes, 1)} rows, not {shape[0]}")
        finally:
            os.close(fd)
        if shape[0] * row_bytes == 0:  # an empty file cannot be mapped
            return np.zeros(shape, dtype=dtype)
        return np.memmap(path, dtype=dtype, mode="r", shape=shape)

    def appended(self, name: str, dtype: Union[str, np.dtype]) -> "AppendedArray":
        """A new scratch file that values of `dtype` are appended to, as a reader parses them (AppendedArray)."""
        values = AppendedArray(self._new_path(name), np.dtype(dtype))
        self._appended.append(values)
        return values

    def array(self, name: str, dtype: Union[str, np.dtype], shape: Union[int, tuple[int, ...]]) -> np.ndarray:
        """A writable memory-mapped array backed by a preallocated scratch file (a plain empty array
        when it holds no items: an empty file cannot be mapped)."""
        return map_new_file(self._new_path(name), dtype, shape)



class AppendedArray:
    """Values appended to a scratch file as they come (a text reader's parsed ids), written back and dropped from the
    page cache after each append, then mapped read-only (`finish`): the values cost disk and clean page cache, which
    a memory cgroup reclaims, not anonymous memory. The counterpart of an array grown in memory, with its
    `size`, `append` and `finish`; a full disk is an OutputError naming the file."""

    def __init__(self, path: Path, dtype: np.dtype):
        self.path, self.dtype, self.size = path, dtype, 0
        try:
            self._fd: Optional[int] = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise OutputError(path, f"cannot create a scratch file: {exc.strerror or exc}") from None

    def append(self, values: np.ndarray) -> None:
        assert self._fd is not None, "AppendedArray appended to after finish"
        values = np.ascontiguousarray(values, dtype=self.dtype)
        at = self.size * self.dtype.itemsize
        try:
            pwrite_all(self._fd, values, at)
            drop_written(self._fd, at, values.nbytes)
        except OSError as exc:
            raise OutputError(self.path, f"write failed: {exc.strerror or exc}") from None
        self.size += int(values.shape[0])

    def finish(self) -> np.ndarray:
        """The values appended, mapped read-only (a plain empty array when there are none: an empty file cannot be
        mapped); the file stays until its ScratchDir ends."""
        self.close()
        if self.size == 0:
            return np.zeros(0, dtype=self.dtype)
        return np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.size,))

    def close(self) -> None:
        """Close the file without mapping it (idempotent; finish closes it too)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
