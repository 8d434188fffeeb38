"""`--method stream`: clusters and Fennel, restreamed and refined (gpart.engines.stream, gpart.engines.stream_refine), memory
O(nodes x parts), edges spilled to scratch files."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from gpart.base.graph import Graph
from gpart.engines.stream import DEFAULT_IMBALANCE, stream_book
from gpart.formats.partition.book import PartitionBook
from gpart.partition_methods.method import MethodContext, PartitionMethod
from gpart.partition_methods.options import BalanceOptions, check_count
from gpart.partition_methods.typed_input import TypedInput
from gpart.partition_methods.typed_runs import constrained_book


@dataclass
class StreamOptions(BalanceOptions):
    """The balance options and the number of streaming passes of a run, restreaming and refinement (None:
    gpart.engines.stream.PASSES). The tolerance is the default method's bound (gpart.engines.stream.DEFAULT_IMBALANCE)."""

    DEFAULT_IMBALANCE: ClassVar[float] = DEFAULT_IMBALANCE
    passes: Optional[int] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_count("passes", self.passes, optional=True)


class StreamMethod(PartitionMethod):
    name = "stream"
    summary = "Clusters or Fennel, restreamed and refined; memory O(nodes x parts), edges on disk."
    options_type = StreamOptions

    def run(self, graph: Graph, num_parts: int, options: StreamOptions, context: MethodContext) -> tuple[PartitionBook, dict[str, Any]]:
        more = {} if options.passes is None else {"passes": int(options.passes)}
        return stream_book(graph, num_parts, imbalance=options.imbalance, balance=options.names(), balance_edges=options.balance_edges,
                           scratch_dir=context.scratch_dir, progress=context.progress, max_memory=context.max_memory, **more)

    def run_typed(self, typed: TypedInput, num_parts: int, options: StreamOptions,
                  context: MethodContext) -> tuple[PartitionBook, dict[str, Any]]:
        return constrained_book(self, typed, num_parts, options, context)
