"""How typed graphs run the methods (SPEC.md 8.3): a rule per node type, or one balance constraint per node type.

Rules (remainder, range, random) assign each node type on its own, types in
order, from one generator. Partitioners (metis, kaminpar, stream) run on the
erased graph with every node type's mask as one more balance array; when a
type's balance still exceeds gpart.engines.balance.BALANCE_BOUND, `repair_types`
moves the cheapest nodes of over-full types.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from gpart.base.graph import Graph
from gpart.engines.balance import BALANCE_BOUND, share_balance
from gpart.engines.refine import part_loads, repair_balance
from gpart.engines.symmetric import symmetric_bytes, symmetric_csr
from gpart.formats.partition.book import ArrayBook, PartitionBook
from gpart.partition_methods.method import MethodContext, PartitionMethod
from gpart.partition_methods.options import BalanceOptions, replaced
from gpart.partition_methods.typed_input import TypedInput

TypeOwner = Callable[[int, int, np.random.Generator], np.ndarray]  # (nodes of the type, parts, generator) -> owner


def per_type_book(typed: TypedInput, num_parts: int, seed: int, owner_of_type: TypeOwner) -> tuple[ArrayBook, dict[str, Any]]:
    """The rule `owner_of_type` applied to every node type's own ids (0..N_t-1), types in order."""
    hg = typed.hg
    rng = np.random.default_rng(seed)  # one generator, drawn type after type (SPEC.md 8.3)
    owner = np.concatenate([owner_of_type(hg.num_nodes[t], num_parts, rng) for t in hg.node_types])
    return ArrayBook(owner, num_parts), {"num_parts": num_parts, "per_type": True}


def constrained_book(method: PartitionMethod, typed: TypedInput, num_parts: int, options: BalanceOptions,
                     context: MethodContext) -> tuple[PartitionBook, dict[str, Any]]:
    """`method` on the erased graph with one balance constraint per node type (before the balance arrays
    asked for), repaired where a type's balance exceeds the bound (`repair_types`)."""
    masks = typed.masks
    g = typed.graph(options.balance)
    result = method.assign(g, num_parts, replaced(options, g.source, balance=list(masks) + list(options.balance)), context)
    return repair_types(g, result.book, dict(result.params, type_constraints=list(masks)), masks, context.max_memory)


def repair_types(g: Graph, book: ArrayBook, params: dict[str, Any], masks: dict[str, np.ndarray],
                 max_memory: Optional[int] = None) -> tuple[ArrayBook, dict[str, Any]]:
    """The partitioner's book, or, when a node type's balance exceeds the bound, the book after moving the
    cheapest nodes of over-full types to parts with room (gpart.engines.refine.repair_balance with one share column
    per node type, as the homogeneous default repairs its shares; recorded in params.repair). The repair
    holds the symmetric adjacency: past `max_memory` it is skipped (params.repair.skipped) and the book kept."""
    shares = np.column_stack([masks[m] for m in masks]).astype(np.float64)
    before = type_balance(book.owner_array, shares, book.num_parts)
    if max(before, default=1.0) <= BALANCE_BOUND:
        return book, params
    need = symmetric_bytes(g.num_edges)
    if max_memory is not None and need > max_memory:  # `stream` runs in bounded memory; the repair would not
        return book, dict(params, repair={"bound": BALANCE_BOUND, "skipped": f"needs about {need} bytes, more than --max-memory",
                                          "before": dict(zip(masks, before))})
    xadj, adjncy = symmetric_csr(g)
    owner = repair_balance(book.owner_array, shares, book.num_parts, BALANCE_BOUND, xadj, adjncy)
    del xadj, adjncy
    after = type_balance(owner, shares, book.num_parts)
    params = dict(params, repair={"bound": BALANCE_BOUND, "moved": int(np.count_nonzero(owner != book.owner_array)),
                                  "before": dict(zip(masks, before)), "after": dict(zip(masks, after))})
    return ArrayBook(owner, book.num_parts), params


def type_balance(owner: np.ndarray, shares: np.ndarray, num_parts: int) -> list[float]:
    """max/mean over parts of every column of `shares` (one per node type)."""
    return [share_balance(column) for column in part_loads(owner, shares, num_parts).T]
