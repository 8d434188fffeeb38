"""The one byte sink: a new file written in whole chunks, CRC-32 of the data, fsync on close.

Every writer of gpart (array files, part files of an export, checkpoint shards,
.npy outputs) appends its bytes through `ByteSink`; the format layer decides
names, dtypes and manifests, the commit (rename into place, manifest last) is
gpart.formats.files.commit's. Also: `preallocate` for files written through a memory
map (`map_new_file`: reserved and mapped in one call; every writable map of a new
file in gpart goes through these two) and `close_quietly` for files being abandoned.

Written bytes do not pile up as dirty page cache (gpart.bytes.written_pages): a sink
starts the writeback of each SETTLE_BYTES it appends and drops the window before
it, and drops the rest after its fsync. A memory cgroup counts the page cache of
what its processes write, and dirty pages cannot be reclaimed at once: without
this, a capped run is killed at its cap by what it has already written.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import math
import os
import zlib
from pathlib import Path
from typing import Any, Optional, TypeVar

import numpy as np

from gpart.base.errors import OutputError
from gpart.bytes.crc import crc_pool
from gpart.bytes.reader import bytes_view
from gpart.bytes.written_pages import WrittenPages

# Chunks at least this large are checksummed in the CRC thread while being written.
THREAD_CRC_BYTES = 1 << 20


SinkT = TypeVar("SinkT", bound="ByteSink")


class ByteSink:
    """Appends raw bytes to a new file after an optional header, with a CRC-32 of the data part.

    One unbuffered handle and whole-chunk writes (`buffered`: small writes
    gather in a write buffer; a full disk may then show only at close, still
    as an OutputError). `crc_in_thread`: a chunk's
    CRC-32 runs in the shared CRC thread while the chunk is written (both
    release the GIL); otherwise it is computed right after the write, while the
    chunk is still in the CPU cache (for a memory-mapped source the kernel's
    copy faults the pages in far more cheaply than user-space reads do, measured
    2-3x less CPU). `close()` flushes and fsyncs; leaving a `with` block by an exception
    closes without fsync (the caller deletes the file).
    """

    def __init__(self, path: Path, header: bytes = b"", crc_in_thread: bool = True, buffered: bool = False):
        self.path = Path(path)
        self.offset = len(header)
        self.crc = 0
        self.nbytes = 0
        self.crc_in_thread = crc_in_thread
        try:
            self._fh = open(self.path, "wb", buffering=-1 if buffered else 0)
        except OSError as exc:
            raise OutputError(self.path, f"cannot create file: {exc.strerror or exc}") from None
        self._pages = WrittenPages(self._fh.fileno())
        if header:
            self._write_all(memoryview(header))

    def _write_all(self, view: memoryview) -> None:
        try:
            written = 0
            while written < len(view):  # a raw write may be partial
                written += self._fh.write(view[written:])
        except OSError as exc:
            close_quietly(self._fh)  # unusable now; no descriptor outlives the error
            raise OutputError(self.path, f"write failed: {exc.strerror or exc}") from None

    def write(self, arr: np.ndarray) -> None:
        view = bytes_view(np.ascontiguousarray(arr))
        threaded = self.crc_in_thread and len(view) >= THREAD_CRC_BYTES
        crc = crc_pool().submit(zlib.crc32, view, self.crc) if threaded else None
        try:
            self._write_all(view)
        finally:
            self.crc = crc.result() if crc is not None else zlib.crc32(view, self.crc)
        self.nbytes += len(view)
        if self._pages.due(self.offset + self.nbytes):
            self.flush()  # a buffered sink's last bytes reach the kernel before their range is written back
            self._settle(self.offset + self.nbytes)

    def _settle(self, end: int) -> None:
        """Write back and drop this file's pages up to about `end` (WrittenPages); a failed writeback is a
        failed write."""
        try:
            self._pages.wrote(end)
        except OSError as exc:
            close_quietly(self._fh)
            raise OutputError(self.path, f"write failed: {exc.strerror or exc}") from None

    def flush(self) -> None:
        """Hand buffered bytes to the kernel (a full disk shows here at the latest); close() still fsyncs."""
        if self._fh.closed:
            return
        try:
            self._fh.flush()
        except OSError as exc:
            close_quietly(self._fh)
            raise OutputError(self.path, f"write failed: {exc.strerror or exc}") from None

    def close(self) -> None:
        """fsync and close (a manifest written afterwards never names data not on disk)."""
        if self._fh.closed:
            return
        try:
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:
            close_quietly(self._fh)
            raise OutputError(self.path, f"write failed: {exc.strerror or exc}") from None
        self._pages.synced()  # every page is clean now: drop them all
        close_quietly(self._fh)

    def discard(self) -> None:
        """Close without fsync: the caller is abandoning the file."""
        close_quietly(self._fh)

    def __enter__(self: SinkT) -> SinkT:
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], *rest: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()


def close_quietly(fh: Any) -> None:
    """Close a file whose data no longer matters (the caller reports a failure or removes the file):
    a buffered file's close() flushes, and on a full disk that flush must not raise a second error."""
    try:
        fh.close()  # closes the descriptor even when the final flush fails
    except OSError:
        pass


def pwrite_all(fd: int, values: np.ndarray, offset: int) -> None:
    """All bytes of the contiguous array `values` at byte `offset` of the open file `fd` (os.pwrite may write
    fewer at a time; it releases the GIL, so threads write their own spans of one file at once)."""
    if values.nbytes == 0:  # nothing to write (and rows of no bytes cannot be cast to a byte view)
        return
    view = np.ascontiguousarray(values).data.cast("B")
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def preallocate(path: os.PathLike | str, nbytes: int) -> None:
    """Create `path` with `nbytes` of disk space reserved, for a file that is then written
    through a memory map: a full disk is a one-line OutputError naming the file here, not a
    SIGBUS on a page write later. The file is removed again when the space cannot be had.

    posix_fallocate reserves the blocks; where the call or the file system lacks it
    (macOS, some network mounts) the zeros are written instead, which reserves them too.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as exc:
        raise OutputError(path, f"cannot create file: {exc.strerror or exc}") from None
    try:
        if nbytes > 0:
            _reserve(fd, nbytes)
    except OSError as exc:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise OutputError(path, f"cannot reserve {nbytes:,} bytes: {exc.strerror or exc}") from None
    os.close(fd)


def reserve(fd: int, offset: int, nbytes: int, path: os.PathLike | str) -> None:
    """Reserve bytes [offset, offset + nbytes) of the open file `fd` (at `path`), growing it as a file written
    piece by piece needs: a full disk is a one-line OutputError naming the file, before the piece is written."""
    if nbytes <= 0:
        return
    try:
        _reserve(fd, nbytes, offset)
    except OSError as exc:
        raise OutputError(Path(path), f"cannot reserve {nbytes:,} bytes: {exc.strerror or exc}") from None


# fallocate(2) modes: deallocate a range, keeping the file's length
_PUNCH_HOLE = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE


def _libc_fallocate() -> Any:
    """libc's fallocate(int, int, off_t, off_t), or None where the C library has none (not Linux)."""
    try:
        call = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    call.restype = ctypes.c_int
    return call


_FALLOCATE = _libc_fallocate()


def release(fd: int, offset: int, nbytes: int) -> bool:
    """Give the disk blocks of bytes [offset, offset + nbytes) of `fd` back to the file system (the range then
    reads as zeros; the file keeps its length), for scratch read once and no longer needed: a pass over a large
    scratch file then frees it as it goes instead of holding all of it to the end. False where the platform or
    the file system cannot (the blocks then stay until the file is removed, as before)."""
    if nbytes <= 0 or _FALLOCATE is None:
        return False
    return _FALLOCATE(fd, _PUNCH_HOLE, offset, nbytes) == 0


def _reserve(fd: int, nbytes: int, offset: int = 0) -> None:
    try:
        os.posix_fallocate(fd, offset, nbytes)
        return
    except AttributeError:  # no posix_fallocate on this platform
        pass
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
    zeros = bytes(min(nbytes, 1 << 20))
    os.lseek(fd, offset, os.SEEK_SET)
    left = nbytes
    while left > 0:
        left -= os.write(fd, zeros[: min(left, len(zeros))])


def map_new_file(path: os.PathLike | str, dtype: Any, shape: int | tuple[int, ...]) -> np.ndarray:
    """A new file of `shape` items of `dtype`, its space reserved (preallocate), mapped for
    reading and writing; a plain zero-filled array when it holds no items (an empty file cannot
    be mapped; the empty file is still created)."""
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    preallocate(path, nbytes)
    if nbytes == 0:
        return np.zeros(shape, dtype=dtype)
    try:
        return np.memmap(path, dtype=dtype, mode="r+", shape=shape)
    except OSError as exc:
        raise OutputError(path, f"cannot map file: {exc.strerror or exc}") from None
