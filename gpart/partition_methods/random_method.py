"""`--method random`: a seeded random permutation of arange(N) % P, so exactly balanced."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpart.base.graph import Graph
from gpart.formats.partition.book import ArrayBook, PartitionBook
from gpart.partition_methods.method import MethodContext, PartitionMethod
from gpart.partition_methods.options import MethodOptions
from gpart.partition_methods.typed_input import TypedInput
from gpart.partition_methods.typed_runs import per_type_book


class RandomMethod(PartitionMethod):
    name = "random"
    summary = "seeded, exactly balanced."
    needs_edges = False

    def run(self, graph: Graph, num_parts: int, options: MethodOptions, context: MethodContext) -> tuple[PartitionBook, dict[str, Any]]:
        return random_book(graph.num_nodes, num_parts, options.seed), {
            "seed": int(options.seed), "rng": "numpy.random.default_rng(seed).permutation(arange(N) % P)"}

    def run_typed(self, typed: TypedInput, num_parts: int, options: MethodOptions,
                  context: MethodContext) -> tuple[PartitionBook, dict[str, Any]]:
        book, params = per_type_book(typed, num_parts, options.seed, random_owner)
        params.update(seed=int(options.seed), rng="default_rng(seed).permutation(arange(N_t) % P), type after type")
        return book, params


def random_book(num_nodes: int, num_parts: int, seed: int) -> ArrayBook:
    """Seeded and exactly balanced: a random permutation of arange(N) % P."""
    rng = np.random.default_rng(seed)
    owner = (np.arange(num_nodes, dtype=np.int64) % num_parts).astype(np.int32)
    return ArrayBook(rng.permutation(owner), num_parts)


def random_owner(num_nodes: int, num_parts: int, rng: np.random.Generator) -> np.ndarray:
    """One node type's owners, drawn from `rng` (shared by the types, in order)."""
    return rng.permutation(np.arange(num_nodes, dtype=np.int64) % num_parts).astype(np.int32)
