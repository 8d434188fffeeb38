"""A ParHiP graph on disk read in node ranges: what the on-disk levels (clusters, contraction, refinement) pass over.

    graph = DiskGraph.open(parhip_file)
    for first, stop in graph.ranges():
        rows, neighbours, weights = graph.lists(first, stop)   # entries of nodes [first, stop)

    moved = pass_in_batches(graph.ranges(), propose, apply)  # the ranges' moves, two ranges at a time

Only the list starts (8 bytes a node) are held; neighbour ids and edge weights are mapped from the file, one range
at a time, so a pass holds at most RANGE_ENTRIES entries and their
temporaries whatever the graph.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, TypeVar

import numpy as np

from gpart.base.spans import ARRAY_THREADS
from gpart.engines.parhip_file import ParhipFile

P = TypeVar("P")

# Adjacency entries per range. Each temporary of a range (a sort key, its order, the gathered labels: 8 bytes an
# entry) stays under 1 MiB, so glibc takes it from its heap: gpart's entry points make every allocation of 1 MiB
# or more a mapping of its own (gpart.base.memory.return_large_frees), and ranges of 1M entries spent a third of
# their time in the kernel zeroing fresh pages (R-MAT 1M/10M: 19 of 56 s).
RANGE_ENTRIES = 1 << 16
# Ranges proposed at once from the same state (then applied in order): two, for this machine's two cores.
BATCH_RANGES = 2


@dataclass
class DiskGraph:
    """The graph of `file`: its list starts `xadj` (int64 [n + 1], in memory), and its neighbour ids and edge
    weights (None: every weight 1) mapped once for all the ranges."""

    file: ParhipFile
    xadj: np.ndarray
    adjncy: np.ndarray
    edge_weights: Optional[np.ndarray]

    @classmethod
    def open(cls, file: ParhipFile) -> "DiskGraph":
        return cls(file, file.list_starts(), file.adjacency(), file.edge_weights())

    @property
    def num_nodes(self) -> int:
        return self.file.num_nodes

    def ranges(self, entries: int = RANGE_ENTRIES, rows: Optional[int] = None) -> list[tuple[int, int]]:
        """Consecutive node ranges [first, stop) covering every node, each of at most `entries` adjacency entries
        and `rows` nodes (None: any number); a node with more entries alone in its range."""
        n = self.num_nodes
        bounds, first = [], 0
        while first < n:
            stop = int(np.searchsorted(self.xadj, self.xadj[first] + entries, side="right")) - 1
            stop = min(max(stop, first + 1), n if rows is None else first + rows, n)
            bounds.append((first, stop))
            first = stop
        return bounds

    def lists(self, first: int, stop: int) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
        """The entries of nodes [first, stop): each one's node relative to `first` (int64), its neighbour (int64)
        and its edge weight (int64; None where the file has none: every weight 1)."""
        start, end = int(self.xadj[first]), int(self.xadj[stop])
        degree = np.diff(self.xadj[first:stop + 1])
        rows = np.repeat(np.arange(stop - first, dtype=np.int64), degree)
        neighbours = np.asarray(self.adjncy[start:end], dtype=np.int64)
        weights = None if self.edge_weights is None else np.asarray(self.edge_weights[start:end], dtype=np.int64)
        return rows, neighbours, weights


def pass_in_batches(ranges: Sequence[tuple[int, int]], propose: Callable[[int, tuple[int, int]], P],
                    apply: Callable[[P], int], threads: int = ARRAY_THREADS) -> int:
    """One pass of moves over `ranges`: `propose(index, range)` for BATCH_RANGES consecutive ranges, all reading the
    state as the batch found it (at once on `threads` threads: numpy's sorts and gathers run without the GIL);
    then `apply(proposal)` for each, in range order, in this thread, the only one that changes the state. So the
    result depends neither on timing nor on `threads`. Returns the sum of what `apply` returned (the nodes that
    moved)."""
    moved = 0
    with ThreadPoolExecutor(max(1, threads), thread_name_prefix="gpart-range") as pool:
        for first in range(0, len(ranges), BATCH_RANGES):
            batch = range(first, min(first + BATCH_RANGES, len(ranges)))
            for proposal in list(pool.map(lambda i: propose(i, ranges[i]), batch)):
                moved += apply(proposal)
    return moved


def run_starts(values: np.ndarray) -> np.ndarray:
    """Where each run of equal values starts in `values` (grouped: equal values adjacent); empty for none."""
    if values.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))


def fits_in_order(receiver: np.ndarray, weight: np.ndarray, load: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Which moves fit: moves grouped by `receiver` (in the order they claim room), each with `weight` ([k], or
    [k, c] for c limits); a move fits when its receiver's `load` plus the weight of its moves up to this one
    stays within `limit` (every column). The earlier moves count whether they fit or not: conservative."""
    arriving = np.cumsum(weight, axis=0)
    starts = run_starts(receiver)
    before = np.repeat(arriving[starts] - weight[starts], np.diff(np.append(starts, receiver.shape[0])), axis=0)
    within = load[receiver] + arriving - before <= limit
    return within if within.ndim == 1 else np.all(within, axis=1)
