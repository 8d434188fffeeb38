"""`--method remainder`: owner = id % P, local id = id // P (the rule alone, no array)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpart.base.graph import Graph
from gpart.formats.partition.book import PartitionBook, remainder_book
from gpart.partition_methods.method import MethodContext, PartitionMethod
from gpart.partition_methods.options import MethodOptions
from gpart.partition_methods.typed_input import TypedInput
from gpart.partition_methods.typed_runs import per_type_book


class RemainderMethod(PartitionMethod):
    name = "remainder"
    summary = "owner = id % P."
    needs_edges = False
    book_bytes_per_node = 0  # a rule: no owner array

    def run(self, graph: Graph, num_parts: int, options: MethodOptions, context: MethodContext) -> tuple[PartitionBook, dict[str, Any]]:
        return remainder_book(graph.num_nodes, num_parts), {}

    def run_typed(self, typed: TypedInput, num_parts: int, options: MethodOptions,
                  context: MethodContext) -> tuple[PartitionBook, dict[str, Any]]:
        return per_type_book(typed, num_parts, options.seed, remainder_owner)


def remainder_owner(num_nodes: int, num_parts: int, rng: np.random.Generator) -> np.ndarray:
    """id % P of ids 0..num_nodes-1 (one node type's ids)."""
    return (np.arange(num_nodes, dtype=np.int64) % num_parts).astype(np.int32)
