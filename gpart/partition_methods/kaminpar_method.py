"""`--method kaminpar`: KaMinPar on the symmetric graph, one combined vertex weight for every requested balance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from gpart.base.errors import GpartError
from gpart.base.graph import Graph
from gpart.base.progress import Progress
from gpart.engines.balance import combined_weights, in_degrees
from gpart.engines.kaminpar import KaminparRun, KaminparUnavailable, kaminpar_partitions, kaminpar_version
from gpart.engines.metis import balance_column
from gpart.formats.partition.book import ArrayBook, PartitionBook
from gpart.partition_methods.adjacency import symmetric_adjacency
from gpart.partition_methods.memory import coarsened_kaminpar_memory, needs_lean_preset, runs_compressed
from gpart.partition_methods.method import MethodContext, PartitionMethod, PathLike
from gpart.partition_methods.options import BalanceOptions, KaminparRunOptions
from gpart.partition_methods.typed_input import TypedInput
from gpart.partition_methods.typed_runs import constrained_book

# The compressed path's peak (gpart.partition_methods.adjacency; the default's too, whose runs go one at a time
# there): per node, the in-degree, xadj, weights, order and owners here and KaMinPar's per-node arrays in its
# process; per input edge, KaMinPar's compressed graph and coarse levels (the adjacency itself is a file).
# The whole job's anonymous peak with KaMinPar's terapart preset (benchmarks/bench_scale.py, 8 parts): R-MAT
# 1M/10M 561 MiB, 8M/120M 5.1 GB; geometric 1M/10M 423 MiB, 12M/120M 3.6 GB. The estimate covers R-MAT (5.9
# GB at 8M/120M) and is 1.7x the geometric graph's need (its edges compress better). It is the path's floor:
# terapart runs only where the own presets' estimate below does not fit (memory.needs_lean_preset).
COMPRESSED_NODE_BYTES, COMPRESSED_EDGE_BYTES = 100, 40
# With the methods' own presets (fast, default) on the compressed path: R-MAT 8M/120M 8.2 GB (fast), estimated 8.7.
OWN_PRESET_NODE_BYTES, OWN_PRESET_EDGE_BYTES = 160, 60


@dataclass
class KaminparOptions(KaminparRunOptions, BalanceOptions):
    """The balance options, KaMinPar's thread count and preset."""


class KaminparMethod(PartitionMethod):
    name = "kaminpar"
    summary = "KaMinPar (--balance/--balance-edges fold into one vertex weight)."
    options_type = KaminparOptions
    needs_adjacency = True
    bytes_per_edge = 100  # 0.90 GB on the 1M/10M power-law graph, the symmetric CSR included (gpart.pipeline.memory_plan)
    compressed_bytes_per_node, compressed_bytes_per_edge = COMPRESSED_NODE_BYTES, COMPRESSED_EDGE_BYTES
    own_preset_bytes_per_node, own_preset_bytes_per_edge = OWN_PRESET_NODE_BYTES, OWN_PRESET_EDGE_BYTES

    def run(self, graph: Graph, num_parts: int, options: KaminparOptions,
            context: MethodContext) -> tuple[PartitionBook, dict[str, Any]]:
        compressed = runs_compressed(self, graph.num_nodes, graph.num_edges, context.max_memory)
        lean = compressed and needs_lean_preset(self, graph.num_nodes, graph.num_edges, context.max_memory)
        return kaminpar_book(graph, num_parts, options, progress=context.progress,
                             on_disk=(context.scratch_dir, context.max_memory) if compressed else None, lean=lean)

    def run_typed(self, typed: TypedInput, num_parts: int, options: KaminparOptions,
                  context: MethodContext) -> tuple[PartitionBook, dict[str, Any]]:
        return constrained_book(self, typed, num_parts, options, context)


def kaminpar_book(graph: Graph, num_parts: int, options: KaminparOptions, progress: Progress,
                  on_disk: Optional[tuple[Optional[PathLike], Optional[int]]] = None,
                  lean: bool = False) -> tuple[ArrayBook, dict[str, Any]]:
    """KaMinPar on the symmetric graph, one combined vertex weight for every requested balance; `on_disk`
    (scratch directory, memory budget): on the compressed path (gpart.partition_methods.adjacency); `lean`: the
    memory-lean preset unless one is asked for (KaminparRunOptions.preset_for)."""
    balance, balance_edges = options.names(), options.balance_edges
    try:
        version = kaminpar_version()
    except KaminparUnavailable as exc:
        raise GpartError(graph.source, str(exc)) from None
    masks = [balance_column(graph, name) for name in balance]
    weights = None
    if masks or balance_edges:
        weights = combined_weights(graph.num_nodes, in_degrees(graph) if balance_edges else None, masks)
    scratch_dir, budget = on_disk or (None, None)
    with symmetric_adjacency(graph, on_disk is not None, scratch_dir, budget, progress) as adj, progress.stage("kaminpar"):
        try:
            run = KaminparRun(seed=options.seed, imbalance=options.imbalance, threads=options.threads,
                              preset=options.preset_for(lean), order=adj.order,
                              memory=None if on_disk is None else coarsened_kaminpar_memory(
                                  KaminparMethod, graph.num_nodes, graph.num_edges, budget, options.preset))
            [result] = kaminpar_partitions(adj.xadj, adj.adjncy, [weights], num_parts, run, on_disk=adj.on_disk)
            owner = result.owner
        except (RuntimeError, ValueError, MemoryError) as exc:
            raise GpartError(graph.source, f"KaMinPar failed: {exc}") from None
        params = kaminpar_params(options, run.preset, options.imbalance, adj.adjncy, adj.order, version)
    params.update(balance=balance, balance_edges=bool(balance_edges), vertex_weights="combined" if weights is not None else "unit")
    if on_disk is not None:
        params["adjacency"] = "compressed"
    if result.disk_levels:
        params["disk_levels"] = result.disk_levels
    return ArrayBook(owner, num_parts), params


def kaminpar_params(options: KaminparRunOptions, preset: str, imbalance: float, adjncy: np.ndarray,
                    order: Optional[np.ndarray], version: str) -> dict[str, Any]:
    """What the manifest records of a KaMinPar run with `options` (its seed, threads), `preset` and `imbalance` on
    the symmetric graph (adjncy) in `order`."""
    return {"seed": int(options.seed), "imbalance": float(imbalance), "threads": int(options.threads), "preset": preset,
            "symmetric_edges": int(adjncy.shape[0] // 2), "vertex_order": "input" if order is None else "breadth-first",
            "kaminpar": f"kaminpar {version}"}
