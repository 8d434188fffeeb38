""".npz and .npy inputs (SPEC.md 3.1, 3.2): members memory-mapped at their data offset when
stored; when compressed, loaded, or (given a scratch directory, `spill`, and SPILL_MEMBER_BYTES or more) inflated
block by block into a scratch file there and mapped; headers validated, nothing unpickled; the .npz graph reader."""

from __future__ import annotations

import io
import os
import struct
import zipfile
import zlib
from pathlib import Path
from typing import IO, BinaryIO, Iterator, Literal, Optional, Sequence, Union

import numpy as np

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.formats.files.scratch import CONCAT_BLOCK_BYTES, ScratchDir
from gpart.formats.input.checks import (
    SCAN_BYTES,
    check_data_array,
    check_id_array,
    check_ids_in_range,
    check_input_file,
    check_name,
    check_rows,
    scalar_num_nodes,
    split_array_spec,
)

PathLike = Union[str, "os.PathLike[str]"]

COO_KEYS = ("src", "dst")
CSR_KEYS = ("indptr", "indices")
NUM_NODES_KEY = "num_nodes"
EDGE_PREFIX = "edge_"
# A compressed member (or a CSR graph's expanded sources) this large goes to a scratch file where the reader has
# one: below it, memory is cheaper than a file and the graph is small anyway
SPILL_MEMBER_BYTES = 64 << 20


def open_npy(path: PathLike) -> np.ndarray:
    """Memory-map a `.npy` file after validating its header (never unpickles)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            return map_npy(path, fh, 0, size, path.name)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


def read_npz_arrays(path: PathLike, only: Optional[Sequence[str]] = None,
                    spill: Optional[ScratchDir] = None) -> dict[str, np.ndarray]:
    """All (or the named) arrays of an `.npz`: stored members memory-mapped, compressed ones loaded (with `spill`,
    large ones inflated into scratch files there and mapped)."""
    path = Path(path)
    out: dict[str, np.ndarray] = {}
    with open_zip(path) as zf:
        members = npz_members(path, zf)
        if only is not None:
            missing = [k for k in only if k not in members]
            if missing:
                raise InputError(path, f"no array {missing[0]!r} (available: {', '.join(members) or 'none'})")
            members = {k: members[k] for k in only}
        try:
            with open(path, "rb") as raw:
                for key, info in members.items():
                    out[key] = read_member(path, zf, raw, key, info, spill)
        except OSError as exc:
            raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    return out


def open_zip(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise InputError(path, f"not a valid .npz (zip) file, corrupt or truncated: {exc}") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


def npz_members(path: Path, zf: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    members: dict[str, zipfile.ZipInfo] = {}
    for info in zf.infolist():
        if info.is_dir():
            continue
        if not info.filename.endswith(".npy"):
            raise InputError(path, f"member {info.filename!r} is not a .npy array")
        key = info.filename[: -len(".npy")]
        if key in members:
            raise InputError(path, f"array {key!r} stored twice")
        members[key] = info
    return members


def npz_keys(path: Path, zf: zipfile.ZipFile) -> list[str]:
    return list(npz_members(path, zf))


def read_member(path: Path, zf: zipfile.ZipFile, raw: BinaryIO, key: str, info: zipfile.ZipInfo,
                spill: Optional[ScratchDir] = None) -> np.ndarray:
    where = f"array {key!r}"
    if info.flag_bits & 0x1:
        raise InputError(path, f"{where}: encrypted zip members are not supported")
    if info.compress_type == zipfile.ZIP_STORED:
        raw.seek(info.header_offset)
        local = raw.read(30)
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            raise InputError(path, f"{where}: corrupt zip local header")
        name_len, extra_len = struct.unpack("<HH", local[26:30])
        data_offset = info.header_offset + 30 + name_len + extra_len
        return map_npy(path, raw, data_offset, info.file_size, where)
    try:
        with zf.open(info) as fh:
            version = np.lib.format.read_magic(fh)
            shape, fortran, dtype = read_npy_header(path, fh, version, where)
            count = int(np.prod(shape, dtype=np.int64))
            if spill is not None and count * dtype.itemsize >= SPILL_MEMBER_BYTES and (len(shape) < 2 or not fortran):
                return _inflated(path, fh, spill, shape, dtype, where)
            data = bytearray(count * dtype.itemsize)  # writable, read in place (no second copy)
            # typeshed types ZipFile.open as IO[bytes]; in read mode it returns a ZipExtFile, a BufferedIOBase with readinto
            got = fh.readinto(data) if data else 0  # type: ignore[attr-defined]
            if got != len(data):
                raise InputError(path, f"{where}: truncated data ({got} of {len(data)} bytes)")
    except InputError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError) as exc:
        raise InputError(path, f"{where}: corrupt or truncated compressed member: {exc}") from None
    arr = np.frombuffer(data, dtype=dtype, count=count)
    arr = arr.reshape(shape, order="F" if fortran else "C")
    return arr


def _inflated(path: Path, fh: IO[bytes], spill: ScratchDir, shape: tuple[int, ...], dtype: np.dtype,
              where: str) -> np.ndarray:
    """The data of the member open in `fh` (its header read, C order), inflated block by block into a scratch file in
    `spill` and mapped read-only: memory holds one block, not the array (nor one row: OGB's edge_index is 2 rows)."""
    count = int(np.prod(shape, dtype=np.int64))
    per_block = max(1, CONCAT_BLOCK_BYTES // dtype.itemsize)

    def blocks() -> Iterator[np.ndarray]:
        for start in range(0, count, per_block):
            want = min(per_block, count - start) * dtype.itemsize
            data = fh.read(want)
            if len(data) != want:
                raise InputError(path, f"{where}: truncated data ({start * dtype.itemsize + len(data)} of "
                                       f"{count * dtype.itemsize} bytes)")
            yield np.frombuffer(data, dtype=dtype)

    return spill.concatenated("inflated-member", blocks(), dtype, (count,)).reshape(shape)


def read_npy_header(path: Path, fh: IO[bytes], version: tuple[int, int], where: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    try:
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            # 3.0 (utf-8 header): numpy reads it only through this private helper, which its stubs leave out
            shape, fortran, dtype = np.lib.format._read_array_header(fh, version)  # type: ignore[attr-defined]
    except (ValueError, OverflowError, EOFError, SyntaxError) as exc:
        raise InputError(path, f"{where}: corrupt .npy header: {exc}") from None
    if dtype.hasobject:
        raise InputError(path, f"{where}: object arrays are refused (they would need unpickling)")
    return tuple(int(s) for s in shape), bool(fortran), dtype


def map_npy(path: Path, fh: BinaryIO, offset: int, size: int, where: str) -> np.ndarray:
    """Memory-map the .npy stored at `offset` (`size` bytes) of an open file."""
    fh.seek(offset)
    try:
        version = np.lib.format.read_magic(fh)
    except (ValueError, OverflowError, EOFError) as exc:
        raise InputError(path, f"{where}: not a .npy array: {exc}") from None
    shape, fortran, dtype = read_npy_header(path, fh, version, where)
    header_len = fh.tell() - offset
    count = int(np.prod(shape, dtype=np.int64))
    need = count * dtype.itemsize
    if size - header_len < need:
        raise InputError(path, f"{where}: truncated data ({max(0, size - header_len)} of {need} bytes for shape {list(shape)} {dtype})")
    if count == 0:
        return np.zeros(shape, dtype=dtype)
    order: Literal["F", "C"] = "F" if fortran else "C"
    try:
        return np.memmap(path, dtype=dtype, mode="r", offset=offset + header_len, shape=shape, order=order)
    except (ValueError, OverflowError, OSError) as exc:  # the file is shorter than its directory says
        raise InputError(path, f"{where}: truncated data, cannot map {need} bytes: {exc}") from None


def read_npz_graph(path: Path, spill: Optional[ScratchDir] = None) -> Graph:
    """The graph of an `.npz` (SPEC.md 3.1); with `spill`, large compressed members and a CSR graph's expanded
    sources go to scratch files there, mapped."""
    arrays = read_npz_arrays(path, spill=spill)
    has_coo = [k for k in COO_KEYS if k in arrays]
    has_csr = [k for k in CSR_KEYS if k in arrays]
    if has_coo and has_csr:
        raise InputError(path, "has both COO keys (src/dst) and CSR keys (indptr/indices); keep one structure")
    if not has_coo and not has_csr:
        found = ", ".join(arrays) or "none"
        raise InputError(path, f"no graph structure: expected keys 'src' and 'dst' (COO) or 'indptr' and 'indices' (CSR); found: {found}")
    if has_coo and len(has_coo) == 1:
        other = "dst" if has_coo[0] == "src" else "src"
        raise InputError(path, f"has {has_coo[0]!r} but no {other!r}")
    if has_csr and len(has_csr) == 1:
        other = "indices" if has_csr[0] == "indptr" else "indptr"
        raise InputError(path, f"has {has_csr[0]!r} but no {other!r}")
    num_nodes = scalar_num_nodes(path, arrays[NUM_NODES_KEY]) if NUM_NODES_KEY in arrays else None
    if has_coo:
        src, dst, num_nodes = coo_structure(path, arrays["src"], arrays["dst"], num_nodes)
        structural = {*COO_KEYS, NUM_NODES_KEY}
    else:
        src, dst, num_nodes = csr_structure(path, arrays["indptr"], arrays["indices"], num_nodes, spill)
        structural = {*CSR_KEYS, NUM_NODES_KEY}
    graph = Graph(num_nodes, src, dst)
    for key, arr in arrays.items():
        if key in structural:
            continue
        check_name(path, key, "key")  # the key becomes a file or dataset name of the result
        if key.startswith(EDGE_PREFIX):
            check_data_array(path, key, arr, "edge array")
            check_rows(path, "edge array", key, arr, graph.num_edges, "num_edges")
            graph.edge_data[key] = arr
        else:
            check_data_array(path, key, arr, "node array")
            check_rows(path, "node array", key, arr, num_nodes, "num_nodes")
            graph.node_data[key] = arr
    return graph


def coo_structure(path: Path, src: np.ndarray, dst: np.ndarray, num_nodes: Optional[int]) -> tuple[np.ndarray, np.ndarray, int]:
    check_id_array(path, "src", src)
    check_id_array(path, "dst", dst)
    if src.shape[0] != dst.shape[0]:
        raise InputError(path, f"'src' has {src.shape[0]} entries but 'dst' has {dst.shape[0]}")
    hi = max(check_ids_in_range(path, "src", src, num_nodes), check_ids_in_range(path, "dst", dst, num_nodes))
    return src, dst, (hi + 1 if num_nodes is None else num_nodes)


def csr_structure(path: Path, indptr: np.ndarray, indices: np.ndarray, num_nodes: Optional[int],
                  spill: Optional[ScratchDir] = None) -> tuple[np.ndarray, np.ndarray, int]:
    check_id_array(path, "indptr", indptr)
    check_id_array(path, "indices", indices)
    if indptr.shape[0] < 1:
        raise InputError(path, "'indptr' is empty; it needs num_nodes + 1 entries starting with 0")
    n = indptr.shape[0] - 1
    if num_nodes is not None and num_nodes != n:
        raise InputError(path, f"'num_nodes' is {num_nodes} but 'indptr' has {indptr.shape[0]} entries (num_nodes + 1 = {n + 1} expected)")
    first, last = int(indptr[0]), int(indptr[-1])
    if first != 0:
        raise InputError(path, f"'indptr' must start with 0, starts with {first}")
    if last != indices.shape[0]:
        raise InputError(path, f"'indptr' ends with {last} but 'indices' has {indices.shape[0]} entries")
    check_non_decreasing(path, indptr)
    check_ids_in_range(path, "indices", indices, n)
    bounds = np.asarray(indptr, dtype=np.int64)
    counts = bounds[1:] - bounds[:-1]  # np.diff's stubs type an int64 difference as timedelta64
    src_dtype = indices.dtype if n == 0 or np.can_cast(np.min_scalar_type(n - 1), indices.dtype) else np.dtype(np.int64)
    if spill is not None and indices.shape[0] * src_dtype.itemsize >= SPILL_MEMBER_BYTES:
        return _expanded_sources(spill, counts, src_dtype, int(indices.shape[0])), indices, n
    src = np.repeat(np.arange(n, dtype=src_dtype), counts)
    return src, indices, n


def _expanded_sources(spill: ScratchDir, counts: np.ndarray, dtype: np.dtype, num_edges: int) -> np.ndarray:
    """Each edge's source (node i repeated counts[i] times) written to a scratch file in `spill` a block of nodes at
    a time and mapped read-only."""
    ends = np.cumsum(counts)
    step = max(1, CONCAT_BLOCK_BYTES // dtype.itemsize)

    def blocks() -> Iterator[np.ndarray]:
        first = 0
        while first < counts.shape[0]:  # nodes whose edges end within the next `step` entries (at least one node)
            base = int(ends[first - 1]) if first else 0
            stop = max(first + 1, int(np.searchsorted(ends, base + step, side="right")))
            yield np.repeat(np.arange(first, stop, dtype=dtype), counts[first:stop])
            first = stop

    return spill.concatenated("csr-sources", blocks(), dtype, (num_edges,))


def check_non_decreasing(path: Path, indptr: np.ndarray) -> None:
    step = max(2, SCAN_BYTES // indptr.dtype.itemsize)
    for start in range(0, indptr.shape[0] - 1, step - 1):
        chunk = np.asarray(indptr[start : start + step])
        bad = np.flatnonzero(chunk[1:] < chunk[:-1])
        if bad.size:
            i = start + int(bad[0]) + 1
            raise InputError(path, f"'indptr' decreases at index {i} ({int(indptr[i - 1])} -> {int(indptr[i])})")


def open_array_input(spec: str) -> tuple[np.ndarray, str]:
    """Open `file.npy` or `file.npz:key` as (array, default name), memory-mapped when stored.

    The array must be numeric or boolean, at least 1-D and C-contiguous.
    """
    path, key = split_array_spec(spec)
    check_input_file(path)
    lower = path.name.lower()
    if key is None:
        if lower.endswith(".npz"):
            with open_zip(path) as zf:
                keys = npz_keys(path, zf)
            raise InputError(path, f"name the array inside the .npz as {path}:KEY (available: {', '.join(keys) or 'none'})")
        if not lower.endswith(".npy"):
            raise InputError(path, "expected a .npy file or FILE.npz:KEY")
        arr = open_npy(path)
        name = path.name[: -len(".npy")]
    else:
        arrays = read_npz_arrays(path, only=[key])
        arr = arrays[key]
        name = key
    check_data_array(path, name, arr, what="array")
    if arr.ndim and not arr.flags.c_contiguous:
        raise InputError(path, f"array {name!r} is not C-contiguous (Fortran order); save it with np.ascontiguousarray")
    return arr, name


def npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The .npy header numpy itself writes for a C-order array of `dtype` and `shape` (version 1.0, else 2.0)."""
    d = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": tuple(shape)}
    buf = io.BytesIO()
    try:
        np.lib.format.write_array_header_1_0(buf, d)
    except ValueError:
        buf = io.BytesIO()
        np.lib.format.write_array_header_2_0(buf, d)
    return buf.getvalue()
