"""Clusters for `--method stream`: label propagation over the spilled edges (gpart.engines.spilled_graph).

Each node takes the label most of its neighbours carry, no cluster above
1/CLUSTER_SPLIT of a part's mean in any share. This is what social graphs
need, whose ids carry no locality: Fennel and restreaming alone cut
0.43-0.51 of facebook's and email-Enron's edges at 8 parts, the clusters
partitioned by METIS (gpart.engines.stream_cluster_graph) 0.24-0.33 before the
refinement. Clustering gives up after CLUSTER_PROBE passes where its
clusters cannot beat Fennel's placement (`_hopeless`: R-MAT, road-NY).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from gpart.engines.spilled_graph import SpilledGraph

CLUSTER_PASSES = 16
CLUSTER_PROBE, CLUSTER_FLOOR, CLUSTER_SETTLED, CLUSTER_HOPE = 3, 0.15, 0.001, 0.5
CLUSTER_SEED = 7
# A cluster holds at most 1/CLUSTER_SPLIT of a part in any share: small enough for the partition of the clusters
# to balance every share, large enough to keep the edges inside. Facebook, ids permuted, 8 parts, imbalance 0.10,
# cut in the end (CLUSTER_SPLIT 2 / 3 / 4 / 8): 0.198 / 0.181 / 0.190 / under CLUSTER_FLOOR (too few edges inside).
# Clustering until a pass adds under 0.001 (CLUSTER_SETTLED) rather than 0.005: 0.190 against 0.216 at 4.
CLUSTER_SPLIT = 3


def cluster(spilled: SpilledGraph, bar, rival: np.ndarray) -> Optional[np.ndarray]:
    """Cluster label of every node, by label propagation over the blocks,
    no cluster above 1/CLUSTER_SPLIT of a part's mean in any share; None when partitioning the clusters cannot
    beat `rival` (owners).

    Blocks are visited in a seeded random order per pass and a block's new labels count at once
    for the blocks after it. Up to CLUSTER_PASSES passes; it stops early when a pass adds less
    than CLUSTER_SETTLED to the share of edges inside clusters, and gives up (`_hopeless`) from
    CLUSTER_PROBE passes on.
    """
    buckets, shares, num_parts, block = spilled.buckets, spilled.shares, spilled.num_parts, spilled.block
    n, cap = shares.shape[0], shares.sum(axis=0) / (num_parts * CLUSTER_SPLIT)
    ids = np.int32 if n < 2**31 else np.int64
    label = np.arange(n, dtype=ids)
    size = shares.copy()  # [N, C] shares of each cluster, by label
    home = np.zeros(n, dtype=ids)  # neighbours in the own cluster
    rows, rival_rows, inside = max(int(buckets.offsets[-1]), 1), 0, 0.0
    for done in range(CLUSTER_PASSES):
        rng = np.random.default_rng([CLUSTER_SEED, done])
        for b in rng.permutation(spilled.num_blocks):  # in id order, labels would drift with the ids
            first, last = b * block, min((b + 1) * block, n)
            node, neighbour = buckets.rows(b, "node"), buckets.rows(b, "neighbour")
            rival_rows += int(np.count_nonzero(rival[node] != rival[neighbour])) if done == 0 else 0
            home[first:last] = _relabel_block(node.astype(np.int64) - first, label[neighbour], label, size, shares,
                                              first, last, cap, rng)
        bar.advance(1.0)
        inside, before = float(home.sum()) / rows, inside
        if done + 1 >= CLUSTER_PROBE and _hopeless(inside, rival_rows / rows, num_parts):
            return None
        if inside - before < CLUSTER_SETTLED:
            break
    return label


def _hopeless(inside: float, rival_cut: float, num_parts: int) -> bool:
    """Whether clusters holding `inside` of the edges are past hoping to beat a placement cutting `rival_cut`.

    Packed into parts, the edges between clusters are cut about as often as at random (1 - 1/P of
    them); partitioned by METIS, about half as often or less (CLUSTER_HOPE). Measured after 3 passes
    (clusters up to a part): R-MAT 1M/10M 6% of the edges inside clusters (hopeless: no
    clusters to pack); road-NY 38%, so 0.54 to cut at 8 parts, against 0.10 for Fennel's placement
    (hopeless); email-Enron 29%, 0.62 against Fennel's 0.55 (not: the clusters went on to cut 0.43).
    """
    return inside < CLUSTER_FLOOR or CLUSTER_HOPE * (1.0 - inside) * (1.0 - 1.0 / num_parts) > rival_cut


def _relabel_block(local: np.ndarray, around: np.ndarray, label: np.ndarray, size: np.ndarray, shares: np.ndarray,
                   first: int, last: int, cap: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Move nodes first..last-1 (in place) to the label most of their neighbours carry, where that cluster has room;
    returns each node's neighbours in its cluster.

    local [rows]: each row's node minus `first`; around [rows]: the label of its neighbour. A seeded
    random half of the block takes part (neighbours moving at once would swap labels); each of them
    takes its best label, equals in random order (its own among them: a move to a label as good as
    its own lets clusters merge), claiming room most hits first.
    """
    n = label.shape[0]
    home = np.zeros(last - first, dtype=np.int64)
    theirs = label[first:last][local] == around
    home += np.bincount(local[theirs], minlength=last - first)
    active = rng.random(last - first) < 0.5
    keys, hits = np.unique(local[active[local]] * n + around[active[local]].astype(np.int64), return_counts=True)
    if keys.size == 0:
        return home
    who, target = keys // n, keys % n
    score = hits + rng.random(hits.size)  # keys come sorted by node: each node's best label is its group's maximum
    starts = np.flatnonzero(np.r_[True, who[1:] != who[:-1]])
    top = np.maximum.reduceat(score, starts)
    best = np.flatnonzero(score == np.repeat(top, np.diff(np.r_[starts, who.size])))
    who, target, gain = who[best], target[best], hits[best] - home[who[best]]
    move = target != label[first + who]
    who, target, gain = who[move], target[move], gain[move]
    order = np.lexsort((-gain, target))  # grouped by target cluster, most hits first
    who, target, gain = who[order], target[order], gain[order]
    w = shares[first + who]
    taken = np.cumsum(w, axis=0)
    group = np.searchsorted(target, target)  # index of the first mover into the same cluster
    fits = np.all(size[target] + taken - (taken[group] - w[group]) <= cap, axis=1)
    home[who[fits]] += gain[fits]
    who, target, w = first + who[fits], target[fits], w[fits]
    np.subtract.at(size, label[who], w)
    np.add.at(size, target, w)
    label[who] = target
    return home
