"""Balanced label-propagation refinement of a partition of a graph on disk: the uncoarsening step of an on-disk level.

    owner = disk_refine(graph, owner, weights, num_parts, max_part_weight, seed)

A partition of the coarse graph, projected to its clusters' members, is as
good as it was on the coarse graph; moving single nodes of the finer graph
then lowers the cut (KaMinPar's own uncoarsening refines every level with
label propagation the same way). Over gpart.engines.disk_graph ranges: per
range, one bincount of (node, part of neighbour) gives each node its edge
weight towards every part; the nodes with a positive gain towards their best
part move, a seeded random half of them a round (two neighbours moving
towards each other's parts at once would each gain alone and undo it
together), best gain first per receiving part while the part stays within
`max_part_weight` in vertex weight (with several weight columns, the
multi-constraint METIS path's, in every column). Moves count for the ranges after them
(two ranges proposed at once from the same state, then applied in order:
gpart.engines.disk_graph.pass_in_batches).
A partition within the bound stays within it.

Memory: the owners, the part weights, and one range's [rows, parts] weights
(ranges hold at most RANGE_ENTRIES entries and RANGE_ENTRIES / parts rows).
"""

from __future__ import annotations

from typing import Union

import numpy as np

from gpart.engines.disk_graph import RANGE_ENTRIES, DiskGraph, fits_in_order, pass_in_batches

REFINE_ROUNDS = 12
SETTLED = 0.0002  # a round moving fewer than this share of the nodes ends the refinement


def disk_refine(graph: DiskGraph, owner: np.ndarray, weights: np.ndarray, num_parts: int,
                max_part_weight: Union[int, np.ndarray], seed: int, rounds: int = REFINE_ROUNDS) -> np.ndarray:
    """`owner` (int32 [n]) with nodes moved to lower the cut, no part's weight (the sum of its nodes' `weights`,
    int64 [n]) past `max_part_weight` (nor past its weight before, where that was more). `weights` [n, c] with
    `max_part_weight` [c]: every column held."""
    owner = owner.astype(np.int32, copy=True)
    part_weight = np.zeros((num_parts,) + weights.shape[1:], dtype=np.int64)
    np.add.at(part_weight, owner, weights)
    limit = np.maximum(part_weight, max_part_weight)
    ranges = graph.ranges(RANGE_ENTRIES, rows=max(1, RANGE_ENTRIES // num_parts))

    def apply(moves: tuple[np.ndarray, np.ndarray, np.ndarray]) -> int:
        return _apply(moves, owner, (weights, part_weight, limit), num_parts)

    for round_index in range(rounds):
        def propose(index: int, nodes: tuple[int, int],
                    round_index: int = round_index) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            return _proposed(graph, nodes, owner, num_parts, np.random.default_rng([seed, round_index, index]))

        if pass_in_batches(ranges, propose, apply) < SETTLED * graph.num_nodes:
            break
    return owner


def _proposed(graph: DiskGraph, nodes: tuple[int, int], owner: np.ndarray, num_parts: int,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The nodes of [first, stop) = `nodes` with a positive gain towards their best part (a random half of
    them), those parts and the nodes' current ones, grouped by receiver, best gain first; reads the state only."""
    first, stop = nodes
    rows, neighbours, edge_weights = graph.lists(first, stop)
    size = stop - first
    if rows.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    towards = np.bincount(rows * num_parts + owner[neighbours], weights=edge_weights,
                          minlength=size * num_parts).reshape(size, num_parts)
    own = owner[first:stop].astype(np.int64)
    best = np.argmax(towards, axis=1)
    local = np.arange(size)
    gain = towards[local, best] - towards[local, own]
    movers = np.flatnonzero((gain > 0) & (rng.random(size) < 0.5))
    movers = movers[np.lexsort((-gain[movers], best[movers]))]  # by receiver, best gain first
    return first + movers, best[movers], own[movers]


def _apply(moves: tuple[np.ndarray, np.ndarray, np.ndarray], owner: np.ndarray,
           loads: tuple[np.ndarray, np.ndarray, np.ndarray], num_parts: int) -> int:
    """Move the proposed nodes whose receiver stays within its limit, in their order; how many moved. `loads`: the
    nodes' weights, the parts' (updated) and their limits."""
    movers, target, own = moves
    if movers.size == 0:
        return 0
    weights, part_weight, limit = loads
    weight = weights[movers]
    keep = fits_in_order(target, weight, part_weight, limit[target])  # departures not counted: conservative
    movers, target, own, weight = movers[keep], target[keep], own[keep], weight[keep]
    part_weight -= _part_sums(own, weight, num_parts)
    part_weight += _part_sums(target, weight, num_parts)
    owner[movers] = target
    return int(movers.shape[0])


def _part_sums(parts: np.ndarray, weight: np.ndarray, num_parts: int) -> np.ndarray:
    """The sum of `weight` ([k], or [k, c]: each column) per part of `parts` (int64 [num_parts] or [num_parts, c])."""
    if weight.ndim == 1:
        return np.bincount(parts, weights=weight, minlength=num_parts).astype(np.int64)
    sums = np.zeros((num_parts, weight.shape[1]), dtype=np.int64)
    np.add.at(sums, parts, weight)
    return sums
