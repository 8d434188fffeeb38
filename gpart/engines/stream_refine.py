"""Streaming refinement for `--method stream`: balanced label propagation and swaps over the spilled edges.

`refine`: each pass reads the buckets of gpart.engines.spilled_graph (every neighbour of a
block's nodes, block by block) once, one bincount of (node, owner of
neighbour) per block giving each node's neighbours per part
(`neighbour_counts`, [N, P] int32), from which the cut of the owners as they
stand and each node's best other part and gain (neighbours there minus
neighbours in its own part). Then one vectorised batch of moves (`_moves`):

- a seeded random half (ACTIVE) of the nodes with a positive gain may move
  (neighbours moving at once towards each other's parts would each gain
  alone and swap places together); they claim room best gain first, grouped
  by target part, no part past (1 + imbalance) times its mean in any
  balanced share (nodes, in-edges, training nodes or the named masks:
  SpilledGraph.shares); room freed by nodes leaving counts in the next
  of ROUNDS rounds;
- full parts block most of those moves (facebook, 8 parts at 3%: 150-400
  candidates a pass, 0-9 fit), so then, for every two parts a and b, the
  i-th best a->b node swaps with the i-th best b->a node (either may lose,
  the two together gain), the prefix of pairs gaining most whose loads
  leave both parts within the bound (`_swap`).

The cut of a pass is counted by the next read; the best pass (by `rank`:
the balance, then the cut) is kept, so more passes never return a worse
result; STALL_PASSES passes in a row that do not lower the best cut by
SETTLED of it end the refinement.

`tighten` brings a partition far past the bound (a partition of clusters
by one combined weight) within it by steps, repairing (gpart.engines.refine.rebalance,
moves priced by `neighbour_counts`) and refining at each looser bound first.

Memory: the [N, P] int32 counts (4 P bytes a node: 64 MiB at 1M nodes and
16 parts; twice that while a batch picks each node's best other part) and
N-sized owners, targets and gains; one block's rows; the
[P, C] loads. Time: one read of the buckets a pass plus O(N P) for the
swaps (a Python loop over the P (P - 1) / 2 pairs of parts).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from gpart.engines.refine import rebalance
from gpart.engines.spilled_graph import SpilledGraph

PASSES = 12
# STALL_PASSES passes in a row that do not lower the best cut by SETTLED of it end the refinement (R-MAT 1M/10M,
# 8 parts, passes 1-12: 0.27%, 0.15%, 0.09%, 0.05% ... of the cut; facebook 2%, 0.7%, 0.2%, 0.5%, 0.15% ...)
STALL_PASSES = 2
SETTLED = 0.001
ACTIVE = 0.5
ROUNDS = 4
SEED = 11
TIGHTEN_STAGES = 4  # bounds 1 + imbalance * 2^k, k = TIGHTEN_STAGES .. 1, before the bound itself
TIGHTEN_PASSES = 4  # refinement passes at each of those bounds

Rank = Callable[[np.ndarray, float], tuple[float, float]]


def refine(spilled: SpilledGraph, owner: np.ndarray, rank: Rank, passes: int = PASSES,
           bar=None) -> tuple[np.ndarray, list[float], tuple[float, float]]:
    """The best of `owner` and up to `passes` refinement passes from it (by `rank`: lower is better), the cut
    (fraction of the input edges) of every pass, `owner`'s first, and the best one's rank."""
    shares, num_parts = spilled.shares, spilled.num_parts
    limit = (1.0 + spilled.imbalance) * shares.sum(axis=0) / num_parts
    cuts: list[float] = []
    best, best_key, stalled = owner, (np.inf, np.inf), 0
    for done in range(passes + 1):
        counts = neighbour_counts(spilled, owner)
        rows = np.arange(owner.shape[0])
        cuts.append(float(counts.sum(dtype=np.int64) - counts[rows, owner].sum(dtype=np.int64)) / max(2 * spilled.num_edges, 1))
        key = rank(owner, cuts[-1])
        settled = key[0] == best_key[0] and key[1] > best_key[1] * (1.0 - SETTLED)
        stalled = stalled + 1 if key >= best_key or settled else 0
        best, best_key = (owner, key) if key < best_key else (best, best_key)
        if bar is not None:
            bar.advance(1.0)
        if done == passes or stalled >= STALL_PASSES:
            break
        moved = _moves(owner, counts, shares, limit, num_parts, np.random.default_rng([SEED, done]))
        if moved is None:
            break
        owner = moved
    return best, cuts, best_key


def tighten(spilled: SpilledGraph, owner: np.ndarray) -> np.ndarray:
    """`owner` (far past the bound, e.g. a partition of clusters) moved within 1 + imbalance in every share, by
    steps: at each bound 1 + imbalance * 2^k (k = TIGHTEN_STAGES .. 1, those `owner` is not within already),
    then 1 + imbalance, the nodes move until every share is within it (gpart.engines.refine.rebalance, each move
    priced by the node's neighbours in its part and in the receiver: `neighbour_counts`, one read), then
    TIGHTEN_PASSES refinement passes at that bound (not after the last: the caller refines).

    In one step from the partition of facebook's clusters by one combined weight (8 parts, ids permuted,
    node / in-edge balance 1.42 / 1.57, cut 0.06) the repair cuts 0.213 and the refinement ends at 0.205;
    by steps 0.48, 0.24, 0.12, 0.06 it ends at 0.200 (ids as read 0.204 and 0.196).
    """
    worst = worst_balance(owner, spilled.shares, spilled.num_parts)
    for k in range(TIGHTEN_STAGES, -1, -1):
        bound = 1.0 + spilled.imbalance * 2**k
        if k and bound >= worst:
            continue
        owner = _repair(spilled, owner, bound)
        if k:
            # the cut of these passes counts the spilled rows (self-loops left out), not the input's edges
            at_bound = spilled.at(bound - 1.0, int(spilled.buckets.offsets[-1]) // 2)
            owner = refine(at_bound, owner, lambda owner, cut: (0.0, cut), TIGHTEN_PASSES)[0]
    return owner


def _repair(spilled: SpilledGraph, owner: np.ndarray, bound: float) -> np.ndarray:
    """gpart.engines.refine.rebalance to `bound`, a move priced by the mover's neighbours in its part minus in the receiver
    (counted once, before the moves)."""
    counts = neighbour_counts(spilled, owner)
    return rebalance(owner, spilled.shares, spilled.num_parts, bound,
                     lambda current, nodes, part, to: counts[nodes, part] - counts[nodes, to], counts.sum(axis=1))


def worst_balance(owner: np.ndarray, shares: np.ndarray, num_parts: int) -> float:
    """The largest max/mean over the shares (1.0 = every share perfectly balanced)."""
    mean = shares.sum(axis=0) / num_parts
    return float((loads(owner, shares, num_parts).max(axis=0) / np.where(mean > 0, mean, np.inf)).max())


def loads(owner: np.ndarray, shares: np.ndarray, num_parts: int) -> np.ndarray:
    """[P, C]: each part's sum of each share over the nodes `owner` assigns to it."""
    return np.column_stack([np.bincount(owner, weights=shares[:, c], minlength=num_parts) for c in range(shares.shape[1])])


def neighbour_counts(spilled: SpilledGraph, owner: np.ndarray) -> np.ndarray:
    """[N, P] int32: each node's neighbours in each part (one read of the buckets)."""
    num_parts = spilled.num_parts
    counts = np.zeros((owner.shape[0], num_parts), dtype=np.int32)
    for first, last, node, neighbour in spilled.spans(num_parts):
        local = node.astype(np.int64) - first
        counts[first:last] = np.bincount(local * num_parts + owner[neighbour],
                                         minlength=(last - first) * num_parts).reshape(last - first, num_parts)
    return counts


def _moves(owner: np.ndarray, counts: np.ndarray, shares: np.ndarray, limit: np.ndarray, num_parts: int,
           rng: np.random.Generator) -> np.ndarray | None:
    """New owners after one batch of moves (None where no move gains): free room best gain first, then swaps.
    The owners may come back unchanged (the random half left nothing to do): the next pass draws another."""
    rows = np.arange(owner.shape[0])
    own = counts[rows, owner]
    others = counts.copy()
    others[rows, owner] = -1
    target = np.argmax(others, axis=1).astype(np.int32)
    gain = others[rows, target] - own
    del others
    if not np.any(gain > 0):
        return None
    movers = np.flatnonzero((gain > 0) & (rng.random(owner.shape[0]) < ACTIVE))
    owner = owner.copy()
    load = loads(owner, shares, num_parts)
    moved = np.zeros(owner.shape[0], dtype=bool)
    for _ in range(ROUNDS):
        taken = _claim_room(movers, target, gain, shares, load, limit)
        if taken.size == 0:
            break
        _apply(owner, taken, target, shares, load)
        moved[taken] = True
        movers = np.setdiff1d(movers, taken, assume_unique=True)
    _swap(owner, counts, moved | (rng.random(owner.shape[0]) >= ACTIVE), shares, load, limit, num_parts)
    return owner


def _claim_room(movers: np.ndarray, target: np.ndarray, gain: np.ndarray, shares: np.ndarray, load: np.ndarray,
                limit: np.ndarray) -> np.ndarray:
    """The movers whose target part has room for them and for every better mover into it (in every share)."""
    order = movers[np.lexsort((-gain[movers], target[movers]))]  # grouped by target part, best gain first
    to = target[order]
    w = shares[order]
    cum = np.cumsum(w, axis=0)
    first = np.searchsorted(to, to)  # each row's group start
    within = cum - cum[first] + w[first]
    fits = np.all(load[to] + within <= limit, axis=1)
    return order[fits]


def _swap(owner: np.ndarray, counts: np.ndarray, fixed: np.ndarray, shares: np.ndarray, load: np.ndarray,
          limit: np.ndarray, num_parts: int) -> None:
    """Swap nodes between every two parts a, b (in place; `load` kept): the i-th best a->b with the i-th best b->a,
    as long as the two together gain (either may lose) and both parts stay within `limit`; nodes in `fixed` and
    nodes swapped once stay."""
    rows = np.arange(owner.shape[0])
    own = counts[rows, owner]
    by_part = np.argsort(owner, kind="stable")
    members = np.split(by_part, np.searchsorted(owner[by_part], np.arange(1, num_parts)))  # owners as the swaps start
    for a in range(num_parts):  # a Python loop over pairs of parts, vectorised within a pair
        for b in range(a + 1, num_parts):
            ab, ba = _towards(members[a], counts, own, fixed, b), _towards(members[b], counts, own, fixed, a)
            if ab[0].size == 0 or ba[0].size == 0:
                continue
            # a pair gains only if its a->b node gains more than its b->a node can lose, and the other way round
            ab, ba = _best_first(*ab, -ba[1].max()), _best_first(*ba, -ab[1].max())
            k = min(ab[0].size, ba[0].size)
            if k == 0:
                continue
            total = np.cumsum(ab[1][:k] + ba[1][:k])  # the pairs gain less and less: their sums rise, then fall
            net = np.cumsum(shares[ab[0][:k]] - shares[ba[0][:k]], axis=0)  # what b gains and a loses after each pair
            # the pairs move at once: only the loads after the last pair taken count
            ok = np.all(load[b] + net <= limit, axis=1) & np.all(load[a] - net <= limit, axis=1) & (total > 0)
            pairs = int(np.argmax(np.where(ok, total, 0))) + 1 if ok.any() else 0
            if pairs:
                load[b] += net[pairs - 1]
                load[a] -= net[pairs - 1]
                owner[ab[0][:pairs]], owner[ba[0][:pairs]] = b, a
                fixed[ab[0][:pairs]] = fixed[ba[0][:pairs]] = True


def _towards(members: np.ndarray, counts: np.ndarray, own: np.ndarray, fixed: np.ndarray,
             b: int) -> tuple[np.ndarray, np.ndarray]:
    """The free nodes of `members` (one part's) with a neighbour in part b and what moving to b gains each."""
    nodes = members[~fixed[members] & (counts[members, b] > 0)]
    return nodes, counts[nodes, b].astype(np.int64) - own[nodes]


def _best_first(nodes: np.ndarray, gain: np.ndarray, floor: int) -> tuple[np.ndarray, np.ndarray]:
    """`nodes` gaining more than `floor`, best first, and their gains."""
    keep = gain > floor
    nodes, gain = nodes[keep], gain[keep]
    order = np.argsort(-gain, kind="stable")
    return nodes[order], gain[order]


def _apply(owner: np.ndarray, nodes: np.ndarray, target: np.ndarray, shares: np.ndarray, load: np.ndarray) -> None:
    """Move `nodes` to their target parts (in place), updating `load` [P, C]."""
    if nodes.size == 0:
        return
    for c in range(shares.shape[1]):
        np.subtract.at(load[:, c], owner[nodes], shares[nodes, c])
        np.add.at(load[:, c], target[nodes], shares[nodes, c])
    owner[nodes] = target[nodes]
