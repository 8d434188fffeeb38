"""A ParHiP binary graph file on disk (KaMinPar's input): its layout, its weights, its renumbered copy.

Layout, as KaMinPar's reader parses it: three uint64 header words (version
flags, n, m = adjacency entries), n+1 uint64 byte offsets of each neighbour
list from the start of the file, m neighbour ids, then n vertex weights.
Version flag bits, set meaning "absent" or "32-bit": 1 edge weights, 2
vertex weights, 4 32-bit edge offsets, 8 32-bit vertex ids, 16 32-bit
vertex weights, 32 32-bit edge weights. gpart writes 64-bit offsets, 32-bit
vertex ids (4 bytes per adjacency entry instead of 8) and 64-bit vertex
weights.

`ParhipFile` is such a file built on disk whole (gpart.engines.symmetric_file)
with room for the weights: each KaMinPar run of the compressed path rewrites
the weights in place (`write_weights`) and KaMinPar reads the file into its
compressed graph, so the adjacency is never an array in this process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from gpart.base.spans import ARRAY_THREADS, run_spans, weighted_spans
from gpart.bytes.sink import pwrite_all
from gpart.bytes.written_pages import WrittenPages, drop_written
from gpart.engines.locality_order import neighbour_lists, runs_by_entries

HEADER_BYTES = 24
FLAG_NO_EDGE_WEIGHTS, FLAG_NO_VERTEX_WEIGHTS, FLAG_32BIT_VERTEX_IDS, FLAG_32BIT_EDGE_WEIGHTS = 1, 2, 8, 32
WEIGHTED_FLAGS = FLAG_NO_EDGE_WEIGHTS | FLAG_32BIT_VERTEX_IDS | FLAG_32BIT_EDGE_WEIGHTS  # 64-bit vertex weights present
WRITE_CHUNK = 1 << 22


@dataclass(frozen=True)
class ParhipFile:
    """A weighted ParHiP file of `num_nodes` nodes and `num_entries` adjacency entries at `path`; with
    `edge_weighted`, int32 edge weights follow the vertex weights (a coarse graph of gpart.engines.coarse_file)."""

    path: Path
    num_nodes: int
    num_entries: int
    edge_weighted: bool = False

    @property
    def flags(self) -> int:
        return WEIGHTED_FLAGS & ~FLAG_NO_EDGE_WEIGHTS if self.edge_weighted else WEIGHTED_FLAGS

    @property
    def adjncy_at(self) -> int:
        return HEADER_BYTES + 8 * (self.num_nodes + 1)

    @property
    def weights_at(self) -> int:
        return self.adjncy_at + 4 * self.num_entries

    @property
    def edge_weights_at(self) -> int:
        return self.weights_at + 8 * self.num_nodes

    @property
    def nbytes(self) -> int:
        return self.edge_weights_at + (4 * self.num_entries if self.edge_weighted else 0)

    def list_starts(self) -> np.ndarray:
        """Where each node's list starts among the adjacency entries (int64 [n + 1]), read from the offsets."""
        offsets = np.fromfile(self.path, dtype="<u8", count=self.num_nodes + 1, offset=HEADER_BYTES)
        return ((offsets - np.uint64(self.adjncy_at)) // np.uint64(4)).astype(np.int64)

    def vertex_weights(self) -> np.ndarray:
        """The vertex weights (int64 [n]) as the file holds them."""
        return np.fromfile(self.path, dtype="<i8", count=self.num_nodes, offset=self.weights_at)

    def edge_weights(self) -> Optional[np.ndarray]:
        """The edge weights (int32 [m]) mapped read-only, or None for a file without them (every weight 1)."""
        if not self.edge_weighted:
            return None
        if self.num_entries == 0:
            return np.empty(0, dtype=np.int32)
        return np.memmap(self.path, dtype="<i4", mode="r", offset=self.edge_weights_at, shape=(self.num_entries,))

    def adjacency(self) -> np.ndarray:
        """The neighbour ids (uint32 [m]), mapped read-only from the file."""
        if self.num_entries == 0:
            return np.empty(0, dtype=np.uint32)
        return np.memmap(self.path, dtype="<u4", mode="r", offset=self.adjncy_at, shape=(self.num_entries,))

    def write_weights(self, weights: Optional[np.ndarray], order: Optional[np.ndarray] = None) -> None:
        """Vertex weights (int64 [n]; None: all 1) into the file, node order[i]'s at i (None: as they are)."""
        with open(self.path, "r+b") as out:
            pages = WrittenPages(out.fileno(), start=self.weights_at)
            for start in range(0, self.num_nodes, WRITE_CHUNK):
                stop = min(start + WRITE_CHUNK, self.num_nodes)
                if weights is None:
                    block = np.ones(stop - start, dtype="<i8")
                else:
                    block = np.asarray(weights)[slice(start, stop) if order is None else order[start:stop]].astype("<i8")
                pwrite_all(out.fileno(), block, self.weights_at + 8 * start)
                if pages.due(self.weights_at + 8 * stop):
                    pages.wrote(self.weights_at + 8 * stop)
            drop_written(out.fileno(), self.weights_at)


def write_header(out, flags: int, num_nodes: int, num_entries: int) -> None:
    """The three header words at the start of `out`."""
    pwrite_all(out.fileno(), np.array([flags, num_nodes, num_entries], dtype="<u8"), 0)


def renumbered_file(source: ParhipFile, xadj: np.ndarray, order: np.ndarray, path: Path) -> ParhipFile:
    """A copy of `source` (whose lists start at `xadj`) at `path` with node order[i] as node i: its list and
    each neighbour as its new id (lists are not re-sorted; KaMinPar's compressed reader sorts them)."""
    out_file = ParhipFile(path, source.num_nodes, source.num_entries)
    with open(path, "r+b") as out:
        write_header(out, WEIGHTED_FLAGS, source.num_nodes, source.num_entries)
        out.seek(HEADER_BYTES)
        write_renumbered(out, xadj, source.adjacency(), out_file.adjncy_at, order)
    return out_file


def write_renumbered(out, xadj: np.ndarray, adjncy: np.ndarray, adjncy_at: int, order: np.ndarray,
                     threads: int = ARRAY_THREADS) -> None:
    """Byte offsets and neighbour ids of node order[0], order[1], ... (written from the current position of
    `out`, the offsets' start); each neighbour as its new id. The ids are gathered and written in `threads`
    spans of the order, each to its own span of the file (the gathers miss the cache, and two threads overlap
    them)."""
    n = int(xadj.shape[0] - 1)
    new_id = np.empty(n, dtype=np.uint32)  # KaMinPar's ids are 32-bit (n < 2**32 checked)
    new_id[order] = np.arange(n, dtype=np.uint32)
    ends = np.cumsum(np.diff(xadj)[order])  # adjacency entries up to and including each position's list
    out.write(np.array([adjncy_at], dtype="<u8").tobytes())
    for start in range(0, n, WRITE_CHUNK):
        out.write((ends[start:start + WRITE_CHUNK] * 4 + adjncy_at).astype("<u8").tobytes())
    out.flush()

    def write_span(first: int, stop: int) -> None:
        at = adjncy_at + 4 * (int(ends[first - 1]) if first else 0)
        pages = WrittenPages(out.fileno(), start=at)  # each span is written front to back
        for nodes in runs_by_entries(xadj, order[first:stop], WRITE_CHUNK):
            ids = new_id[neighbour_lists(xadj, adjncy, nodes)].astype("<u4", copy=False)
            pwrite_all(out.fileno(), ids, at)
            at += ids.nbytes
            if pages.due(at):
                pages.wrote(at)

    run_spans(write_span, weighted_spans(ends, threads))
    drop_written(out.fileno())  # nothing of the file left dirty in the page cache (a memory cgroup counts it)
