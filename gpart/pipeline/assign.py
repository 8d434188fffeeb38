"""Assign every node of a graph to a partition with one of the registered methods.

`assign` is the one entry point: it picks the method from the registry
(gpart.partition_methods.registry), validates the options through the
method's options dataclass and returns an `Assignment` holding the partition
book and the parameters exactly as run (JSON-serialisable, for the manifest).
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

from gpart.base.graph import Graph
from gpart.base.progress import Progress, or_null
from gpart.partition_methods.method import Assignment, MethodContext
from gpart.partition_methods.registry import method_options, resolve_method


def assign(
    graph: Graph,
    num_parts: int,
    method: Optional[str] = None,
    *,
    progress: Optional[Progress] = None,
    max_memory: Optional[int] = None,
    scratch_dir: Union[str, "os.PathLike[str]", None] = None,
    **options: Any,
) -> Assignment:
    """Assign each node of `graph` to one of `num_parts` partitions.

    method: a registered method's name (gpart.partition_methods.registry:
    balanced, metis, kaminpar, stream, remainder, range, random, assignment),
    or None for the default (balanced, or metis when a METIS-only option is
    given). `options` are the method's (its options dataclass: seed for all;
    imbalance, balance, balance_edges for metis, kaminpar and stream;
    objective, algorithm, trials, iterations for metis; threads for balanced
    and kaminpar; passes for stream; `assignment`, an owner array or a .npy /
    text file, which replaces metis and balanced); another method's option
    must hold its default. `max_memory` (bytes) lets "balanced" skip its METIS
    fallback where METIS would not fit; `scratch_dir` is where "stream"
    spills its edges (default: the system's temporary directory).
    """
    chosen = resolve_method(method, options, graph.source)
    made = method_options(chosen, options, graph.source)
    return chosen.assign(graph, num_parts, made, MethodContext(or_null(progress), max_memory, scratch_dir))

