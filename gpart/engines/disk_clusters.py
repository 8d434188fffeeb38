"""Size-limited label-propagation clusters of a graph on disk: the first step of an on-disk coarsening level.

    cluster, count = disk_clusters(graph, weights, max_weight, seed)   # cluster id of every node, 0..count-1

What KaMinPar's coarsening does first, done over gpart.engines.disk_graph
ranges so that no array of the edges' size is ever held: every node starts
as its own cluster and, round after round, joins the cluster its edges weigh
most towards, while that cluster's vertex weights stay within `max_weight`:
one column per weighting that will partition the clusters (the default's two
KaMinPar runs share one coarsening), each with its own limit.

One range of nodes moves at once (vectorised: one sort of (node, neighbour's
cluster) keys gives each node its weight towards every cluster around it),
and its moves count for the ranges after it; two ranges are proposed at once
on two threads from the same state and applied in order
(gpart.engines.disk_graph.pass_in_batches). Moving a whole range at once
lets two neighbours swap clusters past each other (each joins the other's
singleton and both stay alone), so each round a seeded random half of the
would-be movers moves, and none joins a cluster that every member is leaving.
Ties go to the node's own cluster, then at random (seeded per round and range). Clusters are
numbered by their first node, so a graph in locality order (the breadth-first
renumbering of the compressed path) keeps it.

Memory: 4 bytes a node for the clusters (8 past 2^31 nodes), 8 a weighting
for their weights, and one range's temporaries (about 60 bytes an
entry: the keys sorted, their runs, the scores).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from gpart.engines.disk_graph import DiskGraph, fits_in_order, pass_in_batches, run_starts

# KaMinPar's label propagation clustering runs 5 rounds a level. A round moving fewer than SETTLED of the nodes
# ends it: R-MAT 1M/10M moved 41, 16, 7.6, 3.7 and 1.8% of its nodes in rounds 1-5 (the fifth 5% of the moves
# for a fifth of the time), the geometric 1M/10M 41, 33, 27, 21, 16% (its clusters grow each round, and fewer
# levels keep more of the cut: 3 rounds took 120M edges to two levels and 1.053x the in-memory cut)
CLUSTER_ROUNDS = 5
SETTLED = 0.05
_LABEL_BITS = 32  # a (node in range, cluster) key: the cluster in the low bits
_TIE_BITS = 16  # score = weight, then own cluster, then a random tie-break


def disk_clusters(graph: DiskGraph, weights: np.ndarray, max_weight: np.ndarray, seed: int,
                  rounds: int = CLUSTER_ROUNDS) -> tuple[np.ndarray, int]:
    """The cluster of every node (int32, or int64 past 2^31 nodes), numbered 0..count-1 by each cluster's first
    node, and the number of clusters. `weights`: [n, c] vertex weights (int64), `max_weight`: [c]; a cluster of
    more than one node stays within `max_weight` in every column."""
    n = graph.num_nodes
    label = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    weights = np.asfortranarray(weights, dtype=np.int64)  # columns contiguous: each is gathered on its own
    cluster_weight = weights.copy(order="F")
    ranges = graph.ranges()

    def apply(moves: tuple[np.ndarray, np.ndarray]) -> int:
        return _apply(moves, label, (weights, cluster_weight), max_weight)

    for round_index in range(rounds):
        def propose(index: int, nodes: tuple[int, int], round_index: int = round_index) -> tuple[np.ndarray, np.ndarray]:
            rng = np.random.default_rng([seed, round_index, index])
            return _proposed(graph, nodes, label, (weights, cluster_weight), max_weight, rng)

        if pass_in_batches(ranges, propose, apply) < SETTLED * n:
            break
    return _numbered(label)


def _proposed(graph: DiskGraph, nodes: tuple[int, int], label: np.ndarray, weights: tuple[np.ndarray, np.ndarray],
              max_weight: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The nodes of [first, stop) = `nodes` that would move and their best clusters (see the module), a random
    half of them; reads the state only. `weights`: the nodes' and the clusters' ([n, c] each)."""
    first, stop = nodes
    vertex_weight, cluster_weight = weights
    rows, neighbours, edge_weights = graph.lists(first, stop)
    if rows.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    node, cluster, towards = _weights_towards(rows, label[neighbours].astype(np.int64), edge_weights, first)
    own = label[node] == cluster
    room = np.ones(node.shape[0], dtype=bool)
    for j in range(max_weight.shape[0]):  # a gather per column (a row gather of [pairs, c] took twice as long)
        room &= cluster_weight[:, j][cluster] + vertex_weight[:, j][node] <= max_weight[j]
    score = np.where(own | room, (towards << (_TIE_BITS + 1)) | (own.astype(np.int64) << _TIE_BITS)
                     | rng.integers(0, 1 << _TIE_BITS, size=node.shape[0]), -1)
    best = _best_per_node(node, score)
    best = best[score[best] >= 0]
    movers, target = node[best], cluster[best]
    keep = (label[movers] != target) & (rng.random(movers.shape[0]) < 0.5)
    return movers[keep], target[keep]


def _apply(moves: tuple[np.ndarray, np.ndarray], label: np.ndarray, weights: tuple[np.ndarray, np.ndarray],
           max_weight: np.ndarray) -> int:
    """Move the proposed nodes that still may (no cluster that all its members leave, none past `max_weight`);
    the number that moved."""
    movers, target = moves
    vertex_weight, cluster_weight = weights
    keep = ~np.isin(target, _emptied(label[movers], vertex_weight[movers], cluster_weight))
    movers, target = _within_weight(movers[keep], target[keep], vertex_weight, cluster_weight, max_weight)
    moving_weight = vertex_weight[movers]
    np.subtract.at(cluster_weight, label[movers], moving_weight)
    np.add.at(cluster_weight, target, moving_weight)
    label[movers] = target
    return int(movers.shape[0])


def _weights_towards(rows: np.ndarray, clusters: np.ndarray, edge_weights: Optional[np.ndarray],
                     first: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per distinct (node, neighbour's cluster) of a range: the node, the cluster and the edge weight between
    them, grouped by node (ascending)."""
    key = (rows << _LABEL_BITS) | clusters
    # The keys come in runs (a node's entries, nodes ascending): numpy's stable sort (a timsort for int64) merges
    # runs, 3.3x its quicksort on 64K keys of degree 20
    if edge_weights is None:
        key.sort(kind="stable")
        starts = run_starts(key)
        towards = np.diff(np.append(starts, key.shape[0]))
    else:
        order = np.argsort(key, kind="stable")
        key = key[order]
        starts = run_starts(key)
        towards = np.add.reduceat(edge_weights[order], starts)
    pairs = key[starts]
    return (pairs >> _LABEL_BITS) + first, pairs & ((1 << _LABEL_BITS) - 1), towards.astype(np.int64)


def _best_per_node(node: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Index of the highest score of each node's run (`node` grouped ascending), the first of equal ones."""
    starts = run_starts(node)
    best = np.maximum.reduceat(score, starts)
    lengths = np.diff(np.append(starts, node.shape[0]))
    at = np.flatnonzero(score == np.repeat(best, lengths))
    return at[run_starts(node[at])]


def _emptied(left: np.ndarray, weight: np.ndarray, cluster_weight: np.ndarray) -> np.ndarray:
    """The clusters among `left` that every member leaves (the weight leaving is all they weigh)."""
    if left.size == 0:
        return left
    clusters, inverse = np.unique(left, return_inverse=True)
    leaving = np.bincount(inverse, weights=weight.sum(axis=1))
    return clusters[leaving >= cluster_weight[clusters].sum(axis=1)]


def _within_weight(movers: np.ndarray, target: np.ndarray, weight: np.ndarray, cluster_weight: np.ndarray,
                   max_weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The movers whose cluster stays within `max_weight` (every column) with them and the movers before them
    into it."""
    if movers.size == 0:
        return movers, target
    order = np.argsort(target, kind="stable")
    movers, target = movers[order], target[order]
    keep = fits_in_order(target, weight[movers], cluster_weight, max_weight)
    return movers[keep], target[keep]


def _numbered(label: np.ndarray) -> tuple[np.ndarray, int]:
    """Labels renumbered 0..count-1 in the order of each label's first node."""
    labels, first = np.unique(label, return_index=True)
    number = np.empty(label.shape[0], dtype=label.dtype)
    number[labels[np.argsort(first)]] = np.arange(labels.shape[0], dtype=label.dtype)
    return number[label], int(labels.shape[0])
