"""What a checkpoint export target is: the interface every `gpart export-ckpt --to NAME` implements (SPEC.md 6.7).

A target is one module with one ExportTarget subclass, registered in
gpart.ckpt.export_registry. export_checkpoint (gpart.ckpt.foreign_export) reads
the checkpoint, refuses an optimizer the target has no states for (unless
the tables alone are asked for), then calls the target's hooks in this order:
default_prefix (when no prefix was given), policies (which embeddings go out,
each under the policy its files are cut by), write inside the staged output
directory, and exported_optimizer for the export's manifest, written last by
the caller.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from gpart.base.errors import InputError
from gpart.base.progress import Progress
from gpart.formats.checkpoint.reader import Checkpoint
from gpart.formats.sharding.policies import ShardPolicy

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class ExportOptions:
    """What `gpart export-ckpt` was asked beyond the target; each target reads the options it has a use for."""

    world_size: int  # ranks of the job that resumes
    prefix: Optional[str] = None  # the file-name prefix (default: the target's default_prefix)
    embedding: Optional[str] = None  # the one embedding to export (default: the target's choice)
    policy: str = "remainder"  # how rows are split over the ranks, where the target lets the user choose
    boundaries: Optional[Sequence[int]] = None  # W+1 row boundaries of a range split
    table_only: bool = False  # the tables alone, without optimizer states
    ntype: str = "_N"  # DistDGL: the node type in the optimizer's state names
    verify: bool = False  # check every input file's CRC-32 first
    chunk_rows: Optional[int] = None  # rows per streaming step (default: about 32 MiB)


class ExportTarget(ABC):
    """One system whose checkpoint files `gpart export-ckpt` writes."""

    name: str  # the --to value
    optimizers: tuple[str, ...]  # the gpart optimizers whose states the target saves ("none" among them)

    @abstractmethod
    def default_prefix(self, src: Checkpoint, options: ExportOptions, where: PathLike) -> str:
        """The file-name prefix when none is given."""

    @abstractmethod
    def policies(self, src: Checkpoint, options: ExportOptions, where: PathLike) -> dict[str, ShardPolicy]:
        """{embedding: the policy its rows are split by} of every embedding exported, in order."""

    @abstractmethod
    def write(self, src: Checkpoint, prefix: str, policies: dict[str, ShardPolicy], stage: Path, options: ExportOptions,
              progress: Progress) -> list[dict[str, Any]]:
        """Write the files under the staging directory `stage`; their manifest entries, in order."""

    def exported_optimizer(self, optimizer: dict[str, Any], table_only: bool) -> dict[str, Any]:
        """The optimizer entry of the export's manifest (default: the source's, or none for the tables alone)."""
        return {"type": "none"} if table_only else optimizer


def check_embedding(src: Checkpoint, name: str, where: PathLike) -> str:
    """`name`, checked to be an embedding of `src`."""
    if name not in src.embeddings:
        raise InputError(where, f"has no embedding {name!r} (embeddings: {', '.join(src.embeddings)})")
    return name

