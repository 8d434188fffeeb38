"""Flat file-list exports (SPEC.md section 5): WholeGraph-style row-major binaries.

An export named NAME is `NAME_part_<i>_of_<n>` (i = 0..n-1), headerless
little-endian row-major files whose concatenation is the whole array, plus
`NAME.json` describing them, side by side in one folder. WholeGraph's
`create_embedding_from_filelist` / `create_wholememory_tensor_from_filelist`
read the part files as they are; `open_filelist` reads them back here,
validating the JSON and the file sizes before mapping anything.

Writing streams rows in chunks (never the whole array in memory), casts on the
way when asked (float16 / bfloat16 / narrower integers, refusing overflow),
fsyncs the parts and writes `NAME.json` last, into a folder that becomes a
result only as a whole: export-feat's export set `OUT/<set>/`, swapped in with
one rename-exchange, or a staged checkpoint. A `NAME.json` therefore never
names incomplete data, and the part files a reader opens by name all belong to
one export.

The modules: this one (names, the JSON's fields, its validation), filelist_sources
(RowSource, ArrayRows), filelist_convert (Converter: dtype casts), filelist_writer
(FileListWriter: one folder's exports), filelist_sets (ExportSetWriter,
write_filelist: export-feat's folders and their swap), filelist_commit (commit
records of the earlier flat layout, rolled forward) and filelist_reader
(FileList, open_filelist, find_exports).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np

from gpart.base.errors import InputError
from gpart.base.version import __version__
from gpart.formats.filelist.convert import Converter
from gpart.formats.files.arrays import ArrayEntry
from gpart.formats.files.dtypes import storage_dtype
from gpart.formats.files.names import safe_name
from gpart.formats.sharding.policies import even_boundaries

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
NONFINITE_MASK16 = {"float16": 0x7C00, "bfloat16": 0x7F80}


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


def build_manifest(
    name: str, converter: Converter, shape: tuple[int, ...], entries: list[dict[str, Any]], source: Optional[str], extra: Optional[dict[str, Any]]
) -> dict[str, Any]:
    """The `<name>.json` of an export (SPEC.md 5.1); `converter`: its source, target and storage dtypes."""
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


def validate_manifest(obj: dict[str, Any], where: Path) -> tuple[str, str, tuple[int, ...], list[ArrayEntry]]:
    name = safe_name(obj.get("name"), "field 'name'", where)
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
    for item in files:
        entry = ArrayEntry.from_json(item, where)
        if entry.crc32 is None:  # every writer records one; without it flipped data would pass verify
            raise InputError(where, f"file entry {entry.file!r} lacks 'crc32'")
        if "/" in entry.file or "\\" in entry.file:
            raise InputError(where, f"file entry {entry.file!r} is not a plain file name")
        if not entry.shape:
            raise InputError(where, f"file {entry.file}: shape {list(entry.shape)} has no rows")
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
