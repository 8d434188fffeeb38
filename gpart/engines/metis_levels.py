"""METIS on a graph on disk: the compressed path of `--method metis`.

    owner, sizes, facts = metis_on_disk(file, weights, order, DiskMetis(...))

The symmetric adjacency is a ParHiP file (gpart.engines.symmetric_file, renumbered in `order` where the ids look
random). Where METIS would not hold it in the memory it is given (`metis_fits`), the file is first coarsened on
disk (gpart.engines.disk_levels, with every balance constraint as a weight column: a cluster stays within the
tolerance of a part's mean in each), and METIS partitions the coarsest level with its vertex weights (one column
per constraint: ncon) and edge weights, through the METIS library pymetis bundles
(gpart.engines.metis.part_graph_multiconstraint, which takes edge weights). The owners then come back level by
level, refined with every constraint held within (1 + tolerance) times its mean (gpart.engines.disk_refine);
where METIS left a constraint past that bound (heavy coarse vertices: recursive bisection does not hold the
tolerance exactly, nor does k-way with several constraints), the finest level is repaired to it over the mapped
adjacency (gpart.engines.refine.repair_balance); the owners are mapped to the input ids. All of it runs in a
forked child (gpart.engines.isolate: METIS traps SIGTERM), which holds METIS's arrays: the coarsest level's list
starts, neighbours and edge weights as int64 and the vertex weights, besides METIS's own graph and its coarsening.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from gpart.base.memory import release_freed_memory
from gpart.engines.disk_levels import coarsen, partition_levels
from gpart.engines.isolate import call_isolated
from gpart.engines.metis import part_graph_multiconstraint
from gpart.engines.parhip_file import ParhipFile
from gpart.engines.refine import part_loads, repair_balance
from gpart.formats.files.scratch import ScratchDir

# METIS's process on a ParHiP level, the growth of its peak RSS over the forked child's start (the level's arrays as
# int64: xadj, adjncy, adjwgt, vwgt; METIS and its own coarsening), 8 parts, pymetis 2025.2.2:
#   R-MAT 1M nodes / 20.0M entries (unweighted): recursive 2646 MiB (139 B/entry), k-way 3069, 3 constraints 3114;
#     its clusters' graph 340K / 18.6M (edge-weighted): recursive 1909 MiB, k-way with 3 constraints 2155;
#     the next level 165K / 11.5M: 804 and 918 MiB
#   geometric 1M / 17.4M: 783-806 MiB (47 B/entry); its clusters' graph 84K / 0.84M: 31-34 MiB
# METIS coarsens a power-law graph poorly (its matching leaves the hubs), so R-MAT costs 3x the geometric graph per
# entry; the estimate covers R-MAT (1M / 20.0M, 3 constraints: 3.41 GB against 3.27 GB measured; 340K / 18.6M:
# 2.98 against 2.26 GB) and is 3-6x the geometric graph's need.
METIS_BASE_BYTES, METIS_NODE_BYTES, METIS_ENTRY_BYTES, METIS_CONSTRAINT_BYTES = 64 << 20, 300, 150, 16


def metis_bytes(nodes: int, entries: int, constraints: int = 1) -> int:
    """METIS's estimated peak on a graph of `nodes` and `entries` adjacency entries with `constraints` vertex weights."""
    return METIS_BASE_BYTES + (METIS_NODE_BYTES + METIS_CONSTRAINT_BYTES * constraints) * nodes + METIS_ENTRY_BYTES * entries


def metis_fits(nodes: int, entries: int, constraints: int, memory: int) -> bool:
    """Whether METIS holds a graph of `nodes` and `entries` adjacency entries with `constraints` in `memory`."""
    return metis_bytes(nodes, entries, constraints) <= memory


@dataclass(frozen=True)
class DiskMetis:
    """What METIS is asked on a graph on disk: parts, recursive bisection or k-way, its settings
    (gpart.engines.metis.option_values: seed, imbalance, objective, trials, iterations), the memory its process is
    given (None: any, no levels) and the bucket memory while a level is built."""

    num_parts: int
    recursive: bool
    settings: dict
    memory: Optional[int]
    budget: int


def metis_on_disk(file: ParhipFile, weights: np.ndarray, order: Optional[np.ndarray],
                  job: DiskMetis) -> tuple[np.ndarray, list[dict[str, int]], dict[str, Any]]:
    """The owner (int32, by input id) of every node of `file` (node i is input node order[i]; `order` None: the
    input ids), METIS balancing every column of `weights` ([n, c] int64 by file id, c >= 1); the sizes of the
    levels coarsened on disk (empty: METIS ran on the file) and what METIS said (its objective on the coarsest)."""
    constraints = weights.shape[1]
    tolerance = float(job.settings["imbalance"])
    memory = job.memory

    def fits(nodes: int, entries: int) -> bool:
        return memory is None or metis_fits(nodes, entries, constraints, memory)

    with ScratchDir(file.path.parent) as scratch:
        levels = coarsen(file, weights, [tolerance] * constraints, job.num_parts, int(job.settings["seed"]), fits,
                         scratch, max(1 << 20, (memory or 1 << 30) // 4))
        column = 0 if constraints == 1 else list(range(constraints))
        release_freed_memory()  # this process waits on METIS's: what its allocator holds would count beside it

        def partition(out: np.ndarray) -> dict[str, Any]:
            said: dict[str, Any] = {}

            def on_coarsest(coarsest: ParhipFile) -> np.ndarray:
                value, owner = metis_file(coarsest, levels.coarsest_weights, job)
                said["coarsest_objective_value"] = value
                return owner

            owner = partition_levels(levels, column, job.num_parts, tolerance, int(job.settings["seed"]), on_coarsest)
            owner, said["repaired"] = _within_tolerance(file, owner, weights, job.num_parts, tolerance)
            if order is None:
                out[:] = owner
            else:
                out[order] = owner
            return said

        facts, owner = call_isolated(partition, file.num_nodes, np.int32)
        return owner, levels.sizes() if levels.levels else [], facts


def _within_tolerance(file: ParhipFile, owner: np.ndarray, weights: np.ndarray, num_parts: int,
                      tolerance: float) -> tuple[np.ndarray, bool]:
    """`owner` with every column of `weights` within (1 + tolerance) times its mean part weight: as it is where it
    is (False), else repaired over `file`'s mapped adjacency (True)."""
    shares = weights.astype(np.float64)
    loads = part_loads(owner, shares, num_parts)
    mean = shares.sum(axis=0) / num_parts
    if np.all(loads <= (1 + tolerance) * mean + 1e-9):
        return owner, False
    return repair_balance(owner, shares, num_parts, 1 + tolerance, file.list_starts(), file.adjacency()), True


def metis_file(file: ParhipFile, weights: np.ndarray, job: DiskMetis) -> tuple[int, np.ndarray]:
    """METIS's objective and owners on the graph of `file`, its vertex weights `weights` ([n, c]) and its edge
    weights (none: each 1)."""
    xadj = file.list_starts()
    adjncy = np.asarray(file.adjacency(), dtype=np.int64)
    edge_weights = file.edge_weights()
    vwgt = np.ascontiguousarray(weights, dtype=np.int64).reshape(-1)
    value, owner = part_graph_multiconstraint(xadj, adjncy, vwgt, weights.shape[1], job.num_parts, job.recursive,
                                              job.settings, None if edge_weights is None else
                                              np.asarray(edge_weights, dtype=np.int64))
    return int(value), owner.astype(np.int32)
