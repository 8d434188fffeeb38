"""The graph of clusters (one coarsening level) of a graph on disk, written as an edge-weighted ParHiP file.

    coarse, coarse_weights = coarse_file(graph, cluster, count, weights, scratch, budget)

Cluster c is node c of the coarse graph: its vertex weights are the sums of
its members' (every column of `weights`; the file holds the first), and two clusters are joined by one edge weighing the sum of the
edges between their members (edges inside a cluster are dropped). Built like
gpart.engines.symmetric_file's file, by an external bucket sort: every fine
adjacency entry u-v goes as the key `cluster(u) << 32 | cluster(v)` with its
weight (a level with edge weights; each weighs 1 on one without) to the bucket of cluster(u)'s range (gpart.engines.spill; entries
inside a cluster too, so that each bucket's size is known before the one
pass), and each bucket drops those, is sorted, its equal keys summed, and its
lists written in range order (the next buckets sort on other threads while
one is written: spill.prepared_in_order).
The edge weights go to a scratch file first (the file's layout puts them after
the vertex weights, which sit after an adjacency of a length known only at the
end) and are copied into place inside the kernel.

Memory: O(clusters) plus the buckets in hand (at most `budget` bytes of keys,
weights and their sorts for all of them); disk: 12 bytes per fine entry of scratch while building (8
where the level has no edge weights; each bucket's freed once read, so it shrinks as the file grows), then
the file (8 bytes per coarse entry, 16 per cluster).
"""

from __future__ import annotations

import os
from typing import BinaryIO, Optional

import numpy as np

from gpart.base.errors import InputError
from gpart.bytes.copy import KernelCopyUnsupported, kernel_copy
from gpart.bytes.sink import pwrite_all, reserve
from gpart.bytes.written_pages import WrittenPages, drop_written
from gpart.engines.disk_graph import DiskGraph, run_starts
from gpart.engines.parhip_file import HEADER_BYTES, WRITE_CHUNK, ParhipFile, write_header
from gpart.engines.spill import BUCKETS_AT_ONCE, ROW_CHUNK, RowsOf, bucket_rows, prepared_in_order
from gpart.engines.symmetric_file import MIN_BUCKET_ENTRIES, NEIGHBOUR_BITS, NEIGHBOUR_MASK, range_starts
from gpart.formats.files.scratch import ScratchDir

# A bucket's working memory per raw entry: the uint64 key and int32 weight read, the kept entries, the sort order, the
# sorted copies, the run starts and sums.
BUCKET_BYTES_PER_ENTRY = 56
EDGE_WEIGHT_LIMIT = 2**31 - 1  # the file's edge weights are int32 (KaMinPar's edge weight type)
# The least entries a bucket is cut to so that its pairs pack (_bucket_entries): every chunk of the bucketing
# writes one piece per bucket, and 65K-entry buckets took 30K buckets and 6,400 writes a chunk on the geometric
# graph of 1B edges (11M clusters), where the bucketing stalled on them
PACKED_BUCKET_ENTRIES = 1 << 20


def coarse_file(graph: DiskGraph, cluster: np.ndarray, count: int, weights: np.ndarray, scratch: ScratchDir,
                budget: int) -> tuple[ParhipFile, np.ndarray]:
    """The graph of the clusters `cluster` (0..count-1 per node of `graph`) as an edge-weighted ParHiP file in
    `scratch`, building with at most about `budget` bytes of bucket memory, and the clusters' vertex weights
    ([count, c] from the nodes' `weights` [n, c]; column 0 is in the file)."""
    raw = np.bincount(cluster, weights=np.diff(graph.xadj), minlength=count).astype(np.int64)
    starts = range_starts(raw, _bucket_entries(budget, count, graph.edge_weights is not None))
    counts = np.add.reduceat(raw, starts) if count else np.zeros(1, dtype=np.int64)
    del raw
    # Its lists and weights reserve disk as they are written: `most` (every fine entry) would reserve 16 bytes
    # for each, where the clusters keep a tenth of them on the geometric graph (3.8 of 7.1 GB at 120M edges)
    path = scratch.file("coarse.parhip", HEADER_BYTES + 8 * (count + 1))
    with ScratchDir(path.parent) as buckets_dir:
        columns = {"key": np.dtype(np.uint64)} if graph.edge_weights is None else \
            {"key": np.dtype(np.uint64), "weight": np.dtype(np.int32)}  # no weights: each entry weighs 1
        buckets = bucket_rows(buckets_dir, graph.file.num_entries, starts.shape[0],
                              _bucketed_pairs(graph, cluster, starts), columns, counts=counts)
        weights_fd = buckets_dir.open_file("coarse-edge-weights", 0)
        xadj = np.zeros(count + 1, dtype=np.int64)
        bounds = np.append(starts, count)
        with open(path, "r+b") as out:
            adjncy_at = HEADER_BYTES + 8 * (count + 1)
            pages = WrittenPages(out.fileno(), start=adjncy_at)

            def lists(b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
                weight = buckets.rows(b, "weight") if "weight" in columns else None
                keys = buckets.rows(b, "key")
                buckets.release(b)  # read once: its disk goes back while the coarse file grows
                return _bucket_lists(keys, weight, (int(bounds[b]), int(bounds[b + 1])), count)

            for b, (neighbours, summed, lengths) in enumerate(prepared_in_order(starts.shape[0], lists)):
                nodes = (int(bounds[b]), int(bounds[b + 1]))
                if summed.shape[0] and int(summed.max()) > EDGE_WEIGHT_LIMIT:
                    raise InputError(graph.file.path, f"an edge of the coarse graph weighs {int(summed.max()):,}, "
                                                      "past KaMinPar's int32 edge weights")
                at = int(xadj[nodes[0]])
                reserve(out.fileno(), adjncy_at + 4 * at, neighbours.nbytes, path)
                reserve(weights_fd, 4 * at, neighbours.nbytes, path)
                pwrite_all(out.fileno(), neighbours, adjncy_at + 4 * at)
                pwrite_all(weights_fd, summed.astype("<i4"), 4 * at)
                xadj[nodes[0] + 1:nodes[1] + 1] = at + np.cumsum(lengths)
                if pages.due(adjncy_at + 4 * int(xadj[nodes[1]])):
                    pages.wrote(adjncy_at + 4 * int(xadj[nodes[1]]))
            file = ParhipFile(path, count, int(xadj[-1]), edge_weighted=True)
            coarse_weights = _cluster_weights(weights, cluster, count)
            _write_rest(out, file, xadj, coarse_weights[:, 0], weights_fd, buckets_dir)
    return file, coarse_weights


def _bucketed_pairs(graph: DiskGraph, cluster: np.ndarray, starts: np.ndarray) -> RowsOf:
    """spill.RowsOf over the fine adjacency entries: for entries [start, stop), the key cluster(u) << 32 |
    cluster(v) (uint64, as symmetric_file's keys), the entry's weight (where the graph has edge weights) and the
    bucket of cluster(u). Entries inside a cluster go too (dropped when their bucket is written): each bucket's
    count is then known beforehand, and the bucketing reads the adjacency once instead of twice."""
    adjncy, edge_weights = graph.adjncy, graph.edge_weights

    def rows_of(start: int, stop: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        cu = cluster[_sources(graph.xadj, start, stop)].astype(np.int64)
        cv = cluster[np.asarray(adjncy[start:stop], dtype=np.int64)].astype(np.int64)
        rows = {"key": (cu.astype(np.uint64) << NEIGHBOUR_BITS) | cv.astype(np.uint64)}
        if edge_weights is not None:
            rows["weight"] = np.asarray(edge_weights[start:stop], dtype=np.int32)  # the file's int32, summed as int64
        return np.searchsorted(starts, cu, side="right") - 1, rows

    return rows_of


def _sources(xadj: np.ndarray, start: int, stop: int) -> np.ndarray:
    """The node whose list holds each adjacency entry of [start, stop)."""
    first = int(np.searchsorted(xadj, start, side="right")) - 1
    last = int(np.searchsorted(xadj, stop, side="left"))
    ends = np.clip(xadj[first + 1:last + 1], start, stop) - np.clip(xadj[first:last], start, stop)
    return np.repeat(np.arange(first, last, dtype=np.int64), ends)


def _bucket_entries(budget: int, count: int, weighted: bool) -> int:
    """Raw entries a bucket may hold: its share of `budget` (the buckets sorting while one is written), and, on a
    `weighted` level, few enough that a pair of cluster ids and an entry's index pack into 64 bits
    (_pairs_summed) where that leaves PACKED_BUCKET_ENTRIES or more."""
    entries = max(MIN_BUCKET_ENTRIES, budget // (BUCKET_BYTES_PER_ENTRY * (BUCKETS_AT_ONCE + 1)))
    packable = 1 << max(0, 64 - 2 * _bits(count))
    return min(entries, packable) if weighted and packable >= PACKED_BUCKET_ENTRIES else entries


def _bits(count: int) -> int:
    return max(1, (count - 1).bit_length())


def _bucket_lists(keys: np.ndarray, weights: Optional[np.ndarray], nodes: tuple[int, int],
                  count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One bucket's lists (clusters [first, stop) = `nodes`; `weights`: its entries', None: 1 each): the
    neighbour ids (uint32, list after list, ascending), the summed weight of each and each list's length.
    Entries inside a cluster are dropped."""
    first, stop = nodes
    between = (keys >> NEIGHBOUR_BITS) != (keys & NEIGHBOUR_MASK)
    pairs, summed = _pairs_summed(keys[between], None if weights is None else weights[between], count)
    lengths = np.bincount((pairs >> NEIGHBOUR_BITS).astype(np.int64) - first, minlength=stop - first)
    return pairs.astype("<u4"), summed, lengths  # the low 32 bits: the neighbour


def _pairs_summed(keys: np.ndarray, weights: Optional[np.ndarray], count: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct `keys` ascending and the summed `weights` of each (None: 1 each, the run lengths). With
    weights, one plain sort of the pair packed with each entry's index (numpy's plain sort of 64-bit integers
    took 0.5x its argsort on 15M), an argsort where they do not fit 64 bits."""
    if weights is None or keys.shape[0] == 0:
        keys = np.sort(keys)
        starts = run_starts(keys)
        summed = np.diff(np.append(starts, keys.shape[0])) if weights is None else np.zeros(0, dtype=np.int64)
        return keys[starts], summed
    pair_bits, index_bits = _bits(count), _bits(keys.shape[0])
    if 2 * pair_bits + index_bits > 64:
        order = np.argsort(keys)
        keys = keys[order]
        starts = run_starts(keys)
        return keys[starts], np.add.reduceat(weights[order], starts, dtype=np.int64)
    low, index = np.uint64(pair_bits), np.uint64(index_bits)
    packed = (keys >> NEIGHBOUR_BITS) << low
    packed |= keys & NEIGHBOUR_MASK
    packed <<= index
    packed |= np.arange(keys.shape[0], dtype=np.uint64)
    packed.sort()
    summed_weights = weights[(packed & np.uint64((1 << index_bits) - 1)).astype(np.int64)]
    packed >>= index
    starts = run_starts(packed)
    pairs = packed[starts]
    return ((pairs >> low) << NEIGHBOUR_BITS) | (pairs & np.uint64((1 << pair_bits) - 1)), \
        np.add.reduceat(summed_weights, starts, dtype=np.int64)


def _cluster_weights(weights: np.ndarray, cluster: np.ndarray, count: int) -> np.ndarray:
    """Each cluster's vertex weights: the sums of its members' (int64 [count, c], exact)."""
    summed = np.zeros((count, weights.shape[1]), dtype=np.int64)
    np.add.at(summed, cluster, weights)
    return summed


def _write_rest(out: BinaryIO, file: ParhipFile, xadj: np.ndarray, vertex_weights: np.ndarray, weights_fd: int,
                scratch: ScratchDir) -> None:
    """Header, byte offsets, vertex weights and (from the scratch file) edge weights of `file`; the file cut to
    its length and dropped from the page cache."""
    fd = out.fileno()
    reserve(fd, file.weights_at, file.nbytes - file.weights_at, file.path)  # vertex and edge weights
    write_header(out, file.flags, file.num_nodes, file.num_entries)
    for start in range(0, file.num_nodes + 1, WRITE_CHUNK):
        pwrite_all(fd, (xadj[start:start + WRITE_CHUNK] * 4 + file.adjncy_at).astype("<u8"), HEADER_BYTES + 8 * start)
    pwrite_all(fd, vertex_weights.astype("<i8"), file.weights_at)
    nbytes = 4 * file.num_entries
    try:
        kernel_copy(weights_fd, fd, 0, file.edge_weights_at, nbytes, scratch.path or file.path, file.path)
    except KernelCopyUnsupported:
        for start in range(0, nbytes, 4 * ROW_CHUNK):
            block = os.pread(weights_fd, min(4 * ROW_CHUNK, nbytes - start), start)
            pwrite_all(fd, np.frombuffer(block, dtype=np.uint8), file.edge_weights_at + start)
    os.ftruncate(fd, file.nbytes)
    drop_written(fd)
