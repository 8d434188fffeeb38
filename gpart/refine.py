"""Multi-constraint moves on top of a partitioner's owner array: balance repair and cut refinement.

    owner = repair_balance(owner, shares, num_parts, 1.10, xadj, adjncy)   # every share within the bound
    owner = refine_cut(owner, shares, num_parts, 1.10, xadj, adjncy)       # fewer cut edges, still within it

`shares` is [n, c]: one column per balanced quantity (node count, in-degree,
training-node membership; gpart.balance). Single-weight partitioners balance
one combination of them, which can leave one share a little past its bound
(KaMinPar at 8 parts on the 5.6M/70M graph: node balance 1.109) while others
have room; these passes treat every column as its own constraint.

Both are vectorised rounds over all nodes (never a loop per node), on the
symmetric CSR (xadj, adjncy) the partitioner already built:

- repair: the part and share furthest past the bound give nodes to the part
  with the most room: those whose move cuts the fewest extra edges
  (neighbours in the receiver minus neighbours at home) and that carry the
  least of the other shares, until the excess is gone.
- refine: label propagation with every constraint: each node's best part is
  the one holding most of its neighbours; per (from, to) pair the moves with
  the highest gain go while the receiver stays within the bound in every
  share; half the candidates move per round (a random half, seeded), so
  neighbours rarely swap past each other, and a round that does not lower
  the cut is undone.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

REPAIR_MARGIN = 0.005  # aim this far below the bound, so rounding in the next measure keeps it
MAX_CANDIDATES = 1 << 20  # lightest nodes considered per repair round


def balance_shares(in_degree: np.ndarray, train: Optional[np.ndarray]) -> np.ndarray:
    """[n, 2 or 3] float64 shares: node count, in-degree and (when given) training-node membership."""
    columns = [np.ones(in_degree.shape[0]), np.asarray(in_degree, dtype=np.float64)]
    if train is not None:
        columns.append(np.asarray(train, dtype=np.float64))
    return np.column_stack(columns)


def part_loads(owner: np.ndarray, shares: np.ndarray, num_parts: int) -> np.ndarray:
    """[num_parts, c] sum of each share per part."""
    return np.stack([np.bincount(owner, weights=shares[:, j], minlength=num_parts) for j in range(shares.shape[1])], axis=1)


def edge_cut(owner: np.ndarray, src: np.ndarray, dst: np.ndarray, chunk: int = 1 << 22) -> int:
    """Edges whose endpoints have different owners (directed input edges, counted in chunks)."""
    cut = 0
    for start in range(0, src.shape[0], chunk):
        cut += int(np.count_nonzero(owner[np.asarray(src[start:start + chunk])] != owner[np.asarray(dst[start:start + chunk])]))
    return cut


def repair_balance(owner: np.ndarray, shares: np.ndarray, num_parts: int, bound: float, xadj: np.ndarray,
                   adjncy: np.ndarray, max_rounds: int = 64) -> np.ndarray:
    """A copy of `owner` with every share's max/mean at most `bound`, where moves can reach it."""
    owner = owner.astype(np.int32, copy=True)
    degree = np.diff(xadj)
    for _ in range(max_rounds):
        loads = part_loads(owner, shares, num_parts)
        mean = loads.mean(axis=0)
        limit = np.where(mean > 0, bound * mean, np.inf)
        ratio = loads / np.where(mean > 0, limit, 1.0)
        part, share = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        if ratio[part, share] <= 1.0:
            break
        goal = (bound - REPAIR_MARGIN) * mean
        moved, receiver = np.zeros(0, dtype=np.int64), -1
        for receiver in np.argsort(loads[:, share] / np.where(mean[share] > 0, mean[share], 1.0), kind="stable"):
            if receiver != part:  # the part with the least of the share first, the next when it takes nothing
                moved = _repair_moves(owner, shares, part, share, int(receiver), loads, goal, degree, xadj, adjncy)
                if moved.size:
                    break
        if moved.size == 0:
            break
        owner[moved] = receiver
    return owner


def _repair_moves(owner, shares, part, share, receiver, loads, goal, degree, xadj, adjncy) -> np.ndarray:
    """Nodes of `part` to move to `receiver`: enough of `share` to reach the goal, cheapest cut first.

    When the receiver's room in another share runs out first (cheap nodes carry little of `share`),
    the nodes carrying most of `share` per unit of the receiver's scarcest room go instead.
    """
    room = np.maximum(goal - loads[receiver], 0)
    excess = loads[part, share] - goal[share]
    candidates = np.flatnonzero((owner == part) & (shares[:, share] > 0))
    candidates = candidates[np.all(shares[candidates] <= room, axis=1)]
    if candidates.size > MAX_CANDIDATES:  # the lightest ones: fewest edges to re-home
        candidates = candidates[np.argpartition(degree[candidates], MAX_CANDIDATES)[:MAX_CANDIDATES]]
    if candidates.size == 0:
        return candidates
    gain = _connections(owner, candidates, receiver, xadj, adjncy) - _connections(owner, candidates, part, xadj, adjncy)
    chosen = _prefix(candidates[np.lexsort((degree[candidates], -gain))], shares, share, room, excess)
    if shares[chosen, share].sum() < excess:
        consumption = np.max(shares[candidates] / np.where(room > 0, room, np.inf), axis=1)
        efficiency = shares[candidates, share] / np.maximum(consumption, 1e-300)
        chosen = _prefix(candidates[np.lexsort((-gain, -efficiency))], shares, share, room, excess)
    return chosen


def _prefix(ordered: np.ndarray, shares: np.ndarray, share: int, room: np.ndarray, excess: float) -> np.ndarray:
    """The shortest prefix of `ordered` carrying `excess` of `share`, cut where the receiver's room ends."""
    taken = np.cumsum(shares[ordered], axis=0)
    within = np.all(taken <= room, axis=1)
    fits = int(np.argmin(within)) if not within.all() else ordered.size
    enough = int(np.searchsorted(taken[:, share], excess)) + 1
    return ordered[:min(enough, fits)]


def _connections(owner: np.ndarray, nodes: np.ndarray, part: int, xadj: np.ndarray, adjncy: np.ndarray) -> np.ndarray:
    """Neighbours of each of `nodes` owned by `part` (symmetric CSR)."""
    start, stop = xadj[nodes], xadj[nodes + 1]
    lengths = stop - start
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(nodes.shape[0], dtype=np.int64)
    offsets = np.cumsum(lengths) - lengths
    positions = np.arange(total, dtype=np.int64) + np.repeat(start - offsets, lengths)
    hits = (owner[adjncy[positions]] == part).astype(np.int64)
    sums = np.add.reduceat(hits, offsets[lengths > 0]) if total else hits
    out = np.zeros(nodes.shape[0], dtype=np.int64)
    out[lengths > 0] = sums
    return out


def refine_cut(owner: np.ndarray, shares: np.ndarray, num_parts: int, bound: float, xadj: np.ndarray, adjncy: np.ndarray,
               rounds: int = 8, seed: int = 0, cut_of=None) -> np.ndarray:
    """Label-propagation rounds that lower the cut while every share stays within `bound` (max/mean).

    cut_of(owner) -> number measures a round (default: cut edges of the symmetric graph); a
    round that does not lower it is undone and ends the refinement.
    """
    rng = np.random.default_rng(seed)
    owner = owner.astype(np.int32, copy=True)
    measure = cut_of or (lambda o: _symmetric_cut(o, xadj, adjncy))
    best = measure(owner)
    for _ in range(rounds):
        trial = _propagate(owner, shares, num_parts, bound, xadj, adjncy, rng)
        if trial is None:
            break
        cut = measure(trial)
        if cut >= best:
            break
        owner, best = trial, cut
    return owner


def _symmetric_cut(owner: np.ndarray, xadj: np.ndarray, adjncy: np.ndarray) -> int:
    rows = np.repeat(np.arange(xadj.shape[0] - 1, dtype=np.int64), np.diff(xadj))
    return int(np.count_nonzero(owner[rows] != owner[adjncy]))


def _propagate(owner, shares, num_parts, bound, xadj, adjncy, rng) -> Optional[np.ndarray]:
    n = owner.shape[0]
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(xadj))
    conn = np.bincount(rows * num_parts + owner[adjncy], minlength=n * num_parts).reshape(n, num_parts)
    del rows
    best = np.argmax(conn, axis=1).astype(np.int32)
    gain = conn[np.arange(n), best] - conn[np.arange(n), owner]
    movers = np.flatnonzero((best != owner) & (gain > 0) & (rng.random(n) < 0.5))
    if movers.size == 0:
        return None
    loads = part_loads(owner, shares, num_parts)
    mean = loads.mean(axis=0)
    limit = np.where(mean > 0, bound * mean, np.inf)
    trial = owner.copy()
    # Receivers fill in order of gain, all pairs at once: a node moves if the cumulative load its
    # receiver gets (over nodes of higher gain) stays within the limit in every share.
    movers = movers[np.lexsort((-gain[movers], best[movers]))]
    to = best[movers]
    taken = np.cumsum(shares[movers], axis=0)
    first = np.searchsorted(to, np.arange(num_parts))
    before = np.vstack([np.zeros((1, shares.shape[1])), taken])[first]  # load taken before each receiver's run
    arrived = taken - before[to]
    # (counting every earlier candidate of the receiver, moved or not, and no departures: conservative)
    ok = np.all(loads[to] + arrived <= limit, axis=1)
    trial[movers[ok]] = to[ok]
    return trial
