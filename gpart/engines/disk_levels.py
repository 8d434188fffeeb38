"""A partition of a graph on disk too large for KaMinPar's memory: the first levels coarsened on disk.

    levels = coarsen(file, weights, tolerances, num_parts, seed, fits, scratch, budget)   # once for every weighting
    owner = partition_levels(levels, column, num_parts, tolerance, seed, partition)        # one weighting's owners

KaMinPar's peak on its compressed graph is its first coarse graph, built in
memory uncompressed with edge weights: 39 bytes per input edge on R-MAT
2.7M/40M, whose clusters keep most edges between them (docs/partitioning.md,
"Where the memory goes"). So while `fits(nodes, entries)` says KaMinPar would
not hold the graph, gpart coarsens it one level on disk itself, as KaMinPar
would (gpart.engines.disk_clusters: size-limited label propagation;
gpart.engines.coarse_file: the graph of clusters as an edge-weighted ParHiP
file), and hands KaMinPar (`partition`) the coarsest file. The levels are
built once for all the weightings a job runs (the default's two): clusters
stay within every weighting's limit, and each run writes its own weights. The owners come
back down level by level, each refined on its graph
(gpart.engines.disk_refine: balanced label propagation, as KaMinPar refines
its own levels). A cluster weighs at most `tolerance` of a part's mean, so
the coarse partition can balance; parts stay within KaMinPar's bound,
(1 + tolerance) times the mean rounded up.

Memory: per level, the clusters (4 bytes a node) and vertex weights (8 bytes
a node and weighting) until the way back; while a level is built or refined,
its list starts (8 bytes a node) and one range or bucket (`budget`). Disk: each coarse file,
and 16 bytes per entry of scratch while it is built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence, Union

import numpy as np

from gpart.engines.coarse_file import coarse_file
from gpart.engines.disk_clusters import disk_clusters
from gpart.engines.disk_graph import DiskGraph
from gpart.engines.disk_refine import disk_refine
from gpart.engines.parhip_file import ParhipFile
from gpart.formats.files.scratch import ScratchDir

MAX_LEVELS = 8
# A clustering keeping more than this share of the nodes cannot shrink the graph further: coarsening stops there
LEAST_SHRINK = 0.9

Fits = Callable[[int, int], bool]  # fits(nodes, adjacency entries): KaMinPar holds such a graph

# KaMinPar's process on a compressed ParHiP file (terapart, one thread), its peak RSS: R-MAT 1M nodes / 20M
# entries 401 MiB, 2.7M / 80M 1.43 GB; the edge-weighted graph of R-MAT 1M's clusters (312K / 15.7M) 208 MiB,
# of the next level (160K / 7.9M) 127 MiB. The estimate is above each of them.
KAMINPAR_BASE_BYTES, KAMINPAR_NODE_BYTES, KAMINPAR_ENTRY_BYTES = 64 << 20, 100, 20
# The other presets (fast, default) hold more than terapart: 1.6x on the whole R-MAT 8M/120M job (fast 8.2 GB,
# terapart 5.1 GB), counted here per node and per entry.
OWN_PRESET_SHARE = 1.6


def kaminpar_fits(nodes: int, entries: int, memory: int, lean: bool = True) -> bool:
    """Whether KaMinPar's process holds a compressed graph of `nodes` and `entries` adjacency entries in `memory`,
    with a memory-lean preset (terapart) or (`lean` False) another."""
    graph = KAMINPAR_NODE_BYTES * nodes + KAMINPAR_ENTRY_BYTES * entries
    return KAMINPAR_BASE_BYTES + (graph if lean else int(graph * OWN_PRESET_SHARE)) <= memory


@dataclass
class Level:
    """One graph of the hierarchy (the finest: the input file): its file, its nodes' vertex weights ([n, c], one
    column per weighting) and their clusters (the next level's nodes)."""

    file: ParhipFile
    weights: np.ndarray
    cluster: np.ndarray


@dataclass
class DiskLevels:
    """The levels coarsened on disk, finest first, and the coarsest graph (its vertex weights [n, c] beside it)."""

    levels: list[Level]
    coarsest: ParhipFile
    coarsest_weights: np.ndarray

    def sizes(self) -> list[dict[str, int]]:
        """Nodes and adjacency entries of each coarse level, finest first (what the manifest records)."""
        coarse = [level.file for level in self.levels[1:]] + [self.coarsest]
        return [{"nodes": f.num_nodes, "entries": f.num_entries} for f in coarse]


def coarsen(file: ParhipFile, weights: np.ndarray, tolerances: Sequence[float], num_parts: int, seed: int, fits: Fits,
            scratch: ScratchDir, budget: int) -> DiskLevels:
    """Levels of `file` (its vertex weights `weights` [n, c], c weightings with their `tolerances`) coarsened on
    disk in `scratch` until `fits(nodes, entries)`, a clustering no longer shrinks the graph, or MAX_LEVELS;
    bucket memory about `budget`."""
    mean = np.ceil(weights.sum(axis=0) / num_parts)
    heaviest = weights.max(axis=0) if weights.shape[0] else np.zeros(weights.shape[1], dtype=np.int64)
    max_cluster = np.maximum(np.maximum((np.asarray(tolerances) * mean).astype(np.int64), heaviest), 1)
    levels: list[Level] = []
    current, current_weights = file, weights
    while not fits(current.num_nodes, current.num_entries) and len(levels) < MAX_LEVELS:
        graph = DiskGraph.open(current)
        cluster, count = disk_clusters(graph, current_weights, max_cluster, seed + len(levels))
        if count > LEAST_SHRINK * current.num_nodes:
            break
        coarse, coarse_weights = coarse_file(graph, cluster, count, current_weights, scratch, budget)
        levels.append(Level(current, current_weights, cluster))
        current, current_weights = coarse, coarse_weights
    return DiskLevels(levels, current, current_weights)


def partition_levels(levels: DiskLevels, column: Union[int, Sequence[int]], num_parts: int, tolerance: float,
                     seed: int, partition: Callable[[ParhipFile], np.ndarray]) -> np.ndarray:
    """The owner (int32) of every node of the finest level for weighting `column`: `partition` on the coarsest
    graph (its vertex weights written first), then projected and refined level by level, every part within
    (1 + tolerance) times its mean rounded up. `column` a list of weightings (multi-constraint METIS: its
    `partition` reads them from `levels.coarsest_weights`): every one held so while refining, the first in the
    file."""
    first = column if isinstance(column, int) else column[0]
    levels.coarsest.write_weights(levels.coarsest_weights[:, first])
    owner = partition(levels.coarsest)
    max_part = _max_part(_held(levels.coarsest_weights, column), num_parts, tolerance)
    for level in reversed(levels.levels):
        owner = disk_refine(DiskGraph.open(level.file), owner[level.cluster], _held(level.weights, column), num_parts,
                            max_part, seed)
    return owner


def _held(weights: np.ndarray, column: Union[int, Sequence[int]]) -> np.ndarray:
    """The weightings `column` of `weights` [n, c]: [n] for one, [n, k] for a list (`weights` itself for all)."""
    if isinstance(column, int):
        return weights[:, column]
    if list(column) == list(range(weights.shape[1])):
        return weights
    return weights[:, list(column)]


def _max_part(weights: np.ndarray, num_parts: int, tolerance: float) -> Union[int, np.ndarray]:
    """(1 + tolerance) times the mean part weight rounded up: an int for [n] weights, [k] for [n, k]."""
    if weights.ndim == 1:
        return int((1 + tolerance) * math.ceil(int(weights.sum()) / num_parts))
    return np.array([_max_part(weights[:, j], num_parts, tolerance) for j in range(weights.shape[1])], dtype=np.int64)
