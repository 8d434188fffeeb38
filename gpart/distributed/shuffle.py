"""The shuffle: rows move to the rank that needs them in rounds of bounded messages.

Rows are fixed-width byte records (ids and data packed side by side, so one
`all_to_all_single` per round carries every column). In a round a rank sends
at most `rows_per_round` rows in all, so no message (and no send buffer)
exceeds the `--max-message` bytes they were derived from. Every rank makes
the same number of rounds (agreed with an all_reduce max first) and so the
same collective calls; a rank that fails while producing or storing rows
tells the others through the next round's counts, and the shuffle then stops
on every rank with the failing rank's one-line error (Comm.agree).

Received rows are appended to one scratch file per partition, so a rank
holds one round's rows in memory, not its partitions' edges.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

import numpy as np

from gpart.base.errors import OutputError
from gpart.bytes.written_pages import drop_written
from gpart.collectives.comm import Comm, ShuffleAborted

Block = tuple[np.ndarray, np.ndarray]  # (rows uint8 [n, row_bytes], destination rank of each row)


def rows_per_round(max_message: int, row_bytes: int) -> int:
    """Rows a rank may send in one round: at least one, however wide a row is."""
    return max(1, int(max_message) // max(1, int(row_bytes)))


def pack(columns: Iterable[np.ndarray], num_rows: int) -> np.ndarray:
    """Rows of bytes: each column (int64 ids or data rows) contributes its row's raw bytes, in order."""
    pieces = [np.ascontiguousarray(c).reshape(num_rows, -1).view(np.uint8) for c in columns]
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=1)


def narrow(keys: np.ndarray, bound: int) -> np.ndarray:
    """Small non-negative keys (< bound) in the narrowest unsigned dtype: numpy's stable argsort
    radix-sorts 8- and 16-bit keys in linear time, wider ones by merge sort."""
    return keys.astype(np.uint8 if bound <= 256 else np.uint16 if bound <= 65536 else np.int64, copy=False)


def take_rows(rows: np.ndarray, order: np.ndarray) -> np.ndarray:
    """rows[order] for packed byte rows, each row moved as one void item (numpy gathers a 2-D uint8
    array element by element; as 1-D void items it copies whole rows: several times faster)."""
    rows = np.ascontiguousarray(rows)
    if rows.shape[1] == 0:
        return rows[order]
    items = rows.view(np.dtype((np.void, rows.shape[1]))).reshape(-1)
    return items[order].view(np.uint8).reshape(-1, rows.shape[1])


def column(rows: np.ndarray, start: int, dtype, row_shape: tuple[int, ...] = ()) -> np.ndarray:
    """Column bytes [start, start + row size) of packed rows, as an array of `dtype` and `row_shape` rows."""
    dtype = np.dtype(dtype)
    width = int(np.prod(row_shape, dtype=np.int64)) * dtype.itemsize
    return np.ascontiguousarray(rows[:, start:start + width]).view(dtype).reshape(rows.shape[0], *row_shape)


def shuffle(comm: Comm, blocks: Iterator[Block], local_rounds: int, row_bytes: int,
            deliver: Callable[[np.ndarray], None], what: str) -> int:
    """Run the rounds: send each block's rows to their ranks, hand what arrives to `deliver`; return the rounds.

    Raises on every rank (in bounded time) when any rank failed.
    """
    rounds = int(comm.all_reduce(np.array([local_rounds]), "max")[0])
    error: Optional[BaseException] = None
    empty = np.zeros((0, row_bytes), dtype=np.uint8)
    for _ in range(rounds):
        rows, counts = empty, np.zeros(comm.world, dtype=np.int64)
        if error is None:
            try:
                block = next(blocks, None)
                if block is not None:
                    rows, dest = block
                    if comm.world > 1 and not bool(np.all(dest[1:] >= dest[:-1])):
                        rows = take_rows(rows, np.argsort(narrow(dest, comm.world), kind="stable"))
                    counts = np.bincount(dest, minlength=comm.world).astype(np.int64)
            except Exception as exc:  # handed to every rank through the counts, then Comm.agree
                error = exc
        try:
            received, _ = comm.exchange_rows(rows, None if error is not None else counts)
        except ShuffleAborted:
            break
        if error is None:
            try:
                deliver(received)
            except Exception as exc:
                error = exc
    comm.agree(error, what)
    return rounds


class PartFiles:
    """Append-only scratch files of received rows, one per partition (under a ScratchDir's path)."""

    def __init__(self, directory: Path, tag: str, parts: Iterable[int], row_bytes: int):
        self.row_bytes = row_bytes
        self.paths = {p: directory / f"{tag}-{p}.rows" for p in parts}
        self.rows = {p: 0 for p in self.paths}
        for path in self.paths.values():
            path.touch()

    def append(self, part: int, rows: np.ndarray) -> None:
        """Rows for `part` after those before, written back and dropped from the page cache (a memory cgroup counts
        dirty pages; the rows are read back once, at the end)."""
        path = self.paths[part]
        try:
            with open(path, "ab") as fh:
                fh.write(memoryview(np.ascontiguousarray(rows).reshape(-1)))
                fh.flush()
                drop_written(fh.fileno(), self.rows[part] * self.row_bytes, rows.shape[0] * self.row_bytes)
        except OSError as exc:
            raise OutputError(path, f"write failed: {exc.strerror or exc}") from None
        self.rows[part] += rows.shape[0]

    def append_grouped(self, rows: np.ndarray, part_of_row: np.ndarray, num_parts: int) -> None:
        """Append each row to its partition's file (rows keep their order within a partition)."""
        if rows.shape[0] == 0:
            return
        order = np.argsort(narrow(part_of_row, num_parts), kind="stable")
        ordered, parts = take_rows(rows, order), part_of_row[order]
        bounds = np.flatnonzero(np.diff(parts)) + 1
        for lo, hi in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [parts.shape[0]]])):
            self.append(int(parts[lo]), ordered[lo:hi])

    def mapped(self, part: int) -> np.ndarray:
        """All rows received for `part`, mapped read-only from the file (remove it with `remove` after use)."""
        if self.rows[part] == 0:
            return np.zeros((0, self.row_bytes), dtype=np.uint8)
        return np.memmap(self.paths[part], dtype=np.uint8, mode="r", shape=(self.rows[part], self.row_bytes))

    def remove(self, part: int) -> None:
        os.unlink(self.paths[part])

    def read(self, part: int) -> np.ndarray:
        """All rows received for `part`, read into memory; the file is removed."""
        path = self.paths[part]
        data = np.fromfile(path, dtype=np.uint8)
        os.unlink(path)
        assert data.shape[0] == self.rows[part] * self.row_bytes, "scratch file does not hold the rows appended"
        return data.reshape(self.rows[part], self.row_bytes)
