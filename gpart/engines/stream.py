"""Streaming partitioner (`--method stream`): clusters and Fennel over blocks of nodes, memory O(nodes + buffer).

Each edge u->v (u != v) is spilled to scratch buckets twice, once in each
endpoint's block (gpart.engines.spilled_graph), so a block's bucket holds
every neighbour of its nodes; every pass below reads the buckets block by
block, vectorised per block.

Three first placements compete; each is restreamed, then refined, and the
best pass of any is kept:

- Fennel's placement in id order, a block at a time (gpart.engines.stream_place).
  This is what graphs whose ids carry locality (road networks) and R-MAT
  graphs need.
- Clusters by label propagation (gpart.engines.stream_clusters), the graph of
  clusters partitioned by METIS k-way twice, with every share its own
  constraint ("clusters") and with one combined weight ("clusters-combined"),
  each brought within 1 + imbalance (gpart.engines.stream_cluster_graph). This
  is what social graphs need, whose ids carry no locality. Clustering gives
  up where its clusters cannot beat Fennel's placement (R-MAT, road-NY).

Then restreaming passes (Nishimura & Ugander 2013, gpart.engines.stream_place).
The best pass is kept (within the balance, then the lowest cut; the cut of a
pass is counted while the next one reads the buckets); restreaming stops
after STALL_PASSES passes that do not beat the best. The best pass of each
run (of those within REFINE_MARGIN of the best run's cut) is refined by
gpart.engines.stream_refine.refine (balanced label propagation and pairwise
swaps, a read of the buckets a pass, the best pass kept), so more
restreaming or refinement passes never give a worse result than fewer
(`params.pass_cuts`, `params.refine_cuts`).

Memory: N-sized labels, cluster sizes, owners and shares; the [N, P] int32
neighbour counts of the refinement (4 P bytes a node, 8 P at the peak); one block's bucket
and gain matrix (BLOCK_NODES x P); the graph of clusters (a dense
UNIT_CAP^2 int32 matrix, 64 MiB, and at most UNIT_PAIRS of its entries, 24
bytes each, whatever the edges); the temporaries of a spill step (SPILL_EDGES
edges, about 34 MiB); the edges live in the scratch files (16 bytes per edge
with 32-bit ids, 32 with 64-bit). Time: two passes over the edges to spill them, then
one placing pass, up to CLUSTER_PASSES clustering passes, up to 3 x RESTREAM_PASSES
reads for the restreams and a read per refinement pass (PASSES in all per run).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from gpart.base.graph import Graph
from gpart.base.memory import FIXED_BYTES, default_max_memory
from gpart.base.progress import Progress, or_null
from gpart.engines.balance import BALANCE_BOUND, TRAIN_MASK, in_degrees, train_mask
from gpart.engines.metis import balance_column
from gpart.engines.spill import bucket_rows
from gpart.engines.spilled_graph import SpilledGraph, both_directions
from gpart.engines.stream_cluster_graph import clustered
from gpart.engines.stream_clusters import CLUSTER_PASSES, cluster
from gpart.engines.stream_place import BALANCE_SLACK, GAMMA, pass_key, place_blocks, restream
from gpart.engines.stream_refine import refine
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.partition.book import ArrayBook

BLOCK_NODES = 8192
MIN_BLOCK_NODES = 64
# Restreaming passes of a run at most (the first places, the others restream; it stops earlier where it stalls), then
# refinement passes up to PASSES in all. Fennel's placement restreamed, cut at 1 / 2 / 4 / 8 / 16 passes, 4 parts:
# road-NY 0.079 / 0.067 / 0.054 / 0.045 / 0.043, power-law 1M/10M 0.69 / 0.66 / 0.64 / 0.62 / 0.59.
RESTREAM_PASSES = 8
PASSES = 20
# Input edges per spill step: about 130 bytes of temporaries an edge (both directions, their blocks, the sort):
# 34 MiB. At 1M edges a step (gpart.engines.spill.ROW_CHUNK) they were 130 MiB, past a 144 MiB cap with the interpreter.
SPILL_EDGES = 1 << 18
GAIN_CELLS = 1 << 22  # block nodes x parts: bounds the gain matrix to 32 MiB
# The spilled rows (16 bytes an edge) stay in memory where they take at most 1 / RESIDENT_SHARE of the budget past
# FIXED_BYTES: each pass reads every bucket (about 40 passes over them in all), from disk where the page cache is
# dropped. 8 parts, CPU seconds on disk -> in memory: email-Enron 6.0 -> 4.5, power-law 1M/10M 31.3 -> 21.9.
RESIDENT_SHARE = 4
# The default tolerance keeps every share within the default method's bound (1.10 x its mean) with BALANCE_SLACK,
# not METIS's 3%: the stream stands in for the default where the adjacency does not fit, and Fennel's own load
# bound is 1.1 (Tsourakakis et al. 2014). Facebook, 8 parts, cut at 0.03 / 0.09 / 0.10: 0.197 / 0.169 / 0.162 (ids
# permuted 0.187 / 0.169 / 0.163); email-Enron 0.300 / 0.299 / 0.301; the default cuts 0.153 there at its bound.
DEFAULT_IMBALANCE = round(BALANCE_BOUND - 1 - BALANCE_SLACK, 6)
# Runs whose first pass cuts over 1 + REFINE_MARGIN times the least are not refined: Fennel's placement on the social
# graphs cuts 1.9-3.3 times the clusters' (8 parts), and restreaming and refinement lowered a run's cut by at most a
# third (R-MAT 1M/10M 0.79 -> 0.73; facebook's clusters 0.213 -> 0.200, email-Enron's 0.309 -> 0.307).
REFINE_MARGIN = 0.5

Run = tuple[np.ndarray, list[float], tuple[float, float]]  # the best owners, the cut of every pass, the best's pass_key


def stream_book(graph: Graph, num_parts: int, *, imbalance: float = DEFAULT_IMBALANCE, balance: Sequence[str] = (),
                balance_edges: bool = True, passes: int = PASSES, scratch_dir: Optional[str] = None,
                progress: Optional[Progress] = None, max_memory: Optional[int] = None) -> tuple[ArrayBook, dict[str, Any]]:
    """Place every node three times (Fennel, clusters twice), restream and refine each; the best pass of any, and
    the parameters as run. `max_memory`: the run's budget (None: gpart.base.memory.default_max_memory), which
    decides whether the spilled edges stay in memory (RESIDENT_SHARE).

    Balanced weights: nodes, in-degree (always: edges are stored with their
    destination) and the `balance` masks, or the training mask when none is named.
    """
    names = list(balance) or ([TRAIN_MASK] if train_mask(graph) is not None else [])
    masks = [balance_column(graph, name) for name in names]
    progress = or_null(progress)
    n = graph.num_nodes
    shares = np.column_stack([np.ones(n), in_degrees(graph)] + [np.asarray(m, dtype=np.float64) for m in masks])
    # small blocks on small graphs, so most neighbours are placed before a node is
    block = max(MIN_BLOCK_NODES, min(BLOCK_NODES, n // 256, GAIN_CELLS // max(num_parts, 1)))
    id_dtype = np.dtype(np.int32) if n < 2**31 else np.dtype(np.int64)
    with ScratchDir(scratch_dir) as scratch:
        with progress.stage("stream: spill edges"):
            buckets = bucket_rows(scratch, graph.num_edges, -(-n // block), both_directions(graph, block, id_dtype),
                                  {"node": id_dtype, "neighbour": id_dtype}, chunk=SPILL_EDGES,
                                  resident_bytes=max(0, (max_memory or default_max_memory()) - FIXED_BYTES) // RESIDENT_SHARE)
        spilled = SpilledGraph(buckets, shares, num_parts, block, float(imbalance), graph.num_edges)
        notes: list[str] = []
        starts = _starts(spilled, progress, notes)
        restreams = min(passes, RESTREAM_PASSES)
        with progress.stage("stream: restream", total=float(restreams * len(starts)), unit="passes") as bar:
            runs = {name: restream(spilled, start, restreams, bar) for name, start in starts.items()}
        del starts
        refined = _refine_runs(spilled, runs, passes, progress)
    kept = min(refined, key=lambda name: refined[name][2])
    params = {
        "imbalance": float(imbalance),
        "balance": names,
        "balance_edges": True,
        "vertex_weights": "combined",
        "block_nodes": block,
        "gamma": GAMMA,
        "order": "node id",
        "passes": int(passes),
        "restream_passes": RESTREAM_PASSES,
        "start": kept,
        "pass_cuts": {name: [round(cut, 6) for cut in run[1]] for name, run in runs.items()},
        "refine_cuts": {name: [round(cut, 6) for cut in run[1]] for name, run in refined.items()},
    }
    if notes:
        params["clusters_packed"] = sorted(set(notes))
    return ArrayBook(refined[kept][0], num_parts), params


def _refine_runs(spilled: SpilledGraph, runs: dict[str, Run], passes: int, progress: Progress) -> dict[str, Run]:
    """Each run's best pass refined (gpart.engines.stream_refine.refine) with the passes the run left of `passes`, its cut
    per refinement pass and its `pass_key`; a run whose first pass cut over 1 + REFINE_MARGIN times the
    least any first pass cut stays as it is (its one cut recorded).

    A run restreams until it stalls or RESTREAM_PASSES, whatever `passes`, unless `passes` ends it
    first: one more pass in all is one more restreaming or refinement pass of the same sequence, so
    more passes never return a worse result. Which runs are refined depends on the first passes alone.
    """
    least = min(run[1][0] for run in runs.values())
    left = {name: passes - len(run[1]) if run[1][0] <= least * (1.0 + REFINE_MARGIN) else 0 for name, run in runs.items()}
    refined = {}
    with progress.stage("stream: refine", total=float(sum(r + 1 for r in left.values() if r > 0)), unit="passes") as bar:
        for name, (owner, _, key) in runs.items():
            refined[name] = (refine(spilled, owner, lambda owner, cut: pass_key(spilled, owner, cut), left[name], bar)
                             if left[name] > 0 else (owner, [key[1]], key))
    return refined


def _starts(spilled: SpilledGraph, progress: Progress, notes: list[str]) -> dict[str, np.ndarray]:
    """The first placements: Fennel's, and where the clusters are worth it (stream_clusters.cluster) the graph of
    clusters partitioned with every share its own constraint and with one combined weight
    (stream_cluster_graph.clustered)."""
    n = spilled.shares.shape[0]
    with progress.stage("stream: place"):
        starts = {"fennel": place_blocks(spilled, np.full(n, -1, dtype=np.int32), 0)[0]}
    with progress.stage("stream: cluster", total=float(CLUSTER_PASSES), unit="passes") as bar:
        clusters = cluster(spilled, bar, starts["fennel"])
    if clusters is not None:
        with progress.stage("stream: partition clusters"):
            starts.update(clustered(spilled, clusters, notes))
    return starts
