"""Where a loader reads node data rows: the row source interface, and the partition's node data as the default.

    class Embeddings(RowSource):                       # a user's own rows, e.g. a table outside the partition
        def __init__(self, part, table):              # table: rows of this partition's owned nodes
            self.table = table
        def keys(self):
            return ["emb"]
        def row_spec(self, key):
            return self.table.dtype, tuple(self.table.shape[1:])
        def read(self, key, rows):
            return self.table[rows]

    loader = gr.DistNeighborLoader(part, seeds, node_data="emb", labels=None, row_source=Embeddings(part, table))

A loader asks the row source of the rank that owns a node (PyG's feature
store, one per partition): the owner reads the rows and they travel in the
sampling answers. A source serves:

- `keys()`: the node data it holds. A homogeneous partition's keys are
  names ("feat"); a typed partition's are (node type, name) pairs, as in
  its own node_data. A loader's node_data and labels name these.
- `row_spec(key)`: the dtype and row shape of key's rows; every rank's
  source must give the same (the loader checks it: they size the packed
  answers, gpart.runtime.sampling.packed_rows).
- `read(key, rows)`: the rows of `key` at row ids `rows` (int64, on the
  partition's device), as a [len(rows), *row_shape] tensor on any device
  (the loader moves it). Row ids are the partition's: for a homogeneous
  partition a node's local id (its owned nodes first, 0..num_owned-1); for
  a typed one its position among the partition's nodes of its type (owned
  first: row i of type t is part.owned_ids(t)[i]).
- `read_into(key, rows, out)` (optional): the same rows written into `out`
  (a slice of the batch's tensor, or a reused buffer), so the loader
  needs no buffer between; without it the loader copies read()'s result.
- `holds_halo`: whether it can also read the rows of the partition's halo
  nodes (rows num_owned.. as stored). False (the default): only owned rows
  are read, and a halo node's rows come from its owner like any other.

Reads happen inside the loader's collectives: a source must answer without
waiting on other ranks.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Hashable, Sequence

import torch

from gpart.runtime.partition.interface import Partition


class RowSource(ABC):
    """Node data rows by key and row id, read on the rank that owns the nodes (see the module)."""

    holds_halo: bool = False

    @abstractmethod
    def keys(self) -> Sequence[Hashable]:
        """The node data keys this source serves."""

    @abstractmethod
    def row_spec(self, key: Hashable) -> tuple[torch.dtype, tuple[int, ...]]:
        """(dtype, row shape) of `key`'s rows."""

    @abstractmethod
    def read(self, key: Hashable, rows: torch.Tensor) -> torch.Tensor:
        """Rows of `key` at the partition's row ids `rows`."""


# Rows gathered on the host per piece when node data lives in pinned host memory: the copy of one piece to the
# GPU runs while the host gathers the next.
PINNED_PIECE_BYTES = 8 << 20


class PartitionRows(RowSource):
    """The partition's own node data (the default source): rows read where each table lives (GPU memory, or pinned
    host memory gathered on the host and copied without blocking) onto the partition's device; halo rows where the
    partition stores them."""

    def __init__(self, part: Partition):
        self.node_data, self.device = part.node_data, part.device
        self.holds_halo = True
        self.cache = getattr(part, "row_cache", None)  # hot rows on the device (gpart.runtime.partition.row_cache)

    def keys(self) -> Sequence[Hashable]:
        return list(self.node_data)

    def row_spec(self, key: Hashable) -> tuple[torch.dtype, tuple[int, ...]]:
        table = self.node_data[key]
        return table.dtype, tuple(table.shape[1:])

    def read(self, key: Hashable, rows: torch.Tensor) -> torch.Tensor:
        if self.cache is not None and self.cache.holds(key):  # a set lookup per read: no dict of the cached rows
            return self.cache.read(key, rows)
        table = self.node_data[key]
        if table.device == self.device:
            return torch.index_select(table, 0, rows)
        rows = rows.to(table.device)
        if self.device.type == "cuda" and table.is_pinned():
            return _gather_pinned(table, rows, self.device)
        return torch.index_select(table, 0, rows).to(self.device)

    def read_into(self, key: Hashable, rows: torch.Tensor, out: torch.Tensor) -> None:
        """read(key, rows) written into `out`: gathered straight into it where the table is on out's device."""
        table = self.node_data[key]
        if (self.cache is None or not self.cache.holds(key)) and table.device == out.device:
            torch.index_select(table, 0, rows.to(table.device), out=out)
        else:
            out.copy_(self.read(key, rows))


def _gather_pinned(table: torch.Tensor, rows: torch.Tensor, device: torch.device) -> torch.Tensor:
    """table[rows] (table in pinned host memory) on CUDA `device`: the host gathers piece by piece into pinned
    buffers, each piece's copy issued without blocking, so gathering and copying overlap."""
    out = torch.empty((rows.numel(), *table.shape[1:]), dtype=table.dtype, device=device)
    row_bytes = max(1, table[:1].numel() * table.element_size())
    step = max(1, PINNED_PIECE_BYTES // row_bytes)
    for at in range(0, rows.numel(), step):  # a loop over pieces of megabytes, not over rows
        piece = rows[at:at + step]
        staged = torch.empty((piece.numel(), *table.shape[1:]), dtype=table.dtype, pin_memory=True)
        torch.index_select(table, 0, piece, out=staged)
        out[at:at + piece.numel()].copy_(staged, non_blocking=True)  # the caching host allocator keeps `staged`
    return out
