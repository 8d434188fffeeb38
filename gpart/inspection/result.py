"""`gpart info` and `gpart verify`: describe a directory gpart wrote and prove it intact.

The directory's kind (gpart.inspection.registry: a partition result, a typed one,
a checkpoint, an export-feat directory, a convert or export-ckpt output) does the
work; this module is what the CLI and library callers call.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Sequence, Union

from gpart.base.errors import GpartError, InputMismatchError, IntegrityError
from gpart.base.graph import Graph
from gpart.base.progress import Progress
from gpart.formats.input.typed import HeteroGraph
from gpart.inspection.kind import InspectedKind, VerifyRequest
from gpart.inspection.registry import kind_of

PathLike = Union[str, "os.PathLike[str]"]


def info_kind(directory: PathLike) -> InspectedKind:
    """The kind whose `info` summarises `directory` (and whose `info_view` draws the summary)."""
    return kind_of(directory, missing_is_damage=False)


def info(directory: PathLike) -> dict[str, Any]:
    """Sizes, edge cut, balance, halo ratio and dtypes of a result; or the summary of a checkpoint, an
    export-feat directory, a convert or an export-ckpt output."""
    return info_kind(directory).info(directory)


def verify(
    directory: PathLike,
    graph: Union[PathLike, Graph, HeteroGraph, None] = None,
    *,
    node_data: Optional[Mapping[str, PathLike]] = None,
    edge_data: Optional[Mapping[str, PathLike]] = None,
    progress: Optional[Progress] = None,
    parts: Optional[Sequence[int]] = None,
) -> dict[str, Any]:
    """Check every checksum and invariant; with `graph`, prove the result reconstructs it. `parts`: check only
    the book and these partitions, and their invariants (a per-machine directory of a distributed run, which
    holds its ranks' partitions: SPEC.md 10.4); the checks that need every partition are then left out.

    Returns a report: `ok`, `problems` (one line each), `notes`, `checked`.
    Raises InputError when the directory does not exist, IntegrityError when
    it has no readable manifest.
    """
    kind = kind_of(directory, missing_is_damage=True)
    return kind.verify(directory, VerifyRequest(graph, node_data, edge_data, progress, None if parts is None else tuple(parts)))


def report_failure(directory: PathLike, graph: Union[PathLike, Graph, HeteroGraph, None], report: dict[str, Any]) -> Optional[GpartError]:
    """The one-line error a failed verify report ends with (None when it passed): IntegrityError (exit 1)
    when the result is damaged; InputMismatchError (exit 3) when the result is intact and only its
    comparison with `graph` failed, i.e. `graph` is not the input it was made from."""
    problems, mismatch = report.get("problems", []), report.get("mismatch", [])
    if problems:
        return IntegrityError(directory, f"damaged: {len(problems)} problem{'s' if len(problems) != 1 else ''} found")
    if mismatch:
        given = graph if isinstance(graph, (str, os.PathLike)) else getattr(graph, "source", None)
        recorded = report.get("made_from")
        return InputMismatchError(
            given, f"differs from the input {directory} was made from{f' ({recorded})' if recorded else ''} "
                   f"({len(mismatch)} difference{'s' if len(mismatch) != 1 else ''}); the result's checksums and invariants hold, so the graph "
                   "given is not its input (unless the result was rewritten along with its checksums)")
    return None if report.get("ok") else IntegrityError(directory, "damaged")
