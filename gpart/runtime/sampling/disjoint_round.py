"""The rounds of the sampling protocol over disjoint keys (PyG's disjoint: every seed gets its own sub-graph).

    answer = keyed_round(protocol, frontier, keys, (hop, generator))   # frontier: keys seed * num_nodes + node

A batch node is a key seed index * num_nodes + global id, so the relabelling
(gpart.runtime.sampling.kernels.KeyRelabeller) keeps a node once per seed
that reaches it and `batch` gives each node's seed. Across partitions a hop
asks each distinct node once, with its multiplicity (how many seeds reached
it); the owner samples it that many times, independently, and the answers
spread back to the keys; a node's rows travel once per batch whatever its
multiplicity. With one partition nothing travels and the keys' nodes are
sampled as they are.

Temporal draws (protocol.seed_time set: every key draws at its seed's
time, gpart.runtime.sampling.temporal): a hop asks each distinct (node,
time) pair once, with its multiplicity and its time (a third column of the
requests, float64 bits, beside the flag and the draws: no extra round),
and the owner draws each at its time; a node's rows still travel once, with
the first of its pairs. Every rank of a temporal sampler sends times (a
rank without seeds too), so the requests' widths agree.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Hashable, Optional, Protocol

import torch

from gpart.runtime.partition.exchange import Exchange
from gpart.runtime.partition.interface import Partition
from gpart.runtime.sampling.int_sort import sort_ints
from gpart.runtime.sampling.round_answer import Draw, Keys, RoundAnswer


class Rounds(Protocol):
    """What a keyed round needs of the protocol (gpart.runtime.sampling.protocol.DistSampler)."""

    part: Partition
    device: torch.device
    disjoint: bool
    exchange: Exchange
    seed_time: Optional[torch.Tensor]  # the batch's seed times (temporal draws), None without

    def round(self, frontier: torch.Tensor, keys: Keys, sample: Draw, draws: Optional[torch.Tensor] = None,
              into: Optional[dict[Hashable, torch.Tensor]] = None, rowless: Optional[torch.Tensor] = None,
              held_first: bool = False) -> RoundAnswer: ...


def keyed_round(protocol: Rounds, frontier: torch.Tensor, keys: Keys, sample: Draw) -> RoundAnswer:
    """protocol.round() for a frontier of keys (node ids, or disjoint keys seed * num_nodes + node): across partitions
    each distinct node is asked once, drawn once per key when sampling, and the answers (edges, sources as keys,
    rows) spread back to the keys; with one partition nothing travels and the keys' nodes are sampled as they are."""
    if not protocol.disjoint:
        return protocol.round(frontier, keys, sample)
    n = protocol.part.num_nodes
    nodes = torch.remainder(frontier, n)
    seed_time = protocol.seed_time if sample is not None else None
    if not protocol.exchange.active:
        if seed_time is not None:  # each key draws at its seed's time
            sample = (*sample, torch.index_select(seed_time, 0, torch.div(frontier, n, rounding_mode="floor")))
        answer = protocol.round(nodes, keys, sample)
        order, node_rows = answer.order, answer.node_rows
    elif seed_time is not None:
        answer, order, node_rows = _timed_round(protocol, frontier, keys, sample, seed_time)
    else:
        nodes, inverse, mult = torch.unique(nodes, return_inverse=True, return_counts=True)
        answer = protocol.round(nodes, keys, sample, mult if sample is not None else None)
        node_rows = spread_rows(answer.node_rows, keys, nodes, inverse, protocol.part)
        order = answer.order
        if sample is not None:
            order = _key_order(answer.order, inverse)
    src = answer.src
    if sample is not None:  # sources as keys of the seed of the key they were drawn for
        seed_base = torch.index_select(frontier, 0, order).div_(n, rounding_mode="floor").mul_(n)
        src = src + torch.repeat_interleave(seed_base, answer.counts, output_size=int(src.numel()))
    return replace(answer, src=src, order=order, node_rows=node_rows)


def _timed_round(protocol: Rounds, frontier: torch.Tensor, keys: Keys, sample: tuple,
                 seed_time: torch.Tensor) -> tuple[RoundAnswer, torch.Tensor, dict[Hashable, torch.Tensor]]:
    """A sampling round whose keys draw at their seeds' times: each distinct (node, time) is asked once with its
    multiplicity and its time; a node's rows come with the first of its pairs only (the others are `rowless`), so
    they travel once per node as without time. (answer, key order of the draws, rows per key)."""
    n = protocol.part.num_nodes
    times, seed_rank = torch.unique(seed_time, return_inverse=True)  # a seed's time as its rank among the batch's
    width = max(1, times.numel())
    seed_of = torch.div(frontier, n, rounding_mode="floor")
    pair = torch.remainder(frontier, n).mul_(width).add_(torch.index_select(seed_rank, 0, seed_of))
    pairs, inverse, mult = torch.unique(pair, return_inverse=True, return_counts=True)  # sorted by node, then time
    nodes = torch.div(pairs, width, rounding_mode="floor")
    first = torch.ones_like(nodes, dtype=torch.bool)
    first[1:] = nodes[1:] != nodes[:-1]
    pair_time = torch.index_select(times, 0, torch.remainder(pairs, width))
    answer = protocol.round(nodes, keys, (*sample, pair_time), mult, rowless=~first)
    # each key's rows: those of the first pair of its node (the pairs of a node are consecutive)
    head = torch.cummax(torch.where(first, torch.arange(nodes.numel(), device=nodes.device), 0), 0).values
    node_rows = spread_rows(answer.node_rows, keys, nodes, torch.index_select(head, 0, inverse), protocol.part)
    return answer, _key_order(answer.order, inverse), node_rows


def _key_order(order: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
    """The keys in the order of the draws that answer them: request r's draws (requests in group order `order`)
    answer, in turn, the keys with inverse == r in frontier order."""
    rank = torch.empty_like(order).index_copy_(0, order, torch.arange(order.numel(), device=order.device))
    return sort_ints(torch.index_select(rank, 0, inverse))[1]


def spread_rows(node_rows: dict[Hashable, torch.Tensor], keys: Keys, nodes: torch.Tensor, inverse: torch.Tensor,
                part: Partition) -> dict[Hashable, torch.Tensor]:
    """Rows of the sorted distinct `nodes` (per array, the rows of the nodes of its kind) for the keys
    nodes[inverse], in key order among the keys of that kind (typed: `part`'s node types, by their erased id ranges)."""
    if len(keys) == 1:
        return {key: torch.index_select(rows, 0, inverse) for key, rows in node_rows.items()}
    # typed: a node type's erased ids are one range, so its nodes are one block of the sorted nodes
    starts = torch.searchsorted(nodes, part.node_offsets)
    kind = torch.searchsorted(starts, torch.arange(nodes.numel(), device=nodes.device), right=True) - 1
    within = torch.arange(nodes.numel(), device=nodes.device) - torch.index_select(starts, 0, kind)
    key_kind, key_within = torch.index_select(kind, 0, inverse), torch.index_select(within, 0, inverse)
    out = {}
    for t, names in enumerate(keys):  # a loop over node types
        at = torch.masked_select(key_within, key_kind == t)
        out.update((name, torch.index_select(node_rows[name], 0, at)) for name in names if name in node_rows)
    return out
