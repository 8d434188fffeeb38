"""The mapped reader of the byte layer: memory maps, preadv into buffers, page release.

- `map_read_only(path, nbytes)`: a read-only shared mmap, its errors as InputError naming the file;
- `pread_into(fd, view, offset, path)`: fill a buffer from a file offset;
- `advise_pages(mm, start, nbytes, advice)`: madvise a byte range rounded out to
  whole pages; `release_pages(...)` is MADV_DONTNEED, the one page-release helper
  (the pages leave this process's RSS and stay in the page cache);
- `drop_pages(memmap, start, length)` / `release_rows(memmap, lo, hi)`: the same for numpy memmaps;
- `evict_rows(memmap, lo, hi)`: release_rows, and the rows' pages dropped from the page cache too
  (POSIX_FADV_DONTNEED: for a pass that reads them once, under a memory cgroup that counts the cache);
- `read_only_mapping(arr)`: the mmap behind a read-only numpy memmap, for releasing its pages;
- `bytes_view(arr)`: a C-contiguous array's bytes as a flat memoryview.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Optional

import numpy as np

from gpart.base.errors import InputError

WILLNEED = getattr(mmap, "MADV_WILLNEED", None)
DONTNEED = getattr(mmap, "MADV_DONTNEED", None)
SEQUENTIAL = getattr(mmap, "MADV_SEQUENTIAL", None)


def bytes_view(arr: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array as a flat memoryview (an empty one for an empty array)."""
    return arr.reshape(-1).view(np.uint8).data if arr.size else memoryview(b"")


def pread_into(fd: int, view: memoryview, offset: int, path: Path) -> None:
    """Fill `view` from file offset `offset`; a short file is an InputError naming it."""
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n <= 0:
            raise InputError(path, f"file ended early at byte {offset + done} (it changed while being read?)")
        done += n


def open_sequential(path: Path) -> int:
    """A read descriptor with sequential read-ahead advised; errors name the file."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    return fd


def map_read_only(path: Path, nbytes: int = 0, fd: Optional[int] = None) -> mmap.mmap:
    """A read-only shared map of the first `nbytes` of `path` (0: all of it); errors name the file."""
    try:
        if fd is not None:
            return mmap.mmap(fd, nbytes, access=mmap.ACCESS_READ)
        with open(path, "rb") as fh:
            return mmap.mmap(fh.fileno(), nbytes, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    except (ValueError, OverflowError) as exc:  # a file that changed size since it was checked
        raise InputError(path, f"cannot map: {exc}") from None


def advise_pages(mm: Optional[mmap.mmap], start: int, nbytes: int, advice: Optional[int]) -> None:
    """madvise bytes [start, start + nbytes) of a map, rounded out to whole pages (no-op without map or advice)."""
    if mm is None or nbytes <= 0 or advice is None:
        return
    aligned = start - start % mmap.PAGESIZE
    end = min(len(mm), -(-(start + nbytes) // mmap.PAGESIZE) * mmap.PAGESIZE)
    if end > aligned:
        try:
            mm.madvise(advice, aligned, end - aligned)
        except (OSError, ValueError, OverflowError):  # advice is a hint: never fail a read over it
            pass


def release_pages(mm: Optional[mmap.mmap], start: int, nbytes: int) -> None:
    """Drop mapped pages already consumed from this process (MADV_DONTNEED; the page cache keeps them)."""
    advise_pages(mm, start, nbytes, DONTNEED)


def close_map(mm: Optional[mmap.mmap]) -> None:
    """Close a map; one still referenced by a view goes when the view does."""
    if mm is None:
        return
    try:
        mm.close()
    except BufferError:
        pass


def read_only_mapping(arr: np.ndarray) -> Optional[tuple[mmap.mmap, int]]:
    """(mmap object, address of its first byte) behind a C-contiguous read-only memmap, or None.

    numpy keeps the mmap object at the root of `.base` (also for slices of a memmap).
    Only read-only shared mappings qualify: dropping pages of a copy-on-write mapping
    would discard the caller's changes.
    """
    if not isinstance(arr, np.memmap) or getattr(arr, "mode", None) != "r" or not arr.flags.c_contiguous:
        return None
    if DONTNEED is None or arr.size == 0:
        return None
    # numpy's stubs type .base as an array or None; at the root of a memmap it is the mmap object
    root: object = arr.base
    while isinstance(root, np.ndarray):
        root = root.base
    if not isinstance(root, mmap.mmap) or not hasattr(root, "madvise"):
        return None
    try:
        address = np.frombuffer(root, dtype=np.uint8).ctypes.data
    except (TypeError, ValueError, OverflowError, BufferError):
        return None
    if not address <= arr.ctypes.data <= address + len(root) - arr.nbytes:
        return None
    return root, address


def own_mapping(arr: np.ndarray, modes: tuple[str, ...] = ("r",)) -> Optional[mmap.mmap]:
    """The mmap behind a memmap that np.memmap created itself (base is the mmap; a slice's
    `offset` is its parent's), opened in one of `modes`; else None."""
    if not isinstance(arr, np.memmap):
        return None
    mm = getattr(arr, "_mmap", None)
    base: object = arr.base  # typed as an array or None by numpy's stubs; np.memmap's own is its mmap
    if not isinstance(mm, mmap.mmap) or base is not mm or arr.mode not in modes or DONTNEED is None or not hasattr(mm, "madvise"):
        return None
    return mm


def drop_pages(arr: np.ndarray, start: int = 0, length: Optional[int] = None, modes: tuple[str, ...] = ("r",)) -> None:
    """Let the kernel drop the resident pages of a memmap's byte range [start, start + length).

    Scanning a mapped file leaves its pages counted in this process's RSS;
    dropping them after each chunk keeps RSS bounded. A no-op for arrays that
    are not memmaps opened in `modes` (by default read-only: pages of a
    copy-on-write map hold the only copy). A shared writable map ("r+", "w+")
    may be released too: written data stays in the page cache and reaches the file.
    """
    mm = own_mapping(arr, modes)
    if mm is None or not isinstance(arr, np.memmap):  # own_mapping found one only behind a memmap
        return
    begin = int(arr.offset) % mmap.ALLOCATIONGRANULARITY + start  # where the array starts inside the mapping
    end = len(mm) if length is None else min(len(mm), begin + length)
    advise_pages(mm, begin, end - begin, DONTNEED)


def release_rows(arr: np.ndarray, start_row: int = 0, stop_row: Optional[int] = None) -> None:
    """drop_pages for rows [start_row, stop_row) of a read-only input memmap (a no-op for other arrays).

    Pages of a mapped input count in this process's RSS once touched; the
    kernel keeps them in the page cache, so dropping them after use keeps
    peak RSS near the working set instead of the input's size.
    """
    if not isinstance(arr, np.memmap) or arr.ndim == 0:
        return
    row_bytes = int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize
    stop_row = arr.shape[0] if stop_row is None else stop_row
    drop_pages(arr, start_row * row_bytes, (stop_row - start_row) * row_bytes)


def evict_rows(arr: np.ndarray, start_row: int = 0, stop_row: Optional[int] = None) -> None:
    """release_rows, then drop the rows' file pages from the page cache too (a no-op for other arrays).

    For inputs a pass reads once: a memory cgroup charges the page cache of
    what its processes read, and the kernel reclaims it only under pressure.
    """
    release_rows(arr, start_row, stop_row)
    if not isinstance(arr, np.memmap) or arr.ndim == 0 or not hasattr(os, "posix_fadvise") or arr.filename is None:
        return
    root = read_only_mapping(arr)
    if root is None:
        return
    mm, address = root
    row_bytes = int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize
    stop_row = arr.shape[0] if stop_row is None else stop_row
    # the mapping starts at the allocation-aligned offset below the root memmap's `offset`
    first = int(arr.offset) - int(arr.offset) % mmap.ALLOCATIONGRANULARITY + (arr.ctypes.data - address)
    try:
        fd = os.open(arr.filename, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, first + start_row * row_bytes, (stop_row - start_row) * row_bytes, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass
    finally:
        os.close(fd)
