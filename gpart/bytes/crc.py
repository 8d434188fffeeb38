"""CRC-32 helpers of the byte layer: a shared checksum thread and zlib's crc32_combine in Python.

Writers and copies checksum a piece in a helper thread while the next piece is
written (both release the GIL); copies of whole files whose CRC-32 is already
known combine CRCs instead of reading the bytes (`crc32_combine`); a loader
proving a file intact checksums it through a read-only map, pieces on several
threads, each piece's pages released once summed (`mapped_file_crc32`).
"""

from __future__ import annotations

import mmap
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from gpart.base.errors import InputError, IntegrityError
from gpart.bytes.reader import close_map, map_read_only, release_pages

# Bytes per read step of a whole-file checksum (also the formats' default chunk).
CHUNK_BYTES = 64 << 20

_CRC_POOL: Optional[ThreadPoolExecutor] = None


def crc_pool() -> ThreadPoolExecutor:
    """One shared helper thread for CRC-32s computed while the caller copies or writes."""
    global _CRC_POOL
    if _CRC_POOL is None:
        _CRC_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpart-crc")
    return _CRC_POOL


def _gf2_times(matrix: Sequence[int], vec: int) -> int:
    out, i = 0, 0
    while vec:
        if vec & 1:
            out ^= matrix[i]
        vec >>= 1
        i += 1
    return out


def _gf2_square(matrix: Sequence[int]) -> list[int]:
    return [_gf2_times(matrix, m) for m in matrix]


_SHIFT_OPERATORS: dict[int, list[int]] = {}


def _crc_shift_operator(nbytes: int) -> list[int]:
    """The linear map taking crc(A) to its contribution to crc(A || B) for len(B) = nbytes (zlib's crc32_combine)."""
    op = _SHIFT_OPERATORS.get(nbytes)
    if op is not None:
        return op
    odd = [0xEDB88320] + [1 << i for i in range(31)]  # operator for one zero bit
    even = _gf2_square(odd)  # two zero bits
    odd = _gf2_square(even)  # four zero bits
    result = [1 << i for i in range(32)]  # identity
    n = nbytes
    while n:
        even = _gf2_square(odd)  # first pass: one zero byte
        if n & 1:
            result = [_gf2_times(even, c) for c in result]
        n >>= 1
        if not n:
            break
        odd = _gf2_square(even)
        if n & 1:
            result = [_gf2_times(odd, c) for c in result]
        n >>= 1
    if len(_SHIFT_OPERATORS) < 256:
        _SHIFT_OPERATORS[nbytes] = result
    return result


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of A || B from crc(A), crc(B) and len(B), as zlib's crc32_combine."""
    if len2 <= 0:
        return crc1
    return _gf2_times(_crc_shift_operator(len2), crc1) ^ crc2


def file_crc32(path: os.PathLike | str, chunk_bytes: int = CHUNK_BYTES, offset: int = 0) -> int:
    """CRC-32 of a file's bytes from `offset` on (a .npy file's data starts after its header)."""
    crc = 0
    try:
        with open(path, "rb", buffering=0) as fh:
            fh.seek(offset)
            # a buffer no larger than the data: small files must not pay for a 64 MiB allocation
            buf = bytearray(max(1, min(chunk_bytes, os.fstat(fh.fileno()).st_size - offset)))
            view = memoryview(buf)
            while True:
                n = fh.readinto(view)
                if not n:
                    break
                crc = zlib.crc32(view[:n], crc)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    return crc


# Bytes per piece of a mapped checksum: one piece per thread is mapped at a time (RSS stays ~threads x this).
MAPPED_PIECE_BYTES = 16 << 20


def checksum_threads() -> int:
    """Threads for a mapped checksum: the CPUs this process may run on, at most 8 (zlib.crc32 releases the GIL)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(8, cpus))


def mapped_file_crc32(path: os.PathLike | str, nbytes: int, piece_bytes: int = MAPPED_PIECE_BYTES,
                      threads: Optional[int] = None) -> int:
    """CRC-32 of the first `nbytes` of a file, summed through a read-only map in pieces on `threads` threads
    (None: checksum_threads()) and combined in order; each piece's pages leave this process's RSS once summed
    (they stay in the page cache), so memory stays about threads x piece_bytes however large the file.
    No copy into a buffer: faster than reading the file (benchmarks/bench_load_verify.py)."""
    if nbytes <= 0:
        return 0
    piece_bytes = max(mmap.PAGESIZE, piece_bytes - piece_bytes % mmap.PAGESIZE)  # pieces start on page boundaries
    starts = range(0, nbytes, piece_bytes)
    mm = map_read_only(Path(path), nbytes)
    view = memoryview(mm)

    def piece(start: int, crc: int = 0) -> int:
        end = min(nbytes, start + piece_bytes)
        crc = zlib.crc32(view[start:end], crc)
        release_pages(mm, start, end - start)
        return crc

    try:
        workers = min(len(starts), threads or checksum_threads())
        if workers <= 1:  # one thread: chain the pieces, nothing to combine
            crc = 0
            for start in starts:
                crc = piece(start, crc)
            return crc
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpart-crc-piece") as pool:
            crcs = list(pool.map(piece, starts))
    finally:
        view.release()
        close_map(mm)
    crc = crcs[0]
    for start, part in zip(starts[1:], crcs[1:]):
        crc = crc32_combine(crc, part, min(nbytes, start + piece_bytes) - start)
    return crc


def array_crc32(arr: np.ndarray, chunk_bytes: int = CHUNK_BYTES) -> int:
    """CRC-32 of a C-contiguous array's bytes, in chunks (a memory map is not read whole at once)."""
    flat = arr.reshape(-1).view(np.uint8) if arr.size else np.zeros(0, np.uint8)
    crc = 0
    for start in range(0, flat.shape[0], chunk_bytes):
        crc = zlib.crc32(flat[start : start + chunk_bytes].data, crc)
    return crc


class OnTheWayCrc:
    """Checks the CRC-32 of input files that a reader reads through anyway, as it reads them.

    `feed(i, offset, data)` hands over the bytes of file i at data offset
    `offset`. Reads in order (each starting where the last ended) are
    checksummed; once a file has been read to its end its CRC-32 must equal the
    manifest's, or IntegrityError names the file: damaged input is refused
    instead of being passed on under a fresh checksum. A file read out of
    order is simply not checked on the way.
    """

    def __init__(self, paths: Sequence[Path], sizes: Sequence[int], expected: Sequence[Optional[int]]):
        self.paths, self.sizes, self.expected = list(paths), [int(s) for s in sizes], list(expected)
        self.pos = [0] * len(self.paths)
        self.crc = [0] * len(self.paths)
        self.active = [e is not None for e in self.expected]

    def feed(self, index: int, offset: int, data: np.ndarray) -> None:
        if not self.active[index]:
            return
        if offset != self.pos[index]:
            self.active[index] = False
            return
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8) if data.size else np.zeros(0, np.uint8)
        self.crc[index] = zlib.crc32(flat.data, self.crc[index])
        self.pos[index] += flat.shape[0]
        if self.pos[index] >= self.sizes[index]:
            self.active[index] = False
            if self.crc[index] != self.expected[index]:
                raise IntegrityError(self.paths[index], f"checksum mismatch: crc32 {self.crc[index]:08x}, manifest says {self.expected[index]:08x} (the input is damaged)")

    def finish(self, index: int, arr: np.ndarray, chunk_bytes: int = CHUNK_BYTES) -> None:
        """Read the part of file `index` (whose whole content is `arr`) that the reader skipped, and check it."""
        if not self.active[index]:
            return
        flat = arr.reshape(-1).view(np.uint8) if arr.size else np.zeros(0, np.uint8)
        for start in range(self.pos[index], flat.shape[0], chunk_bytes):
            self.feed(index, start, flat[start : start + chunk_bytes])
        if self.active[index]:  # nothing left to read: an empty file
            self.feed(index, self.pos[index], np.zeros(0, np.uint8))
