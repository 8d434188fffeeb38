"""Fennel's placement and restreaming over the spilled edges of `--method stream` (gpart.engines.spilled_graph).

Fennel (Tsourakakis et al. 2014) in id order, a block at a time:

    gain[i, p] = (neighbours of i already in p) - alpha * gamma * load[p]^(gamma-1)

(gamma = 1.5, alpha = sqrt(P) * E / N^1.5, load in node-equivalents averaged
over the balanced shares), counted with one bincount of (node, owner of
neighbour) pairs; after a block no part may hold more than (1 + imbalance)
times the running average of any share. A block's nodes take their best
part; where a part's room is exceeded it keeps the highest-gain nodes and
the rest retry their next best part (at most P rounds); nodes no room fits
go to the least-loaded parts.

Restreaming (Nishimura & Ugander 2013): loads start from the previous pass's,
a block leaves its parts before it is re-placed, every neighbour counts with
its latest owner, staying claims room before moving and a mover's claim is
what it gains over staying; a seeded random half of each block stays put.
The best pass is kept (`pass_key`: within the balance, then the lowest cut).
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from gpart.engines.spilled_graph import SpilledGraph
from gpart.engines.stream_refine import loads, worst_balance

GAMMA = 1.5
STALL_PASSES = 2  # restreaming passes in a row that do not beat the best end a run
BALANCE_SLACK = 0.01


def restream(spilled: SpilledGraph, owner: np.ndarray, passes: int, bar) -> tuple[np.ndarray, list[float], tuple[float, float]]:
    """The best of `owner` (the first pass) and up to `passes` - 1 restreaming passes from it, the cut of every
    pass and the best one's `pass_key`.

    Best: the lowest `pass_key`. A pass's cut is counted while the next pass reads the same rows
    (the last pass's by one more read), so more passes never return a worse result than fewer.
    Restreaming stops after STALL_PASSES passes in a row that do not beat the best (from a
    clustered start, restreaming mostly undoes the clusters).
    """
    cuts: list[float] = []
    best, best_key, stalled = owner, (np.inf, np.inf), 0
    for done in range(1, passes + 1):
        if done < passes and stalled < STALL_PASSES:
            placed, rows = place_blocks(spilled, owner, done)
        else:
            placed, rows = None, spilled.cut_rows(owner)
        cuts.append(rows / max(2 * spilled.num_edges, 1))  # every edge is two rows
        key = pass_key(spilled, owner, cuts[-1])
        best, best_key, stalled = (owner, key, 0) if key < best_key else (best, best_key, stalled + 1)
        bar.advance(1.0)
        if placed is None:
            break
        owner = placed
    return best, cuts, best_key


def pass_key(spilled: SpilledGraph, owner: np.ndarray, cut: float) -> tuple[float, float]:
    """How a pass ranks (lower is better): how far its worst share is past 1 + imbalance (give or take
    BALANCE_SLACK: a clustered start a hair past it, facebook at 4 parts 1.031, cuts a tenth of what a
    placement within it cuts), then its cut."""
    excess = worst_balance(owner, spilled.shares, spilled.num_parts) - (1.0 + spilled.imbalance + BALANCE_SLACK)
    return max(excess, 0.0), cut


def place_blocks(spilled: SpilledGraph, previous: np.ndarray, seed: int) -> tuple[np.ndarray, int]:
    """One pass over the blocks from `previous`, and the cut rows of `previous` (counted on the way).

    Neighbours count with their owner in
    this pass if placed already, else with their owner in `previous`. Where `previous` places
    nothing (all -1) this is Fennel's placement: loads start empty, no part may pass (1 + imbalance)
    times the running average of any share. Else a restream: loads start full, each block leaves
    its parts before it is re-placed, no part may take more than (1 + imbalance) times the mean.
    """
    buckets, shares, num_parts, block = spilled.buckets, spilled.shares, spilled.num_parts, spilled.block
    imbalance, n = spilled.imbalance, previous.shape[0]
    owner = previous.copy()
    fresh = n > 0 and bool(previous.max() < 0)
    rng = np.random.default_rng(seed)
    load = np.zeros((num_parts, shares.shape[1])) if fresh else loads(previous, shares, num_parts)
    totals = np.maximum(shares.sum(axis=0), 1e-300)
    limit = (1.0 + imbalance) * totals / num_parts
    alpha = math.sqrt(num_parts) * max(spilled.num_edges, 1) / max(n, 1) ** GAMMA
    cut_rows = 0
    for b in range(spilled.num_blocks):
        first, last = b * block, min((b + 1) * block, n)
        node, neighbour = buckets.rows(b, "node"), buckets.rows(b, "neighbour")
        cut_rows += int(np.count_nonzero(previous[node] != previous[neighbour]))
        w = shares[first:last]
        where = owner[neighbour]
        known = where >= 0
        pairs = (node[known].astype(np.int64) - first) * num_parts + where[known]
        gain = np.bincount(pairs, minlength=(last - first) * num_parts).reshape(last - first, num_parts).astype(np.float64)
        if fresh:
            room = (1.0 + imbalance) * (load.sum(axis=0) + w.sum(axis=0)) / num_parts - load
        else:
            load -= loads(owner[first:last], w, num_parts)
            room = limit - load
        # load in node-equivalents: the mean over shares of each part's fraction, times N
        gain -= alpha * GAMMA * np.sqrt((load / totals).mean(axis=1) * n)
        chosen = _fill_parts(gain, w, room) if fresh else _restream_block(gain, w, room, owner[first:last].astype(np.int64), rng)
        owner[first:last] = chosen
        load += loads(chosen, w, num_parts)
    return owner, cut_rows


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
