"""`gpart export-feat`: arrays and graph structure to WholeGraph-style file lists.

Three kinds of input, one output format (SPEC.md section 5):

- an array, `file.npy` or `file.npz:key`: one export, streamed in chunks;
- a partition result directory: its node data arrays reassembled in global
  node order, streamed chunk by chunk from the partitions that own the rows;
- a graph (`csr=True`): CSR `row_ptr` / `col_idx` over source nodes plus the
  edge-id permutation (gpart.export.csr).

Every export of a run is written into a hidden staging folder of its export
set first and swapped into place at the end (formats.filelist_sets), so a
failure leaves no `<name>.json` behind and a reader never meets parts of two
exports.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from gpart.base.errors import InputError, IntegrityError
from gpart.base.progress import Progress, or_null
from gpart.bytes.buffers import BufferRing
from gpart.bytes.crc import OnTheWayCrc
from gpart.bytes.reader import release_rows
from gpart.export.csr import CSR_CHUNK_EDGES, CsrExport, export_csr
from gpart.export.typed import typed_exports
from gpart.formats.filelist.convert import FLOAT_TARGETS, INT_TARGETS, Converter
from gpart.formats.filelist.layout import FILELIST_CHUNK_BYTES, json_file_name
from gpart.formats.filelist.reader import export_json_path
from gpart.formats.filelist.sets import ExportSetWriter
from gpart.formats.filelist.sources import RowSource
from gpart.formats.files.dtypes import storage_dtype
from gpart.formats.input.npz import open_array_input
from gpart.formats.partition.reader import PartitionReader

DTYPE_CHOICES = ("float16", "bfloat16", "float32", "float64", "int32", "int64")


@dataclass
class _Plan:
    """One export to write: its name, rows, target dtype and JSON extras."""

    name: str
    data: Union[np.ndarray, RowSource]
    dtype: Optional[str]
    extra: Optional[dict[str, Any]] = None


@dataclass(frozen=True)
class FeatExport:
    """export_feat's keywords, packed (as export_feat describes them)."""

    name: Optional[str] = None
    files: int = 1
    dtype: Optional[str] = None
    allow_overflow: bool = False
    csr: bool = False
    add_reverse: bool = False
    dedup: bool = False
    force: bool = False
    progress: Optional[Progress] = None
    chunk_bytes: int = FILELIST_CHUNK_BYTES
    csr_chunk_edges: int = CSR_CHUNK_EDGES
    node_type: Optional[str] = None

    def csr_export(self) -> CsrExport:
        """The CSR export set these keywords ask for (`csr=True`)."""
        return CsrExport(self.name, self.files, self.add_reverse, self.dedup, self.force, self.chunk_bytes,
                         self.csr_chunk_edges)


def export_feat(
    input: Union[str, os.PathLike],
    out_dir: Union[str, os.PathLike],
    *,
    name: Optional[str] = None,
    files: int = 1,
    dtype: Optional[str] = None,
    allow_overflow: bool = False,
    csr: bool = False,
    add_reverse: bool = False,
    dedup: bool = False,
    force: bool = False,
    progress: Optional[Progress] = None,
    chunk_bytes: int = FILELIST_CHUNK_BYTES,
    csr_chunk_edges: int = CSR_CHUNK_EDGES,
    node_type: Optional[str] = None,
) -> dict[str, Any]:
    """Export `input` into `out_dir` as file lists; return a summary with every written manifest.

    `input` is `file.npy`, `file.npz:key`, a partition result directory, or (with
    `csr=True`) a graph file. `name` names the export (array input, CSR prefix) or
    selects the node data array (partition input). `dtype` converts on the way
    (SPEC.md 5.3); `files` is the number of part files per export. `csr_chunk_edges` is
    the number of edges per step of the streaming CSR build. `node_type` picks
    the node type of a typed partition result (SPEC.md 8.5).

    The keywords are the library's documented API (as sqlite-utils' table methods take theirs): they are
    packed at once into a FeatExport, which every step below takes (`export_features`).
    """
    return export_features(input, out_dir, FeatExport(
        name=name, files=files, dtype=dtype, allow_overflow=allow_overflow, csr=csr, add_reverse=add_reverse, dedup=dedup,
        force=force, progress=progress, chunk_bytes=chunk_bytes, csr_chunk_edges=csr_chunk_edges, node_type=node_type))


def export_features(input: Union[str, os.PathLike], out_dir: Union[str, os.PathLike], export: FeatExport) -> dict[str, Any]:
    """export_feat with its keywords packed."""
    started = time.perf_counter()
    progress = or_null(export.progress)
    spec = os.fspath(input)
    name, files, dtype, allow_overflow = export.name, export.files, export.dtype, export.allow_overflow
    _check_options(export)
    if export.csr:
        manifests = export_csr(spec, out_dir, export.csr_export(), progress)
        return _summary(spec, out_dir, manifests, started)
    if Path(spec).is_dir():
        plans = _partition_plans(spec, name, dtype, export.node_type)
    else:
        plans = _array_plans(spec, name, dtype)
    for plan in plans:  # refuse impossible conversions before writing anything
        Converter(plan.data.dtype, plan.dtype, spec, allow_overflow)
    input_path = Path(spec.rsplit(":", 1)[0]) if ":" in spec and not Path(spec).exists() else Path(spec)
    with ExportSetWriter(out_dir, force=export.force, inputs=[input_path], chunk_bytes=export.chunk_bytes, progress=progress) as writer:
        writer.check_names([p.name for p in plans])
        for plan in plans:
            writer.add(plan.name, plan.data, files, plan.dtype, allow_overflow=allow_overflow, source=spec, extra=plan.extra)
        manifests = writer.commit()
    return _summary(spec, out_dir, manifests, started)


def _summary(spec: str, out_dir: Union[str, os.PathLike], manifests: list[dict[str, Any]], started: float) -> dict[str, Any]:
    seconds = time.perf_counter() - started
    total = int(sum(m["bytes"] for m in manifests))
    return {
        "input": spec,
        "out_dir": os.fspath(out_dir),
        "exports": [{"json": os.fspath(export_json_path(Path(out_dir) / json_file_name(m["name"]))), "manifest": m} for m in manifests],
        "bytes": total,
        "seconds": seconds,
        "bytes_per_second": total / seconds if seconds > 0 else 0.0,
    }


def _check_options(export: FeatExport) -> None:
    files, dtype, csr, add_reverse, dedup = export.files, export.dtype, export.csr, export.add_reverse, export.dedup
    if not isinstance(files, (int, np.integer)) or isinstance(files, bool) or files < 1:
        raise InputError(None, f"--files must be an integer of at least 1, got {files!r}")
    if dtype is not None and dtype not in FLOAT_TARGETS + INT_TARGETS:
        raise InputError(None, f"unknown --dtype {dtype!r} (expected one of {', '.join(DTYPE_CHOICES)})")
    if csr and dtype is not None:
        raise InputError(None, "--dtype does not apply to --csr (row_ptr is int64; col_idx int32, or int64 for 2^31 nodes or more)")
    if (add_reverse or dedup) and not csr:
        raise InputError(None, "--add-reverse and --dedup apply only with --csr")


# --------------------------------------------------------------------------- arrays


def _array_plans(spec: str, name: Optional[str], dtype: Optional[str]) -> list[_Plan]:
    arr, default_name = open_array_input(spec)
    if arr.ndim == 0:
        raise InputError(spec, "is a 0-d scalar; an export needs an array of rows")
    return [_Plan(name or default_name, arr, dtype)]


# --------------------------------------------------------------------------- partition results


class GlobalOrderRows:
    """A node data array of a partition result, read back in global node order.

    Rows [start, stop) are gathered from every partition's owned rows: partition p
    owns node_ids[:num_owned] (ascending), whose data rows are its first num_owned
    rows; a binary search per partition finds the owned ids inside the window.
    Each window is checked to be covered exactly once.
    """

    def __init__(self, reader: Any, array_name: str):
        spec = reader.manifest["node_data"][array_name]
        self.reader = reader
        self.name = array_name
        self.dtype = storage_dtype(spec["dtype"])
        self.dtype_name = spec["dtype"]
        self.shape = (reader.num_nodes, *(int(s) for s in spec["row_shape"]))
        self._parts = []
        self._whole = []
        labels, sizes, crcs = [], [], []
        for p in range(reader.num_parts):
            owned = int(reader.part_info(p)["num_owned"])
            for key in ("node_ids", f"node_data/{array_name}"):
                entry = reader.entry(p, key)
                self._whole.append(reader.array(p, key))
                labels.append(reader.directory / entry.file if "dataset" not in entry.extra else f"{reader.directory / entry.file}:{entry.extra['dataset']}")
                sizes.append(entry.nbytes)
                crcs.append(entry.crc32)
            self._parts.append((self._whole[-2][:owned], self._whole[-1]))
        # every array read is checksummed on the way, so damaged input is not exported as intact
        self._crc = OnTheWayCrc(labels, sizes, crcs)
        self._ring = BufferRing()

    def read(self, start: int, stop: int) -> np.ndarray:
        rows = stop - start
        out = self._ring.get((rows, *self.shape[1:]), self.dtype)
        seen = np.zeros(rows, dtype=bool)
        filled = 0
        for p, (ids, data) in enumerate(self._parts):
            lo, hi = (int(x) for x in np.searchsorted(ids, [start, stop]))
            if hi <= lo:
                continue
            local = np.asarray(ids[lo:hi], dtype=np.int64) - start
            if local.size > 1 and not np.all(np.diff(local) > 0):
                raise IntegrityError(self.reader.directory, f"partition {p}: owned node ids are not strictly ascending")
            out[local] = data[lo:hi]
            self._crc.feed(2 * p, lo * ids.itemsize, ids[lo:hi])
            self._crc.feed(2 * p + 1, lo * data[:1].nbytes, data[lo:hi])
            seen[local] = True
            filled += hi - lo
            release_rows(data, lo, hi)
        if filled != rows or not seen.all():
            raise IntegrityError(
                self.reader.directory,
                f"owned nodes of the partitions do not cover global ids {start}..{stop - 1} exactly once",
            )
        if stop == self.shape[0]:  # the last window: check what was not read (halo rows)
            for i, arr in enumerate(self._whole):
                self._crc.finish(i, arr)
        return out


def _partition_plans(directory: str, name: Optional[str], dtype: Optional[str], node_type: Optional[str] = None) -> list[_Plan]:
    reader = PartitionReader(directory)
    if reader.hetero is not None:  # typed result: typed node arrays in typed id order (gpart.export.typed)

        return [_Plan(n, rows, dtype if name is not None or _same_kind(rows.dtype, dtype) else None)
                for n, rows in typed_exports(reader, name, node_type)]
    if node_type is not None:
        raise InputError(directory, f"--node-type {node_type!r} applies to typed partition results; this one is homogeneous")
    names = reader.node_data_names()
    if not names:
        raise InputError(directory, "the partition result has no node data arrays to export")
    if name is not None:
        if name not in names:
            raise InputError(directory, f"no node data array {name!r} (available: {', '.join(names)})")
        return [_Plan(name, GlobalOrderRows(reader, name), dtype)]
    plans = []
    for array_name in names:
        rows = GlobalOrderRows(reader, array_name)
        plans.append(_Plan(array_name, rows, dtype if _same_kind(rows.dtype, dtype) else None))
    return plans


def _same_kind(source: np.dtype, target: Optional[str]) -> bool:
    """Whether `--dtype target` applies to an array of `source` dtype when several are exported."""
    if target is None:
        return False
    if target in FLOAT_TARGETS:
        return source.kind == "f"
    return source.kind in "iu"
