"""The undirected simple graph of a directed graph as METIS CSR (`symmetric_csr`), in bounded extra memory."""

from __future__ import annotations

from typing import Optional

import numpy as np

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.base.progress import Progress, or_null

# Edges per chunk when building the symmetric key array: bounds the int64
# temporaries of the key build to ~16 MiB each whatever the graph size.
KEY_CHUNK = 1 << 21


def symmetric_csr(graph: Graph, progress: Optional[Progress] = None) -> tuple[np.ndarray, np.ndarray]:
    """The undirected simple graph of `graph` as METIS CSR (xadj, adjncy), both int64.

    Every edge u->v contributes u-v and v-u; self-loops and repeated edges are
    dropped. Each neighbour list is sorted ascending. Method: encode each
    directed pair as the int64 key u*N+v (self-loops as a sentinel that sorts
    last), sort in place, keep keys unlike their predecessor (a neighbour
    mask: np.unique is far slower), then decode in place. Peak extra memory is
    about 17 bytes per input edge (the 2E keys and a 2E-byte mask).
    """
    n, e = graph.num_nodes, graph.num_edges
    if n > 0 and n * n > LOOP_KEY:
        raise InputError(graph.source, f"{n} nodes are too many for 64-bit edge keys")
    stage = or_null(progress).stage("symmetrise", total=float(max(e, 1)), unit="edges")
    with stage:
        keys = _symmetric_keys(graph.src, graph.dst, n, stage)
        keys.sort()
        keys = keys[:int(np.searchsorted(keys, LOOP_KEY))]  # drop the self-loops
        keys = keys[:_drop_repeats_in_place(keys)]
        if keys.base is not None and keys.nbytes < 0.75 * keys.base.nbytes:
            # Mostly repeats (e.g. an input that already lists both directions):
            # release the unused tail before METIS, which runs with these live.
            keys = keys.copy()
        # Keys are sorted by source, so source u's list starts at the first key >= u*N.
        xadj = np.searchsorted(keys, np.arange(n + 1, dtype=np.int64) * n).astype(np.int64, copy=False)
        np.remainder(keys, n, out=keys)
    return xadj, keys


# Key of a self-loop: larger than any real key u*N+v <= N*N-1, so loops sort last.
LOOP_KEY = np.iinfo(np.int64).max


def _symmetric_keys(src: np.ndarray, dst: np.ndarray, n: int, stage) -> np.ndarray:
    """Keys u*N+v (first half) and v*N+u (second half) of every edge, built chunk by chunk."""
    e = int(src.shape[0])
    keys = np.empty(2 * e, dtype=np.int64)
    for start in range(0, e, KEY_CHUNK):
        stop = min(start + KEY_CHUNK, e)
        s = np.asarray(src[start:stop], dtype=np.int64)
        d = np.asarray(dst[start:stop], dtype=np.int64)
        loops = s == d
        fwd, bwd = keys[start:stop], keys[e + start:e + stop]
        np.multiply(s, n, out=fwd)
        fwd += d
        np.multiply(d, n, out=bwd)
        bwd += s
        fwd[loops] = LOOP_KEY
        bwd[loops] = LOOP_KEY
        stage.advance(float(stop - start))
    return keys


def _drop_repeats_in_place(keys: np.ndarray) -> int:
    """Compact sorted `keys` so its first `size` entries are the distinct values; return size."""
    total = int(keys.shape[0])
    if total == 0:
        return 0
    first = np.empty(total, dtype=bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    size = int(np.count_nonzero(first))
    if size == total:
        return size
    # Move distinct keys forward chunk by chunk: the write position never
    # passes the read position and each chunk is copied out before writing,
    # so no second E-sized array is needed.
    at = 0
    for start in range(0, total, KEY_CHUNK):
        kept = keys[start:start + KEY_CHUNK][first[start:start + KEY_CHUNK]]
        keys[at:at + kept.shape[0]] = kept
        at += kept.shape[0]
    return size
