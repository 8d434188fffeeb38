"""Every edge in both directions (`--add-reverse`, SPEC.md 4.7), as DGL's `to_bidirected` and PyG's `ToUndirected` give.

    graph, reverse = with_reverse_edges(graph, scratch, max_memory)        # homogeneous
    hg, reverse = hetero_with_reverse_edges(hg, scratch, max_memory)       # typed

The graph with reverse edges holds the input's edges unchanged (same ids), then one reverse copy
`v -> u` per distinct input pair `u -> v` whose reverse is not already an edge of the relation the
copy joins, made from its first (smallest id) input edge, copies in ascending input id. A
relation within one node type takes its copies itself; a relation `(s, r, d)` between two node
types gets them as the edge type `(d, rev_r, s)` (PyG's ToUndirected and DGL's AddReverse
defaults). Copies carry their input edge's data rows. The arrays are written to scratch files
(mapped, pages released as they are filled), so the partition pass reads them as it reads any
mapped input, on its in-memory and bounded paths alike.

Finding the copies sorts pair keys packed with their positions in memory (REVERSE_BYTES_PER_EDGE);
past `max_memory` the edges are first bucketed on disk by pair key (gpart.engines.spill) and each bucket
searched alone.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager, Mapping, Optional

import numpy as np

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.bytes.reader import drop_pages, release_rows
from gpart.engines.spill import Buckets, bucket_rows
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.input.typed import TYPE_RE, HeteroGraph
from gpart.formats.partition.reverse import ReverseMeta, ReverseType
from gpart.formats.partition.typed import EdgeType, etype_key

# Peak bytes per input edge of the in-memory search (keys of the input and of the reversed pairs,
# packed with their positions and sorted, then the positions and a mask): 34 measured with
# tracemalloc on 2M random edges, 17 for a relation between two node types; keys split by their
# high bits first (about a million nodes and more) add a radix order of them, about 45 in all.
REVERSE_BYTES_PER_EDGE = 48
COPY_ROWS = 1 << 21  # rows per step when filling the scratch arrays
REVERSE_PREFIX = "rev_"


@dataclass
class ReverseEdges:
    """What the result records of its reverse edges: the counts and, per copy, its input edge."""

    meta: ReverseMeta
    input_edge: np.ndarray  # int64 [num_reverse_edges], copies in stored id order


def reverse_scratch_dir(add_reverse: bool, stage: Optional[Path] = None,
                        parent: Optional[Path] = None) -> ContextManager[Optional[ScratchDir]]:
    """The scratch directory that holds a graph with reverse edges: in `parent` (default: beside the staging
    directory `stage`) named after `stage` (SPEC.md 4.6 names), or in the temporary directory; nothing without
    `add_reverse`."""
    if not add_reverse:
        return contextlib.nullcontext()
    if stage is None:
        return ScratchDir(parent)
    return ScratchDir(stage.parent if parent is None else parent, prefix=f"{stage.name}-scratch-")


def with_reverse_edges(graph: Graph, scratch: ScratchDir, max_memory: int) -> tuple[Graph, ReverseEdges]:
    """`graph` with every edge in both directions: its edges, then the reverse copies (module docstring)."""
    n = graph.num_nodes
    ids = reverse_copy_ids(graph.src, graph.dst, n, n, True, max_memory, scratch, graph.source)
    (src, dst), data = _with_copies(scratch, "edges", graph.src, graph.dst, graph.edge_data, ids, keep=True)
    out = Graph(n, src, dst, graph.node_data, data, source=graph.source, input_format=graph.input_format)
    return out, ReverseEdges(ReverseMeta(graph.num_edges, int(ids.shape[0])), ids)


def hetero_with_reverse_edges(hg: HeteroGraph, scratch: ScratchDir, max_memory: int) -> tuple[HeteroGraph, ReverseEdges]:
    """The typed graph with every edge in both directions: relations within one node type take their
    reverse copies, every other relation (s, r, d) gets the edge type (d, rev_r, s) holding them."""
    edges, data = dict(hg.edges), {e: dict(hg.edge_data.get(e, {})) for e in hg.edge_types}
    copies: dict[EdgeType, tuple[EdgeType, np.ndarray]] = {}
    for etype in hg.edge_types:
        s, _, d = etype
        target = etype if s == d else _reverse_type_of(hg, etype)
        src, dst = hg.edges[etype]
        ids = reverse_copy_ids(src, dst, hg.num_nodes[s], hg.num_nodes[d], s == d, max_memory, scratch,
                               f"{hg.source}: {etype_key(etype)}" if hg.source else etype_key(etype))
        edges[target], data[target] = _with_copies(scratch, etype_key(target).replace(":", "."), src, dst,
                                                   data[etype], ids, keep=s == d)
        copies[target] = (etype, ids)
    out = HeteroGraph(hg.num_nodes, edges, hg.node_data, data, source=hg.source)
    types = [ReverseType(t, copies[t][0] if t in copies else None, hg.num_edges(t) if t in hg.edges else 0,
                         int(copies[t][1].shape[0]) if t in copies else 0) for t in out.edge_types]
    input_edge = _concat(scratch, "reverse_input_edge", [copies[t.edge_type][1] for t in types if t.edge_type in copies])
    total_input = sum(hg.num_edges(e) for e in hg.edge_types)
    return out, ReverseEdges(ReverseMeta(total_input, int(input_edge.shape[0]), types), input_edge)


def _reverse_type_of(hg: HeteroGraph, etype: EdgeType) -> EdgeType:
    s, rel, d = etype
    target = (d, REVERSE_PREFIX + rel, s)
    if not TYPE_RE.match(target[1]):
        raise InputError(hg.source, f"relation {rel!r} is too long for its reverse {target[1]!r} (at most 64 characters)")
    if target in hg.edges:
        raise InputError(hg.source, f"edge type {etype_key(target)!r} is in the input; --add-reverse would store the "
                                    f"reverses of {etype_key(etype)!r} under that name")
    return target


# --------------------------------------------------------------------------- which edges get a copy


def reverse_copy_ids(src: np.ndarray, dst: np.ndarray, num_src_nodes: int, num_dst_nodes: int, merged: bool,
                     max_memory: int, scratch: ScratchDir, where: Optional[str]) -> np.ndarray:
    """Ids, ascending, of the input edges u -> v that get a reverse copy v -> u: the first edge of each
    distinct pair whose reverse is not an input edge of the relation the copy joins (`merged`: the
    same relation; otherwise a new one, which holds no edge before)."""
    if num_src_nodes and num_dst_nodes > (2**63 - 1) // num_src_nodes:
        raise InputError(where, f"{num_dst_nodes:,} x {num_src_nodes:,} node pairs do not fit a 63-bit key")
    num_edges = int(src.shape[0])
    budget = max(1, max_memory // 2)  # the other half: the pass's node arrays and chunk buffers
    if REVERSE_BYTES_PER_EDGE * num_edges <= budget:
        return _first_copies(lambda: _pair_keys(src, dst, num_src_nodes, merged))
    rows = num_edges * (2 if merged else 1)  # bucketed: a row per input pair (merged) and per reversed pair
    return _bucketed_copy_ids(src, dst, num_src_nodes, merged, -(-REVERSE_BYTES_PER_EDGE * rows // budget), scratch)


def _pair_keys(src: np.ndarray, dst: np.ndarray, nb: int, merged: bool) -> tuple[np.ndarray, int, None]:
    """Keys of the input pairs u * nb + v (when the copies join the same relation), then of the reversed
    pairs v * nb + u in edge order, in one array built in place; how many input pairs lead it; None: the
    candidates are edges 0, 1, ..."""
    num_edges = int(src.shape[0])
    first = num_edges if merged else 0
    keys = np.empty(first + num_edges, dtype=np.int64)
    for start in range(0, num_edges, COPY_ROWS):
        stop = min(start + COPY_ROWS, num_edges)
        u, v = np.asarray(src[start:stop], dtype=np.int64), np.asarray(dst[start:stop], dtype=np.int64)
        if merged:
            np.add(u * nb, v, out=keys[start:stop])
        np.add(v * nb, u, out=keys[first + start:first + stop])
    return keys, first, None


def _first_copies(candidates: Callable[[], tuple[np.ndarray, int, Optional[np.ndarray]]]) -> np.ndarray:
    """Ids (ascending) of the candidates whose key is new: the first of its key, and no input pair has it.
    `candidates()` gives (keys: `n` input pairs', then the candidates' in ascending id; `n`; the candidates'
    ids, or None for 0, 1, ...), called here so that each array is let go as soon as it is used. An input
    pair comes before every candidate of its key, so a key's first position is a candidate's only when no
    input pair has the key."""
    keys, num_given, ids = candidates()
    firsts = _key_firsts(keys)
    del keys
    firsts = firsts[firsts >= num_given]
    firsts -= num_given
    firsts.sort()
    return firsts if ids is None else ids[firsts]


def _key_firsts(keys: np.ndarray) -> np.ndarray:
    """The position of the first occurrence of every distinct key (consumes `keys`).

    A key and its position are packed into one int64 and sorted (a sort is much faster than an
    argsort's scattered reads); keys too wide for that are first split by their high bits (at most
    16 of them, one radix sort of the split) and each range packed with its low bits alone."""
    n = int(keys.shape[0])
    shift = max(1, (n - 1).bit_length())
    low = 63 - shift
    high = max(0, (int(keys.max()) if n else 0).bit_length() - low)
    if high == 0:
        return _packed_firsts(keys, None, shift)
    if high > 16:  # ids past 2^27 nodes with many edges: a stable argsort
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        return order[np.concatenate([[True], keys[1:] != keys[:-1]])]
    ranges = (keys >> low).astype(np.uint16)
    order = np.argsort(ranges, kind="stable")  # positions grouped by range, ascending within each
    bounds = np.concatenate([[0], np.cumsum(np.bincount(ranges, minlength=1 << high))])
    del ranges
    keys &= (1 << low) - 1
    firsts = [_packed_firsts(keys[order[lo:hi]], order[lo:hi], shift) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
    return np.concatenate(firsts) if firsts else np.zeros(0, dtype=np.int64)


def _packed_firsts(keys: np.ndarray, positions: Optional[np.ndarray], shift: int) -> np.ndarray:
    """_key_firsts of `keys` (each below 2^(63 - shift)) at `positions` (None: 0, 1, ...), packed and sorted in place."""
    n = int(keys.shape[0])
    keys <<= shift
    if positions is not None:
        keys |= positions
    else:
        for start in range(0, n, COPY_ROWS):
            keys[start:start + COPY_ROWS] |= np.arange(start, min(start + COPY_ROWS, n), dtype=np.int64)
    keys.sort()
    first = np.ones(n, dtype=bool)
    for start in range(1, n, COPY_ROWS):  # chunks: the shifted temporaries stay small
        stop = min(start + COPY_ROWS, n)
        np.not_equal(keys[start:stop] >> shift, keys[start - 1:stop - 1] >> shift, out=first[start:stop])
    keys &= (1 << shift) - 1  # the positions, in place
    return keys[first]


def _bucketed_copy_ids(src: np.ndarray, dst: np.ndarray, nb: int, merged: bool, buckets: int,
                       scratch: ScratchDir) -> np.ndarray:
    """reverse_copy_ids in bounded memory: input pairs (id -1) and reversed pairs (their edge id) are
    bucketed on disk by key, so a pair and its reverse meet in one bucket; each bucket is searched
    alone and its copies marked, then read out in id order."""
    num_edges = int(src.shape[0])

    def rows_of(start: int, stop: int):
        u, v = np.asarray(src[start:stop], dtype=np.int64), np.asarray(dst[start:stop], dtype=np.int64)
        release_rows(src, start, stop)
        release_rows(dst, start, stop)
        keys, ids = v * nb + u, np.arange(start, stop, dtype=np.int64)
        if merged:
            keys, ids = np.concatenate([u * nb + v, keys]), np.concatenate([np.full(stop - start, -1, np.int64), ids])
        return keys % buckets, {"key": keys, "id": ids}

    grouped = bucket_rows(scratch, num_edges, buckets, rows_of, {"key": np.dtype(np.int64), "id": np.dtype(np.int64)})
    mark = scratch.array("reverse_mark", np.bool_, num_edges)
    count = 0
    for b in range(buckets):
        found = _first_copies(functools.partial(_bucket_candidates, grouped, b))
        mark[found] = True
        count += int(found.shape[0])
    out = scratch.array("reverse_ids", np.int64, count)
    filled = 0
    for start in range(0, num_edges, COPY_ROWS):
        hit = np.flatnonzero(mark[start:start + COPY_ROWS]) + start
        out[filled:filled + hit.shape[0]] = hit
        filled += int(hit.shape[0])
    return _read_only(out)


def _bucket_candidates(grouped: Buckets, bucket: int) -> tuple[np.ndarray, int, np.ndarray]:
    """_first_copies's candidates of one bucket: its input pairs' keys (rows of id -1) before its reversed pairs'."""
    keys, ids = grouped.rows(bucket, "key"), grouped.rows(bucket, "id")
    given = ids < 0
    return np.concatenate([keys[given], keys[~given]]), int(np.count_nonzero(given)), ids[~given]


# --------------------------------------------------------------------------- the arrays with the copies


def _with_copies(scratch: ScratchDir, name: str, src: np.ndarray, dst: np.ndarray, edge_data: Mapping[str, np.ndarray],
                 ids: np.ndarray, keep: bool) -> tuple[tuple[np.ndarray, np.ndarray], dict[str, np.ndarray]]:
    """(src, dst) and edge data of a relation's input edges (`keep`) followed by the copies of edges `ids`
    (source and destination swapped, the same data rows), in scratch files."""
    def stacked(key: str, head: np.ndarray, rows: np.ndarray, dtype: np.dtype) -> np.ndarray:
        return _filled(scratch, f"{name}_{key}", ([(head, None)] if keep else []) + [(rows, ids)], dtype)

    pairs = (stacked("src", src, dst, np.dtype(np.int64)), stacked("dst", dst, src, np.dtype(np.int64)))
    return pairs, {key: stacked(key, arr, arr, arr.dtype) for key, arr in edge_data.items()}


def _concat(scratch: ScratchDir, name: str, arrays: list[np.ndarray]) -> np.ndarray:
    """The int64 arrays one after the other, in a scratch file."""
    return _filled(scratch, name, [(a, None) for a in arrays], np.dtype(np.int64), ())


def _filled(scratch: ScratchDir, name: str, pieces: list[tuple[np.ndarray, Optional[np.ndarray]]], dtype: np.dtype,
            row_shape: Optional[tuple[int, ...]] = None) -> np.ndarray:
    """The pieces one after the other (a whole array, or `rows[ids]` for a piece (rows, ids)), as a
    read-only map of a scratch file filled chunk by chunk, input and written pages released as it goes."""
    row_shape = tuple(pieces[0][0].shape[1:]) if row_shape is None else row_shape
    sizes = [int((arr if ids is None else ids).shape[0]) for arr, ids in pieces]
    out = scratch.array(name, dtype, (sum(sizes), *row_shape))
    step = max(1, COPY_ROWS // max(1, int(np.prod(row_shape, dtype=np.int64))))
    at = 0
    for (arr, ids), size in zip(pieces, sizes):
        for start in range(0, size, step):
            stop = min(start + step, size)
            out[at + start:at + stop] = arr[start:stop] if ids is None else arr[np.asarray(ids[start:stop])]
            if ids is None:
                release_rows(arr, start, stop)
            _release_written(out, at + start, at + stop)
        release_rows(arr)
        at += size
    return _read_only(out)


def _release_written(arr: np.ndarray, start: int, stop: int) -> None:
    """Unmap rows of a scratch map once written: they stay in the page cache and reach the file, off this
    process's RSS."""
    row_bytes = int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize
    drop_pages(arr, start * row_bytes, (stop - start) * row_bytes, modes=("r+",))


def _read_only(arr: np.ndarray) -> np.ndarray:
    """A filled scratch map flushed and mapped again read-only (what the partition pass expects of inputs)."""
    if not isinstance(arr, np.memmap):
        return arr  # an empty array: nothing was mapped
    arr.flush()
    return np.memmap(arr.filename, dtype=arr.dtype, mode="r", shape=arr.shape)
