"""What a conversion target is: the interface every `gpart convert --to NAME` implements (SPEC.md section 7).

A target is one module with one ConvertTarget subclass, registered in
gpart.convert.registry. convert_partitions calls its hooks in this order:
check_options (before the result is read), require (after a typed result was
refused or accepted), plan or plan_typed, then write or write_typed inside the
staged output directory; the manifest is written after that, by the caller.
A target that also writes a typed layout (SPEC.md 8) sets accepts_typed and
implements plan_typed and write_typed; the others refuse typed results with
one line before anything is written.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from gpart.base.progress import Progress
from gpart.formats.foreign.torch_files import FileEntry
from gpart.formats.partition.reader import PartitionReader
from gpart.formats.partition.typed import HeteroMeta

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class ConvertOptions:
    """What `gpart convert` was asked beyond the target; each target reads the options it has a use for."""

    rename: Mapping[str, str] = field(default_factory=dict)  # gpart array name -> the target's key
    node_feat: Optional[str] = None
    edge_feat: Optional[str] = None
    label: Optional[str] = None
    graph_name: str = "graph"


@dataclass(frozen=True)
class ConvertPlan:
    """Which data arrays go where in the target's layout; recorded as is in the conversion's manifest.

    node / edge: gpart array name -> the target's key (typed: per node type / per "s:r:d" edge type);
    label: {array name: key} of whole-graph labels, where the target has such a slot;
    skipped: the arrays the target has no slot for.
    """

    node: dict[str, Any]
    edge: dict[str, Any]
    skipped: list[str] = field(default_factory=list)
    label: Optional[dict[str, str]] = None


class ConvertTarget(ABC):
    """One partition layout `gpart convert` writes."""

    name: str  # the --to value
    accepts_typed: bool = False  # True where plan_typed and write_typed are implemented

    def check_options(self, options: ConvertOptions) -> None:
        """Refuse options the layout cannot take, before the result is read (default: all are fine)."""
        return None  # a hook with a default, not an abstract method

    def require(self) -> None:
        """Raise a one-line InputError when a package the writer needs is missing (default: none needed)."""
        return None  # a hook with a default, not an abstract method

    @abstractmethod
    def plan(self, reader: PartitionReader, options: ConvertOptions, where: PathLike) -> ConvertPlan:
        """Where each data array of the homogeneous result `reader` goes; a one-line InputError for what cannot go anywhere."""

    @abstractmethod
    def write(self, reader: PartitionReader, plan: ConvertPlan, stage: Path, progress: Progress, options: ConvertOptions) -> list[FileEntry]:
        """Write the homogeneous result `reader` under the staging directory `stage`; the files written, in order."""

    def plan_typed(self, meta: HeteroMeta, options: ConvertOptions, where: PathLike) -> ConvertPlan:
        """plan for a typed result (the arrays of each node and edge type); only where accepts_typed."""
        raise NotImplementedError(f"convert --to {self.name} writes no typed layout")

    def write_typed(self, reader: PartitionReader, plan: ConvertPlan, stage: Path, progress: Progress, options: ConvertOptions) -> list[FileEntry]:
        """write for a typed result; only where accepts_typed."""
        raise NotImplementedError(f"convert --to {self.name} writes no typed layout")
