"""What a partition result records and how its layouts run: the two values handed down the write pass
(gpart.pipeline.write_result, gpart.pipeline.write_arrays)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

from gpart.formats.files.scratch import ScratchDir
from gpart.pipeline.csc_order import MAX_BLOCK_EDGES
from gpart.pipeline.reverse_edges import ReverseEdges

PathLike = Union[str, "os.PathLike[str]"]
DataSpec = Optional[Mapping[str, PathLike]]


@dataclass(frozen=True)
class ResultPlan:
    """What a partition result records and holds (SPEC.md 4).

    `method` and `params`: the assignment as run; `storage`: "binary" or "hdf5"; `halo`: 0 or 1 hop;
    `node_data` / `edge_data`: the files the input's extra arrays came from (recorded, so `gpart verify
    --graph` can load them again); `extension`: typed graphs' arrays and manifest fields
    (gpart.pipeline.typed.TypedArrays: `nodes`, `edges`, `manifest`, as partition_with_book describes);
    `reverse`: the graph holds reverse copies (gpart.pipeline.reverse_edges), recorded in the manifest.
    """

    method: str
    params: dict[str, Any] = field(default_factory=dict)
    storage: str = "binary"
    halo: int = 0
    node_data: DataSpec = None
    edge_data: DataSpec = None
    extension: Any = None
    reverse: Optional[ReverseEdges] = None


@dataclass(frozen=True)
class LayoutPass:
    """How the per-partition layouts run within the memory limit (SPEC.md 4.6, gpart.pipeline.memory_plan).

    In memory: `threads` layouts at a time, gathering edge sources from a copy in RAM where
    `resident_sources`. Bounded: with `scratch`, edges ordered through buckets on disk, `block_edges`
    at a time.
    """

    threads: int = 1
    resident_sources: bool = False
    scratch: Optional[ScratchDir] = None
    block_edges: int = MAX_BLOCK_EDGES
