"""Flat binary array files: write in chunks with a running CRC-32, map back validated.

A flat array file is headerless, little-endian and row-major (SPEC.md,
"Flat array files"): `numpy.fromfile`, `numpy.memmap` and WholeGraph's
file-list loaders read it as it is. Its description in a manifest is an
`ArrayEntry`: file name, dtype name, shape, byte count and CRC-32.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal, Optional, Sequence

import numpy as np

from gpart.base.errors import InputError, IntegrityError, short_repr

# CHUNK_BYTES, the CRC helpers and preallocate live in the byte layer; imported here
# too because the format modules (and callers) have always found them here.
from gpart.bytes.crc import CHUNK_BYTES, mapped_file_crc32
from gpart.bytes.sink import ByteSink
from gpart.formats.files.dtypes import dtype_name as _name
from gpart.formats.files.dtypes import storage_dtype
from gpart.formats.files.names import safe_relpath

# how an existing array file is mapped: read-only, writable in place, or copy-on-write (np.memmap's modes)
MapMode = Literal["r", "r+", "c"]


@dataclass
class ArrayEntry:
    """One array file as the manifest describes it (SPEC.md, "Array entries")."""

    file: str
    dtype: str
    shape: tuple[int, ...]
    crc32: Optional[int] = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * storage_dtype(self.dtype).itemsize

    def to_json(self) -> dict[str, Any]:
        out = {"file": self.file, "dtype": self.dtype, "shape": list(self.shape), "bytes": self.nbytes}
        if self.crc32 is not None:
            out["crc32"] = f"{self.crc32:08x}"
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, obj: Any, where: Optional[os.PathLike | str] = None) -> "ArrayEntry":
        try:
            shape = tuple(_exact_int(s) for s in obj["shape"])
            if any(s < 0 for s in shape):
                raise ValueError("negative dimension")
            crc = obj.get("crc32")
            entry = cls(
                file=obj["file"],
                dtype=obj["dtype"],
                shape=shape,
                crc32=None if crc is None else int(crc, 16),
                extra={k: v for k, v in obj.items() if k not in ("file", "dtype", "shape", "bytes", "crc32")},
            )
            if not isinstance(entry.dtype, str):
                raise TypeError("dtype is not a string")
            nbytes = _exact_int(obj["bytes"]) if "bytes" in obj else None
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            raise InputError(where, f"malformed array entry {short_repr(obj)}: {exc}") from None
        storage_dtype(entry.dtype, where)
        safe_relpath(entry.file, "array entry file", where)
        if "dataset" in entry.extra:
            dataset = entry.extra["dataset"]
            safe_relpath(dataset[1:] if isinstance(dataset, str) and dataset.startswith("/") else dataset, "array entry dataset", where)
        if nbytes is not None and nbytes != entry.nbytes:
            raise InputError(where, f"array entry {entry.file}: bytes {nbytes} disagree with shape and dtype")
        return entry


def _exact_int(value: Any) -> int:
    """An int from JSON: ints only (no bools, floats or strings)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{value!r} is not an integer")
    return value


class ArrayWriter(ByteSink):
    """Appends row chunks of one dtype and row shape to one flat file (a buffered ByteSink).

    Use as a context manager; `entry()` describes the finished file as an
    ArrayEntry. The file is flushed and fsynced on close, so a manifest written
    afterwards never names data that is not on disk.
    """

    def __init__(self, path: os.PathLike | str, dtype_name: str, row_shape: Sequence[int] = ()):
        self.dtype_name = dtype_name
        self.dtype = storage_dtype(dtype_name)
        self.row_shape = tuple(int(s) for s in row_shape)
        self.rows = 0
        super().__init__(Path(path), crc_in_thread=False, buffered=True)

    def write(self, chunk: np.ndarray) -> None:
        arr = np.asarray(chunk)
        if arr.shape[1:] != self.row_shape:
            raise ValueError(f"{self.path}: chunk rows {arr.shape[1:]} differ from {self.row_shape}")
        if arr.dtype != self.dtype:
            arr = arr.astype(self.dtype)
        super().write(arr)
        self.rows += arr.shape[0] if arr.ndim else 1

    def entry(self, name: Optional[str] = None) -> ArrayEntry:
        return ArrayEntry(name or self.path.name, self.dtype_name, (self.rows, *self.row_shape), self.crc)


def write_array(
    directory: os.PathLike | str,
    name: str,
    arr: np.ndarray,
    dtype_name: Optional[str] = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> ArrayEntry:
    """Write `arr` (possibly a memmap) to `directory/name` in chunks; return its entry."""
    arr = np.asarray(arr) if not isinstance(arr, np.ndarray) else arr
    dname = dtype_name or _name(arr.dtype)
    path = Path(directory) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with ArrayWriter(path, dname, arr.shape[1:]) as writer:
        for chunk in iter_row_chunks(arr, chunk_bytes):
            writer.write(chunk)
    return writer.entry(name)


def iter_row_chunks(arr: np.ndarray, chunk_bytes: int = CHUNK_BYTES) -> Iterable[np.ndarray]:
    """Row slices of `arr` of about `chunk_bytes` each (at least one row); 0-d arrays as one row."""
    if arr.ndim == 0:
        yield arr.reshape(1)
        return
    row_bytes = max(1, int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize)
    step = max(1, chunk_bytes // row_bytes)
    if arr.shape[0] == 0:
        yield arr
        return
    for start in range(0, arr.shape[0], step):
        yield arr[start : start + step]


def inside(directory: os.PathLike | str, name: str) -> Path:
    """`directory/name`, refused (IntegrityError) when a symbolic link on the way leads out of
    `directory`: a result must never make gpart read someone else's file."""
    directory = Path(directory)
    path = directory / name
    if os.path.islink(path) or not path.resolve().is_relative_to(directory.resolve()):
        raise IntegrityError(path, "is a symbolic link (or lies behind one); a result's files must be inside its directory")
    return path


def check_file_size(path: Path, entry: ArrayEntry) -> Path:
    """`path`, after checking that it exists and holds exactly the entry's bytes."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise IntegrityError(path, "file named in the manifest is missing") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if size != entry.nbytes:
        raise IntegrityError(path, f"size {size} bytes, manifest says {entry.nbytes} ({entry.dtype} {list(entry.shape)})")
    return path


def open_array(
    directory: os.PathLike | str,
    entry: ArrayEntry,
    verify: bool = False,
    mode: MapMode = "r",
) -> np.ndarray:
    """Memory-map the file an entry names, after checking its size (and with verify its CRC-32, summed through a
    map in pieces: memory stays bounded however large the file; an entry without a CRC-32 is refused)."""
    path = check_file_size(inside(directory, entry.file), entry)
    if verify:
        if entry.crc32 is None:
            raise IntegrityError(path, "manifest gives no crc32 to check the file against")
        actual = mapped_file_crc32(path, entry.nbytes)
        if actual != entry.crc32:
            raise IntegrityError(path, f"checksum mismatch: crc32 {actual:08x}, manifest says {entry.crc32:08x}")
    dtype = storage_dtype(entry.dtype, path)
    if entry.nbytes == 0:
        return np.zeros(entry.shape, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode=mode, shape=entry.shape)
