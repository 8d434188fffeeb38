"""A breadth-first order of a symmetric CSR graph: neighbours get nearby ids.

KaMinPar reads and writes per-node arrays at the ids of each node's
neighbours. Where ids carry no locality (R-MAT, SNAP graphs renumbered at
random) nearly every such access misses the cache, and the default's two
KaMinPar children side by side wait on the same memory. Handed the graph
renumbered in breadth-first order (levels from the highest-degree node,
each level in the order its nodes were first reached from the one before,
as Cuthill-McKee without the degree sort), the default's whole job on
R-MAT 5.6M/70M at 4 parts took 221.7 s instead of 256-296 s, with the same
cut; the order itself took 5.4-6.9 s (docs/partitioning.md).

Level-synchronous and vectorised: one step per level, each frontier's
neighbour lists read in chunks of ORDER_CHUNK entries, a large frontier in
two spans at once (gpart.base.spans; 6.8-7.6 s -> 5.5-5.7 s on 5.6M/70M). Nodes the first
search does not reach start further searches while they are many
(RESTARTS at most); the rest follow in id order. Deterministic for a graph.

Only graphs larger than the cache whose ids look random are renumbered
(`worth_renumbering`). Where the input ids already keep neighbours close
(meshes, road networks, SNAP graphs in crawl order) the search costs time
and its order is no better (road-NY: median neighbour gap 0.0000 of the ids
as read, 0.0035 after the search). Where the whole graph fits in the cache
there are no misses to save, and the other order only changes which of
KaMinPar's equally good results comes out (SNAP graphs with permuted ids
and the mesh crack, renumbered: 1.04-1.11x the cut at 4 parts, 0.96-1.02x
at 8-32). The size is a constant, not this machine's cache, so the same
graph gets the same order (and partition) on every machine.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from gpart.base.spans import ARRAY_THREADS, run_spans, weighted_spans

ORDER_CHUNK = 1 << 22  # adjacency entries read at a time (32 MiB of int64 ids, a few such temporaries)
SPLIT_ENTRIES = 1 << 18  # a level whose lists hold fewer entries is searched in one thread (threads cost more)
RESTARTS = 16  # further searches, each from the highest-degree node not yet reached
RESTART_SHARE = 0.01  # start one only while at least this share of the nodes is unreached
RANDOM_GAP = 1 - 1 / math.sqrt(2)  # median |u - v| / n over the edges when ids are uniformly random
LOCAL_GAP = 0.5 * RANDOM_GAP  # below it, the ids keep neighbours closer than random ids do: left as they are
GAP_SAMPLE = 1 << 20  # adjacency entries the gap is measured on, evenly spaced
CACHED_ENTRIES = 1 << 24  # adjacency entries below which a graph is not renumbered: 64 MiB of 32-bit ids, past
# the last-level cache of current servers (32 MiB here), so smaller graphs' accesses mostly hit it anyway


def locality_order(xadj: np.ndarray, adjncy: np.ndarray) -> Optional[np.ndarray]:
    """`bfs_order` where `worth_renumbering`, else None: keep the ids."""
    return bfs_order(xadj, adjncy) if worth_renumbering(xadj, adjncy) else None


def worth_renumbering(xadj: np.ndarray, adjncy: np.ndarray) -> bool:
    """Whether the graph outgrows the cache (CACHED_ENTRIES adjacency entries or more) and its neighbours lie
    as far apart in id as random ids put them (`neighbour_gap` >= LOCAL_GAP)."""
    return adjncy.shape[0] >= CACHED_ENTRIES and neighbour_gap(xadj, adjncy) >= LOCAL_GAP


def neighbour_gap(xadj: np.ndarray, adjncy: np.ndarray, sample: int = GAP_SAMPLE) -> float:
    """Median |u - v| / n over up to `sample` evenly spaced adjacency entries (u, v): about 0.29 for random
    ids, near 0 where neighbours have nearby ids."""
    n, m = int(xadj.shape[0] - 1), int(adjncy.shape[0])
    if m == 0:
        return 0.0
    at = np.linspace(0, m - 1, min(m, sample)).astype(np.int64)
    source = np.searchsorted(xadj, at, side="right") - 1
    return float(np.median(np.abs(source - np.asarray(adjncy[at], dtype=np.int64)))) / n


def bfs_order(xadj: np.ndarray, adjncy: np.ndarray, chunk: int = ORDER_CHUNK, threads: int = ARRAY_THREADS) -> np.ndarray:
    """The nodes in breadth-first order (int64 [n]: position -> node id), a permutation of 0..n-1; the same
    for any `threads` (each level's frontier is searched in that many spans at once)."""
    n = int(xadj.shape[0] - 1)
    degree = np.diff(xadj)
    reached = np.zeros(n, dtype=bool)
    order = np.empty(n, dtype=np.int64)
    filled = 0
    for _ in range(1 + RESTARTS):
        unreached = np.flatnonzero(~reached & (degree > 0))
        if unreached.size == 0 or (filled and unreached.size < RESTART_SHARE * n):
            break
        root = unreached[np.argmax(degree[unreached])]
        filled = _search(xadj, adjncy, np.array([root]), reached, order, filled, chunk, threads)
    rest = np.flatnonzero(~reached)
    order[filled:] = rest
    return order


def _search(xadj: np.ndarray, adjncy: np.ndarray, frontier: np.ndarray, reached: np.ndarray, order: np.ndarray,
            filled: int, chunk: int, threads: int) -> int:
    """One breadth-first search from `frontier`, appending each level to `order` at `filled`; returns the new fill."""
    reached[frontier] = True
    while frontier.size:
        order[filled:filled + frontier.size] = frontier
        filled += frontier.size
        frontier = _next_level(xadj, adjncy, frontier, reached, chunk, threads)
    return filled


def _next_level(xadj: np.ndarray, adjncy: np.ndarray, frontier: np.ndarray, reached: np.ndarray, chunk: int,
                threads: int) -> np.ndarray:
    """The unreached neighbours of `frontier`, each once, in the order they are first met; marked reached.
    `threads` spans of the frontier are searched at once; a node found in two spans was met first in the
    earlier one, so the level is the same for any count."""
    ends = np.cumsum(xadj[frontier + 1] - xadj[frontier])
    spans = weighted_spans(ends, threads if ends.size and ends[-1] >= SPLIT_ENTRIES else 1)
    levels = []
    for new in run_spans(lambda a, b: _first_met(xadj, adjncy, frontier[a:b], reached, chunk), spans):
        new = new[~reached[new]]
        reached[new] = True
        levels.append(new)
    return np.concatenate(levels) if levels else frontier[:0]


def _first_met(xadj: np.ndarray, adjncy: np.ndarray, nodes: np.ndarray, reached: np.ndarray, chunk: int) -> np.ndarray:
    """The neighbours of `nodes` not in `reached`, each once, in the order they are first met. Reads
    `reached` only (other spans read it at the same time); this span's finds are marked in its own array."""
    runs = list(runs_by_entries(xadj, nodes, chunk))
    seen = np.zeros(reached.shape[0] if len(runs) > 1 else 0, dtype=bool)
    found = []
    for run in runs:
        met = neighbour_lists(xadj, adjncy, run)
        met = met[~reached[met]]
        if seen.size:
            met = met[~seen[met]]
        _, first = np.unique(met, return_index=True)
        new = met[np.sort(first)]
        if seen.size:
            seen[new] = True
        found.append(new)
    return np.concatenate(found) if found else nodes[:0]


def runs_by_entries(xadj: np.ndarray, nodes: np.ndarray, chunk: int):
    """`nodes` in consecutive runs whose neighbour lists hold about `chunk` entries each (at least one node)."""
    ends = np.cumsum(xadj[nodes + 1] - xadj[nodes])
    start = 0
    while start < nodes.size:
        base = ends[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, base + chunk, side="right")))
        yield nodes[start:stop]
        start = stop


def neighbour_lists(xadj: np.ndarray, adjncy: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """The neighbour lists of `nodes`, concatenated in the order of `nodes` (int64)."""
    counts = xadj[nodes + 1] - xadj[nodes]
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    shift = np.repeat(xadj[nodes] - (np.cumsum(counts) - counts), counts)
    return np.asarray(adjncy[np.arange(total, dtype=np.int64) + shift], dtype=np.int64)
