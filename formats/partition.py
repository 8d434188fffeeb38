"""Partition results on disk (SPEC.md section 4): binary and HDF5 writers, and the reader.

Both storages hold the same logical arrays under the same keys
(`book/owner`, `part_0/indptr`, `part_0/node_data/feat`, ...):

- binary: one flat little-endian file per array, `<key>.bin`;
- hdf5: one contiguous, uncompressed dataset per array, `/<key>`, in
  `partitions.h5`, whose root attributes repeat the manifest.

Writers stream row chunks and compute each array's CRC-32 over its raw
little-endian bytes as they go, so a checksum never needs a second pass.
`PartitionReader` validates the whole manifest (format, version, storage,
counts, shapes, file sizes) before it touches any data; h5py is imported only
when an HDF5 result is read.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import zlib
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np

from gpart.book import ArrayBook, PartitionBook, RuleBook, remainder_book
from gpart.errors import InputError, IntegrityError, OutputError
from gpart.formats.arrays import CHUNK_BYTES, ArrayEntry, ArrayWriter, array_crc32, check_file_size, file_crc32, inside, iter_row_chunks, open_array
from gpart.formats.dtypes import dtype_name, storage_dtype
from gpart.formats.hetero_partition import HeteroMeta
from gpart.formats.manifest import MANIFEST_NAME, read_manifest, require
from gpart.formats.names import safe_name, safe_relpath
from gpart.shard import RangePolicy

FORMAT = "gpart.partition"
VERSION = 1
STORAGES = ("binary", "hdf5")
HDF5_FILE = "partitions.h5"

# dtype name of each topology / book array (SPEC.md 4.2)
TOPOLOGY_DTYPES = {"node_ids": "int64", "indptr": "int64", "indices": "int64", "edge_ids": "int64"}
BOOK_DTYPES = {"owner": "int32", "local": "int64"}


def part_dir(part: int) -> str:
    return f"part_{part}"


# --------------------------------------------------------------------------- writers


class _IOThread:
    """One background thread that checksums, writes and fsyncs binary array files.

    The partitioner's numpy work (sorts, gathers) releases the GIL, and so do
    zlib.crc32, write and fsync, so moving I/O here overlaps it with compute.
    Pending work is bounded by bytes; the first error stops further writes and
    is raised to the caller at the next submit or at drain().
    """

    def __init__(self, max_pending_bytes: int = 4 * CHUNK_BYTES):
        self._max = max_pending_bytes
        self._pending = 0
        self._cond = threading.Condition()
        self._queue: "queue.Queue" = queue.Queue()
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="gpart-writer", daemon=True)
        self._thread.start()

    def submit(self, fn, nbytes: int = 0) -> None:
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

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def drain(self) -> None:
        """Wait for every submitted write; raise the first error."""
        self._queue.join()
        self._raise()

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join()


class _PendingEntry:
    """The entry of an array whose last writes may still be in flight; `to_json()` is filled in place."""

    def __init__(self):
        self.json: dict[str, Any] = {}

    def to_json(self) -> dict[str, Any]:
        return self.json


# What finish() returns: an ArrayEntry, or (background writes) a _PendingEntry whose
# to_json() dict is filled in place once the file is closed. Both offer to_json().
EntryLike = Union[ArrayEntry, _PendingEntry]


class _BinaryArrayWriter:
    """Streams one array to `<key>.bin` (a flat array file), directly or through an _IOThread."""

    def __init__(self, root: Path, key: str, dtype: str, row_shape: Sequence[int], num_rows: int, io: Optional[_IOThread] = None):
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

    def finish(self):
        if self._io is None:
            self._writer.close()
            self._check_rows(self._writer.rows)
            return self._writer.entry(self.file)
        self._check_rows(self.rows)
        pending = _PendingEntry()

        def close() -> None:
            self._writer.close()
            pending.json.update(self._writer.entry(self.file).to_json())

        self._io.submit(close)
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


def _close_h5_quietly(h5: Any) -> None:
    try:
        h5.close()  # flushes; on a full disk that fails again, and the file is removed anyway
    except (OSError, RuntimeError, ValueError, OverflowError):
        pass


def _refuse_outside_storage(h5: Any, name: str, dataset: Any, where: str) -> None:
    """A dataset must be stored in partitions.h5 itself: no soft or external link on its path,
    no external raw-data files, no virtual dataset (each would make gpart read other files)."""
    import h5py

    group = h5
    for part in name.strip("/").split("/"):
        link = group.get(part, getlink=True)
        if not isinstance(link, h5py.HardLink):
            raise IntegrityError(where, f"reached through a {type(link).__name__}; a result's datasets must be stored in the file itself")
        group = group[part]
    if dataset.external or dataset.is_virtual:
        raise IntegrityError(where, "stores its data in other files (external or virtual dataset); refused")


class _HDF5ArrayWriter:
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
            self.crc = zlib.crc32(memoryview(arr.reshape(-1).view(np.uint8)), self.crc)
        self.rows += n

    def finish(self) -> ArrayEntry:
        if self.rows != self.num_rows:
            raise AssertionError(f"{self.key}: wrote {self.rows} rows, expected {self.num_rows}")
        return ArrayEntry(HDF5_FILE, self.dtype_name, (self.num_rows, *self.row_shape), self.crc, {"dataset": "/" + self.key})

    def abort(self) -> None:
        pass


class PartitionWriter:
    """Writes the arrays of a partition result into a (staging) directory.

    `array(key, dtype, row_shape, num_rows)` returns a streaming writer
    (`write(chunk)`, `finish() -> EntryLike`); `write_array` writes a whole
    (possibly memory-mapped) array in chunks. Chunks handed to a writer must
    not be modified afterwards (binary files are written by a background
    thread). `close(manifest)` finishes the storage (waits for background
    writes; HDF5: root attributes, flush, fsync); the caller then commits
    manifest.json.
    """

    def __init__(self, directory: os.PathLike | str, storage: str = "binary", background: bool = True):
        if storage not in STORAGES:
            raise ValueError(f"unknown storage {storage!r} (expected one of {', '.join(STORAGES)})")
        self.directory = Path(directory)
        self.storage = storage
        self._h5 = None
        # Binary files are checksummed and written by a background thread (HDF5 stays on
        # the caller's thread: h5py serialises calls anyway). Entries returned by
        # finish() are then complete only after close().
        self._io = _IOThread() if background and storage == "binary" else None
        if storage == "hdf5":
            import h5py  # lazily: only HDF5 results need it

            path = self.directory / HDF5_FILE
            try:
                self._h5 = h5py.File(path, "w", libver="earliest")
            except OSError as exc:
                raise OutputError(path, f"cannot create HDF5 file: {exc}") from None

    def array(self, key: str, dtype: str, row_shape: Sequence[int], num_rows: int):
        safe_relpath(key, "array key")  # node/edge data names of library callers reach here unchecked
        if self._h5 is not None:
            return _HDF5ArrayWriter(self._h5, key, dtype, row_shape, num_rows)
        return _BinaryArrayWriter(self.directory, key, dtype, row_shape, num_rows, self._io)

    def write_array(self, key: str, arr: np.ndarray, dtype: Optional[str] = None, chunk_bytes: int = CHUNK_BYTES) -> "EntryLike":
        arr = np.asarray(arr) if not isinstance(arr, np.ndarray) else arr
        writer = self.array(key, dtype or dtype_name(arr.dtype), arr.shape[1:], arr.shape[0])
        for chunk in iter_row_chunks(arr, chunk_bytes):
            writer.write(chunk)
        return writer.finish()

    def write_chunks(self, key: str, dtype: str, row_shape: Sequence[int], num_rows: int, chunks: Iterable[np.ndarray]) -> "EntryLike":
        writer = self.array(key, dtype, row_shape, num_rows)
        for chunk in chunks:
            writer.write(chunk)
        return writer.finish()

    def after_writes(self, fn) -> None:
        """Run `fn()` once every chunk handed over so far is written (e.g. to release input pages)."""
        if self._io is not None:
            self._io.submit(fn)
        else:
            fn()

    def close(self, manifest: dict[str, Any]) -> None:
        """Finish the storage: wait for background writes (binary), or store the manifest as root
        attributes and fsync the file (HDF5). Every entry is complete afterwards."""
        if self._io is not None:
            io, self._io = self._io, None
            try:
                io.drain()
            finally:
                io.stop()
        if self._h5 is None:
            return
        h5, self._h5 = self._h5, None
        path = self.directory / HDF5_FILE
        try:
            h5.attrs["format"] = FORMAT
            h5.attrs["version"] = VERSION
            h5.attrs["manifest"] = json.dumps(manifest, sort_keys=False)
            h5.flush()
            h5.close()
        except OSError as exc:
            _close_h5_quietly(h5)
            raise OutputError(path, h5_write_problem(exc)) from None
        try:
            with open(path, "rb+") as fh:
                os.fsync(fh.fileno())
        except OSError as exc:
            raise OutputError(path, f"write failed: {exc.strerror or exc}") from None

    def abort(self) -> None:
        if self._io is not None:
            io, self._io = self._io, None
            io._error = io._error or RuntimeError("aborted")  # skip what is still queued
            io.stop()
        if self._h5 is not None:
            h5, self._h5 = self._h5, None
            _close_h5_quietly(h5)


# --------------------------------------------------------------------------- reader


class PartitionReader:
    """A partition result on disk, validated from its manifest before any data is read.

    `array(p, key)` returns a memory map (binary) or an array read through
    h5py (hdf5) of partition p's array `key` (`node_ids`, `indptr`,
    `indices`, `edge_ids`, `node_data/<name>`, `edge_data/<name>`).
    """

    def __init__(self, directory: os.PathLike | str, check_files: bool = True):
        self.directory = Path(directory)
        # verify() passes check_files=False so that it can list every damaged file, not stop at the first.
        self._check_files = check_files
        self.manifest_file = self.directory / MANIFEST_NAME
        self.manifest: dict[str, Any] = read_manifest(self.directory, FORMAT, (VERSION,))
        self._h5 = None
        self._entries: list[dict[str, ArrayEntry]] = []
        self._book_entries: dict[str, ArrayEntry] = {}
        self._validate()

    # -- manifest validation (no data touched)

    def _validate(self) -> None:
        m, where = self.manifest, self.manifest_file
        storage = require(m, "storage", str, where)
        if storage not in STORAGES:
            raise InputError(where, f"unknown storage {storage!r} (expected one of {', '.join(STORAGES)})")
        graph = require(m, "graph", dict, where)
        num_nodes = require(graph, "num_nodes", int, where)
        num_edges = require(graph, "num_edges", int, where)
        num_parts = require(m, "num_parts", int, where)
        if num_parts < 1 or num_nodes < 0 or num_edges < 0:
            raise InputError(where, f"bad counts: num_parts {num_parts}, num_nodes {num_nodes}, num_edges {num_edges}")
        halo = require(m, "halo", int, where)
        if halo not in (0, 1):
            raise InputError(where, f"halo must be 0 or 1, got {halo}")
        node_data = require(m, "node_data", dict, where)
        edge_data = require(m, "edge_data", dict, where)
        parts = require(m, "partitions", list, where)
        if len(parts) != num_parts:
            raise InputError(where, f"lists {len(parts)} partitions, num_parts is {num_parts}")
        self._validate_book(require(m, "book", dict, where), num_nodes, num_parts)
        self.hetero = HeteroMeta.from_manifest(m, where)  # typed results (SPEC.md 8.4); None otherwise
        total_owned = total_edges = 0
        for p, part in enumerate(parts):
            if not isinstance(part, dict) or part.get("part") != p:
                raise InputError(where, f"partitions[{p}] is malformed or out of order")
            owned = require(part, "num_owned", int, where)
            halo_n = require(part, "num_halo", int, where)
            edges = require(part, "num_edges", int, where)
            if min(owned, halo_n, edges) < 0:
                raise InputError(where, f"partition {p}: negative count")
            arrays = require(part, "arrays", dict, where)
            data_rows = owned + halo_n if halo else owned
            expected: dict[str, tuple[str, tuple[int, ...]]] = {
                "node_ids": ("int64", (owned + halo_n,)),
                "indptr": ("int64", (owned + 1,)),
                "indices": ("int64", (edges,)),
                "edge_ids": ("int64", (edges,)),
            }
            for name, spec in node_data.items():
                safe_name(name, "node data name", where)
                expected[f"node_data/{name}"] = self._data_spec(spec, data_rows, name)
            for name, spec in edge_data.items():
                safe_name(name, "edge data name", where)
                expected[f"edge_data/{name}"] = self._data_spec(spec, edges, name)
            if self.hetero is not None:
                expected.update(self.hetero.expected_arrays(part, p, where))
            if set(arrays) != set(expected):
                raise InputError(where, f"partition {p}: arrays {sorted(arrays)} differ from the expected {sorted(expected)}")
            entries = {}
            for key, (dtype, shape) in expected.items():
                entry = ArrayEntry.from_json(arrays[key], where)
                if entry.dtype != dtype or entry.shape != shape:
                    raise InputError(where, f"partition {p} {key}: {entry.dtype} {list(entry.shape)}, expected {dtype} {list(shape)}")
                entries[key] = self._check_entry(entry)
            self._entries.append(entries)
            total_owned += owned
            total_edges += edges
        if total_owned != num_nodes or total_edges != num_edges:
            raise InputError(
                where, f"partitions own {total_owned} nodes and store {total_edges} edges; graph has {num_nodes} and {num_edges}"
            )

    def _data_spec(self, spec: Any, rows: int, name: str) -> tuple[str, tuple[int, ...]]:
        try:
            dtype = str(spec["dtype"])
            row_shape = tuple(int(s) for s in spec["row_shape"])
        except (KeyError, TypeError, ValueError, OverflowError):
            raise InputError(self.manifest_file, f"data array {name!r}: malformed description {spec!r}") from None
        storage_dtype(dtype, self.manifest_file)
        return dtype, (rows, *row_shape)

    def _validate_book(self, book: dict[str, Any], num_nodes: int, num_parts: int) -> None:
        where = self.manifest_file
        kind = require(book, "kind", str, where)
        if kind == "remainder":
            return
        if kind == "range":
            bounds = require(book, "boundaries", list, where)
            try:
                RangePolicy(num_nodes, num_parts, tuple(int(b) for b in bounds))
            except (TypeError, ValueError, OverflowError) as exc:
                raise InputError(where, f"book: {exc}") from None
            return
        if kind != "array":
            raise InputError(where, f"unknown book kind {kind!r} (expected remainder, range or array)")
        for key, dtype in BOOK_DTYPES.items():
            entry = ArrayEntry.from_json(require(book, key, dict, where), where)
            if entry.dtype != dtype or entry.shape != (num_nodes,):
                raise InputError(where, f"book {key}: {entry.dtype} {list(entry.shape)}, expected {dtype} [{num_nodes}]")
            self._book_entries[key] = self._check_entry(entry)

    def _check_entry(self, entry: ArrayEntry) -> ArrayEntry:
        """Binary: the file exists with the manifest's size. HDF5: names partitions.h5 and a dataset."""
        if self.storage == "hdf5":
            if entry.file != HDF5_FILE or not isinstance(entry.extra.get("dataset"), str):
                raise InputError(self.manifest_file, f"array entry {entry.file!r} lacks a dataset in {HDF5_FILE}")
            return entry
        if not self._check_files:
            return entry
        check_file_size(inside(self.directory, entry.file), entry)
        return entry

    # -- properties

    @property
    def storage(self) -> str:
        return self.manifest["storage"]

    @property
    def num_parts(self) -> int:
        return int(self.manifest["num_parts"])

    @property
    def num_nodes(self) -> int:
        return int(self.manifest["graph"]["num_nodes"])

    @property
    def num_edges(self) -> int:
        return int(self.manifest["graph"]["num_edges"])

    @property
    def halo(self) -> int:
        return int(self.manifest["halo"])

    def node_data_names(self) -> list[str]:
        return list(self.manifest["node_data"])

    def edge_data_names(self) -> list[str]:
        return list(self.manifest["edge_data"])

    def part_info(self, part: int) -> dict[str, Any]:
        self._check_part(part)
        return self.manifest["partitions"][part]

    def entry(self, part: int, key: str) -> ArrayEntry:
        self._check_part(part)
        try:
            return self._entries[part][key]
        except KeyError:
            raise KeyError(f"partition {part} has no array {key!r} (has {', '.join(self._entries[part])})") from None

    def keys(self, part: int) -> list[str]:
        self._check_part(part)
        return list(self._entries[part])

    def _check_part(self, part: int) -> None:
        if not 0 <= part < self.num_parts:
            raise IndexError(f"partition {part} out of range 0..{self.num_parts - 1}")

    # -- data

    def array(self, part: int, key: str, verify: bool = False, mode: str = "r") -> np.ndarray:
        return self.read_entry(self.entry(part, key), verify, mode)

    def book(self) -> PartitionBook:
        book = self.manifest["book"]
        kind = book["kind"]
        if kind == "remainder":
            return remainder_book(self.num_nodes, self.num_parts)
        if kind == "range":
            return RuleBook(RangePolicy(self.num_nodes, self.num_parts, tuple(int(b) for b in book["boundaries"])))
        owner = self.read_entry(self._book_entries["owner"])
        local = self.read_entry(self._book_entries["local"])
        if owner.size and (int(owner.min()) < 0 or int(owner.max()) >= self.num_parts):
            raise IntegrityError(self.directory / self._book_entries["owner"].file, f"owner ids outside 0..{self.num_parts - 1}")
        return ArrayBook(owner, self.num_parts, local)

    def book_entries(self) -> dict[str, ArrayEntry]:
        return dict(self._book_entries)

    def read_entry(self, entry: ArrayEntry, verify: bool = False, mode: str = "r") -> np.ndarray:
        """The array an entry names, memory-mapped: the binary file, or the bytes of a
        contiguous HDF5 dataset (gpart writes them so; others are read through h5py).
        mode "c" gives a writable copy-on-write map, which torch.from_numpy wraps as is."""
        if self.storage == "binary":
            return open_array(self.directory, entry, verify=verify, mode=mode)
        dataset = self._dataset(entry)
        dtype = storage_dtype(entry.dtype)
        offset = dataset.id.get_offset() if entry.nbytes else None
        if offset is None or dataset.chunks is not None or dataset.compression is not None:
            arr = np.empty(entry.shape, dtype=dtype)
            if arr.size:
                dataset.read_direct(arr)
        else:
            path = self.directory / HDF5_FILE
            if offset + entry.nbytes > path.stat().st_size:
                raise IntegrityError(self._h5_where(entry), f"dataset extends past the end of {HDF5_FILE} (truncated file)")
            arr = np.memmap(path, dtype=dtype, mode=mode, offset=offset, shape=entry.shape)
        if verify and entry.crc32 is not None:
            crc = array_crc32(arr)
            if crc != entry.crc32:
                raise IntegrityError(self._h5_where(entry), f"checksum mismatch: crc32 {crc:08x}, manifest says {entry.crc32:08x}")
        return arr

    # -- hdf5 helpers

    def _h5_where(self, entry: ArrayEntry) -> str:
        return f"{self.directory / HDF5_FILE}:{entry.extra['dataset']}"

    def h5file(self):
        """The open (read-only) partitions.h5 of an HDF5 result; h5py is imported here only."""
        if self._h5 is None:
            import h5py  # lazily: only HDF5 results need it

            path = self.directory / HDF5_FILE
            if not path.exists():
                raise IntegrityError(path, "file named in the manifest is missing")
            inside(self.directory, HDF5_FILE)
            try:
                self._h5 = h5py.File(path, "r")
            except OSError as exc:
                raise IntegrityError(path, f"not a readable HDF5 file: {exc}") from None
        return self._h5

    def _dataset(self, entry: ArrayEntry):
        h5 = self.h5file()
        name = entry.extra["dataset"]
        try:
            dataset = h5[name]
        except KeyError:
            raise IntegrityError(self._h5_where(entry), "dataset named in the manifest is missing") from None
        except Exception as exc:  # h5py raises assorted errors on damaged files
            raise IntegrityError(self._h5_where(entry), f"cannot open dataset: {exc}") from None
        _refuse_outside_storage(h5, name, dataset, self._h5_where(entry))
        expected = storage_dtype(entry.dtype)
        if tuple(dataset.shape) != entry.shape or dataset.dtype != expected:
            raise IntegrityError(
                self._h5_where(entry), f"dataset is {dataset.dtype} {list(dataset.shape)}, manifest says {entry.dtype} {list(entry.shape)}"
            )
        return dataset

    def close(self) -> None:
        if self._h5 is not None:
            self._h5.close()
            self._h5 = None

    def __enter__(self) -> "PartitionReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- checksums

    def all_entries(self) -> list[tuple[str, ArrayEntry]]:
        """(label, entry) for every array in the result, book first."""
        out = [(f"book/{k}", e) for k, e in self._book_entries.items()]
        for p, entries in enumerate(self._entries):
            out += [(f"{part_dir(p)}/{k}", e) for k, e in entries.items()]
        return out

    def verify_checksums(self) -> list[str]:
        """Check every array's size and CRC-32; return one line per problem (empty when intact)."""
        problems: list[str] = []
        for _, entry in self.all_entries():
            try:
                self.check_checksum(entry)
            except (IntegrityError, InputError) as exc:
                problems.append(exc.one_line())
        return problems

    def check_checksum(self, entry: ArrayEntry) -> None:
        """Raise IntegrityError unless the array an entry names has its size and CRC-32."""
        if self.storage == "binary":
            self._check_binary_checksum(entry)
        else:
            self._check_hdf5_checksum(entry)

    def _check_binary_checksum(self, entry: ArrayEntry) -> None:
        path = inside(self.directory, entry.file)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise IntegrityError(path, "file named in the manifest is missing") from None
        if size != entry.nbytes:
            raise IntegrityError(path, f"size {size} bytes, manifest says {entry.nbytes}")
        if entry.crc32 is None:
            raise IntegrityError(path, "manifest gives no crc32")
        crc = file_crc32(path)
        if crc != entry.crc32:
            raise IntegrityError(path, f"checksum mismatch: crc32 {crc:08x}, manifest says {entry.crc32:08x}")

    def _check_hdf5_checksum(self, entry: ArrayEntry) -> None:
        dataset = self._dataset(entry)
        if entry.crc32 is None:
            raise IntegrityError(self._h5_where(entry), "manifest gives no crc32")
        crc = 0
        rows = entry.shape[0] if entry.shape else 0
        row_bytes = max(1, entry.nbytes // rows) if rows else 1
        step = max(1, CHUNK_BYTES // row_bytes)
        try:
            for start in range(0, rows, step):
                chunk = np.ascontiguousarray(dataset[start : start + step])
                crc = zlib.crc32(memoryview(chunk.reshape(-1).view(np.uint8)), crc)
        except (OSError, ValueError, OverflowError) as exc:
            raise IntegrityError(self._h5_where(entry), f"cannot read dataset: {exc}") from None
        if crc != entry.crc32:
            raise IntegrityError(self._h5_where(entry), f"checksum mismatch: crc32 {crc:08x}, manifest says {entry.crc32:08x}")
