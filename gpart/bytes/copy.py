"""Kernel copies of byte spans between files (copy_file_range), with CRC-32s combined or computed on the way.

`copy_spans` concatenates byte ranges of source files into an open output
inside the kernel; `copy_spans_to_new_file` creates, fills and fsyncs one.
`KernelCopyUnsupported` tells the caller to stream instead.
"""

from __future__ import annotations

import errno
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from gpart.base.errors import InputError, OutputError
from gpart.bytes.crc import crc32_combine, crc_pool
from gpart.bytes.reader import close_map, map_read_only, open_sequential, release_pages

# Bytes per copy_file_range call on the checksummed path: the CRC-32 of one piece
# runs in a helper thread (reading the pages the copy just brought into the page
# cache) while the next piece is copied.
COPY_PIECE_BYTES = 16 << 20


@dataclass(frozen=True)
class ByteSpan:
    """Bytes [offset, offset + nbytes) of a file, with their CRC-32 when it is already known.

    `file_size`, when given, is the size the file must have (checked before copying):
    a known CRC is only trusted for a file of the size its manifest states.
    """

    path: Path
    offset: int
    nbytes: int
    crc32: Optional[int] = None
    file_size: Optional[int] = None


class KernelCopyUnsupported(Exception):
    """copy_file_range cannot copy between these files (other filesystem, old kernel): stream instead."""


class SpanSources:
    """Read descriptors and read-only maps of the files spans come from, opened on first use."""

    def __init__(self) -> None:
        self.fds: dict[Path, int] = {}
        self.maps: dict[Path, Any] = {}

    def fd(self, span: ByteSpan) -> int:
        fd = self.fds.get(span.path)
        if fd is None:
            fd = self.fds[span.path] = open_sequential(span.path)
        size = os.fstat(fd).st_size
        if span.file_size is not None and size != span.file_size:
            raise InputError(span.path, f"size {size} bytes, manifest says {span.file_size}")
        if size < span.offset + span.nbytes:
            raise InputError(span.path, f"size {size} bytes, too short for bytes {span.offset}..{span.offset + span.nbytes}")
        return fd

    def view(self, span: ByteSpan, at: int, nbytes: int) -> memoryview:
        mm = self.maps.get(span.path)
        if mm is None:
            mm = self.maps[span.path] = map_read_only(span.path, 0, self.fds[span.path])
        return memoryview(mm)[at : at + nbytes]

    def release(self, span: ByteSpan, at: int, nbytes: int) -> None:
        """Unmap pages already checksummed (they stay in the page cache), so RSS stays flat."""
        release_pages(self.maps.get(span.path), at, nbytes)

    def close(self) -> None:
        for mm in self.maps.values():
            close_map(mm)
        for fd in self.fds.values():
            os.close(fd)
        self.maps, self.fds = {}, {}


def kernel_copy(fd_in: int, fd_out: int, offset_in: int, offset_out: int, nbytes: int, path_in: Path, path_out: Path) -> None:
    done = 0
    while done < nbytes:
        try:
            n = os.copy_file_range(fd_in, fd_out, nbytes - done, offset_in + done, offset_out + done)
        except OSError as exc:
            if exc.errno in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                raise KernelCopyUnsupported() from None
            raise OutputError(path_out, f"copy from {path_in} failed: {exc.strerror or exc}") from None
        if n <= 0:
            raise InputError(path_in, f"file ended early at byte {offset_in + done}")
        done += n


def copy_spans(
    spans: Sequence[ByteSpan],
    out_fd: int,
    out_path: Path,
    out_offset: int = 0,
    *,
    piece_bytes: int = COPY_PIECE_BYTES,
    on_piece: Optional[Callable[[ByteSpan, int, int, int], None]] = None,
    advance: Optional[Callable[[int], None]] = None,
) -> tuple[int, int]:
    """Concatenate `spans` into the open file `out_fd` from `out_offset` inside the kernel
    (copy_file_range); return (CRC-32, bytes) of what was written.

    A span with a known CRC-32 is copied without being read here: its CRC is
    combined (crc32_combine) into the result, so the result's CRC describes what
    the source's manifest says, and damaged input shows up in a later verify of the
    output. A span without one is checksummed piece by piece from its mapped pages
    in a helper thread while the next piece is copied; `on_piece(span, file offset,
    bytes, crc)` sees each such piece, in order (e.g. to check the source's own CRC).
    Raises KernelCopyUnsupported when the kernel cannot copy between these files;
    the caller then truncates the output and streams instead.
    """
    if not hasattr(os, "copy_file_range"):
        raise KernelCopyUnsupported()
    copy = _SpanCopy(out_fd, out_path, out_offset, max(1, int(piece_bytes)), on_piece, advance)
    try:
        for span in spans:
            copy.span(span)
        copy.drain()
    finally:
        copy.close()
    return copy.crc, copy.pos - out_offset


class _SpanCopy:
    """The state of one copy_spans call: the running CRC, the output position, and the piece
    whose CRC is being computed in the CRC thread (at most one, finished in file order)."""

    def __init__(
        self,
        out_fd: int,
        out_path: Path,
        out_offset: int,
        piece_bytes: int,
        on_piece: Optional[Callable[[ByteSpan, int, int, int], None]],
        advance: Optional[Callable[[int], None]],
    ) -> None:
        self.out_fd, self.out_path, self.pos, self.piece_bytes = out_fd, out_path, out_offset, piece_bytes
        self.on_piece, self.advance = on_piece, advance
        self.crc = 0
        self.sources = SpanSources()
        self.pending: Optional[tuple[Any, memoryview, ByteSpan, int, int]] = None

    def span(self, span: ByteSpan) -> None:
        if span.nbytes <= 0:
            return
        fd = self.sources.fd(span)
        if span.crc32 is not None:
            self.drain()  # CRCs combine in file order
        for at in range(span.offset, span.offset + span.nbytes, self.piece_bytes):
            n = min(self.piece_bytes, span.offset + span.nbytes - at)
            kernel_copy(fd, self.out_fd, at, self.pos, n, span.path, self.out_path)
            self.pos += n
            if span.crc32 is None:
                view = self.sources.view(span, at, n)
                previous, self.pending = self.pending, (crc_pool().submit(zlib.crc32, view), view, span, at, n)
                if previous is not None:
                    self._finish(previous)  # its CRC ran while this piece was copied
            if self.advance is not None:
                self.advance(n)
        if span.crc32 is not None:
            self.crc = crc32_combine(self.crc, span.crc32, span.nbytes)

    def drain(self) -> None:
        if self.pending is not None:
            done, self.pending = self.pending, None
            self._finish(done)

    def _finish(self, job: tuple[Any, memoryview, ByteSpan, int, int]) -> None:
        future, view, span, at, n = job
        try:
            piece_crc = future.result()
        finally:
            view.release()
        self.sources.release(span, at, n)
        self.crc = crc32_combine(self.crc, piece_crc, n)
        if self.on_piece is not None:
            self.on_piece(span, at, n, piece_crc)

    def close(self) -> None:
        if self.pending is not None:  # leaving by an error: let the CRC finish before unmapping
            future, view = self.pending[0], self.pending[1]
            self.pending = None
            if not future.cancel():
                future.exception()
            view.release()
        self.sources.close()


def copy_spans_to_new_file(
    spans: Sequence[ByteSpan],
    path: Path,
    header: Union[bytes, int],
    piece: int,
    on_piece: Optional[Callable[[ByteSpan, int, int, int], None]],
    advance: Optional[Callable[[int], None]],
) -> tuple[int, int]:
    """Create `path` (after an optional header: bytes, or 0 for none) and fill it with copy_spans;
    (CRC-32 of the data, data bytes)."""
    prefix = header if isinstance(header, bytes) else b""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as exc:
        raise OutputError(path, f"cannot create file: {exc.strerror or exc}") from None
    try:
        if prefix:
            os.pwrite(fd, prefix, 0)
        result = copy_spans(spans, fd, path, len(prefix), piece_bytes=piece, on_piece=on_piece, advance=advance)
        os.fsync(fd)
        return result
    except OSError as exc:
        raise OutputError(path, f"write failed: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
