"""The partition book on a device: owner(g) and local(g) for tensors of global ids, one small class per
book kind of the manifest (SPEC.md 4.2), so callers ask the book instead of testing its kind.

    book = load_book(reader, verify, device, stager)   # RemainderBook, RangeBook or ArrayBook
    owner, local = book.owner_and_local(gids)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Optional

import torch

from gpart.base.errors import IntegrityError
from gpart.bytes.torch_bridge import numpy_to_tensor
from gpart.runtime.partition.device import Stager, place


class DeviceBook(ABC):
    """owner(g) and local(g) for tensors of global ids, computed on the device.

    Ids must be in 0..num_nodes-1 (checked by callers). `kind` is the manifest's book kind.
    """

    kind: ClassVar[str]

    def __init__(self, num_nodes: int, num_parts: int, device: torch.device):
        self.num_nodes = int(num_nodes)
        self.num_parts = int(num_parts)
        self.device = device

    def owner(self, gids: torch.Tensor) -> torch.Tensor:
        """Owning partition of each id (int64, same shape, on the book's device)."""
        return self.owner_and_local(gids)[0].to(torch.int64)

    def to_local(self, gids: torch.Tensor) -> torch.Tensor:
        """Row of each id within its owner's owned nodes (int64, same shape)."""
        return self.owner_and_local(gids)[1]

    @abstractmethod
    def owner_and_local(self, gids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(owner, local) in one pass; owner is an integer tensor (int32 for array books), both fresh."""

    @abstractmethod
    def counts(self) -> torch.Tensor:
        """Owned nodes per partition (CPU int64)."""


class RemainderBook(DeviceBook):
    """Node g on partition g % P, at local g // P."""

    kind = "remainder"

    def owner(self, gids: torch.Tensor) -> torch.Tensor:
        return torch.remainder(gids.to(self.device), self.num_parts)

    def owner_and_local(self, gids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gids = gids.to(self.device)
        return torch.remainder(gids, self.num_parts), torch.div(gids, self.num_parts, rounding_mode="floor")

    def counts(self) -> torch.Tensor:
        p = torch.arange(self.num_parts)
        return torch.clamp(-torch.div(-(self.num_nodes - p), self.num_parts, rounding_mode="floor"), min=0)


class RangeBook(DeviceBook):
    """Contiguous ranges: P + 1 `boundaries`, owner searchsorted(boundaries), local g - b[owner]."""

    kind = "range"

    def __init__(self, num_nodes: int, num_parts: int, device: torch.device, boundaries: torch.Tensor):
        super().__init__(num_nodes, num_parts, device)
        self.boundaries = boundaries

    def owner(self, gids: torch.Tensor) -> torch.Tensor:
        return torch.searchsorted(self.boundaries, gids.to(self.device), right=True).sub_(1)

    def owner_and_local(self, gids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gids = gids.to(self.device)
        owner = torch.searchsorted(self.boundaries, gids, right=True).sub_(1)
        return owner, gids - self.boundaries[owner]

    def counts(self) -> torch.Tensor:
        return torch.diff(self.boundaries).cpu()


class ArrayBook(DeviceBook):
    """Stored tables (metis, random, assignment books): owner_table[g] (int32), local_table[g] (int64)."""

    kind = "array"

    def __init__(self, num_nodes: int, num_parts: int, device: torch.device, owner_table: torch.Tensor,
                 local_table: torch.Tensor):
        super().__init__(num_nodes, num_parts, device)
        self.owner_table, self.local_table = owner_table, local_table

    def owner_and_local(self, gids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gids = gids.to(self.device)
        return _lookup(self.owner_table, gids), _lookup(self.local_table, gids)

    def owner(self, gids: torch.Tensor) -> torch.Tensor:
        return _lookup(self.owner_table, gids.to(self.device)).to(torch.int64)

    def counts(self) -> torch.Tensor:
        return torch.bincount(self.owner_table.to(torch.int64), minlength=self.num_parts).cpu()


def _lookup(table: torch.Tensor, gids: torch.Tensor) -> torch.Tensor:
    # index_select is markedly faster than advanced indexing for 1-D lookups.
    return torch.index_select(table, 0, gids.reshape(-1)).reshape(gids.shape)


def load_book(reader: Any, verify: bool, device: torch.device, stager: Optional[Stager] = None) -> DeviceBook:
    """The book of the result `reader` opened, on `device` (array books: their tables read, checked and placed)."""
    spec = reader.manifest["book"]
    n, p = reader.num_nodes, reader.num_parts
    if spec["kind"] == RemainderBook.kind:
        return RemainderBook(n, p, device)
    if spec["kind"] == RangeBook.kind:
        bounds = torch.tensor([int(b) for b in spec["boundaries"]], dtype=torch.int64, device=device)
        return RangeBook(n, p, device, bounds)
    entries = reader.book_entries()
    owner = numpy_to_tensor(reader.read_entry(entries["owner"], verify, mode="c"), "int32")
    local = numpy_to_tensor(reader.read_entry(entries["local"], verify, mode="c"), "int64")
    if owner.numel():
        lo, hi = torch.aminmax(owner)
        if int(lo) < 0 or int(hi) >= p:
            raise IntegrityError(Path(reader.directory) / entries["owner"].file, f"owner ids outside 0..{p - 1}")
    return ArrayBook(n, p, device, place(owner, device, stager=stager), place(local, device, stager=stager))
