"""Rows of a checkpoint tensor streamed in global order from any layout, and back into shards.

- `GlobalRows` / `iter_global_chunks`: read a tensor in global row order (SPEC.md
  section 6) in pieces of about 32 MiB through a few reused buffers;
- `ShardSink`: distribute global-order pieces to W shard files (or some of them) under a policy;
- `contiguous_spans`: where rows of a contiguously sharded tensor (ShardPolicy.is_contiguous) lie in its files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

import numpy as np

from gpart.bytes.buffers import BufferRing, in_background
from gpart.bytes.copy import ByteSpan
from gpart.bytes.crc import CHUNK_BYTES, OnTheWayCrc
from gpart.bytes.reader import SEQUENTIAL, WILLNEED, advise_pages, bytes_view, close_map, map_read_only, open_sequential, pread_into, release_pages
from gpart.formats.checkpoint.reader import Checkpoint, TensorInfo
from gpart.formats.checkpoint.writer import ShardWriter
from gpart.formats.sharding.policies import ShardPolicy

# Rows move in pieces of about 32 MiB; BUFFERS such buffers are in flight at once
# (one being written, one queued, one being read: see _in_background), so memory
# stays near 100 MiB whatever the table size.
PIECE_BYTES = CHUNK_BYTES // 2
BUFFERS = 3


def rows_per_piece(row_bytes: int, chunk_rows: Optional[int], chunk_bytes: int = CHUNK_BYTES) -> int:
    if chunk_rows is not None:
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be at least 1, got {chunk_rows}")
        return int(chunk_rows)
    return max(1, chunk_bytes // max(1, row_bytes))


def range_pieces(policy: ShardPolicy, a: int, b: int) -> Iterator[tuple[int, int, int, int]]:
    """(rank, rank's first global row, start, stop) of the rows [a, b) of a contiguous layout (range, or one global file)."""
    bounds = policy.row_bounds()
    r = int(np.searchsorted(bounds, a, side="right") - 1)
    pos = a
    while pos < b:
        end = min(b, int(bounds[r + 1]))
        if end > pos:
            yield r, int(bounds[r]), pos, end
            pos = end
        r += 1


# --------------------------------------------------------------------------- contiguous copies


def contiguous_spans(ckpt: Checkpoint, t: TensorInfo, policy: ShardPolicy, start: int, stop: int) -> list[ByteSpan]:
    """Where global rows [start, stop) of a contiguously sharded tensor lie in its shard files.

    A span that covers a whole shard carries the shard's CRC-32 and size from the
    manifest, so a copy can combine CRCs instead of reading the data.
    """
    bounds = policy.row_bounds()
    spans = []
    for rank, shard in enumerate(t.shards):
        lo, hi = max(start, int(bounds[rank])), min(stop, int(bounds[rank + 1]))
        if hi <= lo or t.row_bytes == 0:
            continue
        begin = shard.offset + (lo - int(bounds[rank])) * t.row_bytes
        nbytes = (hi - lo) * t.row_bytes
        whole = begin == shard.offset and begin + nbytes == shard.bytes
        spans.append(ByteSpan(ckpt.directory / shard.file, begin, nbytes, shard.crc32 if whole else None, shard.bytes))
    return spans


class ShardMaps:
    """Read-only memory maps of one tensor's shards, with pages given back as rows are consumed.

    Rows are read straight from the page cache (no copy into a read buffer);
    `release` drops the mapped pages of consumed rows (MADV_DONTNEED) so that
    they do not accumulate in the process's resident memory.
    """

    def __init__(self, ckpt: Checkpoint, t: TensorInfo):
        self.t = t
        self.maps: list[Any] = []
        self.views: list[np.ndarray] = []
        try:
            for s in t.shards:
                if s.rows == 0:
                    self.maps.append(None)
                    self.views.append(np.empty((0, *t.row_shape), dtype=t.np_dtype))
                    continue
                mm = map_read_only(ckpt.directory / s.file, s.bytes)
                advise_pages(mm, 0, s.bytes, SEQUENTIAL)
                self.maps.append(mm)
                count = s.rows * t.row_bytes // t.np_dtype.itemsize
                self.views.append(np.frombuffer(mm, dtype=t.np_dtype, count=count, offset=s.offset).reshape(s.rows, *t.row_shape))
        except BaseException:
            self.close()
            raise

    def prefetch(self, rank: int, lo: int, hi: int) -> None:
        """Start reading rows [lo, hi) of a shard in the background (MADV_WILLNEED)."""
        start, nbytes = self._span(rank, lo, hi)
        advise_pages(self.maps[rank], start, nbytes, WILLNEED)

    def release(self, rank: int, lo: int, hi: int) -> None:
        """Unmap the pages of consumed rows [lo, hi) (they stay in the page cache)."""
        start, nbytes = self._span(rank, lo, hi)
        release_pages(self.maps[rank], start, nbytes)

    def _span(self, rank: int, lo: int, hi: int) -> tuple[int, int]:
        """(file offset, bytes) of rows [lo, hi) of a shard, clipped to the shard."""
        shard = self.t.shards[rank]
        hi = min(hi, shard.rows)
        return shard.offset + lo * self.t.row_bytes, max(0, hi - lo) * self.t.row_bytes

    def close(self) -> None:
        self.views = []
        for mm in self.maps:
            close_map(mm)
        self.maps = []

    def __enter__(self) -> "ShardMaps":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class GlobalRows:
    """Rows of one tensor in global order, read on demand from any layout (a file-list RowSource).

    `read(start, stop)` returns rows [start, stop) in a reused buffer that stays
    intact for the next BUFFERS - 1 calls (at least what gpart.formats.filelist.layout's
    RowSource contract asks, and what the one-ahead reader thread of
    iter_global_chunks needs). Remainder shards are interleaved through memory maps,
    `out[r::W] = shard_r[lo:hi]`, one strided copy per shard, with the pages
    read ahead (MADV_WILLNEED) and given back after use (MADV_DONTNEED); range
    shards and global files are read with preadv straight into the buffer.
    Reads are expected in ascending order (any order works, only slower).
    """

    def __init__(self, ckpt: Checkpoint, name: str):
        self.ckpt = ckpt
        self.t = t = ckpt.tensor(name)
        self.policy = ckpt.policy(name)
        self.shape = (t.num_rows, *t.row_shape)
        self.dtype = t.np_dtype
        self._ring = BufferRing(BUFFERS)
        self._strided = not self.policy.is_contiguous
        self._maps = ShardMaps(ckpt, t) if self._strided and t.row_bytes else None
        self._paths = [ckpt.directory / s.file for s in t.shards]
        self._fds: dict[int, int] = {}
        # the shards' CRCs are checked as they are read, so damaged input is not re-certified
        self._crc = OnTheWayCrc(self._paths, [s.bytes - s.offset for s in t.shards], [s.crc32 for s in t.shards])

    def read(self, start: int, stop: int) -> np.ndarray:
        out = self._ring.get((stop - start, *self.t.row_shape), self.dtype)
        if stop <= start or self.t.row_bytes == 0:
            return out
        if self._strided:
            self._read_strided(start, stop, out)
        else:
            self._read_ranges(start, stop, out)
        return out

    def byte_spans(self, start: int, stop: int) -> Optional[list[ByteSpan]]:
        """Where rows [start, stop) lie in the shard files (contiguous layouts), for kernel copies; else None."""
        if self._strided:
            return None
        return contiguous_spans(self.ckpt, self.t, self.policy, start, stop)

    def _read_strided(self, a: int, b: int, out: np.ndarray) -> None:
        world, maps = self.policy.world_size, self._maps
        assert maps is not None  # interleaved shards of non-empty rows are always mapped (__init__)
        ahead = b - a
        for r in range(world):  # ask the kernel for the next chunk while this one is copied
            maps.prefetch(r, b // world, (b + ahead) // world + 1)
        for r in range(world):
            first = a + (r - a) % world  # first global row >= a that rank r holds
            if first >= b:
                continue
            lo = first // world
            hi = lo + (b - 1 - first) // world + 1
            out[first - a :: world] = maps.views[r][lo:hi]
            self._crc.feed(r, lo * self.t.row_bytes, maps.views[r][lo:hi])
            maps.release(r, lo, hi)

    def _read_ranges(self, a: int, b: int, out: np.ndarray) -> None:
        for r, start, pos, end in range_pieces(self.policy, a, b):
            s = self.t.shards[r]
            pread_into(self._fd(r), bytes_view(out[pos - a : end - a]), s.offset + (pos - start) * self.t.row_bytes, self._paths[r])
            self._crc.feed(r, (pos - start) * self.t.row_bytes, out[pos - a : end - a])

    def _fd(self, rank: int) -> int:
        if rank not in self._fds:
            for old in list(self._fds):  # shards are read one after another: keep one open
                os.close(self._fds.pop(old))
            self._fds[rank] = open_sequential(self._paths[rank])
        return self._fds[rank]

    def close(self) -> None:
        if self._maps is not None:
            self._maps.close()
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
        self._ring.clear()

    def __enter__(self) -> "GlobalRows":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def iter_global_chunks(
    ckpt: Checkpoint, name: str, chunk_rows: Optional[int] = None, background: bool = True,
    spans: Optional[Sequence[tuple[int, int]]] = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """(start, rows[start:start+k]) of tensor `name` in global row order, from any layout.

    Pieces of at most `chunk_rows` rows (about 32 MiB by default), each valid
    until the next one is requested. With `background`, a helper thread reads
    the next piece while the caller writes the current one. `spans`: only the
    global rows [lo, hi) of each (lo, hi), in the order given (default: all rows).
    """
    t = ckpt.tensor(name)
    n = t.num_rows
    if n == 0:
        return
    step = min(n, rows_per_piece(t.row_bytes, chunk_rows, PIECE_BYTES))

    def pieces() -> Iterator[tuple[int, np.ndarray]]:
        with GlobalRows(ckpt, name) as rows:
            for lo, hi in spans if spans is not None else [(0, n)]:
                for a in range(lo, hi, step):
                    yield a, rows.read(a, min(hi, a + step))

    yield from (in_background(pieces()) if background else pieces())


class ShardSink:
    """Distributes global-order chunks of one tensor to the shard files of `ranks` (default: all) under a
    target policy, each written by gpart.formats.checkpoint.writer's ShardWriter. A context manager:
    leaving it by an exception abandons the files (the caller removes its staging directory)."""

    def __init__(self, directory: Path, name: str, t: TensorInfo, policy: ShardPolicy, step: int,
                 stem: Optional[str] = None, ranks: Optional[Iterable[int]] = None):
        self.policy = policy
        world = policy.world_size
        self.files: dict[int, ShardWriter] = {}
        try:
            for r in range(world) if ranks is None else ranks:
                self.files[r] = ShardWriter(directory, name, r, world, t.dtype, t.row_shape, stem=stem, crc_in_thread=True)
        except BaseException:
            self.discard()
            raise
        # interleaved ranks take every W-th row of a chunk: gathered into this buffer, then written
        interleaved = not policy.is_contiguous
        self.tmp = np.empty((-(-step // world) + 1, *t.row_shape), dtype=t.np_dtype) if interleaved else None

    def feed(self, a: int, chunk: np.ndarray) -> None:
        b = a + chunk.shape[0]
        world = self.policy.world_size
        if self.tmp is not None:
            for r, f in self.files.items():
                first = (r - a) % world
                if first >= chunk.shape[0]:
                    continue
                count = (chunk.shape[0] - 1 - first) // world + 1
                np.copyto(self.tmp[:count], chunk[first::world])
                f.write(self.tmp[:count])
            return
        for r, _, pos, end in range_pieces(self.policy, a, b):
            if r in self.files:
                self.files[r].write(chunk[pos - a : end - a])

    def close(self) -> list[dict[str, Any]]:
        """fsync and close every file; their shard entries."""
        for f in self.files.values():
            f.close()
        return [f.shard_entry() for f in self.files.values()]

    def discard(self) -> None:
        for f in self.files.values():
            f.discard()

    def __enter__(self) -> "ShardSink":
        return self

    def __exit__(self, exc_type, *rest) -> None:
        if exc_type is not None:
            self.discard()


def tensor_bytes(ckpt: Checkpoint) -> int:
    """Bytes of all tensor data of a checkpoint (headers not counted)."""
    return sum(t.nbytes for t in ckpt.tensors.values())
