"""Sources of an export's rows (SPEC.md section 5): the RowSource protocol and ArrayRows,
an ndarray (typically a read-only memmap whose pages are released as rows are written)."""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Optional, Protocol

import numpy as np

from gpart.bytes.copy import ByteSpan
from gpart.bytes.reader import DONTNEED, WILLNEED, advise_pages, read_only_mapping


class RowSource(Protocol):
    """Rows of an array produced on demand, for inputs that are not one ndarray."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop). A result may live in a reused buffer, but must stay intact
        for the next `RING - 1` calls (use a BufferRing). A source may also define
        `release(start, stop)`, called once those rows are written, and
        `byte_spans(start, stop) -> Optional[list[ByteSpan]]`: where rows [start, stop)
        lie, as stored, in files (None where they do not lie contiguously in files); the
        writer then copies them inside the kernel when no dtype change is asked."""
        ...


class ArrayRows:
    """An ndarray as a RowSource: chunks are views, never copies.

    For a read-only memory-mapped file (np.load(mmap_mode="r"), gpart's readers),
    `release(start, stop)`, called by the writer once those rows are written, drops
    their pages from this process's mapping (madvise DONTNEED; the page cache keeps
    them). RSS then stays at a few chunks however large the file, and the bytes are
    copied once, from the page cache into the output file, as a plain copy does.
    """

    def __init__(self, arr: np.ndarray):
        if arr.ndim == 0:
            raise ValueError("a 0-d array has no rows")
        self.arr = arr
        self.shape = tuple(int(s) for s in arr.shape)
        self.dtype = arr.dtype
        self.row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * arr.dtype.itemsize
        self._mapping = read_only_mapping(arr)

    def read(self, start: int, stop: int) -> np.ndarray:
        # ask the kernel to read the next chunk from disk while this one is written
        self._advise(WILLNEED, stop, min(self.shape[0], 2 * stop - start))
        return self.arr[start:stop]

    def release(self, start: int, stop: int) -> None:
        self._advise(DONTNEED, start, stop)

    def byte_spans(self, start: int, stop: int) -> Optional[list["ByteSpan"]]:
        """Rows [start, stop) as bytes of the mapped file (e.g. an .npy past its header), or None.

        Only for a read-only, C-contiguous, little-endian memmap of a named file; the
        first bytes of the span are compared with the mapping, so a file replaced
        since it was mapped is streamed from the mapping instead of copied.
        """
        arr, filename = self.arr, getattr(self.arr, "filename", None)
        if self._mapping is None or not filename or arr.dtype.byteorder == ">" or stop <= start:
            return None
        mm, map_address = self._mapping
        offset = int(getattr(arr, "offset", 0) or 0)
        map_start = offset - offset % mmap.ALLOCATIONGRANULARITY  # np.memmap maps from here
        begin = map_start + (arr.ctypes.data - map_address) + start * self.row_bytes
        nbytes = (stop - start) * self.row_bytes
        probe = min(nbytes, 4096)
        try:
            with open(filename, "rb") as fh:
                fh.seek(begin)
                same = fh.read(probe) == arr[start:stop].reshape(-1).view(np.uint8)[:probe].tobytes()
        except (OSError, ValueError, OverflowError):
            return None
        return [ByteSpan(Path(filename), begin, nbytes)] if same else None

    def _advise(self, advice: Optional[int], start: int, stop: int) -> None:
        """madvise the pages of rows [start, stop) of the mapping (no-op without one)."""
        if self._mapping is None or stop <= start:
            return
        mm, map_address = self._mapping
        begin = self.arr.ctypes.data - map_address + start * self.row_bytes
        advise_pages(mm, begin, (stop - start) * self.row_bytes, advice)

    def close(self) -> None:
        self._mapping = None
