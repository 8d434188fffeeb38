"""What a kind of directory is to `gpart info` and `gpart verify`: the interface every kind implements.

A kind is one module with one InspectedKind subclass, registered in
gpart.inspection.registry. The registry picks the kind of a directory: a
directory with a manifest.json goes to the first kind whose `recognises`
accepts the manifest (by default: its `format` is one of the kind's
`formats`); one without goes to the first kind whose `recognises_unlisted`
accepts its files. `info` returns a JSON-able summary (what `--json` prints),
`info_view` the blocks the CLI draws for that summary, and `verify` a report:
`ok`, `problems` (one line each, each one damage), `notes`, `checked` and, where
the kind compares the directory with its input, `mismatch` and `made_from`.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.base.progress import Progress
from gpart.formats.input.typed import HeteroGraph
from gpart.inspection.view import Block

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class VerifyRequest:
    """What `gpart verify` was asked beyond the directory: the input to compare it with, and progress."""

    graph: Union[PathLike, Graph, HeteroGraph, None] = None
    node_data: Optional[Mapping[str, PathLike]] = None
    edge_data: Optional[Mapping[str, PathLike]] = None
    progress: Optional[Progress] = None
    parts: Optional[tuple[int, ...]] = None  # check these partitions only (a per-machine directory, SPEC.md 10.4)

    @property
    def compares_input(self) -> bool:
        return self.graph is not None or bool(self.node_data) or bool(self.edge_data)

    def refuse_input(self, directory: PathLike, what: str) -> None:
        """A one-line InputError where a kind that has no input to compare with is given one (`what`: the directory is ...)."""
        if self.compares_input:
            raise InputError(directory, f"{what}: --graph, --node-data and --edge-data apply to partition results")
        if self.parts is not None:
            raise InputError(directory, f"{what}: --parts applies to partition results")


class InspectedKind(ABC):
    """One kind of directory that `gpart info` summarises and `gpart verify` checks."""

    formats: tuple[str, ...] = ()  # the manifest formats the kind reads

    def recognises(self, manifest: dict[str, Any]) -> bool:
        """Whether the directory whose manifest.json holds `manifest` (a dict with a `format` string) is of this kind."""
        return manifest["format"] in self.formats

    def recognises_unlisted(self, directory: Path) -> bool:
        """Whether `directory`, which has no manifest.json, is of this kind (default: never)."""
        return False

    @abstractmethod
    def info(self, directory: PathLike) -> dict[str, Any]:
        """The summary `gpart info` prints (as is with --json); one-line errors for what cannot be read."""

    @abstractmethod
    def info_view(self, summary: dict[str, Any]) -> list[Block]:
        """The tables and lines `gpart info` draws for `summary` (what `info` returned)."""

    @abstractmethod
    def verify(self, directory: PathLike, request: VerifyRequest) -> dict[str, Any]:
        """The report `gpart verify` prints; IntegrityError where the manifest is damaged, InputError for a bad request."""
