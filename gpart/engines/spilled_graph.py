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
from typing import Iterator

import numpy as np

from gpart.base.graph import Graph
from gpart.bytes.reader import drop_pages
from gpart.engines.spill import Buckets, RowsOf

SPAN_CELLS = 1 << 20  # temporaries of a pass's step over buckets in memory (SpilledGraph.spans): 8 MiB of int64 each


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
        return sum(int(np.count_nonzero(owner[node] != owner[neighbour]))
                   for _, _, node, neighbour in self.spans(self.rows_per_node))

    @property
    def rows_per_node(self) -> int:
        """Spilled rows a node, rounded up: the `node_cells` of a pass whose temporaries are per row."""
        return -(-int(self.buckets.offsets[-1]) // max(1, self.shares.shape[0]))

    def spans(self, node_cells: int) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
        """(first node, end node, node column, neighbour column) of consecutive blocks for a pass whose work
        takes `node_cells` temporaries a node: a block at a time from disk; in memory as many blocks at once as
        keep the temporaries within SPAN_CELLS (fewer, larger calls: a pass on a small graph is mostly per-call
        cost)."""
        buckets, n, block = self.buckets, self.shares.shape[0], self.block
        step = 1 if buckets.resident is None else max(1, SPAN_CELLS // max(1, block * node_cells))
        for b in range(0, self.num_blocks, step):
            end = min(b + step, self.num_blocks)
            yield b * block, min(end * block, n), buckets.span(b, end, "node"), buckets.span(b, end, "neighbour")


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
