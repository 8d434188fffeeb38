"""Streaming partitioner (`--method stream`): clusters and Fennel over blocks of nodes, memory O(nodes + buffer).

Each edge u->v (u != v) is spilled to scratch buckets (gpart.engines.spill) twice,
as (u, v) in u's block and as (v, u) in v's block (blocks of BLOCK_NODES
consecutive ids), so a block's bucket holds every neighbour of its nodes.
Everything below reads the buckets block by block, vectorised per block.

Three first placements compete; each is restreamed, then refined, and the
best pass of any is kept:

- Fennel (Tsourakakis et al. 2014) in id order, a block at a time:

      gain[i, p] = (neighbours of i already in p) - alpha * gamma * load[p]^(gamma-1)

  (gamma = 1.5, alpha = sqrt(P) * E / N^1.5, load in node-equivalents
  averaged over the balanced shares), counted with one bincount of (node,
  owner of neighbour) pairs; after a block no part may hold more than
  (1 + imbalance) times the running average of any share. A block's nodes
  take their best part; where a part's room is exceeded it keeps the
  highest-gain nodes and the rest retry their next best part (at most P
  rounds); nodes no room fits go to the least-loaded parts. This is what
  graphs whose ids carry locality (road networks) and R-MAT graphs need.
- Clusters (`_cluster`): label propagation, each node taking the label most
  of its neighbours carry, no cluster above 1/CLUSTER_SPLIT of a part's mean
  in any share; the graph of clusters (at most about UNIT_CAP nodes, edges
  weighted by the edges between them) is partitioned by METIS k-way twice
  (`_clustered`): with every share its own constraint ("clusters") and with
  one weight, the mean of the shares ("clusters-combined", far past the
  bound in each share but cutting far less); each is brought within
  1 + imbalance by gpart.engines.stream_refine.tighten (repair and refinement at
  bounds closing in on it). This is what social graphs need, whose ids carry
  no locality: Fennel and restreaming alone cut 0.43-0.51 of facebook's and
  email-Enron's edges at 8 parts, the clusters partitioned by METIS
  0.24-0.33 before the refinement. Clustering gives up after 3 passes where
  its clusters cannot beat Fennel's placement (`_hopeless`: R-MAT, road-NY).

Then restreaming passes (Nishimura & Ugander 2013): loads start from the
previous pass's, a block leaves its parts before it is re-placed, every
neighbour counts with its latest owner, staying claims room before moving
and a mover's claim is what it gains over staying; a seeded random half of
each block stays put. The best pass is kept (within the balance, then the
lowest cut; the cut of a pass is counted while the next one reads the
buckets); restreaming stops after STALL_PASSES passes that do not beat the
best. The best pass of each run (of those within REFINE_MARGIN of the best
run's cut) is refined by gpart.engines.stream_refine.refine (balanced label
propagation and pairwise swaps, a read of the buckets a pass, the best
pass kept), so more restreaming or refinement passes never give a worse
result than fewer (`params.pass_cuts`, `params.refine_cuts`).

Memory: N-sized labels, cluster sizes, owners and shares; the [N, P] int32
neighbour counts of the refinement (4 P bytes a node, 8 P at the peak); one block's bucket
and gain matrix (BLOCK_NODES x P); the graph of clusters (a dense
UNIT_CAP^2 int32 matrix, 64 MiB, and at most UNIT_PAIRS of its entries, 24
bytes each, whatever the edges); the temporaries of a spill step (SPILL_EDGES
edges, about 34 MiB); the edges live in the scratch files (16 bytes per edge
with 32-bit ids, 32 with 64-bit). Time: two passes over the edges to spill them, then
one placing pass, up to CLUSTER_PASSES clustering passes, up to 3 x RESTREAM_PASSES
reads for the restreams and a read per refinement pass (PASSES in all per run).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

from gpart.base.graph import Graph
from gpart.base.progress import Progress, or_null
from gpart.bytes.reader import drop_pages
from gpart.engines.balance import BALANCE_BOUND, TRAIN_MASK, in_degrees, train_mask
from gpart.engines.isolate import call_isolated
from gpart.engines.metis import balance_column, part_graph_multiconstraint
from gpart.engines.spill import bucket_rows
from gpart.engines.stream_refine import loads, refine, tighten, worst_balance
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.partition.book import ArrayBook

BLOCK_NODES = 8192
MIN_BLOCK_NODES = 64
# Restreaming passes of a run at most (the first places, the others restream; it stops earlier where it stalls), then
# refinement passes up to PASSES in all. Fennel's placement restreamed, cut at 1 / 2 / 4 / 8 / 16 passes, 4 parts:
# road-NY 0.079 / 0.067 / 0.054 / 0.045 / 0.043, power-law 1M/10M 0.69 / 0.66 / 0.64 / 0.62 / 0.59.
RESTREAM_PASSES = 8
PASSES = 20
GAMMA = 1.5
# Input edges per spill step: about 130 bytes of temporaries an edge (both directions, their blocks, the sort):
# 34 MiB. At 1M edges a step (gpart.engines.spill.ROW_CHUNK) they were 130 MiB, past a 144 MiB cap with the interpreter.
SPILL_EDGES = 1 << 18
GAIN_CELLS = 1 << 22  # block nodes x parts: bounds the gain matrix to 32 MiB
CLUSTER_PASSES = 16
CLUSTER_PROBE, CLUSTER_FLOOR, CLUSTER_SETTLED, CLUSTER_HOPE = 3, 0.15, 0.001, 0.5
CLUSTER_SEED = 7
# A cluster holds at most 1/CLUSTER_SPLIT of a part in any share: small enough for the partition of the clusters
# to balance every share, large enough to keep the edges inside. Facebook, ids permuted, 8 parts, imbalance 0.10,
# cut in the end (CLUSTER_SPLIT 2 / 3 / 4 / 8): 0.198 / 0.181 / 0.190 / under CLUSTER_FLOOR (too few edges inside).
# Clustering until a pass adds under 0.001 (CLUSTER_SETTLED) rather than 0.005: 0.190 against 0.216 at 4.
CLUSTER_SPLIT = 3
UNIT_CAP = 4096  # nodes of the graph of clusters that METIS partitions
UNIT_SCALE = 1000  # METIS vertex weights: a part's mean of a share is UNIT_SCALE
UNIT_TRIALS = 8
# METIS seeds per partition of the clusters, the best after the repair kept: the seed moves the end result far more
# than the trials do (facebook, ids permuted, 8 parts, combined weight, seeds 0-3: 0.202, 0.188, 0.203, 0.187)
UNIT_SEEDS = 3
STALL_PASSES = 2
BALANCE_SLACK = 0.01
# The default tolerance keeps every share within the default method's bound (1.10 x its mean) with BALANCE_SLACK,
# not METIS's 3%: the stream stands in for the default where the adjacency does not fit, and Fennel's own load
# bound is 1.1 (Tsourakakis et al. 2014). Facebook, 8 parts, cut at 0.03 / 0.09 / 0.10: 0.197 / 0.169 / 0.162 (ids
# permuted 0.187 / 0.169 / 0.163); email-Enron 0.300 / 0.299 / 0.301; the default cuts 0.153 there at its bound.
DEFAULT_IMBALANCE = round(BALANCE_BOUND - 1 - BALANCE_SLACK, 6)
# Runs whose first pass cuts over 1 + REFINE_MARGIN times the least are not refined: Fennel's placement on the social
# graphs cuts 1.9-3.3 times the clusters' (8 parts), and restreaming and refinement lowered a run's cut by at most a
# third (R-MAT 1M/10M 0.79 -> 0.73; facebook's clusters 0.213 -> 0.200, email-Enron's 0.309 -> 0.307).
REFINE_MARGIN = 0.5


def stream_book(graph: Graph, num_parts: int, *, imbalance: float = DEFAULT_IMBALANCE, balance: Sequence[str] = (),
                balance_edges: bool = True, passes: int = PASSES, scratch_dir: Optional[str] = None,
                progress: Optional[Progress] = None) -> tuple[ArrayBook, dict[str, Any]]:
    """Place every node three times (Fennel, clusters twice), restream and refine each; the best pass of any, and
    the parameters as run.

    Balanced weights: nodes, in-degree (always: edges are stored with their
    destination) and the `balance` masks, or the training mask when none is named.
    """
    names = list(balance) or ([TRAIN_MASK] if train_mask(graph) is not None else [])
    masks = [balance_column(graph, name) for name in names]
    progress = or_null(progress)
    n = graph.num_nodes
    shares = np.column_stack([np.ones(n), in_degrees(graph)] + [np.asarray(m, dtype=np.float64) for m in masks])
    # small blocks on small graphs, so most neighbours are placed before a node is
    block = max(MIN_BLOCK_NODES, min(BLOCK_NODES, n // 256, GAIN_CELLS // max(num_parts, 1)))
    id_dtype = np.dtype(np.int32) if n < 2**31 else np.dtype(np.int64)
    with ScratchDir(scratch_dir) as scratch:
        with progress.stage("stream: spill edges"):
            buckets = bucket_rows(scratch, graph.num_edges, -(-n // block), _both_directions(graph, block, id_dtype),
                                  {"node": id_dtype, "neighbour": id_dtype}, chunk=SPILL_EDGES)
        notes: list[str] = []
        starts = _starts(buckets, shares, num_parts, block, float(imbalance), graph.num_edges, progress, notes)
        restreams = min(passes, RESTREAM_PASSES)
        with progress.stage("stream: restream", total=float(restreams * len(starts)), unit="passes") as bar:
            runs = {name: _restream(buckets, start, shares, num_parts, block, float(imbalance), graph.num_edges, restreams, bar)
                    for name, start in starts.items()}
        del starts
        refined = _refine_runs(buckets, runs, shares, num_parts, block, float(imbalance), graph.num_edges, passes, progress)
    kept = min(refined, key=lambda name: refined[name][2])
    params = {
        "imbalance": float(imbalance),
        "balance": names,
        "balance_edges": True,
        "vertex_weights": "combined",
        "block_nodes": block,
        "gamma": GAMMA,
        "order": "node id",
        "passes": int(passes),
        "restream_passes": RESTREAM_PASSES,
        "start": kept,
        "pass_cuts": {name: [round(cut, 6) for cut in run[1]] for name, run in runs.items()},
        "refine_cuts": {name: [round(cut, 6) for cut in run[1]] for name, run in refined.items()},
    }
    if notes:
        params["clusters_packed"] = sorted(set(notes))
    return ArrayBook(refined[kept][0], num_parts), params


def _refine_runs(buckets, runs: dict[str, tuple[np.ndarray, list[float], tuple[float, float]]], shares: np.ndarray,
                 num_parts: int, block: int, imbalance: float, num_edges: int, passes: int,
                 progress: Progress) -> dict[str, tuple[np.ndarray, list[float], tuple[float, float]]]:
    """Each run's best pass refined (gpart.engines.stream_refine.refine) with the passes the run left of `passes`, its cut
    per refinement pass and its `_pass_key`; a run whose first pass cut over 1 + REFINE_MARGIN times the
    least any first pass cut stays as it is (its one cut recorded).

    A run restreams until it stalls or RESTREAM_PASSES, whatever `passes`, unless `passes` ends it
    first: one more pass in all is one more restreaming or refinement pass of the same sequence, so
    more passes never return a worse result. Which runs are refined depends on the first passes alone.
    """
    least = min(run[1][0] for run in runs.values())
    left = {name: passes - len(run[1]) if run[1][0] <= least * (1.0 + REFINE_MARGIN) else 0 for name, run in runs.items()}
    refined = {}
    with progress.stage("stream: refine", total=float(sum(r + 1 for r in left.values() if r > 0)), unit="passes") as bar:
        for name, (owner, _, key) in runs.items():
            refined[name] = (refine(buckets, owner, shares, num_parts, block, imbalance, num_edges,
                                    lambda owner, cut: _pass_key(owner, cut, shares, num_parts, imbalance), left[name], bar)
                             if left[name] > 0 else (owner, [key[1]], key))
    return refined


def _starts(buckets, shares: np.ndarray, num_parts: int, block: int, imbalance: float, num_edges: int,
            progress: Progress, notes: list[str]) -> dict[str, np.ndarray]:
    """The first placements: Fennel's, and where the clusters are worth it (`_cluster`) the graph of clusters
    partitioned with every share its own constraint and with one combined weight (`_clustered`)."""
    n = shares.shape[0]
    with progress.stage("stream: place"):
        starts = {"fennel": _place_blocks(buckets, np.full(n, -1, dtype=np.int32), shares, num_parts, block,
                                          imbalance, num_edges, 0)[0]}
    with progress.stage("stream: cluster", total=float(CLUSTER_PASSES), unit="passes") as bar:
        clusters = _cluster(buckets, shares, num_parts, block, bar, starts["fennel"])
    if clusters is not None:
        with progress.stage("stream: partition clusters"):
            starts.update(_clustered(buckets, clusters, shares, num_parts, imbalance, block, notes))
    return starts


def _both_directions(graph: Graph, block: int, id_dtype: np.dtype):
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


def _cluster(buckets, shares: np.ndarray, num_parts: int, block: int, bar,
             rival: np.ndarray) -> Optional[np.ndarray]:
    """Cluster label of every node, by label propagation over the blocks,
    no cluster above 1/CLUSTER_SPLIT of a part's mean in any share; None when partitioning the clusters cannot
    beat `rival` (owners).

    Blocks are visited in a seeded random order per pass and a block's new labels count at once
    for the blocks after it. Up to CLUSTER_PASSES passes; it stops early when a pass adds less
    than CLUSTER_SETTLED to the share of edges inside clusters, and gives up (`_hopeless`) from
    CLUSTER_PROBE passes on.
    """
    n, cap = shares.shape[0], shares.sum(axis=0) / (num_parts * CLUSTER_SPLIT)
    ids = np.int32 if n < 2**31 else np.int64
    label = np.arange(n, dtype=ids)
    size = shares.copy()  # [N, C] shares of each cluster, by label
    home = np.zeros(n, dtype=ids)  # neighbours in the own cluster
    rows, rival_rows, inside = max(int(buckets.offsets[-1]), 1), 0, 0.0
    for done in range(CLUSTER_PASSES):
        rng = np.random.default_rng([CLUSTER_SEED, done])
        for b in rng.permutation(buckets.offsets.shape[0] - 1):  # in id order, labels would drift with the ids
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


def _clustered(buckets, label: np.ndarray, shares: np.ndarray, num_parts: int, imbalance: float,
               block: int, notes: list[str]) -> dict[str, np.ndarray]:
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
    unit, sizes = _units(label, shares, num_parts)
    unit_graph = _unit_graph(buckets, unit, sizes.shape[0]) if sizes.shape[0] > num_parts else None
    owners = {}
    for name, weights in (("clusters", sizes), ("clusters-combined", sizes.mean(axis=1, keepdims=True))):
        tried = [tighten(buckets, _partition_units(unit_graph, weights, num_parts, imbalance, seed, notes)[unit], shares,
                         num_parts, block, imbalance) for seed in range(UNIT_SEEDS)]
        keys = [_pass_key(owner, float(_cut_rows(buckets, owner)), shares, num_parts, imbalance) for owner in tried]
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


def _unit_graph(buckets, unit: np.ndarray, num_units: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The graph of units as CSR (xadj, adjncy) with edge weights (rows between the two units), read from the
    buckets block by block into a dense num_units^2 int32 matrix (64 MiB at UNIT_CAP units), whatever the edges;
    the UNIT_PAIRS heaviest pairs are kept (`_heaviest_pairs`).

    Merging each block's pairs into a sorted list of the pairs so far instead took 39 s of 51 for a
    Chung-Lu graph of 100k nodes and 16M edges (4096 units).
    """
    dense = np.zeros(num_units * num_units, dtype=np.int32)
    for b in range(buckets.offsets.shape[0] - 1):
        a, c = unit[buckets.rows(b, "node")], unit[buckets.rows(b, "neighbour")]
        apart = a != c
        keys, counts = np.unique(a[apart] * num_units + c[apart], return_counts=True)
        dense[keys] += counts.astype(np.int32)  # keys are distinct: a fancy-index add counts each once
    pairs = _heaviest_pairs(dense, UNIT_PAIRS)
    xadj = np.zeros(num_units + 1, dtype=np.int64)
    xadj[1:] = np.cumsum(np.bincount(pairs // num_units, minlength=num_units))
    return xadj, pairs % num_units, dense[pairs].astype(np.int64)  # both directions of every pair are rows: symmetric


# Pairs of units (both directions) given to METIS at most. Where clusters are dense in edges (Chung-Lu, 100k nodes,
# 20M edges) nearly all 4096^2 pairs have rows between them: 16.7M pairs as int64 CSR and weights were 400 MB
# past the 64 MiB matrix, over --max-memory, and METIS took 2.5 s a try on them. Facebook's and email-Enron's
# graphs of clusters have under 0.4M pairs, so they keep every one.
UNIT_PAIRS = 1 << 20
PAIR_ROWS = 256  # rows of the dense matrix scanned at a time


def _heaviest_pairs(dense: np.ndarray, most: int) -> np.ndarray:
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


def _restream(buckets, owner: np.ndarray, shares: np.ndarray, num_parts: int, block: int, imbalance: float,
              num_edges: int, passes: int, bar) -> tuple[np.ndarray, list[float], tuple[float, float]]:
    """The best of `owner` (the first pass) and up to `passes` - 1 restreaming passes from it, the cut of every
    pass and the best one's `_pass_key`.

    Best: the lowest `_pass_key`. A pass's cut is counted while the next pass reads the same rows
    (the last pass's by one more read), so more passes never return a worse result than fewer.
    Restreaming stops after STALL_PASSES passes in a row that do not beat the best (from a
    clustered start, restreaming mostly undoes the clusters).
    """
    cuts: list[float] = []
    best, best_key, stalled = owner, (np.inf, np.inf), 0
    for done in range(1, passes + 1):
        if done < passes and stalled < STALL_PASSES:
            placed, rows = _place_blocks(buckets, owner, shares, num_parts, block, imbalance, num_edges, done)
        else:
            placed, rows = None, _cut_rows(buckets, owner)
        cuts.append(rows / max(2 * num_edges, 1))  # every edge is two rows
        key = _pass_key(owner, cuts[-1], shares, num_parts, imbalance)
        best, best_key, stalled = (owner, key, 0) if key < best_key else (best, best_key, stalled + 1)
        bar.advance(1.0)
        if placed is None:
            break
        owner = placed
    return best, cuts, best_key


def _pass_key(owner: np.ndarray, cut: float, shares: np.ndarray, num_parts: int, imbalance: float) -> tuple[float, float]:
    """How a pass ranks (lower is better): how far its worst share is past 1 + imbalance (give or take
    BALANCE_SLACK: a clustered start a hair past it, facebook at 4 parts 1.031, cuts a tenth of what a
    placement within it cuts), then its cut."""
    return max(worst_balance(owner, shares, num_parts) - (1.0 + imbalance + BALANCE_SLACK), 0.0), cut


def _cut_rows(buckets, owner: np.ndarray) -> int:
    """Rows of the buckets whose node and neighbour `owner` puts apart (twice the cut edges)."""
    return sum(int(np.count_nonzero(owner[buckets.rows(b, "node")] != owner[buckets.rows(b, "neighbour")]))
               for b in range(buckets.offsets.shape[0] - 1))


def _place_blocks(buckets, previous: np.ndarray, shares: np.ndarray, num_parts: int, block: int, imbalance: float,
                  num_edges: int, seed: int) -> tuple[np.ndarray, int]:
    """One pass over the blocks from `previous`, and the cut rows of `previous` (counted on the way).

    `shares` [N, C] are the balanced quantities per node. Neighbours count with their owner in
    this pass if placed already, else with their owner in `previous`. Where `previous` places
    nothing (all -1) this is Fennel's placement: loads start empty, no part may pass (1 + imbalance)
    times the running average of any share. Else a restream: loads start full, each block leaves
    its parts before it is re-placed, no part may take more than (1 + imbalance) times the mean.
    """
    n = previous.shape[0]
    owner = previous.copy()
    fresh = n > 0 and bool(previous.max() < 0)
    rng = np.random.default_rng(seed)
    load = np.zeros((num_parts, shares.shape[1])) if fresh else loads(previous, shares, num_parts)
    totals = np.maximum(shares.sum(axis=0), 1e-300)
    limit = (1.0 + imbalance) * totals / num_parts
    alpha = math.sqrt(num_parts) * max(num_edges, 1) / max(n, 1) ** GAMMA
    cut_rows = 0
    for b in range(buckets.offsets.shape[0] - 1):
        first, last = b * block, min((b + 1) * block, n)
        node, neighbour = buckets.rows(b, "node"), buckets.rows(b, "neighbour")
        cut_rows += int(np.count_nonzero(previous[node] != previous[neighbour]))
        w = shares[first:last]
        where = owner[neighbour]
        known = where >= 0
        pairs = (node[known].astype(np.int64) - first) * num_parts + where[known]
        gain = np.bincount(pairs, minlength=(last - first) * num_parts).reshape(last - first, num_parts).astype(np.float64)
        if fresh:
            room = (1.0 + imbalance) * (load.sum(axis=0) + w.sum(axis=0)) / num_parts - load
        else:
            load -= loads(owner[first:last], w, num_parts)
            room = limit - load
        # load in node-equivalents: the mean over shares of each part's fraction, times N
        gain -= alpha * GAMMA * np.sqrt((load / totals).mean(axis=1) * n)
        chosen = _fill_parts(gain, w, room) if fresh else _restream_block(gain, w, room, owner[first:last].astype(np.int64), rng)
        owner[first:last] = chosen
        load += loads(chosen, w, num_parts)
    return owner, cut_rows


def _restream_block(gain: np.ndarray, w: np.ndarray, room: np.ndarray, current: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A placed block's new parts: a node's claim on room is what moving gains over staying, and staying
    comes first. A random half of the block stays put: neighbours in one block moving at once (consecutive
    ids are often neighbours) would swap places pass after pass; half of them moving converge."""
    rows = np.arange(gain.shape[0])
    stay = gain[rows, current].copy()
    frozen = rng.random(gain.shape[0]) < 0.5
    gain[frozen] = -np.inf
    gain[rows[frozen], current[frozen]] = stay[frozen]
    return _fill_parts(gain, w, room, baseline=stay, current=current)


def _fill_parts(gain: np.ndarray, w: np.ndarray, room: np.ndarray, baseline: Optional[np.ndarray] = None,
                current: Optional[np.ndarray] = None) -> np.ndarray:
    """Each row's best part with room in every share; rows nothing fits go to the parts with the most room.

    gain [rows, P]; w [rows, C] the shares of each row; room [P, C] what each part may still take.
    Rows claim room best score first: their gain, or (restreaming) with `baseline` [rows] the gain of
    staying and `current` [rows] their part, what a move gains over staying, staying ahead of every move.
    """
    rows, parts = gain.shape
    chosen = np.full(rows, -1, dtype=np.int32)
    room = room.copy()
    open_rows = np.arange(rows)
    for _ in range(parts):
        if open_rows.size == 0:
            break
        g = gain[open_rows]
        best = np.argmax(g, axis=1)
        score = g[np.arange(open_rows.size), best]
        if baseline is not None:
            score = np.where(best == current[open_rows], np.inf, score - baseline[open_rows])
        order = np.lexsort((-score, best))  # grouped by part, best gain first
        by_part, w_sorted = best[order], w[open_rows[order]]
        cum = np.cumsum(w_sorted, axis=0)
        group_start = np.searchsorted(by_part, np.arange(parts))
        before = np.concatenate([np.zeros((1, w.shape[1])), cum])[group_start]
        fits = np.all((cum - before[by_part]) <= room[by_part], axis=1)
        taken = order[fits]
        chosen[open_rows[taken]] = best[taken]
        for c in range(w.shape[1]):
            room[:, c] -= np.bincount(best[taken], weights=w_sorted[fits, c], minlength=parts)
        rejected = order[~fits]
        gain[open_rows[rejected], best[rejected]] = -np.inf
        open_rows = open_rows[rejected]
    if open_rows.size:
        spare = (room / np.maximum(room.sum(axis=0), 1e-300)).sum(axis=1)
        most_room = np.argsort(-spare, kind="stable")
        chosen[open_rows] = most_room[np.arange(open_rows.size) % parts]
    return chosen
