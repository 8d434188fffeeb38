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


# Nodes per step when numbering each partition's nodes (local ids): bounds the step's temporaries.
LOCAL_CHUNK = 1 << 22


def random_book(num_nodes: int, num_parts: int, seed: int) -> ArrayBook:
    """Seeded and exactly balanced: a random permutation of arange(N) % P.

    The book's two arrays (owner int32, local int64: 12 bytes a node) are all it
    holds per node: arange(N) % P is tiled in int32 and shuffled in place (the
    same draws, so the same owners, as permuting the int64 array), and the local
    ids are counted chunk by chunk (local_ids), not through an N-sized argsort.
    """
    rng = np.random.default_rng(seed)
    owner = np.resize(np.arange(num_parts, dtype=np.int32), num_nodes)  # arange(N) % P
    rng.shuffle(owner)
    return ArrayBook(owner, num_parts, local=local_ids(owner, num_parts))


def local_ids(owner: np.ndarray, num_parts: int, chunk: int = LOCAL_CHUNK) -> np.ndarray:
    """Each node's rank among the nodes of its partition, in id order (an array book's local ids)."""
    local = np.empty(owner.shape[0], dtype=np.int64)
    seen = np.zeros(num_parts, dtype=np.int64)  # nodes of each partition in the chunks before
    for start in range(0, owner.shape[0], chunk):
        block = owner[start:start + chunk]
        counts = np.bincount(block, minlength=num_parts)
        order = np.argsort(block, kind="stable")  # the chunk's nodes by partition, ids ascending within
        firsts = np.cumsum(counts) - counts
        rank = np.empty(block.shape[0], dtype=np.int64)
        rank[order] = np.arange(block.shape[0], dtype=np.int64) - np.repeat(firsts, counts)
        rank += seen[block]
        local[start:start + block.shape[0]] = rank
        seen += counts
    return local


def random_owner(num_nodes: int, num_parts: int, rng: np.random.Generator) -> np.ndarray:
    """One node type's owners, drawn from `rng` (shared by the types, in order)."""
    return rng.permutation(np.arange(num_nodes, dtype=np.int64) % num_parts).astype(np.int32)
