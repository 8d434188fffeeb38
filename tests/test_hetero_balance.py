"""The per-type balance repair run after the partitioners on typed graphs: gpart.engines.refine.repair_balance with one
share column per node type (SPEC.md 8.3), on the cases typed graphs give it."""

from __future__ import annotations

import numpy as np

from gpart.base.graph import Graph
from gpart.engines.refine import repair_balance
from gpart.engines.symmetric import symmetric_csr
from gpart.partition_methods.typed_runs import type_balance as column_balance


def _csr(n: int, src: list[int], dst: list[int]) -> tuple[np.ndarray, np.ndarray]:
    return symmetric_csr(Graph(n, np.array(src, np.int64), np.array(dst, np.int64), {}))


def _two_rings(a: int, b: int, bridges: int) -> tuple[np.ndarray, np.ndarray]:
    """Ring 0..a-1 and ring a..a+b-1, node i of the first joined to node a+i for i < bridges."""
    src = list(range(a)) + list(range(a, a + b)) + list(range(bridges))
    dst = [(i + 1) % a for i in range(a)] + [a + (i + 1) % b for i in range(b)] + [a + i for i in range(bridges)]
    return _csr(a + b, src, dst)


def _cut(owner: np.ndarray, xadj: np.ndarray, adjncy: np.ndarray) -> int:
    rows = np.repeat(np.arange(xadj.shape[0] - 1), np.diff(xadj))
    return int(np.count_nonzero(owner[rows] != owner[adjncy])) // 2


def test_moves_the_cheapest_boundary_nodes_first():
    xadj, adjncy = _two_rings(60, 40, 3)
    owner = np.repeat(np.array([0, 1], np.int32), [60, 40])  # 60/40: 1.2 past the bound 1.1
    shares = np.ones((100, 1))
    out = repair_balance(owner, shares, 2, 1.10, xadj, adjncy)
    moved = np.flatnonzero(out != owner)
    assert column_balance(out, shares, 2)[0] <= 1.10
    assert moved.size == 6  # down to 54, the aim 0.005 below the bound (54.75), no further
    assert {0, 1, 2} <= set(moved.tolist())  # the nodes with a neighbour in the receiver cost one cut edge less
    assert out.dtype == np.int32 and owner[0] == 0  # a copy; the input is untouched
    # the greedy's cut beside moving 6 nodes that have no neighbour across
    plain = owner.copy()
    plain[[10, 11, 12, 13, 14, 15]] = 1
    assert _cut(out, xadj, adjncy) < _cut(plain, xadj, adjncy)


def test_every_column_is_its_own_constraint():
    """Type 0 is over-full in part 0 while type 1 is balanced: type 0 moves, type 1 stays within the bound."""
    rng = np.random.default_rng(0)
    n = 400
    src, dst = rng.integers(0, n, 1600), rng.integers(0, n, 1600)
    xadj, adjncy = _csr(n, src.tolist(), dst.tolist())
    kind = (np.arange(n) >= 300).astype(np.int64)  # 300 nodes of type 0, 100 of type 1
    shares = np.column_stack([kind == 0, kind == 1]).astype(np.float64)
    owner = np.zeros(n, np.int32)
    owner[:300] = np.repeat(np.arange(4), [120, 60, 60, 60])  # type 0: 120 of mean 75 in part 0 (1.6)
    owner[300:] = np.arange(100) % 4  # type 1: balanced
    before = column_balance(owner, shares, 4)
    out = repair_balance(owner, shares, 4, 1.10, xadj, adjncy)
    after = column_balance(out, shares, 4)
    assert before[0] == 1.6 and before[1] == 1.0
    assert after[0] <= 1.10 and after[1] <= 1.10
    assert np.array_equal(out[300:], owner[300:])  # only nodes of the over-full type move
    assert np.all(out[owner != out] != 0)  # moved out of the over-full part


def test_a_bound_no_move_can_reach_stops_at_the_best_possible():
    xadj, adjncy = _csr(7, [0, 1, 3, 4, 5], [1, 2, 4, 5, 6])
    shares = np.column_stack([np.arange(7) < 3, np.arange(7) >= 3]).astype(np.float64)  # 3 nodes of type 0 on 2 parts
    owner = np.array([0, 0, 0, 0, 1, 0, 1], np.int32)
    out = repair_balance(owner, shares, 2, 1.10, xadj, adjncy)
    counts = np.bincount(out[:3], minlength=2)
    assert sorted(counts.tolist()) == [1, 2]  # 2 / 1.5 = 1.33 is the best a 3-node type can do on 2 parts
    assert column_balance(out, shares, 2)[1] <= 1.10
    balanced = np.array([0, 1, 0, 0, 1, 0, 1], np.int32)
    assert np.array_equal(repair_balance(balanced, shares, 2, 1.10, xadj, adjncy), balanced)  # nothing to repair
