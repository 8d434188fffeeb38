"""gpart.engines.locality_order: a permutation that puts neighbours at nearby ids, used only where the ids look random,
and KaMinPar's input written through it and its owners mapped back (gpart.engines.kaminpar)."""

from __future__ import annotations

import numpy as np
import pytest
from support.public_data import PUBLIC_DATA

import gpart.engines.locality_order as locality
from gpart.base.graph import Graph
from gpart.engines.locality_order import RANDOM_GAP, bfs_order, locality_order, neighbour_gap, neighbour_lists, runs_by_entries, worth_renumbering
from gpart.formats.input.readers import read_graph


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


def reference_bfs(xadj: np.ndarray, adjncy: np.ndarray) -> list[int]:
    """bfs_order's rules one node at a time: levels from the highest-degree node, each level in the order its
    nodes are first met, further searches from the highest-degree unreached node while at least
    RESTART_SHARE of the nodes is unreached (RESTARTS at most), the rest in id order."""
    n = xadj.shape[0] - 1
    degree = np.diff(xadj)
    reached, order = [False] * n, []
    for _ in range(1 + locality.RESTARTS):
        unreached = [v for v in range(n) if not reached[v] and degree[v] > 0]
        if not unreached or (order and len(unreached) < locality.RESTART_SHARE * n):
            break
        root = max(unreached, key=lambda v: (degree[v], -v))
        reached[root], frontier = True, [root]
        while frontier:
            order += frontier
            level = []
            for u in frontier:
                for v in adjncy[xadj[u]:xadj[u + 1]].tolist():
                    if not reached[v]:
                        reached[v] = True
                        level.append(v)
            frontier = level
    return order + [v for v in range(n) if not reached[v]]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("chunk", [5, 1 << 22])
def test_the_order_is_the_same_for_any_thread_count(monkeypatch, threads, chunk):
    """Every level split into spans searched at once (the size floor removed) gives the one-node-at-a-time
    breadth-first order: a node met in two spans counts as met in the earlier one."""
    monkeypatch.setattr(locality, "SPLIT_ENTRIES", 0)
    rng = np.random.default_rng(4)
    pairs = rng.integers(0, 700, size=(2500, 2))
    pairs = np.concatenate([pairs[pairs[:, 0] != pairs[:, 1]], [[700 + i, 701 + i] for i in range(0, 60, 2)]])
    xadj, adjncy = csr(800, pairs)  # one large component, 30 two-node ones, isolated nodes
    adjncy = adjncy.copy()
    for v in range(800):  # neighbour lists out of id order, so that the order met is not the id order
        np.random.default_rng(v).shuffle(adjncy[xadj[v]:xadj[v + 1]])
    assert bfs_order(xadj, adjncy, chunk=chunk, threads=threads).tolist() == reference_bfs(xadj, adjncy)


def test_neighbour_lists_and_runs():
    xadj, adjncy = csr(6, np.array([[0, 1], [0, 2], [3, 4], [1, 2]]))
    nodes = np.array([2, 0, 5, 3])
    assert neighbour_lists(xadj, adjncy, nodes).tolist() == [0, 1, 1, 2, 4]
    runs = list(runs_by_entries(xadj, nodes, 2))
    assert np.concatenate(runs).tolist() == nodes.tolist() and all(r.size >= 1 for r in runs)


def test_kaminpar_owners_are_mapped_back_to_the_input_ids(monkeypatch):
    """Two cliques whose ids are interleaved at random: KaMinPar (seeing them renumbered, the size floor
    lowered to 0) must still put each clique in one part, which only holds if its owners are mapped back to
    the input ids."""
    pytest.importorskip("kaminpar")
    monkeypatch.setattr(locality, "CACHED_ENTRIES", 0)
    from gpart.engines.kaminpar import kaminpar_partition

    ids = np.random.default_rng(3).permutation(200)
    cliques = [ids[:100], ids[100:]]
    pairs = np.concatenate([np.array([[a, b] for i, a in enumerate(c) for b in c[i + 1:]]) for c in cliques])
    xadj, adjncy = csr(200, pairs)
    assert worth_renumbering(xadj, adjncy)
    order = locality_order(xadj, adjncy)
    owner = kaminpar_partition(xadj, adjncy, None, 2, seed=0, imbalance=0.03, threads=1, order=order)
    assert len(set(owner[cliques[0]])) == 1 and len(set(owner[cliques[1]])) == 1
    assert owner[cliques[0][0]] != owner[cliques[1][0]]


def grid(side: int) -> tuple[np.ndarray, np.ndarray]:
    """A side x side grid, ids row by row: neighbours 1 or `side` ids apart."""
    ids = np.arange(side * side).reshape(side, side)
    pairs = np.concatenate([np.stack([ids[:, :-1].ravel(), ids[:, 1:].ravel()], axis=1),
                            np.stack([ids[:-1].ravel(), ids[1:].ravel()], axis=1)])
    return csr(side * side, pairs)


def permuted(xadj: np.ndarray, adjncy: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The same graph with its ids permuted at random."""
    n = xadj.shape[0] - 1
    new_id = np.random.default_rng(seed).permutation(n)
    src = np.repeat(np.arange(n), np.diff(xadj))
    keep = src < adjncy
    return csr(n, np.stack([new_id[src[keep]], new_id[adjncy[keep]]], axis=1))


def test_the_neighbour_gap_tells_random_ids_from_local_ones(monkeypatch):
    """Random ids leave neighbours a median 1 - 1/sqrt(2) of the ids apart; a grid's row-major ids leave
    them next to each other. Only random ids of a graph past the cache are renumbered (the floor lowered to
    0 for this small grid)."""
    xadj, adjncy = permuted(*grid(60), 1)
    assert abs(neighbour_gap(xadj, adjncy) - RANDOM_GAP) < 0.03
    assert locality_order(xadj, adjncy) is None  # 14,160 entries: in the cache, kept as they are
    monkeypatch.setattr(locality, "CACHED_ENTRIES", 0)
    local = grid(60)
    assert neighbour_gap(*local) < 0.02 and locality_order(*local) is None
    order = locality_order(xadj, adjncy)
    assert order is not None and np.array_equal(np.sort(order), np.arange(3600))
    position = np.empty(3600, dtype=np.int64)
    position[order] = np.arange(3600)
    src = np.repeat(np.arange(3600), np.diff(xadj))
    assert np.median(np.abs(position[src] - position[adjncy])) / 3600 < 0.05  # the search brings them back
    assert neighbour_gap(np.zeros(4, dtype=np.int64), np.zeros(0, dtype=np.int64)) == 0.0  # no edges: nothing to do


FACEBOOK, ROAD_NY = "facebook-combined/facebook_combined.txt.gz", "road-ny/NY.gr.xz"


@pytest.mark.parametrize("name,ids,floor,vertex_order", [(FACEBOOK, "as read", 0, "input"),
                                                        (FACEBOOK, "permuted", 0, "breadth-first"),
                                                        (FACEBOOK, "permuted", None, "input"),
                                                        (ROAD_NY, "as read", 0, "input")])
def test_the_default_renumbers_real_graphs_only_when_their_ids_look_random(monkeypatch, name, ids, floor, vertex_order):
    """SNAP's facebook ids (ego networks in turn, gap 0.05) and the DIMACS road network's (gap 0.0000) keep
    neighbours close and go to KaMinPar as they are; facebook's ids permuted (gap 0.30) are renumbered once
    the size floor is lowered to 0 (`floor`), and kept at the real one (176K entries fit in the cache). The
    manifest says which, and the result is balanced either way."""
    pytest.importorskip("kaminpar")
    if floor is not None:
        monkeypatch.setattr(locality, "CACHED_ENTRIES", floor)
    from gpart.engines.balance import balances, in_degrees, train_mask, within_bound
    from gpart.pipeline.assign import assign

    path = PUBLIC_DATA / name
    graph = read_graph(path)
    if ids == "permuted":
        relabel = np.random.default_rng(0).permutation(graph.num_nodes)
        graph = Graph(graph.num_nodes, relabel[np.asarray(graph.src)], relabel[np.asarray(graph.dst)], {}, source=graph.source)
    result = assign(graph, 4, "balanced")
    assert result.params["backend_params"]["vertex_order"] == vertex_order
    assert within_bound(balances(result.book.owner_array, 4, in_degrees(graph), train_mask(graph)))


def test_the_renumbered_parhip_file_is_the_renumbered_graph():
    """KaMinPar's input written with an order is byte for byte the file of the graph whose node i is node
    order[i] (its neighbour lists in their input order, each neighbour by its new id, its weight)."""
    import gpart.engines.kaminpar as backend
    from gpart.formats.files.scratch import ScratchDir

    xadj, adjncy = permuted(*grid(20), 2)
    n = xadj.shape[0] - 1
    order = np.random.default_rng(3).permutation(n)
    new_id = np.empty(n, dtype=np.int64)
    new_id[order] = np.arange(n)
    lists = [new_id[adjncy[xadj[v]:xadj[v + 1]]] for v in order]
    renumbered_xadj = np.concatenate([[0], np.cumsum([len(x) for x in lists])]).astype(np.int64)
    weights = np.arange(10, 10 + n, dtype=np.int64)
    with ScratchDir() as scratch:
        written = backend._write_parhip(scratch, "ordered", xadj, adjncy, weights, order)
        expected = backend._write_parhip(scratch, "by-hand", renumbered_xadj, np.concatenate(lists), weights[order], None)
        assert written.read_bytes() == expected.read_bytes()
