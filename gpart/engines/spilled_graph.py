"""The edges `--method stream` spills, with what every pass over them balances: one value handed down its passes.

Each edge u->v (u != v) is spilled to scratch buckets (gpart.engines.spill) twice,
as (u, v) in u's block and as (v, u) in v's block (blocks of `block`
consecutive ids), so a block's bucket holds every neighbour of its nodes.
The placement, clustering, restreaming and refinement passes
(gpart.engines.stream_place, stream_clusters, stream_refine) read the buckets
block by block, vectorised per block.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gpart.base.graph import Graph
from gpart.bytes.reader import drop_pages
from gpart.engines.spill import Buckets, RowsOf


@dataclass(frozen=True)
class SpilledGraph:
    """Both directions of every edge in buckets of `block` nodes, and the balance a pass over them keeps."""

    buckets: Buckets  # columns "node" and "neighbour"; bucket b holds the rows of nodes b * block .. (b + 1) * block - 1
    shares: np.ndarray  # [N, C] the balanced quantities per node (nodes, in-degree, masks)
    num_parts: int
    block: int
    imbalance: float  # no part past (1 + imbalance) times its mean in any share
    num_edges: int  # the cut of a pass is its rows apart over 2 * num_edges (every edge is two rows)

    @property
    def num_blocks(self) -> int:
        return self.buckets.offsets.shape[0] - 1

    def at(self, imbalance: float, num_edges: int) -> "SpilledGraph":
        """The same buckets and shares under another bound and edge count."""
        return replace(self, imbalance=imbalance, num_edges=num_edges)

    def cut_rows(self, owner: np.ndarray) -> int:
        """Rows of the buckets whose node and neighbour `owner` puts apart (twice the cut edges)."""
        buckets = self.buckets
        return sum(int(np.count_nonzero(owner[buckets.rows(b, "node")] != owner[buckets.rows(b, "neighbour")]))
                   for b in range(self.num_blocks))


def both_directions(graph: Graph, block: int, id_dtype: np.dtype) -> RowsOf:
    """Rows (node, neighbour) for u->v and v->u of every edge u->v that is not a self-loop, keyed by node's block."""
    def rows_of(start: int, stop: int):
        u = np.array(graph.src[start:stop], dtype=np.int64)  # copies: the input pages can go
        v = np.array(graph.dst[start:stop], dtype=np.int64)
        for arr in (graph.src, graph.dst):
            drop_pages(arr, start * arr.itemsize, (stop - start) * arr.itemsize)
        keep = u != v
        node = np.concatenate([u[keep], v[keep]])
        neighbour = np.concatenate([v[keep], u[keep]])
        return node // block, {"node": node.astype(id_dtype), "neighbour": neighbour.astype(id_dtype)}

    return rows_of
