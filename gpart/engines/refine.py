"""Multi-constraint moves on top of a partitioner's owner array: balance repair and cut refinement.

    owner = repair_balance(owner, shares, num_parts, 1.10, xadj, adjncy)   # every share within the bound
    owner = refine_cut(owner, shares, num_parts, 1.10, xadj, adjncy)       # fewer cut edges, still within it

`shares` is [n, c]: one column per balanced quantity (node count, in-degree,
training-node membership; gpart.engines.balance). Single-weight partitioners balance
one combination of them, which can leave one share a little past its bound
(KaMinPar at 8 parts on the 5.6M/70M graph: node balance 1.109) while others
have room; these passes treat every column as its own constraint.

Both are vectorised rounds over all nodes (never a loop per node). The
refinement reads the symmetric CSR (xadj, adjncy) the partitioner built; the
repair prices its moves through a callable (on that CSR, or in gpart.engines.stream
by each node's neighbours in its cluster):

- repair (`rebalance`; `repair_balance` prices moves on the CSR): the part
  and share furthest past the bound give nodes to a receiver, the prefix
  of candidates that lowers the total excess (every part and share, each
  share in units of its mean) most, ordered by what a node takes off the
  excess per unit of cut it adds. A node counts for the shares its part is
  over in and against those the receiver is full in, so moving a hub moves
  many in-edges for one node and a node with no in-edges moves a node for
  none; a receiver may go past the bound in a share when that lowers the
  excess more (a later round moves it on): KaMinPar's parts are often
  over in one share and under in the other, and only such exchanges fix
  both (R-MAT 1M/10M, 4 parts: node / in-edge balance 1.17 / 1.13).
- refine: label propagation with every constraint: each node's best part is
  the one holding most of its neighbours; per (from, to) pair the moves with
  the highest gain go while the receiver stays within the bound in every
  share; half the candidates move per round (a random half, seeded), so
  neighbours rarely swap past each other, and a round that does not lower
  the cut is undone.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from gpart.base.ids import narrowest_unsigned
from gpart.base.spans import ARRAY_THREADS, even_spans, run_spans
from gpart.engines.locality_order import neighbour_lists

REPAIR_MARGIN = 0.005  # aim this far below the bound, so rounding in the next measure keeps it
MAX_CANDIDATES = 1 << 20  # nodes priced per repair round (the most worth per edge)

# added_cut(owner, nodes, part, receiver) -> the cut edges each of `nodes` adds by moving from part to receiver
AddedCut = Callable[[np.ndarray, np.ndarray, int, int], np.ndarray]


def balance_shares(in_degree: np.ndarray, train: Optional[np.ndarray]) -> np.ndarray:
    """[n, 2 or 3] float64 shares: node count, in-degree and (when given) training-node membership."""
    columns = [np.ones(in_degree.shape[0]), np.asarray(in_degree, dtype=np.float64)]
    if train is not None:
        columns.append(np.asarray(train, dtype=np.float64))
    return np.column_stack(columns)


def part_loads(owner: np.ndarray, shares: np.ndarray, num_parts: int) -> np.ndarray:
    """[num_parts, c] sum of each share per part."""
    return np.stack([np.bincount(owner, weights=shares[:, j], minlength=num_parts) for j in range(shares.shape[1])], axis=1)


def edge_cut(owner: np.ndarray, src: np.ndarray, dst: np.ndarray, chunk: int = 1 << 22,
             threads: int = ARRAY_THREADS) -> int:
    """Edges whose endpoints have different owners (directed input edges, counted in chunks, in `threads`
    spans of the edges at once: the owner gathers run without the GIL). The owners are gathered from a
    copy in the narrowest dtype, which stays in the cache (R-MAT 5.6M/70M, 4 parts: 5.1-5.5 s with int32
    owners on one thread, 0.7-1.0 s with uint8 on two)."""
    if owner.size and int(owner.min()) >= 0:
        owner = owner.astype(narrowest_unsigned(int(owner.max()) + 1))

    def count(first: int, stop: int) -> int:
        cut = 0
        for start in range(first, stop, chunk):
            end = min(start + chunk, stop)
            cut += int(np.count_nonzero(owner[np.asarray(src[start:end])] != owner[np.asarray(dst[start:end])]))
        return cut

    return sum(run_spans(count, even_spans(int(src.shape[0]), threads)))


def repair_balance(owner: np.ndarray, shares: np.ndarray, num_parts: int, bound: float, xadj: np.ndarray,
                   adjncy: np.ndarray, max_rounds: int = 256) -> np.ndarray:
    """A copy of `owner` with every share's max/mean at most `bound`, where moves can reach it.

    `rebalance` with the cut a move adds counted on the symmetric CSR: the mover's neighbours at
    home minus those in the receiver (boundary nodes add less).
    """
    def added_cut(current: np.ndarray, nodes: np.ndarray, part: int, receiver: int) -> np.ndarray:
        return _csr_added_cut(current, nodes, part, receiver, xadj, adjncy)

    return rebalance(owner, shares, num_parts, bound, added_cut, np.diff(xadj), max_rounds)


def rebalance(owner: np.ndarray, shares: np.ndarray, num_parts: int, bound: float, added_cut: AddedCut,
              degree: np.ndarray, max_rounds: int = 256) -> np.ndarray:
    """A copy of `owner` with every share's max/mean at most `bound`, where moves can reach it.

    Each round moves nodes from the part furthest past the bound in a share (or, when no move
    helps there, the next one past it) to one receiver, the receivers with the least of that share
    first, as long as the total excess (over every part and share, each share in units of its
    mean) drops: see `_repair_moves`. A receiver may take more of
    a share it has no room in when the move lowers the excess more; a later round moves it on.
    `added_cut(owner, nodes, part, receiver)`: the cut edges each of `nodes` adds by moving;
    `degree` [n]: edges per node, which ranks candidates when there are too many to price.
    """
    owner = owner.astype(np.int32, copy=True)
    mean = shares.sum(axis=0) / num_parts  # the totals never change: one mean for every round
    unit = np.where(mean > 0, mean, np.inf)  # a share nobody carries weighs nothing
    goal = (bound - REPAIR_MARGIN) * mean
    for _ in range(max_rounds):
        loads = part_loads(owner, shares, num_parts)
        ratio = loads / (bound * unit)
        moved, receiver = np.zeros(0, dtype=np.int64), -1
        for flat in np.argsort(-ratio, axis=None, kind="stable"):  # the furthest past first, the next when none helps
            part, share = np.unravel_index(int(flat), ratio.shape)
            if ratio[part, share] <= 1.0:
                break
            for receiver in np.argsort(ratio[:, share], kind="stable"):  # the part with the least of the share first
                if receiver != part:
                    moved = _repair_moves(owner, shares, int(part), int(receiver), loads, goal, unit, added_cut, degree)
                    if moved.size:
                        break
            if moved.size:
                break
        if moved.size == 0:
            break
        owner[moved] = receiver
    return owner


def _repair_moves(owner, shares, part, receiver, loads, goal, unit, added_cut: AddedCut, degree) -> np.ndarray:
    """Nodes of `part` to move to `receiver`: the prefix, best first, that lowers the total excess most.

    A node's worth is what moving it alone takes off the excess of the two parts, per unit of cut
    it adds (`added_cut`): the shares `part` is over in count for it, the shares `receiver` is
    full in (or would pass the goal in) against it; so moving a hub moves many in-edges for one
    node, a node with no in-edges a node for none, and a hub bigger than the receiver's room is
    worth nothing.
    """
    members = np.flatnonzero(owner == part)
    before = _excess(loads[part], loads[receiver], np.zeros((1, shares.shape[1])), goal, unit)[0]
    worth = before - _excess(loads[part], loads[receiver], shares[members], goal, unit)
    candidates, worth = members[worth > 0], worth[worth > 0]
    if candidates.size > MAX_CANDIDATES:  # the most worth per edge to re-home
        keep = np.argpartition(-worth / (degree[candidates] + 1.0), MAX_CANDIDATES)[:MAX_CANDIDATES]
        candidates, worth = candidates[keep], worth[keep]
    if candidates.size == 0:
        return candidates
    cost = added_cut(owner, candidates, part, receiver)
    ordered = candidates[np.lexsort((cost, -worth / (np.maximum(cost, 0) + 1.0)))]
    total = _excess(loads[part], loads[receiver], np.cumsum(shares[ordered], axis=0), goal, unit)
    best = int(np.argmin(total))
    return ordered[:best + 1] if total[best] < before * (1 - 1e-9) else ordered[:0]


def _excess(giver: np.ndarray, taker: np.ndarray, moved: np.ndarray, goal: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """[k]: the two parts' excess over the goal (summed over shares, in units of the mean) after each row of `moved`
    [k, C] leaves `giver` [C] for `taker` [C]."""
    return ((np.maximum(giver - moved - goal, 0) + np.maximum(taker + moved - goal, 0)) / unit).sum(axis=1)


def _csr_added_cut(owner: np.ndarray, nodes: np.ndarray, part: int, receiver: int, xadj: np.ndarray,
                   adjncy: np.ndarray) -> np.ndarray:
    """Neighbours of each of `nodes` owned by `part` minus those owned by `receiver` (symmetric CSR), from one
    gather of the neighbours' owners (two took 18 of the repair's 26 s on R-MAT 4M/50M)."""
    lengths = xadj[nodes + 1] - xadj[nodes]
    out = np.zeros(nodes.shape[0], dtype=np.int64)
    if int(lengths.sum()) == 0:
        return out
    offsets = np.cumsum(lengths) - lengths
    neighbour_owner = owner[neighbour_lists(xadj, adjncy, nodes)]
    signed = (neighbour_owner == part).astype(np.int64) - (neighbour_owner == receiver)
    out[lengths > 0] = np.add.reduceat(signed, offsets[lengths > 0])
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
