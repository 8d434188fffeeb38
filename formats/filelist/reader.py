"""The reader of file-list exports (SPEC.md section 5): `open_filelist` validates the JSON
and every part file's size before mapping anything."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpart.base.errors import GpartError, InputError, IntegrityError
from gpart.bytes.crc import file_crc32
from gpart.formats.filelist.layout import FORMAT, VERSION, json_file_name, validate_manifest
from gpart.formats.files.arrays import ArrayEntry, check_file_size, inside, open_array
from gpart.formats.files.dtypes import storage_dtype
from gpart.formats.files.manifest import check_format, read_json
from gpart.formats.sharding.policies import wholegraph_boundaries


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
    """Open an export from its `<name>.json` (or an export set's folder, or a path of the flat
    layout: export_json_path): validate the JSON, then every part file's size (and CRC-32
    with `verify`), before mapping anything."""
    json_path = export_json_path(json_path)
    obj = check_format(read_json(json_path), json_path, FORMAT, (VERSION,), what="")
    name, dtype, shape, entries = validate_manifest(obj, json_path)
    filelist = FileList(json_path, obj, entries, name, dtype, shape)
    for entry in entries:
        check_file_size(inside(filelist.directory, entry.file), entry)
    if verify:
        problems = filelist.verify()
        if problems:
            raise IntegrityError(None, problems[0])
    return filelist


def export_json_path(path: os.PathLike | str) -> Path:
    """The `<name>.json` that `path` stands for (SPEC.md 5): `path` itself when it exists; for an
    export set's folder `DIR/<set>`, its `<set>.json`; for a missing `DIR/<name>.json` (where the
    flat layout of gpart before issue 26 kept it), the one export-set folder `DIR/<set>/` holding
    `<name>.json`. Anything else comes back unchanged (and reads as missing)."""
    path = Path(path)
    if path.is_dir():
        return path / json_file_name(path.name)
    if path.exists() or path.suffix != ".json":
        return path
    folders = [p for p in sorted(path.parent.glob(f"*/{glob.escape(path.name)}")) if not p.parent.name.startswith(".")]
    return folders[0] if len(folders) == 1 else path


def is_export_json(path: Path, unreadable: bool = False) -> bool:
    """Whether `path` is the `<name>.json` of a file-list export (`unreadable`: the answer for a file
    that cannot be read as JSON)."""
    try:
        obj = read_json(path)
    except GpartError:
        return unreadable
    return isinstance(obj, dict) and obj.get("format") == FORMAT


def holds_export(directory: Path) -> bool:
    """Whether `directory` holds at least one export's `<name>.json` (an export set's folder does)."""
    return any(is_export_json(p) for p in directory.glob("*.json") if not p.name.startswith("."))


def find_exports(directory: os.PathLike | str) -> list[Path]:
    """The `<name>.json` files of the exports in `directory`: its own (an export set's folder, or a
    directory of the flat layout) and those of its export-set folders (visible subdirectories, not
    symbolic links). A `.json` that cannot be read is listed too: its reader reports the damage."""
    directory = Path(directory)
    folders = [directory] + sorted(p for p in directory.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))
    return [path for folder in folders for path in sorted(folder.glob("*.json"))
            if not path.name.startswith(".") and is_export_json(path, unreadable=True)]
