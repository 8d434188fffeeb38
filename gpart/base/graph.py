"""The in-memory graph model every reader returns and every partitioner takes.

A Graph is COO: edge `k` goes `src[k] -> dst[k]`; `k` is the edge's id.
Arrays may be numpy memmaps of the input file and keep the input's integer
dtype (they are not copied to int64 up front, to keep peak memory near the
input's size); consumers cast chunk by chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import numpy.typing as npt


@dataclass
class Graph:
    num_nodes: int
    src: np.ndarray
    dst: np.ndarray
    node_data: dict[str, np.ndarray] = field(default_factory=dict)
    edge_data: dict[str, np.ndarray] = field(default_factory=dict)
    source: Optional[str] = None
    input_format: str = "memory"

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])

    def check(self) -> None:
        """Assert the structural invariants readers guarantee (cheap O(E) pass)."""
        assert self.src.ndim == 1 and self.src.shape == self.dst.shape
        assert self.src.dtype.kind in "iu" and self.dst.dtype.kind in "iu"
        if self.num_edges:
            lo = min(int(self.src.min()), int(self.dst.min()))
            hi = max(int(self.src.max()), int(self.dst.max()))
            assert lo >= 0 and hi < self.num_nodes, (lo, hi, self.num_nodes)
        for name, arr in self.node_data.items():
            assert arr.shape[0] == self.num_nodes, name
        for name, arr in self.edge_data.items():
            assert arr.shape[0] == self.num_edges, name

    @classmethod
    def from_arrays(cls, src: npt.ArrayLike, dst: npt.ArrayLike, num_nodes: Optional[int] = None, **node_data: np.ndarray) -> "Graph":
        """Build a graph from in-memory arrays (tests, library callers)."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        if num_nodes is None:
            num_nodes = int(max(src.max(initial=-1), dst.max(initial=-1)) + 1)
        return cls(num_nodes, src, dst, dict(node_data))
