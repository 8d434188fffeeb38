"""The reader of a partition result (SPEC.md section 4): the manifest validated against the
format's definition (gpart.formats.partition.writer) before any data is read, then arrays mapped.

h5py is imported only when an HDF5 result is read.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from gpart.base.errors import InputError, IntegrityError
from gpart.bytes.crc import CHUNK_BYTES, array_crc32, file_crc32
from gpart.formats.files.arrays import ArrayEntry, MapMode, check_file_size, inside, open_array
from gpart.formats.files.dtypes import storage_dtype
from gpart.formats.files.manifest import MANIFEST_NAME, read_manifest, require
from gpart.formats.files.names import safe_name
from gpart.formats.partition.book import ArrayBook, PartitionBook, RuleBook
from gpart.formats.partition.reverse import INPUT_EDGE_KEY, ReverseMeta
from gpart.formats.partition.store import refuse_outside_storage
from gpart.formats.partition.typed import HeteroMeta
from gpart.formats.partition.writer import BOOK_DTYPES, FORMAT, HDF5_FILE, STORAGES, VERSION, data_key, expected_arrays, part_dir
from gpart.formats.sharding.policies import POLICY_CLASSES


class PartitionReader:
    """A partition result on disk, validated from its manifest before any data is read.

    `array(p, key)` returns a memory map (binary) or an array read through
    h5py (hdf5) of partition p's array `key` (`node_ids`, `indptr`,
    `indices`, `edge_ids`, `node_data/<name>`, `edge_data/<name>`).
    """

    def __init__(self, directory: os.PathLike | str, check_files: bool = True, parts: Optional[Sequence[int]] = None):
        self.directory = Path(directory)
        # verify() passes check_files=False so that it can list every damaged file, not stop at the first.
        self._check_files = check_files
        # `parts`: check only these partitions' files (a per-machine directory holds its own, SPEC.md 10.4)
        self._parts = None if parts is None else set(parts)
        self.manifest_file = self.directory / MANIFEST_NAME
        self.manifest: dict[str, Any] = read_manifest(self.directory, FORMAT, (VERSION,))
        self._h5: Any = None  # the h5py.File of an HDF5 result, opened on first use (h5py has no types)
        self._entries: list[dict[str, ArrayEntry]] = []
        self._book_entries: dict[str, ArrayEntry] = {}
        self._validate()

    # -- manifest validation (no data touched)

    def _validate(self) -> None:
        m, where = self.manifest, self.manifest_file
        storage = require(m, "storage", str, where)
        if storage not in STORAGES:
            raise InputError(where, f"unknown storage {storage!r} (expected one of {', '.join(STORAGES)})")
        graph = require(m, "graph", dict, where)
        num_nodes = require(graph, "num_nodes", int, where)
        num_edges = require(graph, "num_edges", int, where)
        num_parts = require(m, "num_parts", int, where)
        if num_parts < 1 or num_nodes < 0 or num_edges < 0:
            raise InputError(where, f"bad counts: num_parts {num_parts}, num_nodes {num_nodes}, num_edges {num_edges}")
        halo = require(m, "halo", int, where)
        if halo not in (0, 1):
            raise InputError(where, f"halo must be 0 or 1, got {halo}")
        node_data = require(m, "node_data", dict, where)
        edge_data = require(m, "edge_data", dict, where)
        parts = require(m, "partitions", list, where)
        if len(parts) != num_parts:
            raise InputError(where, f"lists {len(parts)} partitions, num_parts is {num_parts}")
        self._validate_book(require(m, "book", dict, where), num_nodes, num_parts)
        data_specs = self._data_specs(node_data, edge_data)
        self.hetero = HeteroMeta.from_manifest(m, where)  # typed results (SPEC.md 8.4); None otherwise
        reverse = ReverseMeta.from_manifest(m, where, self.hetero)  # results with reverse edges (SPEC.md 4.7)
        self.reverse: Optional[ReverseMeta] = None if reverse is None else reverse[0]
        self._reverse_entries = {} if reverse is None else {INPUT_EDGE_KEY: self._check_entry(reverse[1])}
        total_owned = total_edges = 0
        for p, part in enumerate(parts):
            if not isinstance(part, dict) or part.get("part") != p:
                raise InputError(where, f"partitions[{p}] is malformed or out of order")
            owned = require(part, "num_owned", int, where)
            halo_n = require(part, "num_halo", int, where)
            edges = require(part, "num_edges", int, where)
            if min(owned, halo_n, edges) < 0:
                raise InputError(where, f"partition {p}: negative count")
            arrays = require(part, "arrays", dict, where)
            expected = expected_arrays(owned, halo_n, edges, halo, data_specs)
            if self.hetero is not None:
                expected.update(self.hetero.expected_arrays(part, p, where, halo))
            if set(arrays) != set(expected):
                raise InputError(where, f"partition {p}: arrays {sorted(arrays)} differ from the expected {sorted(expected)}")
            entries = {}
            for key, (dtype, shape) in expected.items():
                entry = ArrayEntry.from_json(arrays[key], where)
                if entry.dtype != dtype or entry.shape != shape:
                    raise InputError(where, f"partition {p} {key}: {entry.dtype} {list(entry.shape)}, expected {dtype} {list(shape)}")
                entries[key] = self._check_entry(entry) if self._parts is None or p in self._parts else entry
            self._entries.append(entries)
            total_owned += owned
            total_edges += edges
        if total_owned != num_nodes or total_edges != num_edges:
            raise InputError(
                where, f"partitions own {total_owned} nodes and store {total_edges} edges; graph has {num_nodes} and {num_edges}"
            )

    def _data_specs(self, node_data: dict[str, Any], edge_data: dict[str, Any]) -> dict[str, tuple[str, tuple[int, ...]]]:
        """{data array key: (dtype, row shape)} of the manifest's node_data and edge_data descriptions."""
        out = {}
        for kind, described in (("node", node_data), ("edge", edge_data)):
            for name, spec in described.items():
                safe_name(name, f"{kind} data name", self.manifest_file)
                try:
                    dtype = str(spec["dtype"])
                    row_shape = tuple(int(s) for s in spec["row_shape"])
                except (KeyError, TypeError, ValueError, OverflowError):
                    raise InputError(self.manifest_file, f"data array {name!r}: malformed description {spec!r}") from None
                storage_dtype(dtype, self.manifest_file)
                out[data_key(kind, name)] = (dtype, row_shape)
        return out

    def _validate_book(self, book: dict[str, Any], num_nodes: int, num_parts: int) -> None:
        where = self.manifest_file
        kind = require(book, "kind", str, where)
        rule = POLICY_CLASSES.get(kind)  # a rule book (remainder, range) stores the policy's own fields
        if rule is not None:
            fields = {key: require(book, key, json_type, where) for key, json_type in rule.FIELDS.items()}
            try:
                rule.from_fields(num_nodes, num_parts, fields)
            except (TypeError, ValueError, OverflowError) as exc:
                raise InputError(where, f"book: {exc}") from None
            return
        if kind != "array":
            raise InputError(where, f"unknown book kind {kind!r} (expected remainder, range or array)")
        for key, dtype in BOOK_DTYPES.items():
            entry = ArrayEntry.from_json(require(book, key, dict, where), where)
            if entry.dtype != dtype or entry.shape != (num_nodes,):
                raise InputError(where, f"book {key}: {entry.dtype} {list(entry.shape)}, expected {dtype} [{num_nodes}]")
            self._book_entries[key] = self._check_entry(entry)

    def _check_entry(self, entry: ArrayEntry) -> ArrayEntry:
        """Binary: the file exists with the manifest's size. HDF5: names partitions.h5 and a dataset."""
        if self.storage == "hdf5":
            if entry.file != HDF5_FILE or not isinstance(entry.extra.get("dataset"), str):
                raise InputError(self.manifest_file, f"array entry {entry.file!r} lacks a dataset in {HDF5_FILE}")
            return entry
        if not self._check_files:
            return entry
        check_file_size(inside(self.directory, entry.file), entry)
        return entry

    # -- properties

    @property
    def storage(self) -> str:
        return self.manifest["storage"]

    @property
    def num_parts(self) -> int:
        return int(self.manifest["num_parts"])

    @property
    def num_nodes(self) -> int:
        return int(self.manifest["graph"]["num_nodes"])

    @property
    def num_edges(self) -> int:
        return int(self.manifest["graph"]["num_edges"])

    @property
    def halo(self) -> int:
        return int(self.manifest["halo"])

    def node_data_names(self) -> list[str]:
        return list(self.manifest["node_data"])

    def edge_data_names(self) -> list[str]:
        return list(self.manifest["edge_data"])

    def part_info(self, part: int) -> dict[str, Any]:
        self._check_part(part)
        return self.manifest["partitions"][part]

    def entry(self, part: int, key: str) -> ArrayEntry:
        self._check_part(part)
        try:
            return self._entries[part][key]
        except KeyError:
            raise KeyError(f"partition {part} has no array {key!r} (has {', '.join(self._entries[part])})") from None

    def keys(self, part: int) -> list[str]:
        self._check_part(part)
        return list(self._entries[part])

    def _check_part(self, part: int) -> None:
        if not 0 <= part < self.num_parts:
            raise IndexError(f"partition {part} out of range 0..{self.num_parts - 1}")

    # -- data

    def array(self, part: int, key: str, verify: bool = False, mode: MapMode = "r") -> np.ndarray:
        return self.read_entry(self.entry(part, key), verify, mode)

    def book(self) -> PartitionBook:
        book = self.manifest["book"]
        rule = POLICY_CLASSES.get(book["kind"])
        if rule is not None:
            return RuleBook(rule.from_fields(self.num_nodes, self.num_parts, book))
        owner = self.read_entry(self._book_entries["owner"])
        local = self.read_entry(self._book_entries["local"])
        if owner.size and (int(owner.min()) < 0 or int(owner.max()) >= self.num_parts):
            raise IntegrityError(self.directory / self._book_entries["owner"].file, f"owner ids outside 0..{self.num_parts - 1}")
        return ArrayBook(owner, self.num_parts, local)

    def book_entries(self) -> dict[str, ArrayEntry]:
        return dict(self._book_entries)

    def reverse_input_edge(self, verify: bool = False) -> np.ndarray:
        """`reverse/input_edge` of a result with reverse edges (SPEC.md 4.7): the input edge of every copy."""
        return self.read_entry(self._reverse_entries[INPUT_EDGE_KEY], verify)

    def read_entry(self, entry: ArrayEntry, verify: bool = False, mode: MapMode = "r") -> np.ndarray:
        """The array an entry names, memory-mapped: the binary file, or the bytes of a
        contiguous HDF5 dataset (gpart writes them so; others are read through h5py).
        mode "c" gives a writable copy-on-write map, which torch.from_numpy wraps as is."""
        if self.storage == "binary":
            return open_array(self.directory, entry, verify=verify, mode=mode)
        dataset = self._dataset(entry)
        dtype = storage_dtype(entry.dtype)
        offset = dataset.id.get_offset() if entry.nbytes else None
        if offset is None or dataset.chunks is not None or dataset.compression is not None:
            arr = np.empty(entry.shape, dtype=dtype)
            if arr.size:
                dataset.read_direct(arr)
        else:
            path = self.directory / HDF5_FILE
            if offset + entry.nbytes > path.stat().st_size:
                raise IntegrityError(self._h5_where(entry), f"dataset extends past the end of {HDF5_FILE} (truncated file)")
            arr = np.memmap(path, dtype=dtype, mode=mode, offset=offset, shape=entry.shape)
        if verify and entry.crc32 is None:
            raise IntegrityError(self._h5_where(entry), "manifest gives no crc32 to check the dataset against")
        if verify:
            crc = array_crc32(arr)
            if crc != entry.crc32:
                raise IntegrityError(self._h5_where(entry), f"checksum mismatch: crc32 {crc:08x}, manifest says {entry.crc32:08x}")
        return arr

    def check_stored_layout(self) -> None:
        """Raise IntegrityError where what is stored differs from the manifest, reading no data: a binary
        result's file sizes (checked on opening with check_files), an HDF5 result's datasets: present, of the
        manifest's dtype and shape, their bytes inside the file. Every entry of the partitions opened."""
        if self.storage != "hdf5":
            return
        entries = [*self._book_entries.values(), *self._reverse_entries.values()]
        for p, part_entries in enumerate(self._entries):
            entries += part_entries.values() if self._parts is None or p in self._parts else []
        for entry in entries:
            dataset = self._dataset(entry)
            offset = dataset.id.get_offset() if entry.nbytes and dataset.chunks is None else None
            if offset is not None and offset + entry.nbytes > (self.directory / HDF5_FILE).stat().st_size:
                raise IntegrityError(self._h5_where(entry), f"dataset extends past the end of {HDF5_FILE} (truncated file)")

    # -- hdf5 helpers

    def _h5_where(self, entry: ArrayEntry) -> str:
        return f"{self.directory / HDF5_FILE}:{entry.extra['dataset']}"

    def h5file(self) -> Any:
        """The open (read-only) partitions.h5 of an HDF5 result; h5py is imported here only."""
        if self._h5 is None:
            import h5py  # lazily: only HDF5 results need it

            path = self.directory / HDF5_FILE
            if not path.exists():
                raise IntegrityError(path, "file named in the manifest is missing")
            inside(self.directory, HDF5_FILE)
            try:
                self._h5 = h5py.File(path, "r")
            except OSError as exc:
                raise IntegrityError(path, f"not a readable HDF5 file: {exc}") from None
        return self._h5

    def _dataset(self, entry: ArrayEntry) -> Any:
        h5 = self.h5file()
        name = entry.extra["dataset"]
        try:
            dataset = h5[name]
        except KeyError:
            raise IntegrityError(self._h5_where(entry), "dataset named in the manifest is missing") from None
        except Exception as exc:  # h5py raises assorted errors on damaged files
            raise IntegrityError(self._h5_where(entry), f"cannot open dataset: {exc}") from None
        refuse_outside_storage(h5, name, dataset, self._h5_where(entry))
        expected = storage_dtype(entry.dtype)
        if tuple(dataset.shape) != entry.shape or dataset.dtype != expected:
            raise IntegrityError(
                self._h5_where(entry), f"dataset is {dataset.dtype} {list(dataset.shape)}, manifest says {entry.dtype} {list(entry.shape)}"
            )
        return dataset

    def close(self) -> None:
        if self._h5 is not None:
            self._h5.close()
            self._h5 = None

    def __enter__(self) -> "PartitionReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- checksums

    def all_entries(self) -> list[tuple[str, ArrayEntry]]:
        """(label, entry) for every array in the result, book (and reverse edges) first."""
        out = [(f"book/{k}", e) for k, e in self._book_entries.items()] + list(self._reverse_entries.items())
        for p, entries in enumerate(self._entries):
            out += [(f"{part_dir(p)}/{k}", e) for k, e in entries.items()]
        return out

    def verify_checksums(self) -> list[str]:
        """Check every array's size and CRC-32; return one line per problem (empty when intact)."""
        problems: list[str] = []
        for _, entry in self.all_entries():
            try:
                self.check_checksum(entry)
            except (IntegrityError, InputError) as exc:
                problems.append(exc.one_line())
        return problems

    def check_checksum(self, entry: ArrayEntry) -> None:
        """Raise IntegrityError unless the array an entry names has its size and CRC-32."""
        if self.storage == "binary":
            self._check_binary_checksum(entry)
        else:
            self._check_hdf5_checksum(entry)

    def _check_binary_checksum(self, entry: ArrayEntry) -> None:
        path = inside(self.directory, entry.file)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise IntegrityError(path, "file named in the manifest is missing") from None
        if size != entry.nbytes:
            raise IntegrityError(path, f"size {size} bytes, manifest says {entry.nbytes}")
        if entry.crc32 is None:
            raise IntegrityError(path, "manifest gives no crc32")
        crc = file_crc32(path)
        if crc != entry.crc32:
            raise IntegrityError(path, f"checksum mismatch: crc32 {crc:08x}, manifest says {entry.crc32:08x}")

    def _check_hdf5_checksum(self, entry: ArrayEntry) -> None:
        dataset = self._dataset(entry)
        if entry.crc32 is None:
            raise IntegrityError(self._h5_where(entry), "manifest gives no crc32")
        crc = 0
        rows = entry.shape[0] if entry.shape else 0
        row_bytes = max(1, entry.nbytes // rows) if rows else 1
        step = max(1, CHUNK_BYTES // row_bytes)
        try:
            for start in range(0, rows, step):
                chunk = np.ascontiguousarray(dataset[start : start + step])
                crc = zlib.crc32(chunk.reshape(-1).view(np.uint8).data, crc)
        except (OSError, ValueError, OverflowError) as exc:
            raise IntegrityError(self._h5_where(entry), f"cannot read dataset: {exc}") from None
        if crc != entry.crc32:
            raise IntegrityError(self._h5_where(entry), f"checksum mismatch: crc32 {crc:08x}, manifest says {entry.crc32:08x}")
