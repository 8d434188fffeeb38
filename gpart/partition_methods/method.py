"""What a partition method is: the interface every `--method NAME` implements.

A method is one module with one PartitionMethod subclass, registered in
gpart.partition_methods.registry. Its options are a dataclass
(gpart.partition_methods.options) made and validated before the graph is
read; `run` assigns every node of a graph and returns the book with the
parameters as run (recorded in the manifest); `assign` adds the common
parameters (num_parts first, empty_parts last). The class attributes say what
the pipeline must know before it runs the method: its memory (the
bounded-memory planner, gpart.pipeline.memory_plan), whether it reads the edges at all (a
distributed run computes an edge-free book on every rank and gathers the graph
on rank 0 for the others, gpart.distributed.gather), and how typed graphs run
it (`run_typed`).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import numpy as np

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.base.progress import NullProgress, Progress
from gpart.formats.partition.book import ARRAY_BOOK_NODE_BYTES, PartitionBook
from gpart.partition_methods.options import MethodOptions, is_int
from gpart.partition_methods.typed_input import TypedInput

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class MethodContext:
    """Where a method runs, beside its options: progress, the memory the run may use
    (None: no limit known) and where to spill (None: the system's temporary directory)."""

    progress: Progress = field(default_factory=NullProgress)
    max_memory: Optional[int] = None
    scratch_dir: Optional[PathLike] = None


@dataclass
class Assignment:
    """The result of a method: the book and how it was made (JSON-serialisable params, for the manifest)."""

    book: PartitionBook
    method: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def num_parts(self) -> int:
        return int(self.book.num_parts)


class PartitionMethod(ABC):
    """One way of assigning every node to a partition."""

    name: str  # the --method value
    summary: str = ""  # one sentence for `gpart partition --help`
    options_type: type[MethodOptions] = MethodOptions
    listed: bool = True  # offered as a --method choice (False: chosen through its own option, as --assignment)
    # Options that, given without a method named, choose this method; and the methods it replaces when
    # one of them is given with that method named (the defaults of the library and of the CLI).
    selected_by: tuple[str, ...] = ()
    replaces: tuple[str, ...] = ()
    # Memory: a method that holds the whole symmetric adjacency cannot run in bounded memory; it needs
    # about gpart.base.memory.FIXED_BYTES + bytes_per_edge * E (peak RSS per input edge, measured).
    needs_adjacency: bool = False
    bytes_per_edge: int = 0
    # Bytes a node its book holds (ARRAY_BOOK_NODE_BYTES); 0 for a rule (remainder, range), which the bounded pass
    # computes (gpart.pipeline.memory_plan.check_node_memory).
    book_bytes_per_node: int = ARRAY_BOOK_NODE_BYTES
    # The compressed path of a method that has one (0: none): the adjacency built on disk and read by
    # KaMinPar compressed, taken by itself when the in-memory path would not fit (partition_methods.memory);
    # its peak is about FIXED_BYTES + compressed_bytes_per_node * N + compressed_bytes_per_edge * E with
    # KaMinPar's memory-lean preset, and with the presets the method runs by itself (deterministic) about
    # FIXED_BYTES + own_preset_bytes_per_node * N + own_preset_bytes_per_edge * E.
    compressed_bytes_per_node: int = 0
    compressed_bytes_per_edge: int = 0
    own_preset_bytes_per_node: int = 0
    own_preset_bytes_per_edge: int = 0
    compressed_partitioner: str = "KaMinPar"  # what partitions the compressed path's graph (named in its refusal)
    # False: the book follows from the node count and the options alone (every rank of a distributed run
    # computes it); True: the method reads the edges (a distributed run gathers the graph on rank 0).
    needs_edges: bool = True

    @abstractmethod
    def run(self, graph: Graph, num_parts: int, options: MethodOptions, context: MethodContext) -> tuple[PartitionBook, dict[str, Any]]:
        """The book of `graph` and the parameters it was made with (beyond num_parts)."""

    def run_typed(self, typed: TypedInput, num_parts: int, options: MethodOptions,
                  context: MethodContext) -> tuple[PartitionBook, dict[str, Any]]:
        """The book of a typed graph over erased ids and its parameters (as recorded).

        Default: `run` on the erased graph as it is; the partitioners balance every
        node type (gpart.partition_methods.typed_runs), the rules apply per type.
        """
        result = self.assign(typed.graph(), num_parts, options, context)
        return result.book, dict(result.params)

    def assign(self, graph: Graph, num_parts: int, options: MethodOptions, context: Optional[MethodContext] = None) -> Assignment:
        """`run` (after checking the part count), with the parameters every method records: num_parts first,
        the empty parts last."""
        check_num_parts(graph, num_parts)
        book, method_params = self.run(graph, int(num_parts), options, context or MethodContext())
        params: dict[str, Any] = {"num_parts": int(num_parts)}
        params.update(method_params)
        counts = np.asarray(book.counts())
        params["empty_parts"] = [int(p) for p in np.flatnonzero(counts == 0)]
        return Assignment(book=book, method=self.name, params=params)


def check_num_parts(graph: Graph, num_parts: Any) -> None:
    """An integer number of parts in [1, number of nodes]."""
    if not is_int(num_parts):
        raise InputError(graph.source, f"number of parts must be an integer, got {num_parts!r}")
    if num_parts < 1:
        raise InputError(graph.source, f"number of parts must be at least 1, got {num_parts}")
    if num_parts > graph.num_nodes:
        raise InputError(graph.source, f"number of parts {num_parts} exceeds the number of nodes {graph.num_nodes}")
