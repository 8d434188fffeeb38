"""The graph of clusters partitioned, for `--method stream`: two first placements from the clusters of
gpart.engines.stream_clusters.

The graph of clusters (at most about UNIT_CAP nodes, edges weighted by the
edges between them) is partitioned by METIS k-way twice (`clustered`): with
every share its own constraint ("clusters") and with one weight, the mean
of the shares ("clusters-combined", far past the bound in each share but
cutting far less); each is brought within 1 + imbalance by
gpart.engines.stream_refine.tighten (repair and refinement at bounds closing
in on it).

Memory: a dense UNIT_CAP^2 int32 matrix (64 MiB) and at most UNIT_PAIRS of
its entries, 24 bytes each, whatever the edges.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from gpart.engines.isolate import call_isolated
from gpart.engines.metis import part_graph_multiconstraint
from gpart.engines.spilled_graph import SpilledGraph
from gpart.engines.stream_place import pass_key
from gpart.engines.stream_refine import tighten

UNIT_CAP = 4096  # nodes of the graph of clusters that METIS partitions
UNIT_SCALE = 1000  # METIS vertex weights: a part's mean of a share is UNIT_SCALE
UNIT_TRIALS = 8
# METIS seeds per partition of the clusters, the best after the repair kept: the seed moves the end result far more
# than the trials do (facebook, ids permuted, 8 parts, combined weight, seeds 0-3: 0.202, 0.188, 0.203, 0.187)
UNIT_SEEDS = 3
# Pairs of units (both directions) given to METIS at most. Where clusters are dense in edges (Chung-Lu, 100k nodes,
# 20M edges) nearly all 4096^2 pairs have rows between them: 16.7M pairs as int64 CSR and weights were 400 MB
# past the 64 MiB matrix, over --max-memory, and METIS took 2.5 s a try on them. Facebook's and email-Enron's
# graphs of clusters have under 0.4M pairs, so they keep every one.
UNIT_PAIRS = 1 << 20
PAIR_ROWS = 256  # rows of the dense matrix scanned at a time


def clustered(spilled: SpilledGraph, label: np.ndarray, notes: list[str]) -> dict[str, np.ndarray]:
    """Two owners of every node from its cluster: the graph of clusters (`_units`, `_unit_graph`) partitioned by
    METIS (`_partition_units`) with every share its own constraint ("clusters") and with one weight, the mean
    of the shares ("clusters-combined"), then nodes moved until every share is within 1 + imbalance
    (gpart.engines.refine.rebalance), each move priced by the node's neighbours in its part and in the receiver as the
    partition of the clusters left them (`neighbour_counts`, one read of the buckets).

    The combined weight leaves a partition far past the bound in every share (facebook, 8 parts: 1.38
    in nodes, 1.56 in in-edges) but cutting a third as many edges (0.08 against 0.27), from which the
    repair and the refinement end lower on facebook (0.204 against 0.246) and higher on email-Enron
    (0.342 against 0.306): both compete. Each is tried with UNIT_SEEDS METIS seeds, the best after
    `tighten` kept (its cut counted by one read).
    """
    num_parts, imbalance = spilled.num_parts, spilled.imbalance
    unit, sizes = _units(label, spilled.shares, num_parts)
    unit_graph = _unit_graph(spilled, unit, sizes.shape[0]) if sizes.shape[0] > num_parts else None
    owners = {}
    for name, weights in (("clusters", sizes), ("clusters-combined", sizes.mean(axis=1, keepdims=True))):
        tried = [tighten(spilled, _partition_units(unit_graph, weights, num_parts, imbalance, seed, notes)[unit])
                 for seed in range(UNIT_SEEDS)]
        keys = [pass_key(spilled, owner, float(spilled.cut_rows(owner))) for owner in tried]
        owners[name] = tried[min(range(UNIT_SEEDS), key=keys.__getitem__)]
    return owners


def _units(label: np.ndarray, shares: np.ndarray, num_parts: int) -> tuple[np.ndarray, np.ndarray]:
    """The unit of every node and each unit's shares [U, C] in parts (1.0 = a part's mean).

    Units: the clusters where there are at most UNIT_CAP, else each cluster heavier than a grain
    (2/UNIT_CAP of the graph) and bundles of the lighter ones in the order of their profile (in-edges
    per node), so a bundle is as edge-heavy or node-heavy as its clusters. At most about UNIT_CAP units.
    """
    num_shares = shares.shape[1]
    sizes = np.column_stack([np.bincount(label, weights=shares[:, c], minlength=label.shape[0]) for c in range(num_shares)])
    mean = np.maximum(sizes.sum(axis=0) / num_parts, 1e-300)
    weight = (sizes / mean).mean(axis=1)
    clusters = np.flatnonzero(weight > 0)
    grain = 0.0 if clusters.size <= UNIT_CAP else 2.0 * num_parts / UNIT_CAP  # bundles only where there are too many
    big, small = clusters[weight[clusters] > grain], clusters[weight[clusters] <= grain]
    small = small[np.argsort(sizes[small, 1] / mean[1] - sizes[small, 0] / mean[0], kind="stable")]
    bundle = (np.cumsum(weight[small]) // grain).astype(np.int64)
    unit = np.zeros(label.shape[0], dtype=np.int64)
    unit[big] = np.arange(big.size)
    unit[small] = big.size + bundle
    num_units = big.size + (int(bundle[-1]) + 1 if small.size else 0)
    unit_sizes = np.column_stack([np.bincount(unit[clusters], weights=sizes[clusters, c], minlength=num_units)
                                  for c in range(num_shares)]) / mean
    return unit[label], unit_sizes


def _unit_graph(spilled: SpilledGraph, unit: np.ndarray, num_units: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The graph of units as CSR (xadj, adjncy) with edge weights (rows between the two units), read from the
    buckets block by block into a dense num_units^2 int32 matrix (64 MiB at UNIT_CAP units), whatever the edges;
    the UNIT_PAIRS heaviest pairs are kept (`heaviest_pairs`).

    Merging each block's pairs into a sorted list of the pairs so far instead took 39 s of 51 for a
    Chung-Lu graph of 100k nodes and 16M edges (4096 units).
    """
    dense = np.zeros(num_units * num_units, dtype=np.int32)
    for _, _, node, neighbour in spilled.spans(spilled.rows_per_node):
        a, c = unit[node], unit[neighbour]
        apart = a != c
        keys, counts = np.unique(a[apart] * num_units + c[apart], return_counts=True)
        dense[keys] += counts.astype(np.int32)  # keys are distinct: a fancy-index add counts each once
    pairs = heaviest_pairs(dense, UNIT_PAIRS)
    xadj = np.zeros(num_units + 1, dtype=np.int64)
    xadj[1:] = np.cumsum(np.bincount(pairs // num_units, minlength=num_units))
    return xadj, pairs % num_units, dense[pairs].astype(np.int64)  # both directions of every pair are rows: symmetric



def heaviest_pairs(dense: np.ndarray, most: int) -> np.ndarray:
    """Sorted flat indices of the nonzero cells of `dense` with weight >= t, the least t that keeps at most `most`
    of them (all of them when they are fewer; the heaviest alone when those alone are more); a weight and its
    mirror are equal, so the kept pairs are symmetric.
    Scanned in slices: the temporaries are a slice's, whatever the matrix."""
    step = PAIR_ROWS * max(int(math.isqrt(dense.shape[0])), 1)
    slices = range(0, dense.shape[0], step)
    heavy = 1 << 16  # weights from here on are counted together: a threshold above it would keep under `most` anyway
    histogram = np.zeros(heavy + 1, dtype=np.int64)
    for start in slices:
        histogram += np.bincount(np.minimum(dense[start:start + step], heavy), minlength=heavy + 1)
    at_least = np.cumsum(histogram[::-1])[::-1]  # at_least[w]: cells weighing w or more
    fits = (at_least <= most) & (at_least > 0)  # a threshold above every weight would keep nothing
    threshold = 1 if fits[1] else int(np.argmax(fits)) if fits.any() else int(np.flatnonzero(histogram)[-1])
    threshold = max(threshold, 1)  # never a cell without rows (a matrix of zeros keeps nothing)
    return np.concatenate([np.flatnonzero(dense[start:start + step] >= threshold) + start for start in slices])


def _partition_units(unit_graph: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]], sizes: np.ndarray, num_parts: int,
                     imbalance: float, seed: int = 0, notes: Optional[list[str]] = None) -> np.ndarray:
    """Part of every unit: METIS k-way on the graph of units (`_unit_graph`; None where there are no more units
    than parts), edges weighted by the rows between them, every column of `sizes` [U, C] a constraint (in a
    forked child: METIS traps SIGTERM, gpart.engines.isolate); `_pack` where METIS fails, the reason appended to
    `notes` (the manifest's `params.clusters_packed`: a METIS child killed at a memory cap must not pass unseen).

    Measured (8 parts, cut after rebalancing, before restreaming): facebook 0.59 packed heaviest first,
    0.26 partitioned; email-Enron 0.52 and 0.41.
    """
    num_units = sizes.shape[0]
    if unit_graph is None:  # no more units than parts
        return _pack(sizes, num_parts)
    xadj, adjncy, weights = unit_graph
    vertex_weights = np.rint(sizes * UNIT_SCALE).astype(np.int64)
    settings = dict(seed=seed, imbalance=imbalance, objective="cut", trials=UNIT_TRIALS, iterations=None)

    def run(out: np.ndarray) -> int:
        value, out[:] = part_graph_multiconstraint(xadj, adjncy, vertex_weights.ravel(), sizes.shape[1], num_parts,
                                                   False, settings, edge_weights=weights)
        return int(value)

    try:
        _, part = call_isolated(run, num_units)
    except (RuntimeError, ValueError, MemoryError) as exc:  # no multi-constraint METIS, or its child died: pack
        if notes is not None:
            notes.append(f"METIS on the graph of clusters failed ({exc}); clusters packed greedily")
        return _pack(sizes, num_parts)
    return part.astype(np.int32)


def _pack(sizes: np.ndarray, num_parts: int) -> np.ndarray:
    """Part of every unit (`sizes` [U, C] in parts): heaviest first, each to the part it leaves least loaded in its
    most loaded share."""
    part = np.zeros(sizes.shape[0], dtype=np.int32)
    load = np.zeros((num_parts, sizes.shape[1]))
    for u in np.argsort(-sizes.mean(axis=1), kind="stable"):  # at most about UNIT_CAP units
        after = (load + sizes[u]).max(axis=1)
        best = int(np.lexsort((load.sum(axis=1), after))[0])
        part[u], load[best] = best, load[best] + sizes[u]
    return part

