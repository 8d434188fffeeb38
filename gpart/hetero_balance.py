"""Balance repair after a partitioner: every column of a weight matrix within its own bound (SPEC.md 8.3).

    owner = repair_balance(owner, shares, num_parts, 1.10, xadj, adjncy)   # shares: [n, k] float

Single-weight partitioners (KaMinPar, the streaming one) balance one combined
weight, so one node type can end past the bound while the sum is balanced
(KaMinPar, Cora-derived graph, 4 parts: papers 1.15, words 1.17). This pass
treats every column of `shares` as its own constraint: while a (part, column)
is past `bound * mean`, the part gives nodes carrying that column to the part
with the most room in it, cheapest first: fewest extra cut edges (neighbours
at home minus neighbours in the receiver, on the symmetric CSR the caller
has), then the least of the other columns, as many as cover the excess
without pushing the receiver past its goal in any column. Each round is
vectorised over the giving part's nodes (no loop per node or edge).

The signature is that of gpart.refine.repair_balance on the issue-910 branch
(not merged when this was written); one of the two should replace the other.
"""

from __future__ import annotations

import numpy as np

REPAIR_MARGIN = 0.005  # aim this far below the bound, so the next measurement's rounding keeps it


def part_loads(owner: np.ndarray, shares: np.ndarray, num_parts: int) -> np.ndarray:
    """[num_parts, k]: the sum of each column of `shares` per part."""
    return np.stack([np.bincount(owner, weights=shares[:, j], minlength=num_parts) for j in range(shares.shape[1])], axis=1)


def column_balance(owner: np.ndarray, shares: np.ndarray, num_parts: int) -> list[float]:
    """max/mean over parts of every column (1.0 for an empty column)."""
    loads = part_loads(owner, shares, num_parts)
    mean = loads.mean(axis=0)
    return [float(loads[:, j].max() / mean[j]) if mean[j] > 0 else 1.0 for j in range(shares.shape[1])]


def repair_balance(owner: np.ndarray, shares: np.ndarray, num_parts: int, bound: float, xadj: np.ndarray,
                   adjncy: np.ndarray, max_rounds: int = 64) -> np.ndarray:
    """A copy of `owner` with every column's max/mean within `bound`, where moves can reach it.

    A column can only get as low as mean + its largest weight (3 unit nodes on 2 parts: 2 / 1.5),
    so the bound accepted per column is the larger of the two."""
    owner = owner.astype(np.int32, copy=True)
    shares = np.asarray(shares, dtype=np.float64)
    mean = shares.sum(axis=0) / num_parts
    heaviest = shares.max(axis=0, initial=0.0)
    accept = np.maximum(bound * mean, mean + heaviest)
    goal = np.maximum((bound - REPAIR_MARGIN) * mean, mean + heaviest)
    live = mean > 0
    for _ in range(max_rounds):
        loads = part_loads(owner, shares, num_parts)
        ratio = np.where(live, loads / np.where(live, accept, 1.0), 0.0)
        part, col = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        if ratio[part, col] <= 1.0:
            break
        room = np.maximum(goal - loads, 0.0)  # [P, k]: what each part may still take in every column
        moved, receiver = np.zeros(0, dtype=np.int64), -1
        for receiver in np.argsort(-room[:, col], kind="stable"):  # most room first; the next if it takes nothing
            if receiver != part and room[receiver, col] > 0:
                moved = _moves(owner, shares, int(part), int(col), int(receiver), loads[part, col] - goal[col],
                               room[receiver], xadj, adjncy)
                if moved.size:
                    break
        if moved.size == 0:
            break
        owner[moved] = receiver
    return owner


def _moves(owner: np.ndarray, shares: np.ndarray, part: int, col: int, receiver: int, excess: float, room: np.ndarray,
           xadj: np.ndarray, adjncy: np.ndarray) -> np.ndarray:
    """Nodes of `part` carrying column `col` to move to `receiver`: cheapest first, enough to cover `excess`,
    no more than `room` allows in any column."""
    cand = np.flatnonzero((owner == part) & (shares[:, col] > 0))
    if cand.size == 0:
        return cand
    deg = (xadj[cand + 1] - xadj[cand]).astype(np.int64)
    total = int(deg.sum())
    seg = np.repeat(np.arange(cand.size), deg)
    first = np.cumsum(deg) - deg
    nbr_owner = owner[adjncy[np.repeat(xadj[cand] - first, deg) + np.arange(total)]]
    home = np.bincount(seg, weights=nbr_owner == part, minlength=cand.size)
    there = np.bincount(seg, weights=nbr_owner == receiver, minlength=cand.size)
    others = shares[cand].sum(axis=1) - shares[cand, col]
    order = np.lexsort((others, home - there))  # extra cut edges first, then the least of the other columns
    ordered = cand[order]
    cum = np.cumsum(shares[ordered], axis=0)
    enough = int(np.searchsorted(cum[:, col], excess, side="left")) + 1  # the prefix covering the excess
    fits = min(int(np.searchsorted(cum[:, c], room[c], side="right")) for c in range(shares.shape[1]) if cum[-1, c] > 0)
    return ordered[:max(0, min(enough, fits, ordered.size))]
