"""The undirected simple graph of a directed graph as METIS CSR (`symmetric_csr`), in bounded extra memory."""

from __future__ import annotations

from typing import Optional

import numpy as np

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.base.memory import FIXED_BYTES
from gpart.base.progress import Progress, or_null
from gpart.base.spans import ARRAY_THREADS, even_spans, run_spans

# Edges per chunk when building the symmetric key array: bounds the int64
# temporaries of the key build to ~16 MiB each whatever the graph size.
KEY_CHUNK = 1 << 21
SYMMETRIC_BYTES_PER_EDGE = 18  # symmetric_csr's peak: 2E int64 keys and a 2E-byte mask


def symmetric_bytes(num_edges: int) -> int:
    """Estimated peak of building the symmetric adjacency (symmetric_csr) of `num_edges` edges."""
    return FIXED_BYTES + SYMMETRIC_BYTES_PER_EDGE * num_edges


def symmetric_csr(graph: Graph, progress: Optional[Progress] = None,
                  threads: int = ARRAY_THREADS) -> tuple[np.ndarray, np.ndarray]:
    """The undirected simple graph of `graph` as METIS CSR (xadj, adjncy), both int64.

    Every edge u->v contributes u-v and v-u; self-loops and repeated edges are
    dropped. Each neighbour list is sorted ascending. Method: encode each
    directed pair as the int64 key u*N+v (self-loops as a sentinel that sorts
    last), sort in place, keep keys unlike their predecessor (a neighbour
    mask: np.unique is far slower), then decode in place. Peak extra memory is
    about 17 bytes per input edge (the 2E keys and a 2E-byte mask). Every pass
    but the sort runs in `threads` spans of the arrays at once
    (gpart.base.spans); the arrays are the same for any count.
    """
    n, e = graph.num_nodes, graph.num_edges
    if n > 0 and n * n > LOOP_KEY:
        raise InputError(graph.source, f"{n} nodes are too many for 64-bit edge keys")
    stage = or_null(progress).stage("symmetrise", total=float(max(e, 1)), unit="edges")
    with stage:
        keys = np.empty(2 * e, dtype=np.int64)
        run_spans(lambda a, b: _symmetric_keys(graph.src, graph.dst, n, keys, a, b, stage), even_spans(e, threads))
        keys.sort()
        keys = keys[:int(np.searchsorted(keys, LOOP_KEY))]  # drop the self-loops
        keys = keys[:_drop_repeats_in_place(keys, threads)]
        if keys.base is not None and keys.nbytes < 0.75 * keys.base.nbytes:
            # Mostly repeats (e.g. an input that already lists both directions):
            # release the unused tail before METIS, which runs with these live.
            keys = keys.copy()
        # Keys are sorted by source, so source u's list starts at the first key >= u*N.
        xadj = np.empty(n + 1, dtype=np.int64)

        def list_starts(a: int, b: int) -> None:
            xadj[a:b] = np.searchsorted(keys, np.arange(a, b, dtype=np.int64) * n)

        run_spans(list_starts, even_spans(n + 1, threads))
        run_spans(lambda a, b: np.remainder(keys[a:b], n, out=keys[a:b]), even_spans(keys.shape[0], threads))
    return xadj, keys


# Key of a self-loop: larger than any real key u*N+v <= N*N-1, so loops sort last.
LOOP_KEY = np.iinfo(np.int64).max


def _symmetric_keys(src: np.ndarray, dst: np.ndarray, n: int, keys: np.ndarray, first: int, stop: int,
                    stage) -> None:
    """Keys u*N+v (at the edge's position) and v*N+u (at E + position) of edges [first, stop), chunk by chunk."""
    e = int(src.shape[0])
    for start in range(first, stop, KEY_CHUNK):
        end = min(start + KEY_CHUNK, stop)
        s = np.asarray(src[start:end], dtype=np.int64)
        d = np.asarray(dst[start:end], dtype=np.int64)
        loops = s == d
        fwd, bwd = keys[start:end], keys[e + start:e + end]
        np.multiply(s, n, out=fwd)
        fwd += d
        np.multiply(d, n, out=bwd)
        bwd += s
        fwd[loops] = LOOP_KEY
        bwd[loops] = LOOP_KEY
        stage.advance(float(end - start))


def _drop_repeats_in_place(keys: np.ndarray, threads: int = 1) -> int:
    """Compact sorted `keys` so its first `size` entries are the distinct values; return size."""
    total = int(keys.shape[0])
    if total == 0:
        return 0
    first = np.empty(total, dtype=bool)
    first[0] = True
    spans = even_spans(total - 1, threads)
    run_spans(lambda a, b: np.not_equal(keys[a + 1:b + 1], keys[a:b], out=first[a + 1:b + 1]), spans)
    size = int(np.count_nonzero(first))
    if size == total:
        return size
    # Each span moves its distinct keys to its own front, then the spans close up. Within a span, chunk by
    # chunk: the write position never passes the read position and each chunk is copied out before writing,
    # so no second E-sized array is needed.
    spans = even_spans(total, threads)
    kept = run_spans(lambda a, b: _compact(keys, first, a, b), spans)
    at = 0
    for (start, _), count in zip(spans, kept):
        _move_forward(keys, start, at, count)
        at += count
    return at


def _compact(keys: np.ndarray, first: np.ndarray, start: int, stop: int) -> int:
    """Keys [start, stop) whose `first` is set, moved to the front of the span; returns how many."""
    at = start
    for chunk in range(start, stop, KEY_CHUNK):
        end = min(chunk + KEY_CHUNK, stop)
        kept = keys[chunk:end][first[chunk:end]]
        keys[at:at + kept.shape[0]] = kept
        at += kept.shape[0]
    return at - start


def _move_forward(keys: np.ndarray, source: int, target: int, count: int) -> None:
    """keys[target:target+count] = keys[source:source+count] with target <= source, chunk by chunk."""
    if source == target:
        return
    for offset in range(0, count, KEY_CHUNK):
        end = min(offset + KEY_CHUNK, count)
        keys[target + offset:target + end] = keys[source + offset:source + end].copy()
