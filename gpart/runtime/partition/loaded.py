"""Load one partition of a gpart partition result onto a device and serve feature lookups.

    part = load_partition("parts/", rank=rank, device="cuda")
    part.indptr, part.indices, part.node_ids      # CSC over local ids, on the device
    part.owner(gids), part.to_local(gids)         # the partition book, on the device
    x = part.gather("feat", gids)                 # rows in request order

Loading reads the manifest through gpart.formats.partition.reader.PartitionReader
(format, version, sizes, dtypes checked before any data is touched; the
CRC-32 of every file loaded unless verify=False), then maps every array: file -> memory map ->
torch.from_numpy (no copy). On CPU the tensors stay backed by the mapping
(the page cache); on CUDA they are copied through a small reusable pinned
staging buffer to the device. With feature_device="cpu" node data stays in
(pinned, when CUDA is present) host memory and lookups still return tensors
on the partition's device. HDF5 results are mapped the same way (their
datasets are contiguous); h5py is imported only for them.

`gather` answers ids of this partition locally (owned rows, and halo rows when
the result stores halo data). When torch.distributed is initialised on P x L
ranks (L trainers per partition) it fetches the other ids from the serving
ranks of their owners (gpart.runtime.partition.serving: ids out, rows back);
everything else is an error that says what is missing. The partition is the
one-type case of the Partition interface (gpart.runtime.partition.interface).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional, Union

import torch

from gpart.base.errors import InputError, NotLocalError
from gpart.runtime.partition.book import DeviceBook
from gpart.runtime.partition.device import place_topology
from gpart.runtime.partition.interface import PLAIN_EDGE_TYPE, PLAIN_NODE_TYPE
from gpart.runtime.partition.row_cache import CachedRows, RowCache
from gpart.runtime.partition.serving import ServingRanks, gather_rows, read_rows

PathLike = Union[str, "os.PathLike[str]"]


# --------------------------------------------------------------------------- the loaded partition


@dataclass(eq=False, repr=False)
class LoadedPartition(CachedRows):
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
    # where the per-edge arrays live: "device", or "pinned" host memory the GPU reads (load_partition's topology=)
    topology: str = "device"
    typed: ClassVar[bool] = False  # homogeneous: the one-type case of a typed partition
    is_hetero: ClassVar[bool] = False  # the same, under the name callers probed for
    serving: ServingRanks = field(init=False, repr=False)
    # the device cache of hot node data rows (load_partition's cache=; gpart.runtime.partition.row_cache), or None
    row_cache: Optional[RowCache] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.serving = ServingRanks(self.directory, self.digest, self.rank, self.num_parts, self.device)

    def place_edge_array(self, array: torch.Tensor) -> torch.Tensor:
        """Per-edge array `array` (a table made from the topology: alias tables, temporal keys) where this
        partition keeps its topology."""
        return place_topology(array, self.device, self.topology)

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

    # -- the one-type view (gpart.runtime.partition.interface.Partition)

    @property
    def node_types(self) -> list[str]:
        return [PLAIN_NODE_TYPE]

    @property
    def edge_types(self) -> list[tuple[str, str, str]]:
        return [PLAIN_EDGE_TYPE]

    @property
    def node_offsets(self) -> torch.Tensor:
        return torch.tensor([0, self.num_nodes], dtype=torch.int64, device=self.device)

    @property
    def edge_offsets(self) -> torch.Tensor:
        return torch.tensor([0, self.num_edges], dtype=torch.int64, device=self.device)

    def num_nodes_of(self, ntype: str) -> int:
        self._check_type(ntype)
        return self.num_nodes

    def owned_ids_of(self, ntype: str) -> torch.Tensor:
        self._check_type(ntype)
        return self.owned_ids

    def erased_rows(self, erased: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(0, row in this partition's node data or -1) of each global id: local_rows, as the one type."""
        return torch.zeros_like(erased), self.local_rows(erased)

    def owned_rows(self, local: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(0, local) of owned local ids: their rows are their local ids."""
        return torch.zeros_like(local), local

    def gather_edges(self, key: Any, positions: Any) -> torch.Tensor:
        """Rows of edge data `key` (a name, or (PLAIN_EDGE_TYPE, name)) at local CSC positions `positions`."""
        name = key[1] if isinstance(key, (tuple, list)) else key
        if isinstance(key, (tuple, list)) and tuple(key[0]) != PLAIN_EDGE_TYPE:
            raise KeyError(f"{self.directory}: a homogeneous partition has no edge type {key[0]!r}")
        try:
            table = self.edge_data[name]
        except KeyError:
            have = ", ".join(self.edge_data) or "none"
            raise KeyError(f"{self.directory}: no edge data {name!r} (loaded: {have})") from None
        pos = torch.as_tensor(positions, device=self.device).to(torch.int64)
        flat = pos.reshape(-1)
        if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= self.indices.numel()):
            raise IndexError(f"edge positions outside 0..{self.indices.numel() - 1} of partition {self.rank}")
        rows = torch.index_select(table, 0, flat.to(table.device))
        return rows.reshape(*pos.shape, *table.shape[1:])

    def _check_type(self, ntype: str) -> None:
        if ntype != PLAIN_NODE_TYPE:
            raise InputError(self.directory, f"unknown node type {ntype!r} (a homogeneous partition has the one "
                                             f"node type {PLAIN_NODE_TYPE!r})")

    # -- lookups

    def gather(self, name: str, gids: Any, *, timeout_s: Optional[float] = None) -> torch.Tensor:
        """Rows of node data `name` for global ids `gids`, in request order, on the partition's device.

        The result has shape `gids.shape + row_shape`. Duplicates and empty
        requests are fine. Without torch.distributed (or in a world of one)
        every id must be in this partition (owned, or halo when halo data is
        stored). With torch.distributed initialised on P x L ranks (L trainers
        per partition, rank r on partition r // L) this is a collective: every
        rank must call it (with its own ids, possibly none) and remote rows come
        from the serving ranks of their owners (gpart.runtime.partition.serving).
        """
        table = self._table(name)
        shape = torch.as_tensor(gids).shape
        rows = gather_rows(self.serving, lambda: self._ids(gids).reshape(-1), self._resolve,
                           lambda wanted: read_rows(table, wanted, self.device), self._not_local, timeout_s or self.timeout_s)
        return rows.reshape(*shape, *table.shape[1:])

    def _table(self, name: str) -> torch.Tensor:
        try:
            return self.node_data[name]
        except KeyError:
            have = ", ".join(self.node_data) or "none"
            raise KeyError(f"{self.directory}: no node data {name!r} (loaded: {have})") from None

    def _not_local(self, ids: torch.Tensor, owner: torch.Tensor, missing: torch.Tensor) -> NotLocalError:
        n = int(missing.sum())
        first = int(torch.nonzero(missing)[0, 0])
        return NotLocalError(
            self.directory,
            f"{n} of {ids.numel()} requested ids are not in partition {self.rank} "
            f"(e.g. global id {int(ids[first])}, owned by partition {int(owner[first])}"
            f"{'' if self.halo else '; halo data is not stored'}); "
            f"initialise torch.distributed with one rank per partition ({self.num_parts}) to fetch remote rows",
        )
