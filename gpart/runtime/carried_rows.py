"""Which node data rows the fused sampler carries, and where a partition holds them (gpart.runtime.fused).

A source sorts nodes into kinds (one kind for a homogeneous partition, the
node types of a typed one); each kind has its own node data arrays, so its
own row layout. The fused sampler asks a source, per hop, which arrays each
kind carries (`keys`), where the requester holds a node's rows (`locate`)
and where an owner finds the rows of a column it was asked about (`owned`).

    PlainRows(part, ["feat"], "label")                     # DistNeighborLoader
    TypedRows(part, ["feat"], "label", "paper")            # HeteroNeighborLoader
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Hashable, Optional, Sequence

import torch

from gpart.runtime.packed_rows import RowLayout


class RowSource(ABC):
    """The rows of `data_keys` (keys of part.node_data) per kind; `label_key`'s rows of the seeds on the first hop."""

    part: Any
    kind_keys: list[list[Hashable]]  # per kind: its node data keys, in the loader's name order
    label_key: Optional[Hashable]
    seed_kind: int

    @property
    def data_keys(self) -> list[Hashable]:
        return [key for keys in self.kind_keys for key in keys]

    def keys(self, first_hop: bool) -> list[list[Hashable]]:
        """Per kind, the arrays whose rows a hop's requests carry: the first hop's add the seeds' labels."""
        keys = [list(k) for k in self.kind_keys]
        if first_hop and self.label_key is not None and self.label_key not in keys[self.seed_kind]:
            keys[self.seed_kind].append(self.label_key)
        return keys

    def layouts(self, keys: list[list[Hashable]]) -> list[RowLayout]:
        """Per kind, the layout of the rows of `keys` (cached: every hop asks)."""
        cache = self.__dict__.setdefault("_layouts", {})
        marker = repr(keys)
        if marker not in cache:
            cache[marker] = [RowLayout.of([self.part.node_data[key][:0] for key in kind]) for kind in keys]
        return cache[marker]

    def describe(self) -> str:
        """The kinds' layouts (every rank must agree: they size the answers' bytes)."""
        return "; ".join(f"{k}: {layout.fields}" for k, layout in zip(self.kind_keys, self.layouts(self.keys(True))))

    @abstractmethod
    def locate(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(kind, row here or -1) of global ids."""

    @abstractmethod
    def owned(self, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(kind, row) of owned local columns."""


class PlainRows(RowSource):
    """A homogeneous LoadedPartition: one kind, rows at local ids (owned first, then halo)."""

    def __init__(self, part: Any, names: Sequence[str], labels: Optional[str]):
        self.part, self.kind_keys, self.label_key, self.seed_kind = part, [list(names)], labels, 0

    def locate(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros_like(ids), self.part.local_rows(ids)

    def owned(self, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros_like(cols), cols


class TypedRows(RowSource):
    """A HeteroPartition over erased ids: one kind per node type, the arrays of `names` that type has."""

    def __init__(self, part: Any, names: Sequence[str], labels: Optional[str], input_type: str):
        self.part = part
        self.kind_keys = [[(ntype, name) for name in names if (ntype, name) in part.node_data] for ntype in part.node_types]
        self.label_key = (input_type, labels) if labels is not None else None
        self.seed_kind = part.node_types.index(input_type)

    def locate(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.part.erased_rows(ids)

    def owned(self, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.part.owned_rows(cols)
