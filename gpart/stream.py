"""Streaming partitioner (`--method stream`): Fennel over blocks of nodes, memory O(nodes + buffer).

Nodes arrive in id order, in blocks of BLOCK_NODES. Each edge u->v
(u != v) is spilled to scratch buckets (gpart.spill) twice, as (u, v) in
u's block and as (v, u) in v's block, so a block's bucket holds every
neighbour of its nodes. A block is placed at once, vectorised:

    gain[i, p] = (neighbours of i already in p) - alpha * gamma * load[p]^(gamma-1)

(Fennel, Tsourakakis et al. 2014, gamma = 1.5, alpha = sqrt(P) * E / N^1.5,
load in node-equivalents averaged over the balanced shares), counted with
one bincount of (node, owner of neighbour) pairs. Balance: each node
carries its shares (1 node, its in-degree, 1 if a training node); after a
block no part may hold more than (1 + imbalance) times the average so far
of any share.
A block's nodes take their best part; where a part's capacity is exceeded
it keeps the highest-gain nodes and the rest retry their next best part
(at most P rounds); nodes no capacity fits go to the least-loaded parts.

In the first pass a neighbour counts once it is placed. Later passes
restream (Nishimura & Ugander 2013): loads start from the previous pass's,
a block leaves its parts before it is re-placed, every neighbour counts
with its latest owner, staying claims room before moving and a mover's
claim is what it gains over staying. A seeded random half of each block
stays put in a pass: ids next to each other are often neighbours, and a
block moving all at once would swap them between parts pass after pass.

Memory: the N-sized owner, degree and share arrays, one block's bucket and
gain matrix (BLOCK_NODES x P); the edges live in the scratch files (16
bytes per edge with 32-bit ids, 32 with 64-bit). Time: two passes over the
edges, then PASSES passes over the buckets.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

from gpart.balance import TRAIN_MASK, in_degrees, train_mask
from gpart.formats.book import ArrayBook
from gpart.bytes.reader import drop_pages
from gpart.formats.scratch import ScratchDir
from gpart.base.graph import Graph
from gpart.base.progress import Progress, or_null
from gpart.spill import bucket_rows
from gpart.metis import balance_column

BLOCK_NODES = 8192
MIN_BLOCK_NODES = 64
# Passes in all (the first places, the others restream). Cut at 1 / 2 / 4 / 8 / 16 passes, 4 parts:
# email-Enron 0.54 / 0.47 / 0.40 / 0.36 / 0.35, facebook 0.61 / 0.53 / 0.43 / 0.38 / 0.36,
# road-NY 0.079 / 0.067 / 0.054 / 0.045 / 0.043, power-law 1M/10M 0.69 / 0.66 / 0.64 / 0.62 / 0.59.
PASSES = 8
GAMMA = 1.5
GAIN_CELLS = 1 << 22  # block nodes x parts: bounds the gain matrix to 32 MiB


def stream_book(graph: Graph, num_parts: int, *, imbalance: float = 0.03, balance: Sequence[str] = (),
                balance_edges: bool = True, passes: int = PASSES, scratch_dir: Optional[str] = None,
                progress: Optional[Progress] = None) -> tuple[ArrayBook, dict[str, Any]]:
    """Assign every node by one Fennel pass; returns the book and the parameters as run.

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
    with ScratchDir(scratch_dir) as scratch, progress.stage("stream", total=float(max(n, 1) * passes), unit="nodes") as bar:
        buckets = bucket_rows(scratch, graph.num_edges, -(-n // block), _both_directions(graph, block, id_dtype),
                              {"node": id_dtype, "neighbour": id_dtype})
        owner = np.full(n, -1, dtype=np.int32)
        for done in range(passes):
            owner = _place_blocks(buckets, owner, shares, num_parts, block, float(imbalance), graph.num_edges, bar, seed=done)
    params = {
        "imbalance": float(imbalance),
        "balance": names,
        "balance_edges": True,
        "vertex_weights": "combined",
        "block_nodes": block,
        "gamma": GAMMA,
        "order": "node id",
        "passes": int(passes),
    }
    return ArrayBook(owner, num_parts), params


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


def _place_blocks(buckets, previous: np.ndarray, shares: np.ndarray, num_parts: int, block: int, imbalance: float,
                  num_edges: int, bar, seed: int = 0) -> np.ndarray:
    """Owner of every node, block by block; `shares` [N, C] are the balanced quantities per node.

    Neighbours count with their owner in this pass if placed already, else
    with their owner from the previous pass (`previous`, -1 where none).
    """
    n = previous.shape[0]
    owner = previous.copy()
    restream = n > 0 and bool(previous.min() >= 0)
    rng = np.random.default_rng(seed)
    # a restream starts from the full loads; each block leaves its parts before it is re-placed
    load = _loads(previous, shares, num_parts) if restream else np.zeros((num_parts, shares.shape[1]))
    totals = np.maximum(shares.sum(axis=0), 1e-300)
    alpha = math.sqrt(num_parts) * max(num_edges, 1) / max(n, 1) ** GAMMA
    for b in range(buckets.offsets.shape[0] - 1):
        first, last = b * block, min((b + 1) * block, n)
        node, neighbour = buckets.rows(b, "node"), buckets.rows(b, "neighbour")
        w = shares[first:last]
        if restream:
            load -= _loads(owner[first:last], w, num_parts)
        where = owner[neighbour]
        known = where >= 0
        pairs = (node[known].astype(np.int64) - first) * num_parts + where[known]
        gain = np.bincount(pairs, minlength=(last - first) * num_parts).reshape(last - first, num_parts).astype(np.float64)
        # load in node-equivalents: the mean over shares of each part's fraction, times N
        gain -= alpha * GAMMA * np.sqrt((load / totals).mean(axis=1) * n)
        capacity = (1.0 + imbalance) * (load.sum(axis=0) + w.sum(axis=0)) / num_parts - load
        if restream:
            chosen = _restream_block(gain, w, capacity, owner[first:last].astype(np.int64), rng)
        else:
            chosen = _fill_parts(gain, w, capacity)
        owner[first:last] = chosen
        load += _loads(chosen, w, num_parts)
        bar.advance(float(last - first))
    return owner


def _loads(owner: np.ndarray, shares: np.ndarray, num_parts: int) -> np.ndarray:
    """[P, C]: each part's sum of each share over the nodes `owner` assigns to it."""
    return np.column_stack([np.bincount(owner, weights=shares[:, c], minlength=num_parts) for c in range(shares.shape[1])])


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
