"""The undirected simple graph of a directed graph as a ParHiP file on disk, in bounded memory.

`symmetric_parhip` gives what gpart.engines.symmetric.symmetric_csr gives (every
edge u->v as u-v and v-u, self-loops and repeats dropped, each neighbour
list ascending), but the adjacency goes to a file instead of an array: the
input of KaMinPar's compressed path (gpart.engines.parhip_file).

Method, an external bucket sort by source range:

1. one pass over the (memory-mapped) src and dst counts every node's
   endpoint occurrences (self-loops left out): the raw length of its list;
2. the nodes are cut into consecutive ranges whose raw lists hold at most
   `budget // BUCKET_BYTES_PER_ENTRY` entries (a node past that alone);
3. gpart.engines.spill.bucket_rows writes every entry as the uint64 key
   u<<32|v into its range's bucket in a scratch file (16 bytes per input edge
   on disk; each bucket's disk is freed once it is read, the rest when the
   file is built);
4. bucket by bucket, in range order: its keys are sorted, repeats dropped,
   and the neighbour ids written as uint32 into the ParHiP file; the list
   starts accumulate into xadj. The next buckets sort on other threads while
   one is written (spill.prepared_in_order).

Memory: O(nodes) (the counts and xadj, int64) plus the buckets in hand
(`budget` for all of them) and their temporaries, never an E-sized array;
disk: 16 bytes per input edge of scratch while building, then the file (8
bytes per kept edge + 16 per node).
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.base.progress import Progress, or_null
from gpart.bytes.reader import drop_pages
from gpart.bytes.sink import pwrite_all
from gpart.bytes.written_pages import WrittenPages, drop_written
from gpart.engines.parhip_file import HEADER_BYTES, WEIGHTED_FLAGS, WRITE_CHUNK, ParhipFile, write_header
from gpart.engines.spill import BUCKETS_AT_ONCE, ROW_CHUNK, bucket_rows, prepared_in_order
from gpart.formats.files.scratch import ScratchDir

# A bucket's working memory per raw entry: its int64 keys, the sorted copy's repeat mask, the kept keys,
# their sources and uint32 neighbour ids.
BUCKET_BYTES_PER_ENTRY = 32
MIN_BUCKET_ENTRIES = 1 << 16
# A list entry's key: source << 32 | neighbour (uint64; ids < 2^32, KaMinPar's): shifts, not int64 divisions
NEIGHBOUR_BITS = np.uint64(32)
NEIGHBOUR_MASK = np.uint64(2**32 - 1)


def symmetric_parhip(graph: Graph, scratch: ScratchDir, budget: int,
                     progress: Optional[Progress] = None) -> tuple[ParhipFile, np.ndarray]:
    """The symmetric simple graph of `graph` as a weighted ParHiP file in `scratch` (its weights still to be
    written: ParhipFile.write_weights) and its list starts xadj (int64 [N+1], adjacency entries), building
    with at most about `budget` bytes of bucket memory."""
    n, e = graph.num_nodes, graph.num_edges
    if n >= 2**32:
        raise InputError(graph.source, f"{n:,} nodes exceed KaMinPar's 32-bit vertex ids")
    stage = or_null(progress).stage("symmetrise on disk", total=float(max(2 * e, 1)), unit="edges")
    with stage:
        counts = _endpoint_counts(graph, stage)
        per_entry = BUCKET_BYTES_PER_ENTRY * (BUCKETS_AT_ONCE + 1)  # buckets sorting while one is written
        starts = range_starts(counts, max(MIN_BUCKET_ENTRIES, budget // per_entry))
        raw = int(counts.sum())
        per_bucket = np.add.reduceat(counts, starts) if n else np.zeros(1, dtype=np.int64)
        del counts
        path = scratch.file("symmetric.parhip", _file_bytes(n, raw))
        with ScratchDir(path.parent) as buckets_dir:
            buckets = bucket_rows(buckets_dir, e, starts.shape[0], _bucketed_keys(graph, starts, stage),
                                  {"key": np.dtype(np.uint64)}, counts=per_bucket)
            xadj = np.zeros(n + 1, dtype=np.int64)
            with open(path, "r+b") as out:
                adjncy_at = HEADER_BYTES + 8 * (n + 1)
                pages = WrittenPages(out.fileno(), start=adjncy_at)  # the lists are written front to back
                bounds = np.append(starts, n)

                def lists(b: int) -> tuple[np.ndarray, np.ndarray]:
                    keys = buckets.rows(b, "key")
                    buckets.release(b)  # read once: its disk goes back while the file grows
                    return _bucket_lists(keys, (int(bounds[b]), int(bounds[b + 1])))

                for b, (neighbours, lengths) in enumerate(prepared_in_order(starts.shape[0], lists)):
                    nodes = (int(bounds[b]), int(bounds[b + 1]))
                    at = int(xadj[nodes[0]])
                    pwrite_all(out.fileno(), neighbours, adjncy_at + 4 * at)
                    xadj[nodes[0] + 1:nodes[1] + 1] = at + np.cumsum(lengths)
                    if pages.due(adjncy_at + 4 * int(xadj[nodes[1]])):
                        pages.wrote(adjncy_at + 4 * int(xadj[nodes[1]]))
                m = int(xadj[-1])
                write_header(out, WEIGHTED_FLAGS, n, m)
                for start in range(0, n + 1, WRITE_CHUNK):
                    pwrite_all(out.fileno(), (xadj[start:start + WRITE_CHUNK] * 4 + adjncy_at).astype("<u8"), HEADER_BYTES + 8 * start)
                file = ParhipFile(path, n, m)
                os.ftruncate(out.fileno(), file.nbytes)
                drop_written(out.fileno())  # nothing of the file left dirty in the page cache (a memory cgroup counts it)
    return file, xadj


def least_scratch_bytes(num_nodes: int, num_edges: int) -> int:
    """The disk symmetric_parhip holds at once for a graph without self-loops: the buckets (16 bytes per edge) beside
    the file it preallocates (two raw entries per edge)."""
    return 16 * num_edges + _file_bytes(num_nodes, 2 * num_edges)


def _file_bytes(num_nodes: int, raw_entries: int) -> int:
    """The ParHiP file symmetric_parhip preallocates: header, list starts, 4 bytes per raw entry, vertex weights."""
    return HEADER_BYTES + 8 * (num_nodes + 1) + 4 * raw_entries + 8 * num_nodes


def _endpoint_counts(graph: Graph, stage) -> np.ndarray:
    """Occurrences of every node as an endpoint of a non-loop edge (int64 [N])."""
    n, e = graph.num_nodes, graph.num_edges
    counts = np.zeros(n, dtype=np.int64)
    for start in range(0, e, ROW_CHUNK):
        s, d = _chunk(graph, start, min(start + ROW_CHUNK, e))
        counts += np.bincount(s, minlength=n)
        counts += np.bincount(d, minlength=n)
        stage.advance(float(s.shape[0]))
    return counts


def range_starts(counts: np.ndarray, per_bucket: int) -> np.ndarray:
    """First node of each bucket: consecutive node ranges of at most `per_bucket` raw entries (a node with
    more alone in its range); int64, starting at 0."""
    if counts.shape[0] == 0:
        return np.zeros(1, dtype=np.int64)
    ends = np.cumsum(counts)
    starts, at = [0], 0
    while True:
        base = int(ends[at - 1]) if at else 0
        nxt = max(at + 1, int(np.searchsorted(ends, base + per_bucket, side="right")))
        if nxt >= counts.shape[0]:
            return np.asarray(starts, dtype=np.int64)
        starts.append(nxt)
        at = nxt


def _chunk(graph: Graph, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Sources and destinations (int64) of the non-loop edges among [start, stop); the mapped pages dropped."""
    s = np.asarray(graph.src[start:stop], dtype=np.int64)
    d = np.asarray(graph.dst[start:stop], dtype=np.int64)
    for column in (graph.src, graph.dst):
        drop_pages(column, start * column.itemsize, (stop - start) * column.itemsize)
    keep = s != d
    return s[keep], d[keep]


def _bucketed_keys(graph: Graph, starts: np.ndarray, stage):
    """spill.RowsOf: for edges [start, stop), the keys u<<32|v and v<<32|u (uint64) and the bucket of each key's
    source. (The bucket sizes come from the endpoint counts: bucket_rows makes one pass, not two.)"""

    def rows_of(start: int, stop: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        s, d = _chunk(graph, start, stop)
        sources = np.concatenate([s, d])
        keys = sources.astype(np.uint64) << NEIGHBOUR_BITS
        keys[:s.shape[0]] |= d.astype(np.uint64)
        keys[s.shape[0]:] |= s.astype(np.uint64)
        stage.advance(float(stop - start))
        return np.searchsorted(starts, sources, side="right") - 1, {"key": keys}

    return rows_of


def _bucket_lists(keys: np.ndarray, nodes: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """One bucket's lists (its raw keys, sources in [first, stop) = `nodes`): the neighbour ids (uint32, list
    after list, each ascending, repeats dropped) and each list's length."""
    first, stop = nodes
    if keys.shape[0] == 0:
        return np.zeros(0, dtype="<u4"), np.zeros(stop - first, dtype=np.int64)
    keys.sort()
    keep = np.empty(keys.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    keys = keys[keep]
    del keep
    lengths = np.bincount((keys >> NEIGHBOUR_BITS).astype(np.int64) - first, minlength=stop - first)
    return keys.astype("<u4"), lengths  # the low 32 bits: the neighbour
