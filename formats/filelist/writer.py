"""The writer of file-list exports (SPEC.md section 5): parts streamed under their final names
and fsynced, then each `<name>.json` last, into a directory that is not yet anyone's result.

The directory is committed as a whole by its owner: export-feat's export sets
(gpart.formats.filelist.sets) swap it into place; gather-ckpt's staged output
(gpart.formats.files.commit) moves it. A reader that opens the files by name therefore
never meets parts of two different exports.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from gpart.base.errors import InputError, OutputError
from gpart.base.progress import Progress, StageHandle, or_null
from gpart.bytes.copy import COPY_PIECE_BYTES, KernelCopyUnsupported, copy_spans
from gpart.bytes.sink import ByteSink
from gpart.formats.filelist.convert import Converter
from gpart.formats.filelist.layout import FILELIST_CHUNK_BYTES, build_manifest, check_export_name, file_row_counts, json_file_name, part_file_name
from gpart.formats.filelist.sources import ArrayRows, RowSource
from gpart.formats.files.arrays import ArrayEntry
from gpart.formats.files.manifest import write_json_atomic


class FileListWriter:
    """Writes one or more exports into the existing `directory`, each as its part files and `<name>.json`.

    `add()` streams an export's parts (fsynced) under their final names; `commit()`
    writes each `<name>.json` last. Leaving the `with` block by an exception removes
    every file written here; the directory itself is its owner's.
    """

    def __init__(self, directory: os.PathLike | str, *, chunk_bytes: int = FILELIST_CHUNK_BYTES, progress: Optional[Progress] = None):
        self.directory = Path(directory)
        self.chunk_bytes = max(1, int(chunk_bytes))
        self.progress = or_null(progress)
        self._pending: list[dict[str, Any]] = []
        self._names: set[str] = set()
        self._written: list[Path] = []

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
        """Stream `data` into `num_files` parts; return the manifest commit() will write."""
        check_export_name(name)
        if name in self._names:
            raise InputError(None, f"export name {name!r} given twice")
        if num_files < 1:
            raise InputError(None, f"number of files must be at least 1, got {num_files}")
        where = source if source is not None else self.directory / json_file_name(name)
        if len(data.shape) == 0:
            raise InputError(where, "is a 0-d scalar; an export needs an array of rows")
        rows_src = ArrayRows(data) if isinstance(data, np.ndarray) else data
        shape = tuple(int(s) for s in rows_src.shape)
        converter = Converter(rows_src.dtype, dtype, where, allow_overflow)
        self._names.add(name)
        finals = [self.directory / part_file_name(name, i, num_files) for i in range(num_files)]
        try:
            entries = self._write_parts(rows_src, shape, converter, finals, name)
        finally:
            if isinstance(rows_src, ArrayRows):
                rows_src.close()
        manifest = build_manifest(name, converter, shape, entries, source, extra)
        self._pending.append(manifest)
        return manifest

    def _write_parts(
        self, rows_src: RowSource, shape: tuple[int, ...], converter: Converter, finals: list[Path], name: str
    ) -> list[dict[str, Any]]:
        counts = file_row_counts(shape[0], len(finals))
        row_items = int(np.prod(shape[1:], dtype=np.int64))
        widest = max(rows_src.dtype.itemsize, converter.storage.itemsize)
        chunk_rows = max(1, self.chunk_bytes // max(1, row_items * widest))
        out_bytes = shape[0] * row_items * converter.storage.itemsize
        release = getattr(rows_src, "release", None)  # lets a mapped source drop written rows' pages
        entries = []
        start = 0
        with self.progress.stage(f"export {name}", total=out_bytes, unit="B") as bar:
            for final, rows in zip(finals, counts):
                self._written.append(final)  # before it exists: a failure below removes it
                crc = self._copy_part(rows_src, converter, start, start + int(rows), final, bar)
                if crc is None:
                    with ByteSink(final, crc_in_thread=False) as part:
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

    def _copy_part(self, rows_src: RowSource, converter: Converter, start: int, stop: int, path: Path, bar: StageHandle) -> Optional[int]:
        """Write rows [start, stop) to `path` by a kernel copy when they pass through unchanged
        and the source says where they lie in its files (`byte_spans`); return the part's
        CRC-32, or None (nothing written) where the rows must be streamed instead."""
        byte_spans = getattr(rows_src, "byte_spans", None)
        if byte_spans is None or converter.kind != "same" or np.dtype(rows_src.dtype) != converter.storage or stop <= start:
            return None
        spans = byte_spans(start, stop)
        if spans is None:
            return None
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            raise OutputError(path, f"cannot create file: {exc.strerror or exc}") from None
        try:
            try:
                crc, _ = copy_spans(spans, fd, path, piece_bytes=max(self.chunk_bytes, COPY_PIECE_BYTES), advance=bar.advance)
            except KernelCopyUnsupported:
                os.ftruncate(fd, 0)
                return None
            try:
                os.fsync(fd)
            except OSError as exc:
                raise OutputError(path, f"write failed: {exc.strerror or exc}") from None
        finally:
            os.close(fd)
        return crc

    def commit(self) -> list[dict[str, Any]]:
        """Write every pending export's `<name>.json` (each after its parts); return their manifests."""
        done = []
        while self._pending:
            manifest = self._pending[0]
            path = self.directory / json_file_name(manifest["name"])
            self._written.append(path)
            write_json_atomic(path, manifest)
            done.append(self._pending.pop(0))
        return done

    def discard(self) -> None:
        """Remove every file written here (parts and JSONs)."""
        for path in self._written:
            try:
                path.unlink()
            except OSError:
                pass
        self._written.clear()
        self._pending.clear()

    def __enter__(self) -> "FileListWriter":
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], *rest: object) -> None:
        if exc_type is not None:
            self.discard()
