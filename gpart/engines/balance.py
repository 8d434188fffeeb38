"""Balance that matches training work: node, in-edge and training-node balance of an assignment.

A partition stores its owned nodes, the in-edges of those nodes (SPEC.md 4:
an edge lives with its destination's owner) and trains on its owned nodes
of the training mask, so the busiest rank's share of each of the three sets
the pace. Balance of a share is max/mean over partitions (1.0 = perfect).

Single-weight partitioners (KaMinPar, the streaming partitioner) balance
one weight per node; `combined_weights` folds the three shares into one
integer weight whose three parts each sum to the same total, so a partition
within a few percent of the mean combined weight is usually within the
bound in each share; `balances` measures the three shares afterwards, and
callers fall back or report when a bound is missed.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.base.spans import ARRAY_THREADS, even_spans, run_spans
from gpart.bytes.reader import drop_pages

TRAIN_MASK = "train_mask"  # node array naming the training nodes, when present
BALANCE_BOUND = 1.10  # max/mean each share may reach under the default method
WEIGHT_SCALE = 1 << 30  # each share's weights sum to about this, so int64 totals never overflow
DEGREE_CHUNK = 1 << 22


def in_degrees(graph: Graph, threads: int = ARRAY_THREADS) -> np.ndarray:
    """Number of in-edges of every node (int64 [N]), counted chunk by chunk over the (mapped) dst, in
    `threads` spans of the edges at once (numpy's bincount runs without the GIL; R-MAT 5.6M/70M: 2.1 s on
    one thread)."""
    dst = graph.dst

    def count(first: int, stop: int) -> np.ndarray:
        degree = np.zeros(graph.num_nodes, dtype=np.int64)
        for start in range(first, stop, DEGREE_CHUNK):
            end = min(start + DEGREE_CHUNK, stop)
            degree += np.bincount(np.asarray(dst[start:end]), minlength=graph.num_nodes)
            drop_pages(dst, start * dst.itemsize, (end - start) * dst.itemsize)  # keep RSS off the input's size
        return degree

    counts = run_spans(count, even_spans(graph.num_edges, threads))
    return sum(counts[1:], counts[0]) if counts else np.zeros(graph.num_nodes, dtype=np.int64)


def train_mask(graph: Graph, name: Optional[str] = TRAIN_MASK) -> Optional[np.ndarray]:
    """The training mask as bool [N], or None when the graph has no such node array."""
    if name is None or name not in graph.node_data:
        return None
    column = np.asarray(graph.node_data[name])
    if column.ndim != 1 or (column.dtype != np.bool_ and column.dtype.kind not in "iu"):
        raise InputError(graph.source, f"training mask {name!r} must be 1-D boolean or 0/1, got {column.dtype} {column.shape}")
    return column.astype(bool, copy=False)


def combined_weights(num_nodes: int, degree: Optional[np.ndarray], masks: Sequence[np.ndarray] = (),
                     node_share: float = 1.0) -> np.ndarray:
    """One int64 weight per node: equal parts node count, in-degree (if given) and each mask's membership.

    Each part is scaled so it sums to WEIGHT_SCALE over the graph, the node
    count's part to node_share * WEIGHT_SCALE; a node always weighs at least 1.
    """
    weights = np.full(num_nodes, node_share * WEIGHT_SCALE / max(num_nodes, 1), dtype=np.float64)
    total_degree = 0 if degree is None else int(degree.sum())
    if total_degree:
        weights += degree * (WEIGHT_SCALE / total_degree)
    for mask in masks:
        members = int(np.count_nonzero(mask))
        if members:
            weights += np.asarray(mask, dtype=bool) * (WEIGHT_SCALE / members)
    return np.maximum(np.rint(weights), 1).astype(np.int64)


def share_balance(counts: np.ndarray) -> float:
    """max/mean of per-partition counts (1.0 when everything is empty)."""
    counts = np.asarray(counts, dtype=np.float64)
    mean = counts.mean() if counts.size else 0.0
    return float(counts.max() / mean) if mean > 0 else 1.0


def balances(owner: np.ndarray, num_parts: int, degree: np.ndarray, train: Optional[np.ndarray]) -> dict[str, Optional[float]]:
    """Node, in-edge and training-node balance of an owner array (train None without a mask)."""
    owner = np.asarray(owner)
    return {
        "node_balance": share_balance(np.bincount(owner, minlength=num_parts)),
        "edge_balance": share_balance(np.bincount(owner, weights=degree, minlength=num_parts)),
        "train_balance": None if train is None else share_balance(np.bincount(owner[train], minlength=num_parts)),
    }


def within_bound(measured: dict[str, Optional[float]], bound: float = BALANCE_BOUND) -> bool:
    return all(value is None or value <= bound for value in measured.values())
