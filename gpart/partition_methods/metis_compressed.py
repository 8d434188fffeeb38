"""The compressed path of `--method metis`: taken by itself where METIS on the whole in-memory adjacency would not
fit `--max-memory` (gpart.partition_methods.memory.runs_compressed).

The pieces are the default's (docs/partitioning.md, "The compressed path of metis"): the symmetric adjacency built on disk and renumbered
(gpart.partition_methods.adjacency), coarsened on disk until METIS's estimate for the coarsest level fits the
memory the per-node arrays leave (gpart.partition_methods.memory.coarsened_kaminpar_memory), METIS with every
balance constraint (`vertex_weights`: nodes, --balance arrays, the in-degree) and the edge weights on the
coarsest level, then refined back level by level (gpart.engines.metis_levels).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpart.base.errors import GpartError
from gpart.base.graph import Graph
from gpart.engines.metis import MetisRun, metis_params, pymetis_version, resolve_algorithm, vertex_weights
from gpart.engines.metis_levels import DiskMetis, metis_on_disk
from gpart.formats.partition.book import ArrayBook
from gpart.partition_methods.adjacency import symmetric_adjacency
from gpart.partition_methods.memory import coarsened_kaminpar_memory
from gpart.partition_methods.method import MethodContext, PartitionMethod

# What the refinement of the levels is recorded as (params.refined)
REFINE_RECORD = "gpart.engines.disk_refine"


def compressed_metis_book(method: PartitionMethod, graph: Graph, num_parts: int, run: MetisRun,
                          context: MethodContext) -> tuple[ArrayBook, dict[str, Any]]:
    """METIS's book of `graph` on the compressed path of `method` (MetisMethod: its memory figures), and the
    parameters as run: the in-memory path's, with the objective METIS reached on the coarsest level, the levels'
    sizes and params.adjacency "compressed"."""
    n = graph.num_nodes
    flat, constraints = vertex_weights(graph, run.balance, run.balance_edges)
    columns = np.ones((n, 1), dtype=np.int64) if flat is None else flat.reshape(n, len(constraints))
    del flat
    ran = resolve_algorithm(run.algorithm, run.objective, num_parts, len(constraints))
    memory = coarsened_kaminpar_memory(method, n, graph.num_edges, context.max_memory)
    job = DiskMetis(num_parts, ran == "recursive", dict(seed=run.seed, imbalance=run.imbalance, objective=run.objective,
                                                        trials=run.trials, iterations=run.iterations),
                    memory, max(1 << 20, (context.max_memory or 1 << 30) // 4))
    progress = context.progress
    with symmetric_adjacency(graph, True, context.scratch_dir, context.max_memory, progress) as adj:
        assert adj.on_disk is not None
        if adj.order is not None:
            columns = columns[adj.order]  # in the file's ids
        levels: list[dict[str, int]] = []
        with progress.stage("metis"):
            try:
                if num_parts == 1:  # nothing to partition (and METIS mishandles nparts=1)
                    owner, said = np.zeros(n, dtype=np.int32), {"coarsest_objective_value": 0}
                else:
                    owner, levels, said = metis_on_disk(adj.on_disk, columns, adj.order, job)
            except (RuntimeError, ValueError, MemoryError) as exc:
                raise GpartError(graph.source, f"METIS failed on the compressed path: {exc}") from None
        entries, order = adj.on_disk.num_entries, adj.order
    params = dict(metis_params(run, ran, constraints), **said, symmetric_edges=int(entries // 2),
                  metis=f"pymetis {pymetis_version()}", adjacency="compressed",
                  vertex_order="input" if order is None else "breadth-first")
    if levels:
        params.update(disk_levels=levels, refined=REFINE_RECORD)
    return ArrayBook(owner, num_parts), params
