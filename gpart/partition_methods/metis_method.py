"""`--method metis`: METIS min-cut on the symmetrised graph (gpart.engines.metis), optionally multi-constraint.

Given without a method, a METIS-only option (objective, algorithm, trials,
iterations, balance arrays, balance_edges) chooses metis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from gpart.base.graph import Graph
from gpart.engines.balance import BALANCE_BOUND, share_balance
from gpart.engines.metis import MetisRun, metis_book
from gpart.engines.metis_levels import METIS_ENTRY_BYTES
from gpart.formats.partition.book import ArrayBook, PartitionBook
from gpart.partition_methods.memory import runs_compressed
from gpart.partition_methods.method import MethodContext, PartitionMethod
from gpart.partition_methods.metis_compressed import compressed_metis_book
from gpart.partition_methods.options import BalanceOptions, OptionError, check_count, replaced
from gpart.partition_methods.typed_input import TypedInput
from gpart.partition_methods.typed_runs import constrained_book, repair_types

OBJECTIVES = ("cut", "volume")
# The compressed path's per-node arrays (as the default's: in-degree, list starts, weights, order, owners, a
# level's clusters)
COMPRESSED_NODE_BYTES = 100
ALGORITHMS = ("auto", "recursive", "kway")


@dataclass
class MetisOptions(BalanceOptions):
    """The balance options and METIS's own: objective, algorithm, trials (ncuts), iterations (niter)."""

    objective: str = "cut"
    algorithm: str = "auto"
    trials: int = 1
    iterations: Optional[int] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.objective not in OBJECTIVES:
            raise OptionError(f"unknown METIS objective {self.objective!r} (expected one of {', '.join(OBJECTIVES)})")
        if self.algorithm not in ALGORITHMS:
            raise OptionError(f"unknown METIS algorithm {self.algorithm!r} (expected one of {', '.join(ALGORITHMS)})")
        if self.objective == "volume" and self.algorithm == "recursive":
            raise OptionError("METIS recursive bisection supports only the 'cut' objective; use algorithm 'kway' or 'auto'")
        check_count("trials", self.trials)
        check_count("iterations", self.iterations, optional=True)


class MetisMethod(PartitionMethod):
    name = "metis"
    summary = ("METIS min-cut on the symmetrised graph, node balance (chosen when a METIS-only option is given "
               "without --method).")
    options_type = MetisOptions
    selected_by = ("objective", "algorithm", "trials", "iterations", "balance", "balance_edges")
    needs_adjacency = True
    bytes_per_edge = 300  # multi-constraint METIS 2.78 GB, pymetis 2.7 GB on the 1M/10M power-law graph (gpart.pipeline.memory_plan)
    # The compressed path (gpart.partition_methods.metis_compressed), past bytes_per_edge: the per-node arrays, and
    # METIS on the whole file (per input edge: two adjacency entries at METIS_ENTRY_BYTES), or on levels
    # coarsened on disk until its estimate holds the coarsest
    compressed_bytes_per_node, compressed_bytes_per_edge = COMPRESSED_NODE_BYTES, 2 * METIS_ENTRY_BYTES
    compressed_partitioner = "METIS"

    def run(self, graph: Graph, num_parts: int, options: MetisOptions, context: MethodContext) -> tuple[PartitionBook, dict[str, Any]]:
        run = MetisRun(seed=options.seed, imbalance=options.imbalance, objective=options.objective,
                       algorithm=options.algorithm, trials=options.trials, iterations=options.iterations,
                       balance=options.balance, balance_edges=options.balance_edges)
        if runs_compressed(self, graph.num_nodes, graph.num_edges, context.max_memory):
            return compressed_metis_book(self, graph, num_parts, run, context)
        return metis_book(graph, num_parts, run, context.progress)

    def run_typed(self, typed: TypedInput, num_parts: int, options: MetisOptions,
                  context: MethodContext) -> tuple[PartitionBook, dict[str, Any]]:
        if options.algorithm != "auto":
            return constrained_book(self, typed, num_parts, options, context)
        g = typed.graph(options.balance)
        return repair_types(g, *self._recursive_first(typed, g, num_parts, options, context), typed.masks)

    def _recursive_first(self, typed: TypedInput, g: Graph, num_parts: int, options: MetisOptions,
                         context: MethodContext) -> tuple[ArrayBook, dict[str, Any]]:
        """METIS with one constraint per node type: recursive bisection first, k-way if a type's balance exceeds the bound.

        Recursive bisection does not hold multi-constraint tolerances exactly (a few percent over), but it is
        2-4x faster than k-way with constraints on power-law graphs (benchmarks/bench_hetero.py); k-way holds them."""
        masks = typed.masks
        names = list(masks) + list(options.balance)
        tried = []
        for algorithm in ("recursive", "kway"):
            result = self.assign(g, num_parts, replaced(options, g.source, balance=names, algorithm=algorithm), context)
            measured = {m: share_balance(np.bincount(result.book.owner_array[mask], minlength=num_parts)) for m, mask in masks.items()}
            tried.append({"algorithm": algorithm, **measured})
            if max(measured.values(), default=1.0) <= BALANCE_BOUND:
                break
        return result.book, dict(result.params, type_constraints=list(masks), bound=BALANCE_BOUND, tried=tried)
