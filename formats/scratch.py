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

import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional, Union

import numpy as np

from gpart.base.errors import OutputError

PathLike = Union[str, "os.PathLike[str]"]


class ScratchDir:
    """A private temporary directory for scratch arrays; use as a context manager."""

    def __init__(self, parent: Optional[PathLike] = None, prefix: str = ".gpart-scratch-"):
        self._parent = None if parent is None else Path(parent)
        self._prefix = prefix
        self.path: Optional[Path] = None
        self._count = 0
        self._fds: list[int] = []

    def __enter__(self) -> "ScratchDir":
        parent = self._parent if self._parent is not None else Path(tempfile.gettempdir())
        try:
            self.path = Path(tempfile.mkdtemp(prefix=self._prefix, dir=parent))
        except OSError as exc:
            raise OutputError(parent, f"cannot create a scratch directory: {exc.strerror or exc}") from None
        return self

    def __exit__(self, *exc) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None

    def file(self, name: str, nbytes: int) -> Path:
        """A new file of exactly `nbytes` bytes, its blocks allocated on disk."""
        assert self.path is not None, "ScratchDir used outside its with-block"
        self._count += 1
        path = self.path / f"{self._count:04d}-{name}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            if nbytes > 0:
                preallocate(fd, nbytes, path)
        finally:
            os.close(fd)
        return path

    def open_file(self, name: str, nbytes: int) -> int:
        """A new preallocated scratch file, open for reading and writing (closed when the block ends)."""
        path = self.file(name, nbytes)
        fd = os.open(path, os.O_RDWR)
        self._fds.append(fd)
        return fd

    def array(self, name: str, dtype: Union[str, np.dtype], shape: Union[int, tuple[int, ...]]) -> np.memmap:
        """A writable memory-mapped array backed by a preallocated scratch file."""
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        path = self.file(name, nbytes)
        if nbytes == 0:
            return np.zeros(shape, dtype=dtype)  # numpy cannot map an empty file
        return np.memmap(path, dtype=dtype, mode="r+", shape=shape)


def preallocate(fd: int, nbytes: int, path: PathLike) -> None:
    """Reserve `nbytes` of disk for an open file, or raise OutputError (disk full, quota)."""
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL) and hasattr(os, "ftruncate"):
            # File systems without fallocate (some network mounts): write the blocks instead.
            _write_zeros(fd, nbytes, path)
            return
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OutputError(path, f"no space left on device for {nbytes:,} bytes of scratch") from None
        raise OutputError(path, f"cannot allocate {nbytes:,} bytes of scratch: {exc.strerror or exc}") from None


def _write_zeros(fd: int, nbytes: int, path: PathLike) -> None:
    block = bytes(1 << 20)
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        left = nbytes
        while left > 0:
            left -= os.write(fd, block[: min(left, len(block))])
        os.fsync(fd)
    except OSError as exc:
        raise OutputError(path, f"cannot allocate {nbytes:,} bytes of scratch: {exc.strerror or exc}") from None
