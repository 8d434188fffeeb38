"""Storage backends of a partition result (SPEC.md 4.2, 4.3): how one array's rows reach the disk.

- `BinaryArrayWriter`: one flat file `<key>.bin` (gpart.formats.files.arrays.ArrayWriter),
  written directly or through the `IOThread` (checksum, write and fsync overlap
  the partitioner's compute);
- `HDF5ArrayWriter`: one contiguous, uncompressed dataset `/<key>` of partitions.h5;
- h5py helpers shared with the reader (`h5_write_problem`, `refuse_outside_storage`).

Keys, dtypes and the manifest are gpart.formats.partition.writer's; this module only moves rows.
"""

from __future__ import annotations

import os
import queue
import threading
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from gpart.base.errors import IntegrityError, OutputError
from gpart.bytes.crc import CHUNK_BYTES
from gpart.formats.files.arrays import ArrayEntry, ArrayWriter
from gpart.formats.files.dtypes import storage_dtype

HDF5_FILE = "partitions.h5"
FILES_AWAITING_FSYNC = 64


class IOThread:
    """One background thread that checksums and writes binary array files, and one that fsyncs them.

    The partitioner's numpy work (sorts, gathers) releases the GIL, and so do
    zlib.crc32, write and fsync, so moving I/O here overlaps it with compute.
    A finished file's fsync runs in the second thread (`sync_later`) while the
    first goes on writing the next file: waiting for the disk no longer stalls
    the writes. Pending work is bounded by bytes; the first error stops further
    writes and is raised to the caller at the next submit or at drain(), which
    returns only once every file is on disk.
    """

    def __init__(self, max_pending_bytes: int = 4 * CHUNK_BYTES):
        self._max = max_pending_bytes
        self._pending = 0
        self._cond = threading.Condition()
        self._queue: "queue.Queue" = queue.Queue()
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="gpart-writer", daemon=True)
        self._thread.start()
        self._syncs = ThreadPoolExecutor(1, thread_name_prefix="gpart-fsync")
        self._synced: list[Future] = []
        # each file waiting for its fsync keeps its descriptor open: bound them (thousands of parts)
        self._sync_slots = threading.BoundedSemaphore(FILES_AWAITING_FSYNC)

    def submit(self, fn: Callable[[], None], nbytes: int = 0) -> None:
        with self._cond:
            while self._pending and self._pending + nbytes > self._max and self._error is None:
                self._cond.wait()
            self._raise()
            self._pending += nbytes
        self._queue.put((fn, nbytes))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                self._queue.task_done()
                return
            fn, nbytes = item
            try:
                if self._error is None:
                    fn()
            except BaseException as exc:  # handed to the main thread
                self._error = exc
            finally:
                with self._cond:
                    self._pending -= nbytes
                    self._cond.notify_all()
                self._queue.task_done()

    def sync_later(self, close: Callable[[], None]) -> None:
        """Run `close` (a finished file's fsync and close) in the fsync thread; called from the writer thread,
        which waits here while FILES_AWAITING_FSYNC files are still open for theirs."""
        self._sync_slots.acquire()

        def close_and_free() -> None:
            try:
                close()
            finally:
                self._sync_slots.release()

        self._synced.append(self._syncs.submit(close_and_free))

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def drain(self) -> None:
        """Wait for every submitted write and every fsync; raise the first error."""
        self._queue.join()
        self._raise()
        for future in self._synced:
            future.result()

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self._syncs.shutdown(wait=True)

    def cancel(self) -> None:
        """Skip whatever is still queued, then stop."""
        self._error = self._error or RuntimeError("aborted")
        self.stop()


class PendingEntry:
    """The entry of an array whose last writes may still be in flight; `to_json()` is filled in place."""

    def __init__(self):
        self.json: dict[str, Any] = {}

    def to_json(self) -> dict[str, Any]:
        return self.json


# What finish() returns: an ArrayEntry, or (background writes) a PendingEntry whose
# to_json() dict is filled in place once the file is closed. Both offer to_json().
EntryLike = Union[ArrayEntry, PendingEntry]


class BinaryArrayWriter:
    """Streams one array to `<key>.bin` (a flat array file), directly or through an IOThread."""

    def __init__(self, root: Path, key: str, dtype: str, row_shape: Sequence[int], num_rows: int, io: Optional[IOThread] = None):
        self.file = f"{key}.bin"
        self.num_rows = num_rows
        self.rows = 0
        self.row_shape = tuple(int(s) for s in row_shape)
        self._io = io
        path = root / self.file
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(path.parent, f"cannot create directory: {exc.strerror or exc}") from None
        self._writer = ArrayWriter(path, dtype, row_shape)

    def write(self, chunk: np.ndarray) -> None:
        if self._io is None:
            self._writer.write(chunk)
            return
        if chunk.shape[1:] != self.row_shape:
            raise ValueError(f"{self.file}: chunk rows {chunk.shape[1:]} differ from {self.row_shape}")
        self.rows += chunk.shape[0]
        # The chunk is a fresh array or a view of the read-only input: safe to write later.
        self._io.submit(lambda: self._writer.write(chunk), int(chunk.nbytes))

    def finish(self) -> EntryLike:
        io = self._io
        if io is None:
            self._writer.close()
            self._check_rows(self._writer.rows)
            return self._writer.entry(self.file)
        self._check_rows(self.rows)
        pending = PendingEntry()

        def close() -> None:
            self._writer.flush()
            pending.json.update(self._writer.entry(self.file).to_json())
            io.sync_later(self._writer.close)

        io.submit(close)
        return pending

    def _check_rows(self, rows: int) -> None:
        if rows != self.num_rows:
            raise AssertionError(f"{self.file}: wrote {rows} rows, expected {self.num_rows}")

    def abort(self) -> None:
        self._writer.discard()


def h5_write_problem(exc: OSError) -> str:
    """One line for an h5py write error (h5py's own text spans lines and names C internals)."""
    if exc.errno:
        return f"write failed: {os.strerror(exc.errno)}"
    text = str(exc)
    if "errno = 28" in text or "No space left" in text:
        return "write failed: No space left on device"
    return f"write failed: {text.splitlines()[0] if text else type(exc).__name__}"


def close_h5_quietly(h5: Any) -> None:
    try:
        h5.close()  # flushes; on a full disk that fails again, and the file is removed anyway
    except (OSError, RuntimeError, ValueError, OverflowError):
        pass


def refuse_outside_storage(h5: Any, name: str, dataset: Any, where: str) -> None:
    """A dataset must be stored in partitions.h5 itself: no soft or external link on its path,
    no external raw-data files, no virtual dataset (each would make gpart read other files)."""
    import h5py  # lazily: only HDF5 results need it

    group = h5
    for part in name.strip("/").split("/"):
        link = group.get(part, getlink=True)
        if not isinstance(link, h5py.HardLink):
            raise IntegrityError(where, f"reached through a {type(link).__name__}; a result's datasets must be stored in the file itself")
        group = group[part]
    if dataset.external or dataset.is_virtual:
        raise IntegrityError(where, "stores its data in other files (external or virtual dataset); refused")


class HDF5ArrayWriter:
    """Streams one array into a contiguous dataset, CRC-32 over its little-endian bytes."""

    def __init__(self, h5file: Any, key: str, dtype: str, row_shape: Sequence[int], num_rows: int):
        self.key = key
        self.dtype_name = dtype
        self.dtype = storage_dtype(dtype)
        self.row_shape = tuple(int(s) for s in row_shape)
        self.num_rows = int(num_rows)
        # No chunks, no filters: h5py then lays the dataset out contiguously (SPEC.md 4.3).
        try:
            self.dataset = h5file.create_dataset(key, shape=(self.num_rows, *self.row_shape), dtype=self.dtype)
        except OSError as exc:
            raise OutputError(Path(h5file.filename), h5_write_problem(exc)) from None
        self.rows = 0
        self.crc = 0

    def write(self, chunk: np.ndarray) -> None:
        arr = np.ascontiguousarray(np.asarray(chunk), dtype=self.dtype)
        if arr.shape[1:] != self.row_shape:
            raise ValueError(f"{self.key}: chunk rows {arr.shape[1:]} differ from {self.row_shape}")
        n = arr.shape[0]
        if n:
            try:
                self.dataset[self.rows : self.rows + n] = arr
            except OSError as exc:
                raise OutputError(Path(self.dataset.file.filename), h5_write_problem(exc)) from None
            self.crc = zlib.crc32(arr.reshape(-1).view(np.uint8).data, self.crc)
        self.rows += n

    def finish(self) -> ArrayEntry:
        if self.rows != self.num_rows:
            raise AssertionError(f"{self.key}: wrote {self.rows} rows, expected {self.num_rows}")
        return ArrayEntry(HDF5_FILE, self.dtype_name, (self.num_rows, *self.row_shape), self.crc, {"dataset": "/" + self.key})

    def abort(self) -> None:
        pass


# what PartitionWriter.array hands out: a streaming writer of one array, by storage
PartArrayWriter = Union[BinaryArrayWriter, HDF5ArrayWriter]
