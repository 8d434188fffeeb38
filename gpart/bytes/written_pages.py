"""Page cache of written and read file ranges: written back and dropped as a pass goes, so that a memory
cgroup's cap holds.

A memory cgroup (v1 and v2) charges the page cache of the files its processes
read and write. Clean pages are reclaimed when the group nears its limit;
dirty ones must be written first, and a pass that writes faster than the
disk absorbs fills the group with them until the kernel kills it. So:

- `WrittenPages(fd, start=0)`: a file (or its part from `start`) written front to back (a ByteSink) starts the
  writeback of every SETTLE_BYTES it appends (SYNC_FILE_RANGE_WRITE: no
  waiting) and then waits for the window before and drops it
  (POSIX_FADV_DONTNEED), so at most two windows of it are dirty at a time;
  `synced()` drops the rest after the fsync;
- `drop_written(fd, offset, nbytes)`: the same at once for a range written
  in place (scratch buckets);
- `drop_cached(fd, offset, nbytes)`: drop clean pages already read.

These are page-cache hints, not durability: the commit protocol's fsync
(gpart.bytes.sink.ByteSink.close) is unchanged. Where the calls are missing
(macOS has no sync_file_range, Windows neither call) fdatasync and nothing
stand in; where a file system refuses them (EINVAL, ESPIPE), the file is
left to the kernel.
"""

from __future__ import annotations

import errno
import os

SETTLE_BYTES = 8 << 20  # written bytes per writeback window (two windows of a file may be dirty at once)
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_START = getattr(os, "SYNC_FILE_RANGE_WRITE", 2)
_WAIT = getattr(os, "SYNC_FILE_RANGE_WAIT_BEFORE", 1) | _START | getattr(os, "SYNC_FILE_RANGE_WAIT_AFTER", 4)
# errors that say "this file does not support it", not "the write failed"
_UNSUPPORTED = {errno.EINVAL, errno.ESPIPE, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF}


class WrittenPages:
    """Keeps a file written front to back from holding more than two SETTLE_BYTES windows of dirty pages."""

    def __init__(self, fd: int, window: int = SETTLE_BYTES, start: int = 0):
        self.fd = fd
        self.window = window
        self.started = start  # bytes [start, started) have had their writeback started
        self.dropped = start  # bytes [start, dropped) are written and dropped from the page cache
        self.enabled = True

    def due(self, end: int) -> bool:
        """Whether the bytes written up to file offset `end` complete a window."""
        return self.enabled and end - self.started >= self.window

    def wrote(self, end: int) -> None:
        """The file holds its bytes up to offset `end`: start their writeback, wait for the previous
        window and drop it. OSError: the writeback failed (a full disk shows here or at the fsync)."""
        try:
            _sync_range(self.fd, self.started, end - self.started, _START)
            if self.started > self.dropped:
                drop_written(self.fd, self.dropped, self.started - self.dropped)
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED:
                raise
            self.enabled = False
            return
        self.dropped, self.started = self.started, end

    def synced(self) -> None:
        """After an fsync every page is clean: drop the whole file's."""
        if self.enabled:
            drop_cached(self.fd, 0, 0)


def drop_written(fd: int, offset: int = 0, nbytes: int = 0) -> None:
    """Write bytes [offset, offset + nbytes) of `fd` (nbytes 0: to the end) to the disk and drop their pages, the
    pages they share with their neighbours too. OSError: the writeback failed; unsupported files are left alone."""
    offset, nbytes = _whole_pages(offset, nbytes)
    try:
        _sync_range(fd, offset, nbytes, _WAIT)
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            raise
        return
    drop_cached(fd, offset, nbytes)


def drop_cached(fd: int, offset: int = 0, nbytes: int = 0) -> None:
    """Drop the clean page-cache pages of bytes [offset, offset + nbytes) of `fd`, the pages they share with their
    neighbours too (a hint: never fails)."""
    offset, nbytes = _whole_pages(offset, nbytes)
    if hasattr(os, "posix_fadvise"):
        try:
            os.posix_fadvise(fd, offset, nbytes, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass


def _whole_pages(offset: int, nbytes: int) -> tuple[int, int]:
    """[offset, offset + nbytes) widened to whole pages (nbytes 0, to the end, stays 0): the kernel drops only the
    pages a range covers whole, so a range that ends mid-page would leave that page behind."""
    start = offset - offset % PAGE_BYTES
    if nbytes == 0:
        return start, 0
    end = offset + nbytes
    return start, end - start + (-end) % PAGE_BYTES


def _sync_range(fd: int, offset: int, nbytes: int, flags: int) -> None:
    if hasattr(os, "sync_file_range"):
        os.sync_file_range(fd, offset, nbytes, flags)
    elif flags == _WAIT and hasattr(os, "fdatasync"):
        os.fdatasync(fd)
