"""export-feat's output directory (SPEC.md 5.5): one folder per export set, swapped in whole.

An export set is what one run writes under one name: an array's export
(set `<name>`), or the three exports of a CSR (`<prefix>_row_ptr`, `_col_idx`,
`_edge_perm`: set `<prefix>`). Its folder `OUT/<set>/` holds the part files and
`<name>.json` of each of its exports. A run builds every set in a hidden staging
folder beside it (gpart.formats.files.commit.staged_output) and puts it in place with
one rename-exchange, so a reader that opens `OUT/<set>/<name>_part_<i>_of_<n>` by
name finds the old set or the new one, whole, and never parts of both. Exports
of the flat layout that gpart wrote before (`OUT/<name>.json` beside
`OUT/<name>_part_*`) under the names of a new set are removed after its swap.
An OUT that holds another kind of gpart result (a manifest) is replaced whole
with `--force`, as every command replaces a result (check_output_dir): the
sets are built in a staging directory for OUT, which then takes OUT's place.
"""

from __future__ import annotations

import os
import re
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Optional, Sequence, Union

import numpy as np

from gpart.base.errors import InputError, OutputError
from gpart.base.progress import Progress
from gpart.formats.filelist.commit_record import recover_exports
from gpart.formats.filelist.layout import FILELIST_CHUNK_BYTES, check_export_name, json_file_name
from gpart.formats.filelist.reader import holds_export
from gpart.formats.filelist.sources import RowSource
from gpart.formats.filelist.writer import FileListWriter
from gpart.formats.files.commit import remove_path, staged_output, sweep_stale_work
from gpart.formats.files.manifest import fsync_dir
from gpart.formats.files.names import work_name
from gpart.formats.files.ownership import has_manifest, is_export_output


class ExportSetWriter:
    """Writes export sets into `out_dir`, each committed by swapping its folder into place.

    `check_names()` refuses, before anything is written, names that are not
    allowed or would replace something without `force`; `add()` streams an
    export into its set's staging folder; `commit()` writes the JSONs and swaps
    every set in. Leaving the `with` block by an exception (or without commit)
    removes every staging folder, and `out_dir` if this writer created it and it
    is empty.
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
        self.chunk_bytes, self.progress = chunk_bytes, progress
        self._stack = ExitStack()
        self._sets: dict[str, FileListWriter] = {}
        self._set_of: dict[str, str] = {}  # export name -> its set
        self._scratch: list[Path] = []
        self._created_dir = not self.out_dir.exists()
        self._check_dir()
        self._root = self.out_dir  # where the sets are built: OUT, or a staging directory that replaces OUT whole
        if has_manifest(self.out_dir):  # another kind of gpart result: refused without force, in check_output_dir's words
            self._root = self._stack.enter_context(staged_output(self.out_dir, force, self.inputs, is_complete=is_export_output))
        elif self.out_dir.is_dir():
            recover_exports(self.out_dir)  # finish commits of killed runs of the flat layout, then drop leftovers
            sweep_stale_work(self.out_dir)

    def _check_dir(self) -> None:
        out = self.out_dir
        if out.exists() and not out.is_dir():
            raise OutputError(out, "exists and is not a directory")
        absolute = out.absolute()
        for inp in self.inputs:
            if inp == absolute or (inp.is_dir() and inp in absolute.parents):
                raise OutputError(out, f"output directory would be inside the input {inp}")

    def check_names(self, names: Sequence[str], set_name: Optional[str] = None) -> None:
        """Check the export names (in `set_name`, default: each its own set) and stage their sets."""
        for name in names:
            if name in self._set_of:
                raise InputError(None, f"export name {name!r} given twice")
            self._claim(name, set_name or name)

    def _claim(self, name: str, set_name: str) -> FileListWriter:
        """The writer of `set_name`'s staging folder (staged on first use), with `name` claimed for it."""
        check_export_name(name)
        if self._set_of.setdefault(name, set_name) != set_name:
            raise InputError(None, f"export name {name!r} given twice")
        for path in flat_export_files(self._root, name):
            if path.absolute() in self.inputs:
                raise OutputError(path, "would overwrite the input")
            if not self.force:
                raise OutputError(path, "already exists (an export); use --force to replace it")
        if set_name not in self._sets:
            check_export_name(set_name)
            stage = self._stack.enter_context(staged_output(self._root / set_name, self.force, self.inputs, holds_export, holds_export))
            self._sets[set_name] = FileListWriter(stage, chunk_bytes=self.chunk_bytes, progress=self.progress)
        return self._sets[set_name]

    def add(
        self,
        name: str,
        data: Union[np.ndarray, RowSource],
        num_files: int = 1,
        dtype: Optional[str] = None,
        *,
        set_name: Optional[str] = None,
        allow_overflow: bool = False,
        source: Optional[str] = None,
        extra: Optional[dict[str, Any]] = None,
    ) -> dict[str, Any]:
        """Stream `data` into `num_files` parts of export `name` in set `set_name` (default: `name`);
        return the manifest commit() will write."""
        writer = self._claim(name, set_name or self._set_of.get(name, name))
        return writer.add(name, data, num_files, dtype, allow_overflow=allow_overflow, source=source, extra=extra)

    def scratch_path(self, label: str, set_name: str) -> Path:
        """A hidden file in set `set_name`'s staging folder for data the caller builds before `add()`
        (e.g. a CSR filled out of order): on the parts' file system, so `add()` of a read-only memmap
        of it is a kernel copy. Deleted before the set is committed, and with the folder on failure."""
        check_export_name(set_name)
        if set_name not in self._sets:
            raise ValueError(f"export set {set_name!r} has no export yet (check_names first)")
        path = work_name(self._sets[set_name].directory / label, "tmp")
        self._scratch.append(path)
        return path

    def commit(self) -> list[dict[str, Any]]:
        """Write every export's JSON, swap every set into place, remove replaced flat-layout exports;
        return the manifests in the order the exports were added."""
        for path in self._scratch:
            path.unlink(missing_ok=True)
        manifests = [m for writer in self._sets.values() for m in writer.commit()]
        self._stack.close()  # each staged_output swaps its set in
        for name in self._set_of:
            for path in flat_export_files(self.out_dir, name):
                remove_path(path)
        fsync_dir(self.out_dir)
        return manifests

    def __enter__(self) -> "ExportSetWriter":
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        try:
            self._stack.__exit__(exc_type, exc, tb)  # on failure each staging folder is removed
        finally:
            if exc_type is not None and self._created_dir:
                try:
                    self.out_dir.rmdir()
                except OSError:
                    pass


def flat_export_files(directory: Path, name: str) -> list[Path]:
    """The files of export `name` in the flat layout in `directory` (its `<name>.json` first, then
    every `<name>_part_<i>_of_<n>`): what a new set with that export replaces."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return []
    part = re.compile(rf"{re.escape(name)}_part_[0-9]+_of_[0-9]+")
    json_name = json_file_name(name)
    return [directory / n for n in sorted(entries, key=lambda n: n != json_name) if n == json_name or part.fullmatch(n)]


@dataclass(frozen=True)
class FileListOptions:
    """How write_filelist writes beyond the export's name, rows, file count and dtype."""

    allow_overflow: bool = False  # a cast may turn values too large for the dtype into Inf instead of failing
    force: bool = False  # replace an existing export of the same name
    inputs: Sequence[os.PathLike | str] = ()  # files being read: the output must not replace them
    source: Optional[str] = None  # recorded in `<name>.json` (where the rows came from)
    extra: Optional[dict[str, Any]] = None  # more fields for `<name>.json`
    chunk_bytes: int = FILELIST_CHUNK_BYTES  # rows are streamed in chunks of about this size
    progress: Optional[Progress] = None


def write_filelist(
    out_dir: os.PathLike | str,
    name: str,
    data: Union[np.ndarray, RowSource],
    num_files: int = 1,
    dtype: Optional[str] = None,
    options: FileListOptions = FileListOptions(),
) -> dict[str, Any]:
    """Export one array (an ndarray, typically a memmap, or a RowSource) as `name` in `out_dir`.

    Returns the manifest written to `out_dir/<name>/<name>.json`.
    """
    set_writer = ExportSetWriter(out_dir, force=options.force, inputs=options.inputs, chunk_bytes=options.chunk_bytes, progress=options.progress)
    with set_writer as writer:
        writer.check_names([name])
        writer.add(name, data, num_files, dtype, allow_overflow=options.allow_overflow, source=options.source, extra=options.extra)
        return writer.commit()[0]
