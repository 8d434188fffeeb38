"""Flat file-list exports (SPEC.md section 5): WholeGraph-style row-major binaries.

An export named NAME in a directory is `NAME_part_<i>_of_<n>` (i = 0..n-1),
headerless little-endian row-major files whose concatenation is the whole
array, plus `NAME.json` describing them. WholeGraph's
`create_embedding_from_filelist` / `create_wholememory_tensor_from_filelist`
read the part files as they are; `open_filelist` reads them back here,
validating the JSON and the file sizes before mapping anything.

Writing streams rows in chunks (never the whole array in memory), casts on the
way when asked (float16 / bfloat16 / narrower integers, refusing overflow),
and commits per export: parts are written under hidden temporary names and
fsynced, then renamed into place, and `NAME.json` is written last, atomically.
A `NAME.json` therefore never names incomplete data.
"""

from __future__ import annotations

import mmap
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Protocol, Sequence, Union

import numpy as np

from gpart.bytes.buffers import BufferRing
from gpart.bytes.copy import COPY_PIECE_BYTES, ByteSpan, KernelCopyUnsupported, copy_spans
from gpart.bytes.reader import DONTNEED, WILLNEED, advise_pages, read_only_mapping
from gpart.bytes.sink import ByteSink
from gpart.errors import GpartError, InputError, IntegrityError, OutputError, short_repr, uninterrupted
from gpart.formats.arrays import ArrayEntry, check_file_size, file_crc32, inside, open_array
from gpart.formats.dtypes import STORAGE_DTYPES, dtype_name, storage_dtype
from gpart.formats.manifest import MANIFEST_NAME, check_format, fsync_dir, read_json, write_json_atomic
from gpart.formats.commit import remove_path, sweep_stale_work
from gpart.formats.names import parse_work_name, safe_name, stale_work, work_name
from gpart.progress import Progress, or_null
from gpart.shard import even_boundaries, wholegraph_boundaries

FORMAT = "gpart.filelist"
VERSION = 1
BFLOAT16_NOTE = (
    "bfloat16 is stored as its raw 16-bit pattern (uint16: the upper half of the float32 value, "
    "rounded to nearest even, as torch.bfloat16); read with "
    "torch.from_numpy(np.fromfile(f, np.int16)).view(torch.bfloat16)"
)
# Bytes per read/convert/write step: large enough for sequential writes at disk speed
# and little per-chunk overhead, small enough that a chunk stays in the CPU cache between
# the cast, the CRC-32 and the write (a plain read/write loop on the 2-core dev host ran
# up to 3x faster with 1 MB than with 16 MB chunks). RSS: a few chunks.
FILELIST_CHUNK_BYTES = 4 << 20
# bits that are all set exactly for Inf and NaN, per 16-bit float format
_NONFINITE_MASK16 = {"float16": 0x7C00, "bfloat16": 0x7F80}


def part_file_name(name: str, index: int, num_files: int) -> str:
    """WholeGraph's file naming: `<name>_part_<i>_of_<n>`."""
    return f"{name}_part_{index}_of_{num_files}"


def json_file_name(name: str) -> str:
    return f"{name}.json"


def check_export_name(name: str) -> str:
    """An export name is a plain file-name stem: letters, digits, `_ . -`, not starting with `.` or `-`."""
    return safe_name(name, "export name")


def file_row_counts(num_rows: int, num_files: int) -> np.ndarray:
    """Rows per part file: the even rule of SPEC.md section 2 (sizes differ by at most one, larger first)."""
    return np.diff(even_boundaries(num_rows, num_files))


# --------------------------------------------------------------------------- sources

class RowSource(Protocol):
    """Rows of an array produced on demand, for inputs that are not one ndarray."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop). A result may live in a reused buffer, but must stay intact
        for the next `RING - 1` calls (use a BufferRing). A source may also define
        `release(start, stop)`, called once those rows are written, and
        `byte_spans(start, stop) -> Optional[list[ByteSpan]]`: where rows [start, stop)
        lie, as stored, in files (None where they do not lie contiguously in files); the
        writer then copies them inside the kernel when no dtype change is asked."""
        ...


class ArrayRows:
    """An ndarray as a RowSource: chunks are views, never copies.

    For a read-only memory-mapped file (np.load(mmap_mode="r"), gpart's readers),
    `release(start, stop)`, called by the writer once those rows are written, drops
    their pages from this process's mapping (madvise DONTNEED; the page cache keeps
    them). RSS then stays at a few chunks however large the file, and the bytes are
    copied once, from the page cache into the output file, as a plain copy does.
    """

    def __init__(self, arr: np.ndarray):
        if arr.ndim == 0:
            raise ValueError("a 0-d array has no rows")
        self.arr = arr
        self.shape = tuple(int(s) for s in arr.shape)
        self.dtype = arr.dtype
        self.row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * arr.dtype.itemsize
        self._mapping = read_only_mapping(arr)

    def read(self, start: int, stop: int) -> np.ndarray:
        # ask the kernel to read the next chunk from disk while this one is written
        self._advise(WILLNEED, stop, min(self.shape[0], 2 * stop - start))
        return self.arr[start:stop]

    def release(self, start: int, stop: int) -> None:
        self._advise(DONTNEED, start, stop)

    def byte_spans(self, start: int, stop: int) -> Optional[list["ByteSpan"]]:
        """Rows [start, stop) as bytes of the mapped file (e.g. an .npy past its header), or None.

        Only for a read-only, C-contiguous, little-endian memmap of a named file; the
        first bytes of the span are compared with the mapping, so a file replaced
        since it was mapped is streamed from the mapping instead of copied.
        """
        arr, filename = self.arr, getattr(self.arr, "filename", None)
        if self._mapping is None or not filename or arr.dtype.byteorder == ">" or stop <= start:
            return None
        mm, map_address = self._mapping
        offset = int(getattr(arr, "offset", 0) or 0)
        map_start = offset - offset % mmap.ALLOCATIONGRANULARITY  # np.memmap maps from here
        begin = map_start + (arr.ctypes.data - map_address) + start * self.row_bytes
        nbytes = (stop - start) * self.row_bytes
        probe = min(nbytes, 4096)
        try:
            with open(filename, "rb") as fh:
                fh.seek(begin)
                same = fh.read(probe) == arr[start:stop].reshape(-1).view(np.uint8)[:probe].tobytes()
        except (OSError, ValueError, OverflowError):
            return None
        return [ByteSpan(Path(filename), begin, nbytes)] if same else None

    def _advise(self, advice: Optional[int], start: int, stop: int) -> None:
        """madvise the pages of rows [start, stop) of the mapping (no-op without one)."""
        if self._mapping is None or stop <= start:
            return
        mm, map_address = self._mapping
        begin = self.arr.ctypes.data - map_address + start * self.row_bytes
        advise_pages(mm, begin, (stop - start) * self.row_bytes, advice)

    def close(self) -> None:
        self._mapping = None



FLOAT_TARGETS = ("float16", "bfloat16", "float32", "float64")
INT_TARGETS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


class Converter:
    """Casts chunks of one source dtype to a target dtype name, refusing lossy overflow.

    float -> float16/bfloat16/float32/float64, rounding to nearest even exactly as
    torch's `Tensor.to` (float64 goes through float32 for the 16-bit targets, as torch
    does); a result that is Inf or NaN is an error unless `allow_overflow`. integer ->
    integer only when every value fits; bool and equal dtypes pass through.

    numpy only: importing torch would cost ~190 MB of RSS and seconds of start-up for
    what a few vectorised passes do at memory speed. Output buffers are reused (BufferRing).
    """

    def __init__(self, source: np.dtype, target: Optional[str], where: Any, allow_overflow: bool = False):
        self.source = np.dtype(source)
        try:
            self.source_name = dtype_name(self.source)
        except ValueError:
            raise InputError(where, f"dtype {self.source} is not supported (numeric or bool arrays only)") from None
        self.target = target or self.source_name
        self.where = where
        self.allow_overflow = allow_overflow
        self.storage = storage_dtype(self.target)
        self._ring = BufferRing()
        self._scratch: dict[str, np.ndarray] = {}  # per-chunk temporaries, free again after each call
        self.kind = self._plan()

    def _plan(self) -> str:
        src, dst = self.source_name, self.target
        if dst not in STORAGE_DTYPES:
            raise InputError(self.where, f"unknown target dtype {dst!r}")
        if src == dst:
            return "same"
        if self.source.kind == "f" and dst in FLOAT_TARGETS:
            widening = dst != "bfloat16" and np.dtype(dst).itemsize >= self.source.itemsize
            return "float_widen" if widening else "float_narrow"
        if self.source.kind in "iu" and dst in INT_TARGETS:
            return "int"
        raise InputError(
            self.where,
            f"cannot convert {src} to {dst}: float arrays convert to {'/'.join(FLOAT_TARGETS)}, "
            f"integer arrays to integer dtypes whose range holds every value, bool arrays stay bool",
        )

    def __call__(self, chunk: np.ndarray) -> np.ndarray:
        if self.kind == "same":
            return chunk if chunk.dtype == self.storage else chunk.astype(self.storage)
        if self.kind == "int":
            return self._int(chunk)
        out = self._buffer(chunk.shape)
        self._cast_float(chunk, out)
        if self.kind == "float_narrow":
            self._check_finite(chunk, out)
        return out

    def _scratch_like(self, key: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        size = int(np.prod(shape, dtype=np.int64))
        buf = self._scratch.get(key)
        if buf is None or buf.size < size or buf.dtype != np.dtype(dtype):
            buf = self._scratch[key] = np.empty(size, dtype=dtype)
        return buf[:size].reshape(shape)

    def _cast_float(self, chunk: np.ndarray, out: np.ndarray) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is detected (and reported) by _check_finite
            self._cast_float_quiet(chunk, out)

    def _cast_float_quiet(self, chunk: np.ndarray, out: np.ndarray) -> None:
        if self.target not in ("float16", "bfloat16") or chunk.dtype == np.float32:
            f32 = chunk
        else:  # torch rounds float64 -> float16/bfloat16 through float32; so do we
            f32 = self._scratch_like("f32", chunk.shape, np.float32)
            np.copyto(f32, chunk, casting="unsafe")
        if self.target == "bfloat16":
            _float32_to_bfloat16_bits(np.ascontiguousarray(f32, dtype=np.float32), out, self._scratch_like("u32", chunk.shape, np.uint32))
        else:
            np.copyto(out, f32, casting="unsafe")

    def _buffer(self, shape: tuple[int, ...]) -> np.ndarray:
        return self._ring.get(shape, self.storage)

    def _int(self, chunk: np.ndarray) -> np.ndarray:
        if chunk.size:
            info = np.iinfo(self.storage)
            lo, hi = chunk.min(), chunk.max()
            if int(lo) < info.min or int(hi) > info.max:
                bad = int(lo) if int(lo) < info.min else int(hi)
                raise InputError(
                    self.where,
                    f"cannot store {self.source_name} as {self.target}: value {bad} is outside [{info.min}, {info.max}]",
                )
        out = self._buffer(chunk.shape)
        np.copyto(out, chunk, casting="unsafe")
        return out

    def _check_finite(self, chunk: np.ndarray, out: np.ndarray) -> None:
        mask = _NONFINITE_MASK16.get(self.target)
        if mask is not None:
            bits = out.reshape(-1).view(np.uint16)
            finite = not np.any((bits & mask) == mask) if bits.size else True
        else:
            finite = bool(np.isfinite(out).all())
        if self.target == "bfloat16":  # the rounding trick maps NaN to Inf or (wrapping) to a finite pattern
            finite = finite and bool(np.isfinite(chunk).all())
        if finite:
            return
        if self.target == "bfloat16":
            out[np.isnan(chunk)] = _BFLOAT16_NAN
        if self.allow_overflow:
            return
        source_bad = int(np.count_nonzero(~np.isfinite(chunk)))
        if source_bad:
            problem = f"contains {source_bad} NaN/Inf value(s)"
        else:
            result = out if mask is None else _to_float32(out, self.target)
            overflow = int(np.count_nonzero(~np.isfinite(result)))
            biggest = float(np.abs(chunk[~np.isfinite(result)]).max())
            problem = f"{overflow} finite value(s) overflow {self.target} (largest magnitude {biggest:.6g})"
        raise InputError(self.where, f"{problem} when converting {self.source_name} to {self.target}; pass --allow-overflow to store them as Inf/NaN")


_BFLOAT16_NAN = 0x7FC0


def _float32_to_bfloat16_bits(f32: np.ndarray, out: np.ndarray, tmp: np.ndarray) -> None:
    """Upper 16 bits of float32 rounded to nearest even (torch's round_to_nearest_even):
    bits + 0x7FFF + (bit 16 of bits), shifted down. In place on one uint32 temporary.
    NaN is not preserved here; the caller's finiteness check restores it."""
    bits = f32.view(np.uint32)
    np.right_shift(bits, 16, out=tmp)
    np.bitwise_and(tmp, 1, out=tmp)
    np.add(tmp, 0x7FFF, out=tmp)
    np.add(tmp, bits, out=tmp)  # wraps around only for some negative NaN patterns
    np.right_shift(tmp, 16, out=tmp)
    np.copyto(out, tmp, casting="unsafe")


def _to_float32(bits: np.ndarray, target: str) -> np.ndarray:
    if target == "float16":
        return bits.astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)


# --------------------------------------------------------------------------- writer


@dataclass
class _Pending:
    """An export whose parts are written under temporary names, waiting for commit."""

    name: str
    manifest: dict[str, Any]
    temps: list[Path]
    finals: list[Path]


class FileListWriter:
    """Writes one or more exports into `out_dir`, each committed by its own `<name>.json`.

    `add()` streams an export's parts to hidden temporary files (fsynced); `commit()`
    renames them into place and writes each `<name>.json` last. Leaving the `with`
    block by an exception removes every temporary file (and `out_dir` if this writer
    created it and it is empty).
    """

    def __init__(
        self,
        out_dir: os.PathLike | str,
        *,
        force: bool = False,
        inputs: Sequence[os.PathLike | str] = (),
        chunk_bytes: int = FILELIST_CHUNK_BYTES,
        progress: Optional[Progress] = None,
    ):
        self.out_dir = Path(out_dir)
        self.force = force
        self.inputs = [Path(p).absolute() for p in inputs]
        self.chunk_bytes = max(1, int(chunk_bytes))
        self.progress = or_null(progress)
        self._pending: list[_Pending] = []
        self._scratch: list[Path] = []
        self._created_dir = False
        self._check_dir()
        if self.out_dir.is_dir():
            recover_exports(self.out_dir)  # finish commits of killed runs, then drop their leftovers
            sweep_stale_work(self.out_dir)

    # -- checks -----------------------------------------------------------------

    def _check_dir(self) -> None:
        out = self.out_dir
        if out.exists() and not out.is_dir():
            raise OutputError(out, "exists and is not a directory")
        if (out / MANIFEST_NAME).exists():
            raise OutputError(out, f"is a gpart result directory ({MANIFEST_NAME}); write exports to another directory")
        absolute = out.absolute()
        for inp in self.inputs:
            if inp == absolute or (inp.is_dir() and inp in absolute.parents):
                raise OutputError(out, f"output directory would be inside the input {inp}")

    def check_names(self, names: Sequence[str], num_files: Union[int, Sequence[int]]) -> None:
        """Refuse, before anything is written, names that would overwrite existing files without force."""
        counts = [num_files] * len(names) if isinstance(num_files, int) else list(num_files)
        seen = {p.name for p in self._pending}
        for name, n in zip(names, counts):
            check_export_name(name)
            if name in seen:
                raise InputError(None, f"export name {name!r} given twice")
            seen.add(name)
            self._check_targets(name, n)

    def _check_targets(self, name: str, num_files: int) -> list[Path]:
        if num_files < 1:
            raise InputError(None, f"number of files must be at least 1, got {num_files}")
        finals = [self.out_dir / part_file_name(name, i, num_files) for i in range(num_files)]
        json_path = self.out_dir / json_file_name(name)
        for path in [json_path, *finals]:
            if path.absolute() in self.inputs:
                raise OutputError(path, "would overwrite the input")
            if os.path.lexists(path) and not self.force:
                what = "an export" if path == json_path else "a file"
                raise OutputError(path, f"already exists ({what}); use --force to replace it")
            if path.is_dir():
                raise OutputError(path, "exists and is a directory")
        return finals

    # -- writing ----------------------------------------------------------------

    def add(
        self,
        name: str,
        data: Union[np.ndarray, RowSource],
        num_files: int = 1,
        dtype: Optional[str] = None,
        *,
        allow_overflow: bool = False,
        source: Optional[str] = None,
        extra: Optional[dict[str, Any]] = None,
    ) -> dict[str, Any]:
        """Stream `data` into `num_files` temporary parts; return the manifest commit() will write."""
        check_export_name(name)
        if any(p.name == name for p in self._pending):
            raise InputError(None, f"export name {name!r} given twice")
        where = source if source is not None else self.out_dir / json_file_name(name)
        if len(data.shape) == 0:
            raise InputError(where, "is a 0-d scalar; an export needs an array of rows")
        rows_src = ArrayRows(data) if isinstance(data, np.ndarray) else data
        shape = tuple(int(s) for s in rows_src.shape)
        converter = Converter(rows_src.dtype, dtype, where, allow_overflow)
        finals = self._check_targets(name, num_files)
        self._ensure_dir()
        token = uuid.uuid4().hex[:8]
        temps = [work_name(p, "tmp", token) for p in finals]
        pending = _Pending(name, {}, temps, finals)
        self._pending.append(pending)  # registered first, so a failure below cleans its temps
        try:
            entries = self._write_parts(rows_src, shape, converter, temps, finals, name)
        finally:
            if isinstance(rows_src, ArrayRows):
                rows_src.close()
        pending.manifest = _build_manifest(name, converter, shape, entries, source, extra)
        return pending.manifest

    def scratch_path(self, label: str) -> Path:
        """A hidden temporary file in `out_dir` for data the caller builds before `add()` (e.g. a
        CSR filled out of order): on the parts' filesystem, so `add()` of a read-only memmap of it
        is a kernel copy. Deleted by `commit()` and on any failure, like the parts' temporaries."""
        self._ensure_dir()
        path = work_name(self.out_dir / label, "tmp")
        self._scratch.append(path)
        return path

    def _remove_scratch(self) -> None:
        for path in self._scratch:
            try:
                path.unlink()
            except OSError:
                pass
        self._scratch.clear()

    def _ensure_dir(self) -> None:
        if self.out_dir.is_dir():
            return
        try:
            self.out_dir.mkdir(parents=True)
        except OSError as exc:
            raise OutputError(self.out_dir, f"cannot create directory: {exc.strerror or exc}") from None
        self._created_dir = True

    def _write_parts(self, rows_src, shape, converter: Converter, temps, finals, name) -> list[dict[str, Any]]:
        counts = file_row_counts(shape[0], len(finals))
        row_items = int(np.prod(shape[1:], dtype=np.int64))
        widest = max(rows_src.dtype.itemsize, converter.storage.itemsize)
        chunk_rows = max(1, self.chunk_bytes // max(1, row_items * widest))
        out_bytes = shape[0] * row_items * converter.storage.itemsize
        release = getattr(rows_src, "release", None)  # lets a mapped source drop written rows' pages
        entries = []
        start = 0
        with self.progress.stage(f"export {name}", total=out_bytes, unit="B") as bar:
            for temp, final, rows in zip(temps, finals, counts):
                crc = self._copy_part(rows_src, converter, start, start + int(rows), temp, bar)
                if crc is None:
                    with ByteSink(temp, crc_in_thread=False) as part:
                        for lo in range(start, start + int(rows), chunk_rows):
                            hi = min(lo + chunk_rows, start + int(rows))
                            part.write(converter(rows_src.read(lo, hi)))
                            if release is not None:
                                release(lo, hi)
                            bar.advance((hi - lo) * row_items * converter.storage.itemsize)
                    crc = part.crc
                entry = ArrayEntry(final.name, converter.target, (int(rows), *shape[1:]), crc).to_json()
                entry["rows"] = int(rows)
                entries.append(entry)
                start += int(rows)
        return entries

    def _copy_part(self, rows_src, converter: Converter, start: int, stop: int, temp: Path, bar) -> Optional[int]:
        """Write rows [start, stop) to `temp` by a kernel copy when they pass through unchanged
        and the source says where they lie in its files (`byte_spans`); return the part's
        CRC-32, or None (nothing written) where the rows must be streamed instead."""
        byte_spans = getattr(rows_src, "byte_spans", None)
        if byte_spans is None or converter.kind != "same" or np.dtype(rows_src.dtype) != converter.storage or stop <= start:
            return None
        spans = byte_spans(start, stop)
        if spans is None:
            return None
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise OutputError(temp, f"cannot create file: {exc.strerror or exc}") from None
        try:
            try:
                crc, _ = copy_spans(spans, fd, temp, piece_bytes=max(self.chunk_bytes, COPY_PIECE_BYTES), advance=bar.advance)
            except KernelCopyUnsupported:
                os.ftruncate(fd, 0)
                return None
            try:
                os.fsync(fd)
            except OSError as exc:
                raise OutputError(temp, f"write failed: {exc.strerror or exc}") from None
        finally:
            os.close(fd)
        return crc

    # -- commit -----------------------------------------------------------------

    def commit(self) -> list[dict[str, Any]]:
        """Move every pending export into place, `<name>.json` last; return their manifests."""
        self._remove_scratch()
        done = []
        while self._pending:
            pending = self._pending[0]
            self._commit_one(pending)
            done.append(pending.manifest)
        return done

    def _commit_one(self, pending: _Pending) -> None:
        """Commit one export without a window that loses both the old and the new one.

        The parts are complete under temporary names. A commit record naming the
        new `<name>.json` and the renames still to do is written first (the commit
        point); only then is the old JSON removed, the parts renamed and the new
        JSON written. A run killed after the record is rolled forward by the next
        writer in the directory (recover_exports); one killed before it leaves
        the old export untouched.
        """
        json_path = self.out_dir / json_file_name(pending.name)
        self._check_targets(pending.name, len(pending.finals))  # again: the directory may have changed
        keep = {p.name for p in pending.finals}
        stale = [p.name for p in _files_of_old_export(json_path) if p.name not in keep] if json_path.exists() else []
        record = {
            "format": COMMIT_RECORD_FORMAT,
            "export": pending.manifest,
            "moves": [[t.name, f.name] for t, f in zip(pending.temps, pending.finals)],
            "remove": stale,
        }
        record_path = work_name(json_path, "next", parse_work_name(pending.temps[0]).token)
        with uninterrupted():
            write_json_atomic(record_path, record)
            self._pending.pop(0)  # its parts now belong to the record: a failure below must not delete them
            _roll_forward(record_path, record)

    def discard(self) -> None:
        """Remove every temporary file of uncommitted exports (and the directory if created here and empty)."""
        for pending in self._pending:
            for temp in pending.temps:
                try:
                    temp.unlink()
                except FileNotFoundError:
                    pass
                except OSError:
                    pass
        self._pending.clear()
        self._remove_scratch()
        if self._created_dir:
            try:
                self.out_dir.rmdir()
            except OSError:
                pass

    def __enter__(self) -> "FileListWriter":
        return self

    def __exit__(self, exc_type, *rest) -> None:
        if exc_type is not None or self._pending or self._scratch:
            self.discard()



COMMIT_RECORD_FORMAT = "gpart.filelist-commit"


def _roll_forward(record_path: Path, record: dict[str, Any]) -> None:
    """Carry out a commit record: old JSON out, parts in, new JSON, stale parts removed, record removed.
    Every step can be repeated, so a run killed anywhere in here is finished by the next one."""
    directory = record_path.parent
    manifest = record["export"]
    json_path = directory / json_file_name(manifest["name"])
    try:
        if os.path.lexists(json_path):
            json_path.unlink()
        for temp, final in record["moves"]:
            if (directory / temp).exists():
                os.replace(directory / temp, directory / final)
        fsync_dir(directory)
    except OSError as exc:
        raise OutputError(json_path, f"cannot move parts into place: {exc.strerror or exc}") from None
    write_json_atomic(json_path, manifest)
    for name in record["remove"]:
        remove_path(directory / name)
    remove_path(record_path)
    fsync_dir(directory)


def _read_commit_record(path: Path) -> dict[str, Any]:
    """A commit record, checked: every name in it is a plain safe name."""
    obj = read_json(path)
    try:
        if obj.get("format") != COMMIT_RECORD_FORMAT:
            raise ValueError("not a commit record")
        _validate_manifest(obj["export"], path)
        if any(len(move) != 2 for move in obj["moves"]):
            raise ValueError("moves must be pairs")
        temps = [temp for temp, _ in obj["moves"]]
        finals = [final for _, final in obj["moves"]] + list(obj["remove"])
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as exc:
        raise IntegrityError(path, f"damaged commit record: {exc}") from None
    for name in finals:
        safe_name(name, "file in commit record", path)
    for temp in temps:  # hidden work names of this directory, nothing else
        work = parse_work_name(path.parent / temp) if isinstance(temp, str) and "/" not in temp else None
        if work is None or work.kind != "tmp":
            raise IntegrityError(path, f"damaged commit record: {short_repr(temp)} is not a temporary part name")
    return obj


def recover_exports(directory: os.PathLike | str) -> list[str]:
    """Finish the export commits that killed runs left in `directory`; return the export names."""
    done = []
    for work in stale_work(directory):
        if work.kind != "next":
            continue
        record = _read_commit_record(work.path)
        _roll_forward(work.path, record)
        done.append(record["export"]["name"])
    return done


def interrupted_exports(directory: os.PathLike | str) -> list[Path]:
    """Commit records of exports whose run was killed before finishing (the next export-feat completes them)."""
    return [w.path for w in stale_work(directory) if w.kind == "next"]


def _files_of_old_export(json_path: Path) -> list[Path]:
    """Part files an existing export names (best effort: a damaged JSON names none)."""
    try:
        obj = read_json(json_path)
        return [json_path.parent / Path(str(f["file"])).name for f in obj.get("files", [])]
    except (GpartError, TypeError, KeyError, AttributeError):
        return []


def _build_manifest(name, converter: Converter, shape, entries, source, extra) -> dict[str, Any]:
    from gpart import __version__

    manifest: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "created_by": f"gpart {__version__}",
        "name": name,
        "dtype": converter.target,
        "storage_dtype": converter.storage.name,
        "source_dtype": converter.source_name,
        "shape": list(shape),
        "byteorder": "little",
        "num_files": len(entries),
        "bytes": int(sum(e["bytes"] for e in entries)),
        "files": entries,
    }
    if converter.target == "bfloat16":
        manifest["note"] = BFLOAT16_NOTE
    if source is not None:
        manifest["source"] = str(source)
    if extra:
        manifest.update(extra)
    return manifest


def write_filelist(
    out_dir: os.PathLike | str,
    name: str,
    data: Union[np.ndarray, RowSource],
    num_files: int = 1,
    dtype: Optional[str] = None,
    *,
    allow_overflow: bool = False,
    force: bool = False,
    inputs: Sequence[os.PathLike | str] = (),
    source: Optional[str] = None,
    extra: Optional[dict[str, Any]] = None,
    chunk_bytes: int = FILELIST_CHUNK_BYTES,
    progress: Optional[Progress] = None,
) -> dict[str, Any]:
    """Export one array (an ndarray, typically a memmap, or a RowSource) as `name` in `out_dir`.

    Returns the manifest written to `out_dir/<name>.json`.
    """
    with FileListWriter(out_dir, force=force, inputs=inputs, chunk_bytes=chunk_bytes, progress=progress) as writer:
        writer.check_names([name], num_files)
        writer.add(name, data, num_files, dtype, allow_overflow=allow_overflow, source=source, extra=extra)
        return writer.commit()[0]


# --------------------------------------------------------------------------- kernel copies

# --------------------------------------------------------------------------- reader


@dataclass
class FileList:
    """An export opened from its `<name>.json` (see `open_filelist`)."""

    json_path: Path
    manifest: dict[str, Any]
    entries: list[ArrayEntry]
    name: str
    dtype: str
    shape: tuple[int, ...]
    _maps: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def directory(self) -> Path:
        return self.json_path.parent

    @property
    def files(self) -> list[Path]:
        """The part files in order (their concatenation is the array)."""
        return [self.directory / e.file for e in self.entries]

    @property
    def file_rows(self) -> list[int]:
        return [e.shape[0] for e in self.entries]

    @property
    def file_offsets(self) -> np.ndarray:
        """Global row at which each file starts, plus the total row count."""
        return np.concatenate([[0], np.cumsum(self.file_rows, dtype=np.int64)]).astype(np.int64)

    @property
    def num_rows(self) -> int:
        return self.shape[0]

    @property
    def storage_dtype(self) -> np.dtype:
        """The numpy dtype of the bytes (uint16 for bfloat16)."""
        return storage_dtype(self.dtype)

    def _file_array(self, index: int) -> np.ndarray:
        if index not in self._maps:
            self._maps[index] = open_array(self.directory, self.entries[index])
        return self._maps[index]

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) as one in-memory array (storage dtype)."""
        start, stop = self._check_range(start, stop)
        offsets = self.file_offsets
        parts = []
        for i in self._files_overlapping(start, stop):
            lo, hi = max(start, offsets[i]) - offsets[i], min(stop, offsets[i + 1]) - offsets[i]
            parts.append(self._file_array(i)[lo:hi])
        if not parts:
            return np.empty((0, *self.shape[1:]), dtype=self.storage_dtype)
        return np.concatenate(parts, axis=0) if len(parts) > 1 else np.array(parts[0])

    def rank_range(self, rank: int, world_size: int) -> tuple[int, int]:
        """Rows rank `rank` of `world_size` owns under WholeGraph's split (ceil(N/W) rows per rank)."""
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world size {world_size}")
        bounds = wholegraph_boundaries(self.num_rows, world_size)
        return int(bounds[rank]), int(bounds[rank + 1])

    def rank_slice(self, rank: int, world_size: int) -> np.ndarray:
        """The rank's rows: a memmap view when they lie in one file, else read from the overlapping files only."""
        start, stop = self.rank_range(rank, world_size)
        files = self._files_overlapping(start, stop)
        if len(files) == 1:
            i = files[0]
            base = int(self.file_offsets[i])
            return self._file_array(i)[start - base : stop - base]
        return self.read_rows(start, stop)

    def as_memmap(self) -> np.ndarray:
        """The whole array, memory-mapped (single-file exports only)."""
        if len(self.entries) != 1:
            raise InputError(self.json_path, f"export has {len(self.entries)} files; as_memmap needs exactly one (use read_rows or rank_slice)")
        return self._file_array(0)

    def verify(self) -> list[str]:
        """CRC-32 of every part file against the JSON; a list of problems (empty when intact)."""
        problems = []
        for path, entry in zip(self.files, self.entries):
            if entry.crc32 is not None:
                actual = file_crc32(path)
                if actual != entry.crc32:
                    problems.append(f"{path}: checksum mismatch: crc32 {actual:08x}, {self.json_path.name} says {entry.crc32:08x}")
        return problems

    def _check_range(self, start: int, stop: int) -> tuple[int, int]:
        start, stop = int(start), int(stop)
        if not 0 <= start <= stop <= self.num_rows:
            raise ValueError(f"row range [{start}, {stop}) is outside [0, {self.num_rows})")
        return start, stop

    def _files_overlapping(self, start: int, stop: int) -> list[int]:
        offsets = self.file_offsets
        if start == stop:
            i = int(np.searchsorted(offsets, start, side="right")) - 1
            return [min(max(i, 0), len(self.entries) - 1)]
        return [i for i in range(len(self.entries)) if offsets[i] < stop and offsets[i + 1] > start]


def open_filelist(json_path: os.PathLike | str, verify: bool = False) -> FileList:
    """Open an export from its `<name>.json`: validate the JSON, then every part file's size
    (and CRC-32 with `verify`), before mapping anything."""
    json_path = Path(json_path)
    obj = check_format(read_json(json_path), json_path, FORMAT, (VERSION,), what="")
    name, dtype, shape, entries = _validate_manifest(obj, json_path)
    filelist = FileList(json_path, obj, entries, name, dtype, shape)
    for path, entry in zip(filelist.files, entries):
        check_file_size(inside(filelist.directory, entry.file), entry)
    if verify:
        problems = filelist.verify()
        if problems:
            raise IntegrityError(None, problems[0])
    return filelist


def _validate_manifest(obj: dict[str, Any], where: Path) -> tuple[str, str, tuple[int, ...], list[ArrayEntry]]:
    name = obj.get("name")
    safe_name(name, "field 'name'", where)
    dtype = obj.get("dtype")
    if not isinstance(dtype, str):
        raise InputError(where, "field 'dtype' is missing")
    storage_dtype(dtype, where)
    if obj.get("byteorder") != "little":
        raise InputError(where, f"byteorder {obj.get('byteorder')!r} is not supported (only 'little')")
    shape = obj.get("shape")
    if not isinstance(shape, list) or not shape or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise InputError(where, f"field 'shape' must be a non-empty list of non-negative integers, got {shape!r}")
    files = obj.get("files")
    if not isinstance(files, list) or not files:
        raise InputError(where, "field 'files' must be a non-empty list")
    if obj.get("num_files", len(files)) != len(files):
        raise InputError(where, f"num_files {obj.get('num_files')!r} disagrees with {len(files)} file entries")
    entries = []
    for i, item in enumerate(files):
        entry = ArrayEntry.from_json(item, where)
        if entry.crc32 is None:  # every writer records one; without it flipped data would pass verify
            raise InputError(where, f"file entry {entry.file!r} lacks 'crc32'")
        if "/" in entry.file or "\\" in entry.file:
            raise InputError(where, f"file entry {entry.file!r} is not a plain file name")
        if entry.dtype != dtype or list(entry.shape[1:]) != shape[1:]:
            raise InputError(where, f"file {entry.file}: dtype/shape {entry.dtype} {list(entry.shape)} disagree with {dtype} {shape}")
        rows = item.get("rows", entry.shape[0]) if isinstance(item, dict) else None
        if rows != entry.shape[0]:
            raise InputError(where, f"file {entry.file}: rows {rows!r} disagree with its shape {list(entry.shape)}")
        entries.append(entry)
    total_rows = sum(e.shape[0] for e in entries)
    if total_rows != shape[0]:
        raise InputError(where, f"file row counts add up to {total_rows}, shape says {shape[0]} rows")
    total_bytes = sum(e.nbytes for e in entries)
    if "bytes" in obj and obj["bytes"] != total_bytes:
        raise InputError(where, f"bytes {obj['bytes']!r} disagree with the files ({total_bytes})")
    return name, dtype, tuple(shape), entries
