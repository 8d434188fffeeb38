"""`--method range`: contiguous near-equal blocks of ids (the book holds the boundaries)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpart.base.graph import Graph
from gpart.formats.partition.book import PartitionBook, range_book
from gpart.formats.sharding.policies import RangePolicy
from gpart.partition_methods.method import MethodContext, PartitionMethod
from gpart.partition_methods.options import MethodOptions
from gpart.partition_methods.typed_input import TypedInput
from gpart.partition_methods.typed_runs import per_type_book


class RangeMethod(PartitionMethod):
    name = "range"
    summary = "contiguous blocks."
    needs_edges = False
    book_bytes_per_node = 0  # a rule: no owner array

    def run(self, graph: Graph, num_parts: int, options: MethodOptions, context: MethodContext) -> tuple[PartitionBook, dict[str, Any]]:
        return range_book(graph.num_nodes, num_parts), {}

    def run_typed(self, typed: TypedInput, num_parts: int, options: MethodOptions,
                  context: MethodContext) -> tuple[PartitionBook, dict[str, Any]]:
        return per_type_book(typed, num_parts, options.seed, range_owner)


def range_owner(num_nodes: int, num_parts: int, rng: np.random.Generator) -> np.ndarray:
    """The block of each id 0..num_nodes-1 (one node type's ids)."""
    return RangePolicy.even(num_nodes, num_parts).owner(np.arange(num_nodes, dtype=np.int64)).astype(np.int32)
