"""Partition results on disk (SPEC.md section 4): the format's keys and dtypes, its manifest, and the writer.

Both storages hold the same logical arrays under the same keys
(`book/owner`, `part_0/indptr`, `part_0/node_data/feat`, ...):

- binary: one flat little-endian file per array, `<key>.bin`;
- hdf5: one contiguous, uncompressed dataset per array, `/<key>`, in
  `partitions.h5`, whose root attributes repeat the manifest.

Writers stream row chunks and compute each array's CRC-32 over its raw
little-endian bytes as they go, so a checksum never needs a second pass.
The reader, `PartitionReader` in partition_reader.py, validates the whole manifest (format, version, storage,
counts, shapes, file sizes) before it touches any data; h5py is imported only
when an HDF5 result is read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

import numpy as np

from gpart.base.errors import OutputError
from gpart.bytes.crc import CHUNK_BYTES
from gpart.formats.files.arrays import iter_row_chunks
from gpart.formats.files.dtypes import dtype_name
from gpart.formats.files.names import safe_relpath
from gpart.formats.partition.book import ArrayBook, PartitionBook
from gpart.formats.partition.reverse import REVERSE_KEY
from gpart.formats.partition.store import (
    HDF5_FILE,
    BinaryArrayWriter,
    EntryLike,
    HDF5ArrayWriter,
    IOThread,
    PartArrayWriter,
    close_h5_quietly,
    h5_write_problem,
)

FORMAT = "gpart.partition"
VERSION = 1
STORAGES = ("binary", "hdf5")

# dtype name of each topology / book array (SPEC.md 4.2)
TOPOLOGY_DTYPES = {"node_ids": "int64", "indptr": "int64", "indices": "int64", "edge_ids": "int64"}
BOOK_DTYPES = {"owner": "int32", "local": "int64"}


def part_dir(part: int) -> str:
    return f"part_{part}"


def data_key(kind: str, name: str) -> str:
    """The array key of node (`kind` "node") or edge ("edge") data `name`: `node_data/<name>`, `edge_data/<name>`."""
    return f"{kind}_data/{name}"


def data_description(arrays: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """The manifest's `node_data` / `edge_data` object: {name: {dtype, row_shape}}."""
    return {k: {"dtype": dtype_name(a.dtype), "row_shape": list(a.shape[1:])} for k, a in arrays.items()}


def expected_arrays(
    num_owned: int, num_halo: int, num_edges: int, halo: int, data_specs: Mapping[str, tuple[str, tuple[int, ...]]]
) -> dict[str, tuple[str, tuple[int, ...]]]:
    """{key: (dtype, shape)} of every array of one partition (SPEC.md 4.2), in manifest order.

    `data_specs`: {`node_data/<name>` or `edge_data/<name>`: (dtype, row shape)}. Node
    data holds the halo rows too when the result has halo 1.
    """
    rows = {"node_ids": num_owned + num_halo, "indptr": num_owned + 1, "indices": num_edges, "edge_ids": num_edges}
    out: dict[str, tuple[str, tuple[int, ...]]] = {key: (dtype, (rows[key],)) for key, dtype in TOPOLOGY_DTYPES.items()}
    data_rows = {"node": num_owned + num_halo if halo else num_owned, "edge": num_edges}
    for key, (dtype, row_shape) in data_specs.items():
        out[key] = (dtype, (data_rows[key.split("_", 1)[0]], *row_shape))
    return out


def part_entry(part: int, num_owned: int, num_halo: int, num_edges: int, num_cut: int, arrays: dict[str, Any]) -> dict[str, Any]:
    """One item of the manifest's `partitions` list (`num_cut` is taken out again before PartitionManifest)."""
    return {"part": part, "num_owned": int(num_owned), "num_halo": int(num_halo), "num_edges": int(num_edges),
            "num_cut": int(num_cut), "arrays": arrays}


@dataclass
class PartitionManifest:
    """What the manifest of a partition result (SPEC.md 4.1) says; `to_json()` is the manifest."""

    graph: dict[str, Any]  # the input: source, input_format, num_nodes, num_edges (and data files added)
    storage: str  # one of STORAGES
    created_by: str
    method: str  # the partition method and its parameters
    params: dict[str, Any]
    halo: int
    book: dict[str, Any]  # PartitionWriter.write_book's object
    node_data: Mapping[str, np.ndarray]  # arrays (or empty ones alike) whose dtype and row shape are described
    edge_data: Mapping[str, np.ndarray]
    parts: list[dict[str, Any]]  # part_entry items, num_cut taken out
    stats: dict[str, Any]
    reverse: Optional[dict[str, Any]] = None  # results with reverse edges (SPEC.md 4.7)

    def to_json(self) -> dict[str, Any]:
        """The manifest, keys in the order SPEC.md shows; `reverse` follows the book."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "storage": self.storage,
            "created_by": self.created_by,
            "graph": self.graph,
            "num_parts": len(self.parts),
            "method": self.method,
            "params": self.params,
            "halo": self.halo,
            "book": self.book,
            **({} if self.reverse is None else {REVERSE_KEY: self.reverse}),
            "node_data": data_description(self.node_data),
            "edge_data": data_description(self.edge_data),
            "partitions": self.parts,
            "stats": self.stats,
        }


# --------------------------------------------------------------------------- writer


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

    def __init__(self, directory: os.PathLike | str, storage: str = "binary", background: bool = True,
                 queue_bytes: Optional[int] = None):
        if storage not in STORAGES:
            raise ValueError(f"unknown storage {storage!r} (expected one of {', '.join(STORAGES)})")
        self.directory = Path(directory)
        self.storage = storage
        self._h5 = None
        # Binary files are checksummed and written by a background thread (HDF5 stays on
        # the caller's thread: h5py serialises calls anyway). Entries returned by
        # finish() are then complete only after close(). `queue_bytes`: chunks waiting for that thread
        # (None: IOThread's default, 4 chunks of CHUNK_BYTES; a bounded-memory pass asks for less).
        self._io = (IOThread() if queue_bytes is None else IOThread(queue_bytes)) if background and storage == "binary" else None
        if storage == "hdf5":
            import h5py  # lazily: only HDF5 results need it

            path = self.directory / HDF5_FILE
            try:
                self._h5 = h5py.File(path, "w", libver="earliest")
            except OSError as exc:
                raise OutputError(path, f"cannot create HDF5 file: {exc}") from None

    def array(self, key: str, dtype: str, row_shape: Sequence[int], num_rows: int) -> PartArrayWriter:
        safe_relpath(key, "array key")  # node/edge data names of library callers reach here unchecked
        if self._h5 is not None:
            return HDF5ArrayWriter(self._h5, key, dtype, row_shape, num_rows)
        return BinaryArrayWriter(self.directory, key, dtype, row_shape, num_rows, self._io)

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

    # -- the format's arrays (keys and dtypes decided here, nowhere else)

    def write_book(self, book: PartitionBook) -> dict[str, Any]:
        """The manifest's `book` object; an array book's owner/local arrays written (SPEC.md 4.2)."""
        out = book.to_json()
        if isinstance(book, ArrayBook):
            for key, arr in (("owner", book.owner_array), ("local", book.local_array)):
                out[key] = self.write_array(f"book/{key}", arr, BOOK_DTYPES[key]).to_json()
        return out

    def write_topology(self, part: int, key: str, data: Union[np.ndarray, Iterable[np.ndarray]], num_rows: Optional[int] = None) -> dict[str, Any]:
        """One of partition `part`'s topology arrays (`node_ids`, `indptr`, `indices`, `edge_ids`),
        from an array or from row chunks (then `num_rows` is required); returns its entry JSON."""
        dtype = TOPOLOGY_DTYPES[key]
        if isinstance(data, np.ndarray):
            return self.write_array(f"{part_dir(part)}/{key}", data, dtype).to_json()
        if num_rows is None:
            raise ValueError(f"{key} of partition {part}: row chunks need num_rows")
        return self.write_chunks(f"{part_dir(part)}/{key}", dtype, (), int(num_rows), data).to_json()

    def data_array(self, part: int, kind: str, name: str, like: np.ndarray, num_rows: int) -> PartArrayWriter:
        """A streaming writer of partition `part`'s `node_data/<name>` or `edge_data/<name>` (kind "node" /
        "edge"): `num_rows` rows of the dtype and row shape of the input array `like`."""
        return self.array(f"{part_dir(part)}/{data_key(kind, name)}", dtype_name(like.dtype), like.shape[1:], num_rows)

    def write_data(self, part: int, kind: str, name: str, like: np.ndarray, num_rows: int, chunks: Iterable[np.ndarray]) -> dict[str, Any]:
        """data_array, filled from `chunks` and finished; returns the entry JSON."""
        writer = self.data_array(part, kind, name, like, num_rows)
        for chunk in chunks:
            writer.write(chunk)
        return writer.finish().to_json()

    def after_writes(self, fn: Callable[[], None]) -> None:
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
            close_h5_quietly(h5)
            raise OutputError(path, h5_write_problem(exc)) from None
        try:
            with open(path, "rb+") as fh:
                os.fsync(fh.fileno())
        except OSError as exc:
            raise OutputError(path, f"write failed: {exc.strerror or exc}") from None

    def abort(self) -> None:
        if self._io is not None:
            io, self._io = self._io, None
            io.cancel()  # skip what is still queued
        if self._h5 is not None:
            h5, self._h5 = self._h5, None
            close_h5_quietly(h5)
