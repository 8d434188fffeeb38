"""Several per-row arrays carried as one byte matrix, so one all_to_all moves them all.

    layout = RowLayout.of([counts, feat, label])     # dtypes and row shapes
    packed = layout.pack([counts, feat, label])      # uint8 [n, layout.row_bytes]
    counts, feat, label = layout.unpack(packed)      # the same arrays back

The sampler's answers carry, per requested node, the sampled in-edge count
and that node's data rows (features, labels), and per sampled edge its source
and edge id (and, on the last hop, the source's data rows): packing them lets
one exchange replace a separate gather round trip. Every dtype travels as its
bytes (bool, bfloat16, ... included), on CPU and CUDA alike.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass(frozen=True)
class RowLayout:
    """Dtype and row shape of each packed array, in packing order."""

    fields: tuple[tuple[torch.dtype, tuple[int, ...]], ...]

    @classmethod
    def of(cls, arrays: Sequence[torch.Tensor]) -> "RowLayout":
        return cls(tuple((a.dtype, tuple(a.shape[1:])) for a in arrays))

    @functools.cached_property
    def field_bytes(self) -> list[int]:  # computed once: the samplers ask for every hop
        return [torch.empty(0, dtype=dtype).element_size() * math.prod(shape) for dtype, shape in self.fields]

    @functools.cached_property
    def row_bytes(self) -> int:
        return sum(self.field_bytes)

    def pack(self, arrays: Sequence[torch.Tensor]) -> torch.Tensor:
        """uint8 [n, row_bytes]: row i holds row i of every array, in order."""
        n = int(arrays[0].shape[0]) if arrays else 0
        if len(self.fields) == 1 and n and self.row_bytes:  # one array: its own bytes, no copy
            return arrays[0].reshape(n, -1).contiguous().view(torch.uint8).reshape(n, self.row_bytes)
        out = torch.empty((n, self.row_bytes), dtype=torch.uint8, device=arrays[0].device if arrays else None)
        at = 0
        for array, (_, shape), width in zip(arrays, self.fields, self.field_bytes):
            if width:
                out[:, at:at + width] = array.reshape(n, math.prod(shape)).contiguous().view(torch.uint8).reshape(n, width)
            at += width
        return out

    def unpack(self, packed: torch.Tensor) -> list[torch.Tensor]:
        """The arrays `pack` took, from its output (rows may come from any rank)."""
        n = int(packed.shape[0])
        if len(self.fields) == 1 and n and self.row_bytes and packed.is_contiguous():
            (dtype, shape), = self.fields
            if packed.storage_offset() % torch.empty(0, dtype=dtype).element_size() == 0:  # an aligned start: a view, no copy
                return [packed.view(dtype).reshape(n, *shape)]
        arrays, at = [], 0
        for (dtype, shape), width in zip(self.fields, self.field_bytes):
            # a fresh [n, width] block: a dtype view needs standard strides and an aligned start
            column = torch.empty((n, width), dtype=torch.uint8, device=packed.device).copy_(packed[:, at:at + width])
            if width and n:
                arrays.append(column.view(dtype).reshape(n, *shape))
            else:  # nothing to view (and an empty slice keeps strides a dtype view rejects)
                arrays.append(torch.empty((n, *shape), dtype=dtype, device=packed.device))
            at += width
        return arrays
