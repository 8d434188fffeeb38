"""Load one partition of a gpart partition result onto a device and serve feature lookups.

    part = load_partition("parts/", rank=rank, device="cuda")
    part.indptr, part.indices, part.node_ids      # CSC over local ids, on the device
    part.owner(gids), part.to_local(gids)         # the partition book, on the device
    x = part.gather("feat", gids)                 # rows in request order

Loading reads the manifest through gpart.formats.partition.reader.PartitionReader
(format, version, sizes, dtypes checked before any data is touched; CRC-32s
with verify=True), then maps every array: file -> memory map ->
torch.from_numpy (no copy). On CPU the tensors stay backed by the mapping
(the page cache); on CUDA they are copied through a small reusable pinned
staging buffer to the device. With feature_device="cpu" node data stays in
(pinned, when CUDA is present) host memory and lookups still return tensors
on the partition's device. HDF5 results are mapped the same way (their
datasets are contiguous); h5py is imported only for them.

`gather` answers ids of this partition locally (owned rows, and halo rows when
the result stores halo data). When torch.distributed is initialised with one
rank per partition it fetches the other ids from their owners with two
all_to_all exchanges (ids out, rows back); everything else is an error that
says what is missing.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch

from gpart.base.errors import InputError, IntegrityError, NotLocalError
from gpart.bytes.torch_bridge import numpy_to_tensor
from gpart.collectives.agreement import check_same_across_ranks
from gpart.collectives.all_to_all import all_to_all_rows, exchange_counts, group_by_owner
from gpart.collectives.process_group import world
from gpart.formats.partition.reader import PartitionReader
from gpart.formats.partition.writer import data_key
from gpart.runtime.partition.device import DeviceBook, DeviceLike, Stager, place, resolve_device
from gpart.runtime.partition.trainers import partition_of_rank
from gpart.runtime.partition.typed import HeteroPartition, load_hetero_partition

PathLike = Union[str, "os.PathLike[str]"]


# --------------------------------------------------------------------------- reading arrays


# --------------------------------------------------------------------------- the loaded partition


@dataclass(eq=False, repr=False)
class LoadedPartition:
    """One partition on a device: CSC topology over local ids, node/edge data, the book, and lookups.

    Attributes: `directory`, `manifest`, `digest` (of manifest.json), `rank`
    (the partition), `num_parts`, `num_nodes`/`num_edges` (whole graph),
    `num_owned`, `num_halo`, `halo` (whether node data covers halo nodes),
    `device`, `feature_device`, `indptr`, `indices`, `node_ids`, `edge_ids`
    (int64, on `device`), `node_data` / `edge_data` (name -> tensor; node data
    on `feature_device`), `book` (DeviceBook).
    """

    directory: Path
    manifest: dict[str, Any]
    digest: str
    rank: int
    num_parts: int
    num_nodes: int
    num_edges: int
    num_owned: int
    num_halo: int
    halo: bool
    device: torch.device
    feature_device: torch.device
    book: DeviceBook
    node_ids: torch.Tensor
    indptr: torch.Tensor
    indices: torch.Tensor
    edge_ids: torch.Tensor
    node_data: dict[str, torch.Tensor]
    edge_data: dict[str, torch.Tensor]
    timeout_s: float = 60.0
    _checked_distributed: bool = field(default=False, init=False)

    # -- descriptive

    @property
    def node_data_names(self) -> list[str]:
        return list(self.node_data)

    @property
    def edge_data_names(self) -> list[str]:
        return list(self.edge_data)

    @property
    def owned_ids(self) -> torch.Tensor:
        return self.node_ids[: self.num_owned]

    @property
    def halo_ids(self) -> torch.Tensor:
        return self.node_ids[self.num_owned :]

    def __repr__(self) -> str:
        return (
            f"LoadedPartition({str(self.directory)!r}, rank={self.rank}/{self.num_parts}, owned={self.num_owned}, "
            f"halo={self.num_halo}, edges={int(self.indices.shape[0])}, device={self.device}, node_data={self.node_data_names})"
        )

    # -- book

    def owner(self, gids: Any) -> torch.Tensor:
        """Owning partition of each global id (int64 on the device)."""
        return self.book.owner(self._ids(gids))

    def to_local(self, gids: Any) -> torch.Tensor:
        """Row of each global id within its owner's owned nodes (int64 on the device)."""
        return self.book.to_local(self._ids(gids))

    def local_rows(self, gids: Any) -> torch.Tensor:
        """Row of each id in this partition's node data (owned, or halo when stored), -1 elsewhere."""
        ids = self._ids(gids)
        owner, rows = self._resolve(ids.reshape(-1))
        return rows.masked_fill(owner != self.rank, -1).reshape(ids.shape)

    def _ids(self, gids: Any) -> torch.Tensor:
        ids = torch.as_tensor(gids)
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise TypeError(f"global ids must be integers, got {ids.dtype}")
        ids = ids.to(device=self.device, dtype=torch.int64)
        if ids.numel():
            lo, hi = torch.aminmax(ids)
            if int(lo) < 0 or int(hi) >= self.num_nodes:
                bad = int(((ids < 0) | (ids >= self.num_nodes)).sum())
                raise IndexError(
                    f"{bad} global ids outside 0..{self.num_nodes - 1} (min {int(lo)}, max {int(hi)}) for the graph of {self.directory}"
                )
        return ids

    def _resolve(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(owner, row) of each id: who answers it and at which row of its node data.

        Owner and row come from the book; ids held here as halo nodes with
        stored data are answered here (owner = this rank, row = num_owned +
        position among the halo ids, which are sorted, SPEC.md 4.1).
        """
        if self.num_parts == 1:
            return torch.zeros_like(ids), ids
        owner, rows = self.book.owner_and_local(ids)
        if self.halo and self.num_halo:
            foreign = torch.nonzero(owner != self.rank).reshape(-1)
            if foreign.numel():
                wanted = ids[foreign]
                pos = torch.searchsorted(self.halo_ids, wanted).clamp_(max=self.num_halo - 1)
                hit = self.halo_ids[pos] == wanted
                held = foreign[hit]
                owner[held] = self.rank
                rows[held] = pos[hit] + self.num_owned
        return owner, rows

    # -- lookups

    def gather(self, name: str, gids: Any, *, timeout_s: Optional[float] = None) -> torch.Tensor:
        """Rows of node data `name` for global ids `gids`, in request order, on the partition's device.

        The result has shape `gids.shape + row_shape`. Duplicates and empty
        requests are fine. Without torch.distributed (or in a world of one)
        every id must be in this partition (owned, or halo when halo data is
        stored). With torch.distributed initialised and world size equal to the
        number of partitions this is a collective: every rank must call it (with
        its own ids, possibly none) and remote rows come from their owners.
        """
        table = self._table(name)
        rank, world_size = world()
        try:
            ids = self._ids(gids)
        except (TypeError, IndexError):
            if world_size > 1:
                # The other ranks are about to ask this one for rows: serve them with an
                # empty request of our own so they finish this gather rather than wait
                # for the process group's timeout, then report the bad ids here.
                self._check_distributed(world_size, rank, timeout_s)
                self._gather_distributed(table, torch.zeros(0, dtype=torch.int64, device=self.device), world_size, timeout_s or self.timeout_s)
            raise
        shape = ids.shape
        flat = ids.reshape(-1)
        if world_size == 1:
            rows = self._gather_local(table, flat)
        else:
            self._check_distributed(world_size, rank, timeout_s)
            rows = self._gather_distributed(table, flat, world_size, timeout_s or self.timeout_s)
        return rows.reshape(*shape, *table.shape[1:])

    def _table(self, name: str) -> torch.Tensor:
        try:
            return self.node_data[name]
        except KeyError:
            have = ", ".join(self.node_data) or "none"
            raise KeyError(f"{self.directory}: no node data {name!r} (loaded: {have})") from None

    def _index(self, table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """table[rows] on the table's device, returned on the partition's device."""
        if table.device == self.device:
            return torch.index_select(table, 0, rows)
        rows = rows.to(table.device)
        if self.device.type == "cuda":
            out = torch.empty((rows.shape[0], *table.shape[1:]), dtype=table.dtype, pin_memory=True)
            torch.index_select(table, 0, rows, out=out)
            return out.to(self.device, non_blocking=True)
        return torch.index_select(table, 0, rows).to(self.device)

    def _gather_local(self, table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        owner, rows = self._resolve(ids)
        if self.num_parts > 1:
            missing = owner != self.rank
            if bool(missing.any()):
                n = int(missing.sum())
                first = int(torch.nonzero(missing)[0, 0])
                raise NotLocalError(
                    self.directory,
                    f"{n} of {ids.numel()} requested ids are not in partition {self.rank} "
                    f"(e.g. global id {int(ids[first])}, owned by partition {int(owner[first])}"
                    f"{'' if self.halo else '; halo data is not stored'}); "
                    f"initialise torch.distributed with one rank per partition ({self.num_parts}) to fetch remote rows",
                )
        return self._index(table, rows)

    def _check_distributed(self, world_size: int, rank: int, timeout_s: Optional[float]) -> None:
        if world_size != self.num_parts:
            raise InputError(
                self.directory,
                f"has {self.num_parts} partitions but torch.distributed has world size {world_size}: "
                f"a distributed gather needs one rank per partition",
            )
        if rank != self.rank:
            raise InputError(self.directory, f"this process is rank {rank} but loaded partition {self.rank}")
        if not self._checked_distributed:
            # Once per loaded partition: all ranks must serve the same result.
            check_same_across_ranks(
                f"manifest {self.digest} ({self.num_parts} parts)",
                "the partition result (manifest.json digest)",
                timeout_s=timeout_s or self.timeout_s,
                path=self.directory,
            )
            self._checked_distributed = True

    def _gather_distributed(self, table: torch.Tensor, ids: torch.Tensor, world_size: int, timeout_s: Optional[float] = None) -> torch.Tensor:
        # Ids go to their owners as rows of the owner's node data; rows held
        # here (owned, or halo data) go to "self", a local copy in the exchange.
        owner, rows = self._resolve(ids)
        send_rows, send_counts, order = group_by_owner(rows, owner, world_size)
        send_counts = send_counts.tolist()
        recv_counts = exchange_counts(send_counts, timeout_s=timeout_s)
        wanted = all_to_all_rows(send_rows, send_counts, recv_counts, timeout_s=timeout_s)
        answer = self._index(table, wanted)
        got = all_to_all_rows(answer, recv_counts, send_counts, timeout_s=timeout_s)
        return torch.empty_like(got).index_copy_(0, order, got)


# --------------------------------------------------------------------------- loading


def load_partition(
    path: PathLike,
    rank: Optional[int] = None,
    device: DeviceLike = None,
    feature_device: DeviceLike = None,
    verify: bool = False,
    *,
    node_data: Optional[Sequence[str]] = None,
    edge_data: Optional[Sequence[str]] = None,
    timeout_s: float = 60.0,
    hetero: bool = True,
) -> Union[LoadedPartition, HeteroPartition]:
    """Load partition `rank` of the partition result in `path` onto `device`.

    rank: None -> this job's partition: rank // L when P partitions run on
    P x L ranks (L trainers per partition; 0 when not initialised).
    device: None -> CUDA when available, else CPU. feature_device: where node
    data lives (None: `device`; "cpu" keeps it in pinned host memory when
    CUDA is used). verify: check the CRC-32 of every array read.
    node_data / edge_data: names to load (None: all). timeout_s bounds the
    cross-rank agreement check of distributed gathers. A typed result (SPEC.md 8)
    gives a gpart.runtime.partition.typed.HeteroPartition (node_data then names typed
    arrays, `(ntype, name)`); hetero=False loads its type-erased partition.
    """
    directory = Path(path)
    reader, rank = _open_reader(directory, rank)
    if hetero and reader.hetero is not None:
        reader.close()
        base = load_partition(directory, rank, device, feature_device, verify, node_data=[], edge_data=[], timeout_s=timeout_s,
                              hetero=False)
        return load_hetero_partition(base, feature_device, verify, node_data=node_data, edge_data=edge_data)
    rank = _check_rank(rank, reader.num_parts, directory)
    dev = resolve_device(device)
    fdev = resolve_device(feature_device) if feature_device is not None else dev
    names = _select(reader.node_data_names(), node_data, "node data", directory)
    edge_names = _select(reader.edge_data_names(), edge_data, "edge data", directory)
    try:
        info = reader.part_info(rank)
        fields = dict(
            directory=directory,
            manifest=reader.manifest,
            digest=_manifest_digest(reader.manifest_file),
            rank=rank,
            num_parts=reader.num_parts,
            num_nodes=reader.num_nodes,
            num_edges=reader.num_edges,
            num_owned=int(info["num_owned"]),
            num_halo=int(info["num_halo"]),
            halo=bool(reader.halo),
            device=dev,
            feature_device=fdev,
            timeout_s=timeout_s,
            **_load_arrays(reader, rank, verify, dev, fdev, names, edge_names),
        )
    finally:
        reader.close()
    return LoadedPartition(**fields)


def _open_reader(directory: Path, rank: Optional[int]) -> tuple[Any, Any]:
    """(the result's reader, checking only partition `rank`'s files and the book: a per-machine output holds its
    own partitions only, SPEC.md 10.4; the partition). rank None: this job's, r // L with L trainers per partition."""
    if rank is None and world()[1] > 1:
        probe = PartitionReader(directory, parts=[])  # the manifest alone: how many partitions share the ranks
        try:
            rank = partition_of_rank(probe.num_parts, path=directory)
        finally:
            probe.close()
    mine = world()[0] if rank is None else rank
    return PartitionReader(directory, parts=[mine] if isinstance(mine, int) else None), mine


def _check_rank(rank: Any, num_parts: int, directory: Path) -> int:
    if not isinstance(rank, (int, np.integer)) or not 0 <= int(rank) < num_parts:
        raise InputError(directory, f"has {num_parts} partitions; rank {rank!r} is not one of 0..{num_parts - 1}")
    return int(rank)


def _load_arrays(reader: Any, rank: int, verify: bool, dev: torch.device, fdev: torch.device,
                 names: list[str], edge_names: list[str]) -> dict[str, Any]:
    """The book, topology and data tensors of partition `rank`, each mapped and placed on its device."""
    stager = Stager(dev) if dev.type == "cuda" else None

    def load(key: str, to: torch.device) -> torch.Tensor:
        entry = reader.entry(rank, key)
        host = numpy_to_tensor(reader.read_entry(entry, verify, mode="c"), entry.dtype)
        pin = to.type == "cpu" and dev.type == "cuda"
        return place(host, to, pin=pin, stager=stager if to.type == "cuda" else None)

    arrays: dict[str, Any] = {"book": _load_book(reader, verify, dev, stager)}
    arrays.update({key: load(key, dev) for key in ("node_ids", "indptr", "indices", "edge_ids")})
    arrays["node_data"] = {name: load(data_key("node", name), fdev) for name in names}
    arrays["edge_data"] = {name: load(data_key("edge", name), dev) for name in edge_names}
    return arrays


def _select(available: list[str], wanted: Optional[Sequence[str]], what: str, directory: Path) -> list[str]:
    if wanted is None:
        return list(available)
    if isinstance(wanted, str):
        wanted = [wanted]
    unknown = [n for n in wanted if n not in available]
    if unknown:
        raise InputError(directory, f"no {what} named {', '.join(map(repr, unknown))} (has: {', '.join(available) or 'none'})")
    return list(wanted)


def _manifest_digest(manifest_file: Path) -> str:
    try:
        return hashlib.sha256(manifest_file.read_bytes()).hexdigest()[:16]
    except OSError as exc:
        raise InputError(manifest_file, f"cannot read: {exc.strerror or exc}") from None


def _load_book(reader: Any, verify: bool, device: torch.device, stager: Optional[Stager]) -> DeviceBook:
    spec = reader.manifest["book"]
    kind = spec["kind"]
    n, p = reader.num_nodes, reader.num_parts
    if kind == "remainder":
        return DeviceBook("remainder", n, p, device)
    if kind == "range":
        bounds = torch.tensor([int(b) for b in spec["boundaries"]], dtype=torch.int64, device=device)
        return DeviceBook("range", n, p, device, boundaries=bounds)
    entries = reader.book_entries()
    owner = numpy_to_tensor(reader.read_entry(entries["owner"], verify, mode="c"), "int32")
    local = numpy_to_tensor(reader.read_entry(entries["local"], verify, mode="c"), "int64")
    if owner.numel():
        lo, hi = torch.aminmax(owner)
        if int(lo) < 0 or int(hi) >= p:
            raise IntegrityError(Path(reader.directory) / entries["owner"].file, f"owner ids outside 0..{p - 1}")
    return DeviceBook("array", n, p, device, owner_table=place(owner, device, stager=stager), local_table=place(local, device, stager=stager))
