"""Input graph readers (SPEC.md section 3): `.npz`, extra `.npy`, SNAP text, METIS, DIMACS.

Everything is validated before a Graph is returned, and every problem is one
`InputError(path, problem)`. Arrays stored uncompressed are memory-mapped (a
`.npy` file, or a ZIP_STORED member of an `.npz` mapped at its data offset),
so reading a large graph costs page cache, not a copy. Nothing is unpickled.
Text formats are decompressed and tokenised in large blocks with numpy
(see `_tokenize`), never parsed line by line in Python.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import mmap
import os
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from gpart.errors import InputError
from gpart.formats.names import safe_name
from gpart.graph import Graph

PathLike = Union[str, "os.PathLike[str]"]

# Bytes per step when scanning (possibly memory-mapped) id arrays and per text block.
SCAN_BYTES = 64 << 20
TEXT_BLOCK_BYTES = 16 << 20

COO_KEYS = ("src", "dst")
CSR_KEYS = ("indptr", "indices")
NUM_NODES_KEY = "num_nodes"
EDGE_PREFIX = "edge_"

_TEXT_SUFFIXES = (".txt", ".tsv", ".edges", ".el")
_COMPRESSIONS = {".gz": "gzip", ".xz": "xz", ".bz2": "bzip2"}


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def read_graph(
    path: PathLike,
    node_data: Optional[Mapping[str, PathLike]] = None,
    edge_data: Optional[Mapping[str, PathLike]] = None,
) -> Graph:
    """Read and validate an input graph; arrays are memory-mapped where the format allows.

    `node_data` / `edge_data` map array names to extra `.npy` files (SPEC.md 3.2).
    The format is chosen by the file name (`input_format(path)`).
    """
    path = Path(path)
    if path.is_dir() and (path / "manifest.json").is_file():
        from gpart.formats.chunked import read_chunked_graph  # a chunked graph directory (SPEC.md 10.1)

        graph = read_chunked_graph(path)
        _add_extra_arrays(graph, path, node_data or {}, edge_data or {})
        return graph
    check_input_file(path)
    fmt = input_format(path)
    if fmt == "npz":
        graph = _read_npz_graph(path)
    elif fmt == "snap":
        graph = _read_snap(path)
    elif fmt == "metis":
        graph = _read_metis(path)
    else:
        graph = _read_dimacs(path)
    graph.source = os.fspath(path)
    graph.input_format = fmt
    _add_extra_arrays(graph, path, node_data or {}, edge_data or {})
    return graph


def input_format(path: PathLike) -> str:
    """The input format a file name selects: 'npz', 'snap', 'metis' or 'dimacs'."""
    name = Path(path).name.lower()
    base, compression = _split_compression(name)
    if base.endswith(".npz") and compression is None:
        return "npz"
    if base.endswith(_TEXT_SUFFIXES):
        return "snap"
    if base.endswith(".graph"):
        return "metis"
    if base.endswith(".gr"):
        return "dimacs"
    raise InputError(
        path,
        "unknown input format (expected .npz, a SNAP edge list .txt/.tsv/.edges/.el, "
        "a METIS .graph or a DIMACS .gr, text optionally .gz/.xz/.bz2)",
    )


def open_array_input(spec: str) -> tuple[np.ndarray, str]:
    """Open `file.npy` or `file.npz:key` as (array, default name), memory-mapped when stored.

    The array must be numeric or boolean, at least 1-D and C-contiguous.
    """
    path, key = _split_array_spec(spec)
    check_input_file(path)
    lower = path.name.lower()
    if key is None:
        if lower.endswith(".npz"):
            with _open_zip(path) as zf:
                keys = _npz_keys(path, zf)
            raise InputError(path, f"name the array inside the .npz as {path}:KEY (available: {', '.join(keys) or 'none'})")
        if not lower.endswith(".npy"):
            raise InputError(path, "expected a .npy file or FILE.npz:KEY")
        arr = open_npy(path)
        name = path.name[: -len(".npy")]
    else:
        arrays = read_npz_arrays(path, only=[key])
        arr = arrays[key]
        name = key
    _check_data_array(path, name, arr, what="array")
    if arr.ndim and not arr.flags.c_contiguous:
        raise InputError(path, f"array {name!r} is not C-contiguous (Fortran order); save it with np.ascontiguousarray")
    return arr, name


def parse_name_paths(specs: Sequence[str], what: str = "--node-data") -> dict[str, str]:
    """Turn CLI values `NAME=PATH` into a mapping, refusing empty or repeated names."""
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not value:
            raise InputError(spec, f"{what} expects NAME=PATH.npy")
        _check_name(value, name, what)
        if name in out:
            raise InputError(value, f"{what} name {name!r} given twice")
        out[name] = value
    return out


def open_npy(path: PathLike) -> np.ndarray:
    """Memory-map a `.npy` file after validating its header (never unpickles)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            return _map_npy(path, fh, 0, size, path.name)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


def read_npz_arrays(path: PathLike, only: Optional[Sequence[str]] = None) -> dict[str, np.ndarray]:
    """All (or the named) arrays of an `.npz`: stored members memory-mapped, compressed ones loaded."""
    path = Path(path)
    out: dict[str, np.ndarray] = {}
    with _open_zip(path) as zf:
        members = _npz_members(path, zf)
        if only is not None:
            missing = [k for k in only if k not in members]
            if missing:
                raise InputError(path, f"no array {missing[0]!r} (available: {', '.join(members) or 'none'})")
            members = {k: members[k] for k in only}
        try:
            with open(path, "rb") as raw:
                for key, info in members.items():
                    out[key] = _read_member(path, zf, raw, key, info)
        except OSError as exc:
            raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    return out


def scan_range(arr: np.ndarray, chunk_bytes: int = SCAN_BYTES) -> tuple[int, int]:
    """(min, max) of an integer array in bounded-memory chunks; (0, -1) when empty."""
    if arr.size == 0:
        return 0, -1
    flat = arr.reshape(-1)
    step = max(1, chunk_bytes // max(1, flat.dtype.itemsize))
    lo, hi = None, None
    for start in range(0, flat.shape[0], step):
        chunk = flat[start : start + step]
        cmin, cmax = int(chunk.min()), int(chunk.max())
        lo = cmin if lo is None else min(lo, cmin)
        hi = cmax if hi is None else max(hi, cmax)
        drop_pages(arr, start * flat.dtype.itemsize, len(chunk) * flat.dtype.itemsize)
    return lo, hi


def drop_pages(arr: np.ndarray, start: int = 0, length: Optional[int] = None) -> None:
    """Let the kernel drop the resident pages of a read-only memmap's byte range.

    Scanning a mapped file leaves its pages counted in this process's RSS;
    dropping them after each chunk keeps RSS bounded. A no-op for arrays that
    are not read-only memmaps (nothing to drop, or pages that hold the only copy).
    """
    mm = getattr(arr, "_mmap", None)
    # only a memmap np.memmap created itself (base is the mmap): a slice's `offset` is its parent's
    if not isinstance(arr, np.memmap) or mm is None or arr.base is not mm or arr.mode != "r" or not hasattr(mm, "madvise"):
        return
    base = int(arr.offset) % mmap.ALLOCATIONGRANULARITY  # where the array starts inside the mapping
    total = len(mm)
    begin = base + start
    end = total if length is None else min(total, begin + length)
    page = mmap.PAGESIZE
    begin = (begin // page) * page
    end = min(total, -(-end // page) * page)
    if end > begin:
        try:
            mm.madvise(mmap.MADV_DONTNEED, begin, end - begin)
        except (OSError, ValueError, OverflowError):
            pass


# ---------------------------------------------------------------------------
# Paths and names
# ---------------------------------------------------------------------------


def _split_compression(name: str) -> tuple[str, Optional[str]]:
    for suffix, kind in _COMPRESSIONS.items():
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


def _check_name(path: PathLike, name: str, what: str) -> None:
    if not name:
        raise InputError(path, f"{what}: empty array name")
    safe_name(name, f"{what}: array name", path)


def _split_array_spec(spec: str) -> tuple[Path, Optional[str]]:
    text = os.fspath(spec)
    head, sep, key = text.rpartition(":")
    if sep and head.lower().endswith(".npz"):
        if not key:
            raise InputError(head, "empty array key after ':'")
        return Path(head), key
    return Path(text), None


# ---------------------------------------------------------------------------
# .npy and .npz (zip) access
# ---------------------------------------------------------------------------


def _open_zip(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise InputError(path, f"not a valid .npz (zip) file, corrupt or truncated: {exc}") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


def _npz_members(path: Path, zf: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
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


def _npz_keys(path: Path, zf: zipfile.ZipFile) -> list[str]:
    return list(_npz_members(path, zf))


def _read_member(path: Path, zf: zipfile.ZipFile, raw: BinaryIO, key: str, info: zipfile.ZipInfo) -> np.ndarray:
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
        return _map_npy(path, raw, data_offset, info.file_size, where)
    try:
        with zf.open(info) as fh:
            version = np.lib.format.read_magic(fh)
            shape, fortran, dtype = _read_npy_header(path, fh, version, where)
            count = int(np.prod(shape, dtype=np.int64))
            data = bytearray(count * dtype.itemsize)  # writable, read in place (no second copy)
            got = fh.readinto(data) if data else 0
            if got != len(data):
                raise InputError(path, f"{where}: truncated data ({got} of {len(data)} bytes)")
    except InputError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError) as exc:
        raise InputError(path, f"{where}: corrupt or truncated compressed member: {exc}") from None
    arr = np.frombuffer(data, dtype=dtype, count=count)
    arr = arr.reshape(shape, order="F" if fortran else "C")
    return arr


def _read_npy_header(path: Path, fh: BinaryIO, version: tuple[int, int], where: str) -> tuple[tuple, bool, np.dtype]:
    try:
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            shape, fortran, dtype = np.lib.format._read_array_header(fh, version)  # 3.0: utf-8 header
    except (ValueError, OverflowError, EOFError, SyntaxError) as exc:
        raise InputError(path, f"{where}: corrupt .npy header: {exc}") from None
    if dtype.hasobject:
        raise InputError(path, f"{where}: object arrays are refused (they would need unpickling)")
    return tuple(int(s) for s in shape), bool(fortran), dtype


def _map_npy(path: Path, fh: BinaryIO, offset: int, size: int, where: str) -> np.ndarray:
    """Memory-map the .npy stored at `offset` (`size` bytes) of an open file."""
    fh.seek(offset)
    try:
        version = np.lib.format.read_magic(fh)
    except (ValueError, OverflowError, EOFError) as exc:
        raise InputError(path, f"{where}: not a .npy array: {exc}") from None
    shape, fortran, dtype = _read_npy_header(path, fh, version, where)
    header_len = fh.tell() - offset
    count = int(np.prod(shape, dtype=np.int64))
    need = count * dtype.itemsize
    if size - header_len < need:
        raise InputError(path, f"{where}: truncated data ({max(0, size - header_len)} of {need} bytes for shape {list(shape)} {dtype})")
    if count == 0:
        return np.zeros(shape, dtype=dtype)
    order = "F" if fortran else "C"
    try:
        return np.memmap(path, dtype=dtype, mode="r", offset=offset + header_len, shape=shape, order=order)
    except (ValueError, OverflowError, OSError) as exc:  # the file is shorter than its directory says
        raise InputError(path, f"{where}: truncated data, cannot map {need} bytes: {exc}") from None


# ---------------------------------------------------------------------------
# Validation shared by all formats
# ---------------------------------------------------------------------------


def _dtype_problem(arr: np.ndarray) -> Optional[str]:
    dt = arr.dtype
    if dt.hasobject:
        return "object dtype"
    if dt.fields is not None or dt.kind == "V":
        return f"structured dtype {dt}"
    if dt.kind in "SUa":
        return f"string dtype {dt}"
    if dt.kind not in "biuf" or dt.name not in _SUPPORTED_NAMES:
        return f"unsupported dtype {dt}"
    return None


_SUPPORTED_NAMES = {
    "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float16", "float32", "float64",
}


def _check_id_array(path: Path, key: str, arr: np.ndarray) -> None:
    problem = _dtype_problem(arr)
    if problem is None and arr.dtype.kind == "f":
        nan = " and NaN" if bool(np.isnan(arr).any()) else ""
        problem = f"floating-point dtype {arr.dtype}{nan}"
    elif problem is None and arr.dtype.kind == "b":
        problem = "bool dtype"
    if problem is not None:
        raise InputError(path, f"{key!r} has {problem}; node ids must be integers")
    if arr.ndim != 1:
        raise InputError(path, f"{key!r} must be 1-D, has shape {list(arr.shape)}")


def _check_data_array(path: Path, name: str, arr: np.ndarray, what: str) -> None:
    problem = _dtype_problem(arr)
    if problem is not None:
        raise InputError(path, f"{what} {name!r} has {problem} (expected numeric or bool)")
    if arr.ndim < 1:
        raise InputError(path, f"{what} {name!r} is a scalar; data arrays must be at least 1-D")


def _check_ids_in_range(path: Path, key: str, arr: np.ndarray, num_nodes: Optional[int]) -> int:
    """Refuse negative ids and ids >= num_nodes; return the max id (-1 if empty)."""
    lo, hi = scan_range(arr)
    if arr.size and lo < 0:
        at = int(np.argmax(np.asarray(arr) < 0))
        raise InputError(path, f"{key!r} holds a negative id {lo} (first at index {at})")
    if num_nodes is not None and arr.size and hi >= num_nodes:
        at = int(np.argmax(np.asarray(arr) >= num_nodes))
        raise InputError(path, f"{key!r} holds id {hi} >= num_nodes {num_nodes} (first bad at index {at})")
    return hi


def _scalar_num_nodes(path: Path, arr: np.ndarray) -> int:
    if arr.dtype.kind not in "iu" or arr.size != 1 or arr.ndim > 1:
        raise InputError(path, f"'num_nodes' must be an integer scalar, got {arr.dtype} of shape {list(arr.shape)}")
    value = int(np.asarray(arr).reshape(-1)[0])
    if value < 0:
        raise InputError(path, f"'num_nodes' is negative ({value})")
    _check_node_count_fits(path, value)
    return value


def _check_node_count_fits(path: Path, num_nodes: int) -> None:
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


def _check_rows(path: Path, what: str, name: str, arr: np.ndarray, expected: int, counted: str) -> None:
    if arr.shape[0] != expected:
        raise InputError(path, f"{what} {name!r} has {arr.shape[0]} rows, expected {counted} = {expected}")


# ---------------------------------------------------------------------------
# .npz graphs (SPEC 3.1) and extra .npy arrays (SPEC 3.2)
# ---------------------------------------------------------------------------


def _read_npz_graph(path: Path) -> Graph:
    arrays = read_npz_arrays(path)
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
    num_nodes = _scalar_num_nodes(path, arrays[NUM_NODES_KEY]) if NUM_NODES_KEY in arrays else None
    if has_coo:
        src, dst, num_nodes = _coo_structure(path, arrays["src"], arrays["dst"], num_nodes)
        structural = {*COO_KEYS, NUM_NODES_KEY}
    else:
        src, dst, num_nodes = _csr_structure(path, arrays["indptr"], arrays["indices"], num_nodes)
        structural = {*CSR_KEYS, NUM_NODES_KEY}
    graph = Graph(num_nodes, src, dst)
    for key, arr in arrays.items():
        if key in structural:
            continue
        _check_name(path, key, "key")  # the key becomes a file or dataset name of the result
        if key.startswith(EDGE_PREFIX):
            _check_data_array(path, key, arr, "edge array")
            _check_rows(path, "edge array", key, arr, graph.num_edges, "num_edges")
            graph.edge_data[key] = arr
        else:
            _check_data_array(path, key, arr, "node array")
            _check_rows(path, "node array", key, arr, num_nodes, "num_nodes")
            graph.node_data[key] = arr
    return graph


def _coo_structure(path: Path, src: np.ndarray, dst: np.ndarray, num_nodes: Optional[int]):
    _check_id_array(path, "src", src)
    _check_id_array(path, "dst", dst)
    if src.shape[0] != dst.shape[0]:
        raise InputError(path, f"'src' has {src.shape[0]} entries but 'dst' has {dst.shape[0]}")
    hi = max(_check_ids_in_range(path, "src", src, num_nodes), _check_ids_in_range(path, "dst", dst, num_nodes))
    return src, dst, (hi + 1 if num_nodes is None else num_nodes)


def _csr_structure(path: Path, indptr: np.ndarray, indices: np.ndarray, num_nodes: Optional[int]):
    _check_id_array(path, "indptr", indptr)
    _check_id_array(path, "indices", indices)
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
    _check_non_decreasing(path, indptr)
    _check_ids_in_range(path, "indices", indices, n)
    counts = np.diff(np.asarray(indptr, dtype=np.int64))
    src_dtype = indices.dtype if n == 0 or np.can_cast(np.min_scalar_type(n - 1), indices.dtype) else np.dtype(np.int64)
    src = np.repeat(np.arange(n, dtype=src_dtype), counts)
    return src, indices, n


def _check_non_decreasing(path: Path, indptr: np.ndarray) -> None:
    step = max(2, SCAN_BYTES // indptr.dtype.itemsize)
    for start in range(0, indptr.shape[0] - 1, step - 1):
        chunk = np.asarray(indptr[start : start + step])
        bad = np.flatnonzero(chunk[1:] < chunk[:-1])
        if bad.size:
            i = start + int(bad[0]) + 1
            raise InputError(path, f"'indptr' decreases at index {i} ({int(indptr[i - 1])} -> {int(indptr[i])})")


def _add_extra_arrays(graph: Graph, path: Path, node_data: Mapping[str, PathLike], edge_data: Mapping[str, PathLike]) -> None:
    seen: dict[str, str] = {name: "node array" for name in graph.node_data}
    seen.update({name: "edge array" for name in graph.edge_data})
    for what, mapping, target, expected, counted in (
        ("node array", node_data, graph.node_data, graph.num_nodes, "num_nodes"),
        ("edge array", edge_data, graph.edge_data, graph.num_edges, "num_edges"),
    ):
        for name, extra in mapping.items():
            extra = Path(extra)
            _check_name(extra, name, f"--{what.split()[0]}-data")
            if name in seen:
                raise InputError(extra, f"data array name {name!r} given twice (already a {seen[name]} of {path.name})")
            check_input_file(extra)
            if not extra.name.lower().endswith(".npy"):
                raise InputError(extra, f"{what} {name!r}: expected a .npy file")
            arr = open_npy(extra)
            _check_data_array(extra, name, arr, what)
            if arr.shape[0] != expected:
                raise InputError(extra, f"{what} {name!r} has {arr.shape[0]} rows, expected {counted} = {expected} of {path.name}")
            target[name] = arr
            seen[name] = what


# ---------------------------------------------------------------------------
# Text: block reading and a numpy tokenizer
# ---------------------------------------------------------------------------


def _open_text(path: Path) -> BinaryIO:
    _, compression = _split_compression(path.name.lower())
    if compression == "gzip":
        return gzip.open(path, "rb")
    if compression == "xz":
        return lzma.open(path, "rb")
    if compression == "bzip2":
        return bz2.open(path, "rb")
    return open(path, "rb")


def _text_blocks(path: Path) -> Iterator[bytes]:
    """Decompressed text in blocks of whole lines, each ending with a newline."""
    block_bytes = TEXT_BLOCK_BYTES
    carry = b""
    try:
        with _open_text(path) as fh:
            while True:
                data = fh.read(block_bytes)
                if not data:
                    break
                data = carry + data
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    carry = data
                    continue
                carry = data[cut:]
                yield data[:cut]
    except (EOFError, gzip.BadGzipFile, lzma.LZMAError, zlib.error, OSError, ValueError) as exc:
        if isinstance(exc, OSError) and not isinstance(exc, gzip.BadGzipFile) and exc.errno is not None:
            raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
        raise InputError(path, f"corrupt or truncated compressed text: {exc}") from None
    if carry:
        yield carry + b"\n"


@dataclass
class _Tokens:
    """Whitespace-separated tokens of a block of whole lines, grouped by line.

    `line[t]` is the 0-based line (within the block) of token `t`; lines
    without tokens (blank lines) have no entry. `first[g]` is the token index
    of line group `g`'s first token, `count[g]` its number of tokens.
    """

    buf: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    line: np.ndarray
    group: np.ndarray
    first: np.ndarray
    count: np.ndarray
    num_lines: int

    @property
    def rank(self) -> np.ndarray:
        """Position of each token within its line."""
        return np.arange(self.starts.shape[0]) - self.first[self.group]

    def group_first_byte(self) -> np.ndarray:
        return self.buf[self.starts[self.first]] if self.first.size else np.zeros(0, np.uint8)

    def text(self, t: int) -> str:
        return bytes(self.buf[self.starts[t] : self.ends[t]]).decode("utf-8", "replace")[:40]


def _tokenize(block: bytes) -> _Tokens:
    """Split a block of whole lines at whitespace (any byte <= 32: space, tab, CR, LF, ...)."""
    buf = np.frombuffer(block, dtype=np.uint8)
    in_token = buf > 32
    # token boundaries are where in_token flips; the block ends with a newline, so they pair up
    flips = np.flatnonzero(in_token[1:] != in_token[:-1]) + 1
    if in_token.shape[0] and in_token[0]:
        flips = np.concatenate(([0], flips))
    del in_token
    starts, ends = flips[0::2], flips[1::2]
    newlines = np.flatnonzero(buf == 10)
    line = np.searchsorted(newlines, starts)
    is_first = np.ones(line.shape[0], dtype=bool)
    is_first[1:] = line[1:] != line[:-1]
    first = np.flatnonzero(is_first)
    group = np.cumsum(is_first) - 1
    count = np.diff(np.append(first, line.shape[0]))
    return _Tokens(buf, starts, ends, line, group, first, count, int(newlines.shape[0]))


def _parse_ints(tokens: _Tokens, which: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parse tokens `which` as decimal integers (optional sign); return (values, bad mask).

    Vectorised over tokens: one pass per digit position (at most 18 digits).
    """
    starts = tokens.starts[which]
    lengths = tokens.ends[which] - starts
    buf = tokens.buf
    values = np.zeros(starts.shape[0], dtype=np.int64)
    if not starts.size:
        return values, np.zeros(0, dtype=bool)
    first = buf[starts]
    signed = (first == ord("-")) | (first == ord("+"))
    negative = first == ord("-")
    digits_start = starts + signed
    ndigits = lengths - signed
    bad = (ndigits < 1) | (ndigits > 18)
    last = buf.shape[0] - 1
    for k in range(int(ndigits.max(initial=0)) if not bad.all() else 0):
        inside = ndigits > k
        digit = buf[np.minimum(digits_start + k, last)].astype(np.int64) - 48
        bad |= inside & ((digit < 0) | (digit > 9))
        values = np.where(inside, values * 10 + digit, values)
    values = np.where(negative, -values, values)
    return values, bad


def _parse_or_fail(path: Path, tokens: _Tokens, which: np.ndarray, line0: int, what: str) -> np.ndarray:
    values, bad = _parse_ints(tokens, which)
    if bad.any():
        t = int(which[int(np.argmax(bad))])
        raise InputError(path, f"line {line0 + int(tokens.line[t]) + 1}: {what} {tokens.text(t)!r} is not an integer")
    return values


def _fail_negative(path: Path, tokens: _Tokens, which: np.ndarray, values: np.ndarray, line0: int, lowest: int = 0) -> None:
    below = values < lowest
    if below.any():
        i = int(np.argmax(below))
        t = int(which[i])
        kind = "negative id" if lowest == 0 else f"id below {lowest}"
        raise InputError(path, f"line {line0 + int(tokens.line[t]) + 1}: {kind} {int(values[i])}")


# ---------------------------------------------------------------------------
# SNAP edge lists (SPEC 3.3)
# ---------------------------------------------------------------------------


def _read_snap(path: Path) -> Graph:
    srcs, dsts = [], []
    line0 = 0
    for block in _text_blocks(path):
        tok = _tokenize(block)
        comment = np.isin(tok.group_first_byte(), (ord("#"), ord("%")))
        short = ~comment & (tok.count < 2)
        if short.any():
            g = int(np.argmax(short))
            t = int(tok.first[g])
            raise InputError(path, f"line {line0 + int(tok.line[t]) + 1}: expected 'src dst', found a single token {tok.text(t)!r}")
        keep = ~comment[tok.group]
        rank = tok.rank
        col0 = np.flatnonzero(keep & (rank == 0))
        col1 = np.flatnonzero(keep & (rank == 1))
        src = _parse_or_fail(path, tok, col0, line0, "source id")
        dst = _parse_or_fail(path, tok, col1, line0, "target id")
        _fail_negative(path, tok, col0, src, line0)
        _fail_negative(path, tok, col1, dst, line0)
        srcs.append(src)
        dsts.append(dst)
        line0 += tok.num_lines
    src = np.concatenate(srcs) if srcs else np.zeros(0, np.int64)
    dst = np.concatenate(dsts) if dsts else np.zeros(0, np.int64)
    num_nodes = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
    return Graph(num_nodes, src, dst)


# ---------------------------------------------------------------------------
# METIS .graph (SPEC 3.4)
# ---------------------------------------------------------------------------


@dataclass
class _MetisHeader:
    n: int
    m: int
    has_size: bool
    has_vwgt: bool
    has_ewgt: bool
    ncon: int
    line: int  # global 0-based line index of the header

    @property
    def prefix(self) -> int:
        """Tokens before the neighbour list on each vertex line."""
        return int(self.has_size) + (self.ncon if self.has_vwgt else 0)


def _metis_header(path: Path, tok: _Tokens, g: int, line0: int) -> _MetisHeader:
    t0, cnt = int(tok.first[g]), int(tok.count[g])
    lineno = line0 + int(tok.line[t0])
    if cnt < 2 or cnt > 4:
        raise InputError(path, f"line {lineno + 1}: METIS header must be 'n m [fmt [ncon]]', found {cnt} fields")
    fmt = tok.text(t0 + 2) if cnt >= 3 else "0"
    if len(fmt) > 3 or any(c not in "01" for c in fmt):
        raise InputError(path, f"line {lineno + 1}: METIS fmt {fmt!r} must be up to three 0/1 digits")
    fmt = fmt.rjust(3, "0")
    which = np.array([t0, t0 + 1] + ([t0 + 3] if cnt == 4 else []))
    vals = _parse_or_fail(path, tok, which, line0, "header field")
    n, m = int(vals[0]), int(vals[1])
    if n < 0 or m < 0:
        raise InputError(path, f"line {lineno + 1}: negative vertex or edge count in header")
    has_vwgt = fmt[1] == "1"
    ncon = int(vals[2]) if cnt == 4 else 1
    if cnt == 4 and (ncon < 1 or not has_vwgt):
        raise InputError(path, f"line {lineno + 1}: ncon {ncon} needs vertex weights (fmt x1x) and ncon >= 1")
    return _MetisHeader(n, m, fmt[0] == "1", has_vwgt, fmt[2] == "1", ncon, lineno)


def _read_metis(path: Path) -> Graph:
    header: Optional[_MetisHeader] = None
    srcs, dsts, ewgts, prefixes = [], [], [], []
    line0 = 0  # global index of the block's first line
    vertices_seen = 0  # vertex lines in earlier blocks
    for block in _text_blocks(path):
        tok = _tokenize(block)
        comment_group = tok.group_first_byte() == ord("%")
        if header is None:
            data_groups = np.flatnonzero(~comment_group)
            if not data_groups.size:
                line0 += tok.num_lines
                continue
            header = _metis_header(path, tok, int(data_groups[0]), line0)
        # Vertex lines are all non-comment lines after the header, blank ones included
        # (a blank line is a vertex without neighbours).
        first = max(header.line - line0 + 1, 0)
        comment_lines = tok.line[tok.first[comment_group]]
        comment_lines = comment_lines[comment_lines >= first]
        idx = np.flatnonzero((tok.line >= first) & ~comment_group[tok.group])
        lines = tok.line[idx]
        vertex = vertices_seen + (lines - first) - np.searchsorted(comment_lines, lines)
        if vertex.size and int(vertex[-1]) >= header.n:
            t = int(idx[int(np.argmax(vertex >= header.n))])
            raise InputError(path, f"line {line0 + int(tok.line[t]) + 1}: more vertex lines than n = {header.n} in the header")
        values = _parse_or_fail(path, tok, idx, line0, "entry")
        rank = tok.rank[idx] - header.prefix  # position in the neighbour list, negative for size/weights
        if header.prefix:
            pre = rank < 0
            prefixes.append((vertex[pre], rank[pre] + header.prefix, values[pre]))
        if header.has_ewgt:
            _metis_check_pairs(path, tok, idx, rank, line0)
            nbr = (rank >= 0) & (rank % 2 == 0)
            ewgts.append(values[(rank >= 0) & (rank % 2 == 1)])
        else:
            nbr = rank >= 0
        neighbours = values[nbr]
        bad = (neighbours < 1) | (neighbours > header.n)
        if bad.any():
            t = int(idx[np.flatnonzero(nbr)[int(np.argmax(bad))]])
            raise InputError(path, f"line {line0 + int(tok.line[t]) + 1}: neighbour {tok.text(t)} outside 1..{header.n}")
        srcs.append(vertex[nbr])
        dsts.append(neighbours - 1)
        vertices_seen += max(0, tok.num_lines - first) - int(comment_lines.shape[0])
        line0 += tok.num_lines
    if header is None:
        raise InputError(path, "no METIS header line 'n m [fmt [ncon]]' (empty file?)")
    if vertices_seen < header.n:
        raise InputError(path, f"header says n = {header.n} vertices but the file has {vertices_seen} vertex lines (truncated?)")
    vertex_fields = _metis_vertex_fields(path, header, prefixes) if header.prefix else {}
    src = np.concatenate(srcs) if srcs else np.zeros(0, np.int64)
    dst = np.concatenate(dsts) if dsts else np.zeros(0, np.int64)
    if src.shape[0] != 2 * header.m:
        raise InputError(path, f"header says m = {header.m} edges (2m = {2 * header.m} adjacency entries) but the file lists {src.shape[0]}")
    graph = Graph(header.n, src, dst, node_data=vertex_fields)
    if header.has_ewgt:
        graph.edge_data["edge_weight"] = np.concatenate(ewgts)
    return graph


def _metis_check_pairs(path: Path, tok: _Tokens, idx: np.ndarray, rank: np.ndarray, line0: int) -> None:
    """With edge weights (fmt xx1) every neighbour is followed by its weight."""
    adj = rank >= 0
    counts = np.bincount(tok.group[idx[adj]], minlength=tok.first.shape[0])
    odd = np.flatnonzero(counts % 2 == 1)
    if odd.size:
        t = int(tok.first[int(odd[0])])
        raise InputError(path, f"line {line0 + int(tok.line[t]) + 1}: with edge weights (fmt xx1) each neighbour needs a weight")


def _metis_vertex_fields(path: Path, header: _MetisHeader, prefixes: list) -> dict[str, np.ndarray]:
    """Vertex sizes (node array `vsize`) and weights (`vwgt`, shape [N, ncon]) from line prefixes."""
    table = np.zeros((header.n, header.prefix), dtype=np.int64)
    counts = np.zeros(header.n, dtype=np.int64)
    for vertex, col, values in prefixes:
        table[vertex, col] = values
        counts += np.bincount(vertex, minlength=header.n)
    short = np.flatnonzero(counts < header.prefix)
    if short.size:
        raise InputError(path, f"vertex {int(short[0]) + 1}: its line lacks the {header.prefix} size/weight fields the header's fmt announces")
    fields = {}
    col = 0
    if header.has_size:
        fields["vsize"] = table[:, 0].copy()
        col = 1
    if header.has_vwgt:
        fields["vwgt"] = np.ascontiguousarray(table[:, col : col + header.ncon])
    return fields


# ---------------------------------------------------------------------------
# DIMACS / PACE .gr
# ---------------------------------------------------------------------------


def _read_dimacs(path: Path) -> Graph:
    """DIMACS-9 shortest-path `p sp n m` + `a u v w` arcs, or PACE `p tw n m` + `u v` lines."""
    kind: Optional[str] = None
    n = m = 0
    srcs, dsts, wgts = [], [], []
    line0 = 0
    for block in _text_blocks(path):
        tok = _tokenize(block)
        lead = tok.group_first_byte()
        data = lead != ord("c")
        groups = np.flatnonzero(data)
        if kind is None and groups.size:
            g = int(groups[0])
            t0 = int(tok.first[g])
            if lead[g] != ord("p") or tok.text(t0) != "p" or tok.count[g] != 4:
                raise InputError(path, f"line {line0 + int(tok.line[t0]) + 1}: expected the problem line 'p sp|tw n m' first")
            kind = tok.text(t0 + 1)
            vals = _parse_or_fail(path, tok, np.arange(t0 + 2, t0 + 4), line0, "header field")
            n, m = int(vals[0]), int(vals[1])
            if n < 0 or m < 0:
                raise InputError(path, f"line {line0 + int(tok.line[t0]) + 1}: negative counts in the problem line")
            data[g] = False
        extra = data & (lead == ord("p"))
        if kind is not None and extra.any():
            t = int(tok.first[int(np.argmax(extra))])
            raise InputError(path, f"line {line0 + int(tok.line[t]) + 1}: second problem line")
        if kind is None:
            line0 += tok.num_lines
            continue
        arc = kind == "sp"
        width = 4 if arc else 2
        wrong = data & ((tok.count != width) | ((lead == ord("a")) != arc))
        if wrong.any():
            t = int(tok.first[int(np.argmax(wrong))])
            want = "'a u v w'" if arc else "'u v'"
            raise InputError(path, f"line {line0 + int(tok.line[t]) + 1}: expected {want} for problem '{kind}'")
        keep = data[tok.group]
        rank = tok.rank
        off = 1 if arc else 0
        cu = np.flatnonzero(keep & (rank == off))
        cv = np.flatnonzero(keep & (rank == off + 1))
        u = _parse_or_fail(path, tok, cu, line0, "node id")
        v = _parse_or_fail(path, tok, cv, line0, "node id")
        for which, vals in ((cu, u), (cv, v)):
            _fail_negative(path, tok, which, vals, line0, lowest=1)
            over = vals > n
            if over.any():
                t = int(which[int(np.argmax(over))])
                raise InputError(path, f"line {line0 + int(tok.line[t]) + 1}: node id {tok.text(t)} > n = {n}")
        srcs.append(u - 1)
        dsts.append(v - 1)
        if arc:
            cw = np.flatnonzero(keep & (rank == 3))
            wgts.append(_parse_or_fail(path, tok, cw, line0, "arc weight"))
        line0 += tok.num_lines
    if kind is None:
        raise InputError(path, "no problem line 'p sp|tw n m' (empty file?)")
    src = np.concatenate(srcs) if srcs else np.zeros(0, np.int64)
    dst = np.concatenate(dsts) if dsts else np.zeros(0, np.int64)
    if src.shape[0] != m:
        raise InputError(path, f"problem line says {m} {'arcs' if kind == 'sp' else 'edges'} but the file lists {src.shape[0]}")
    graph = Graph(n, src, dst)
    if kind == "sp":
        graph.edge_data["edge_weight"] = np.concatenate(wgts) if wgts else np.zeros(0, np.int64)
    return graph


__all__ = [
    "read_graph",
    "input_format",
    "open_array_input",
    "open_npy",
    "read_npz_arrays",
    "parse_name_paths",
    "check_input_file",
    "scan_range",
    "drop_pages",
]
