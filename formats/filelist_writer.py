"""The writer of file-list exports (SPEC.md section 5): parts streamed to hidden temporary
files and fsynced, then committed per export with `<name>.json` last (filelist_commit)."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from gpart.bytes.copy import COPY_PIECE_BYTES, KernelCopyUnsupported, copy_spans
from gpart.bytes.sink import ByteSink
from gpart.base.errors import InputError, OutputError, uninterrupted
from gpart.formats.arrays import ArrayEntry
from gpart.formats.manifest import MANIFEST_NAME, write_json_atomic
from gpart.formats.commit import sweep_stale_work
from gpart.formats.names import parse_work_name, work_name
from gpart.base.progress import Progress, or_null
from gpart.formats.filelist import FILELIST_CHUNK_BYTES, build_manifest, check_export_name, file_row_counts, json_file_name, part_file_name


# --------------------------------------------------------------------------- writer
from gpart.formats.filelist_commit import COMMIT_RECORD_FORMAT, files_of_old_export, recover_exports, roll_forward
from gpart.formats.filelist_convert import Converter
from gpart.formats.filelist_sources import ArrayRows, RowSource


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
        pending.manifest = build_manifest(name, converter, shape, entries, source, extra)
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
        stale = [p.name for p in files_of_old_export(json_path) if p.name not in keep] if json_path.exists() else []
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
            roll_forward(record_path, record)

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
