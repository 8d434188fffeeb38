"""gpart.locality_order.bfs_order: a permutation that puts neighbours at nearby ids, and KaMinPar's owners
mapped back through it (gpart.kaminpar_backend)."""

from __future__ import annotations

import numpy as np
import pytest

from gpart.locality_order import bfs_order, neighbour_lists, runs_by_entries


def csr(n: int, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric CSR of the undirected `pairs` on n nodes."""
    src = np.concatenate([pairs[:, 0], pairs[:, 1]])
    dst = np.concatenate([pairs[:, 1], pairs[:, 0]])
    order = np.lexsort((dst, src))
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=xadj[1:])
    return xadj, dst[order].astype(np.int64)


def shuffled_path(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A path 0-1-...-(n-1) with its ids permuted at random: (xadj, adjncy, the id of each path position)."""
    ids = np.random.default_rng(seed).permutation(n)
    pairs = np.stack([ids[:-1], ids[1:]], axis=1)
    return (*csr(n, pairs), ids)


@pytest.mark.parametrize("chunk", [1, 3, 1 << 22])
def test_a_shuffled_path_comes_back_in_path_order(chunk):
    xadj, adjncy, ids = shuffled_path(1000, 5)
    order = bfs_order(xadj, adjncy, chunk=chunk)
    assert np.array_equal(np.sort(order), np.arange(1000))
    position = np.empty(1000, dtype=np.int64)
    position[order] = np.arange(1000)
    along = position[ids]  # the new id of each path position
    # the search starts at an inner node (degree 2) and goes out both ways: path neighbours end up <= 2 ids apart
    assert np.abs(np.diff(along)).max() <= 2


def test_every_node_once_with_components_and_isolated_nodes():
    rng = np.random.default_rng(1)
    n = 5000
    big = rng.integers(0, 3000, size=(20000, 2))  # a large component on 0..2999
    small = np.array([[3000 + 2 * i, 3001 + 2 * i] for i in range(500)])  # 500 two-node components
    pairs = np.concatenate([big[big[:, 0] != big[:, 1]], small])  # nodes 4000..4999 isolated
    xadj, adjncy = csr(n, pairs)
    order = bfs_order(xadj, adjncy)
    assert np.array_equal(np.sort(order), np.arange(n))
    assert np.array_equal(order, bfs_order(xadj, adjncy))  # deterministic
    assert order[0] == np.argmax(np.diff(xadj))  # from the highest-degree node


def test_neighbour_lists_and_runs():
    xadj, adjncy = csr(6, np.array([[0, 1], [0, 2], [3, 4], [1, 2]]))
    nodes = np.array([2, 0, 5, 3])
    assert neighbour_lists(xadj, adjncy, nodes).tolist() == [0, 1, 1, 2, 4]
    runs = list(runs_by_entries(xadj, nodes, 2))
    assert np.concatenate(runs).tolist() == nodes.tolist() and all(r.size >= 1 for r in runs)


def test_kaminpar_owners_are_mapped_back_to_the_input_ids():
    """Two cliques whose ids are interleaved at random: KaMinPar (seeing them renumbered) must still put
    each clique in one part, which only holds if its owners are mapped back to the input ids."""
    pytest.importorskip("kaminpar")
    from gpart.kaminpar_backend import kaminpar_partition

    ids = np.random.default_rng(3).permutation(200)
    cliques = [ids[:100], ids[100:]]
    pairs = np.concatenate([np.array([[a, b] for i, a in enumerate(c) for b in c[i + 1:]]) for c in cliques])
    xadj, adjncy = csr(200, pairs)
    owner = kaminpar_partition(xadj, adjncy, None, 2, seed=0, imbalance=0.03, threads=1)
    assert len(set(owner[cliques[0]])) == 1 and len(set(owner[cliques[1]])) == 1
    assert owner[cliques[0][0]] != owner[cliques[1][0]]
