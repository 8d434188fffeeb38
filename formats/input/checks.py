"""Checks shared by every input reader (SPEC.md section 3): input files, names, array specs,
id arrays, data arrays and row counts; each problem one InputError naming the file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

import numpy as np

from gpart.base.errors import InputError
from gpart.bytes.reader import drop_pages
from gpart.formats.files.names import safe_name

PathLike = Union[str, "os.PathLike[str]"]

# Bytes per step when scanning (possibly memory-mapped) id arrays.
SCAN_BYTES = 64 << 20
COMPRESSIONS = {".gz": "gzip", ".xz": "xz", ".bz2": "bzip2"}


def scan_range(arr: np.ndarray, chunk_bytes: int = SCAN_BYTES) -> tuple[int, int]:
    """(min, max) of an integer array in bounded-memory chunks; (0, -1) when empty."""
    if arr.size == 0:
        return 0, -1
    flat = arr.reshape(-1)
    step = max(1, chunk_bytes // max(1, flat.dtype.itemsize))
    lo, hi = int(flat[0]), int(flat[0])  # the array is not empty
    for start in range(0, flat.shape[0], step):
        chunk = flat[start : start + step]
        lo, hi = min(lo, int(chunk.min())), max(hi, int(chunk.max()))
        drop_pages(arr, start * flat.dtype.itemsize, len(chunk) * flat.dtype.itemsize)
    return lo, hi


def split_compression(name: str) -> tuple[str, Optional[str]]:
    for suffix, kind in COMPRESSIONS.items():
        if name.endswith(suffix):
            return name[: -len(suffix)], kind
    return name, None


def check_input_file(path: Path) -> None:
    """An input must exist, be readable and be a regular file; a one-line InputError otherwise."""
    try:
        if path.is_dir():
            raise InputError(path, "is a directory, expected a file")
        if not path.exists():
            raise InputError(path, "no such file")
        if not path.is_file():
            # a FIFO, socket or device: opening or reading it can block forever
            raise InputError(path, "is not a regular file (a FIFO, socket or device); expected a file")
        with open(path, "rb"):
            pass
    except PermissionError:
        raise InputError(path, "cannot read: permission denied") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


def check_name(path: PathLike, name: str, what: str) -> None:
    if not name:
        raise InputError(path, f"{what}: empty array name")
    safe_name(name, f"{what}: array name", path)


def split_array_spec(spec: str) -> tuple[Path, Optional[str]]:
    text = os.fspath(spec)
    head, sep, key = text.rpartition(":")
    if sep and head.lower().endswith(".npz"):
        if not key:
            raise InputError(head, "empty array key after ':'")
        return Path(head), key
    return Path(text), None


def dtype_problem(arr: np.ndarray) -> Optional[str]:
    dt = arr.dtype
    if dt.hasobject:
        return "object dtype"
    if dt.fields is not None or dt.kind == "V":
        return f"structured dtype {dt}"
    if dt.kind in "SUa":
        return f"string dtype {dt}"
    if dt.kind not in "biuf" or dt.name not in SUPPORTED_NAMES:
        return f"unsupported dtype {dt}"
    return None


SUPPORTED_NAMES = {
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float16", "float32", "float64",
}


def check_id_array(path: Path, key: str, arr: np.ndarray) -> None:
    problem = dtype_problem(arr)
    if problem is None and arr.dtype.kind == "f":
        nan = " and NaN" if bool(np.isnan(arr).any()) else ""
        problem = f"floating-point dtype {arr.dtype}{nan}"
    elif problem is None and arr.dtype.kind == "b":
        problem = "bool dtype"
    if problem is not None:
        raise InputError(path, f"{key!r} has {problem}; node ids must be integers")
    if arr.ndim != 1:
        raise InputError(path, f"{key!r} must be 1-D, has shape {list(arr.shape)}")


def check_data_array(path: Path, name: str, arr: np.ndarray, what: str) -> None:
    problem = dtype_problem(arr)
    if problem is not None:
        raise InputError(path, f"{what} {name!r} has {problem} (expected numeric or bool)")
    if arr.ndim < 1:
        raise InputError(path, f"{what} {name!r} is a scalar; data arrays must be at least 1-D")


def check_ids_in_range(path: Path, key: str, arr: np.ndarray, num_nodes: Optional[int]) -> int:
    """Refuse negative ids and ids >= num_nodes; return the max id (-1 if empty)."""
    lo, hi = scan_range(arr)
    if arr.size and lo < 0:
        at = int(np.argmax(np.asarray(arr) < 0))
        raise InputError(path, f"{key!r} holds a negative id {lo} (first at index {at})")
    if num_nodes is not None and arr.size and hi >= num_nodes:
        at = int(np.argmax(np.asarray(arr) >= num_nodes))
        raise InputError(path, f"{key!r} holds id {hi} >= num_nodes {num_nodes} (first bad at index {at})")
    return hi


def scalar_num_nodes(path: Path, arr: np.ndarray) -> int:
    if arr.dtype.kind not in "iu" or arr.size != 1 or arr.ndim > 1:
        raise InputError(path, f"'num_nodes' must be an integer scalar, got {arr.dtype} of shape {list(arr.shape)}")
    value = int(np.asarray(arr).reshape(-1)[0])
    if value < 0:
        raise InputError(path, f"'num_nodes' is negative ({value})")
    check_node_count_fits(path, value)
    return value


def check_node_count_fits(path: Path, num_nodes: int) -> None:
    """Refuse a node count whose per-node arrays could never be allocated, before anything is.

    Partitioning keeps several int64 arrays of num_nodes entries; one alone larger
    than this machine's memory means the count is a mistake (or hostile), and
    trying would fail deep inside numpy after minutes, or not at all but swap."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OverflowError, OSError, AttributeError):
        return
    if num_nodes * 8 > memory:
        raise InputError(path, f"'num_nodes' is {num_nodes}: one int64 per node would take {num_nodes * 8 / 2**30:.1f} GiB, "
                               f"more than this machine's {memory / 2**30:.1f} GiB of memory")


def check_rows(path: Path, what: str, name: str, arr: np.ndarray, expected: int, counted: str) -> None:
    if arr.shape[0] != expected:
        raise InputError(path, f"{what} {name!r} has {arr.shape[0]} rows, expected {counted} = {expected}")
