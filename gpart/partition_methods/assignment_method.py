"""`--assignment FILE`: the owner of every node, computed elsewhere (ParMETIS, KaHIP, ...).

Chosen by its option, not by --method: an assignment given with no method,
or with the defaults of the library (metis) and of `gpart partition`
(balanced), replaces the method; given with any other method it conflicts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.formats.input.assignment import read_assignment_file
from gpart.formats.partition.book import ArrayBook, PartitionBook
from gpart.partition_methods.method import MethodContext, PartitionMethod
from gpart.partition_methods.options import MethodOptions, OptionError


@dataclass
class AssignmentOptions(MethodOptions):
    """The owner array, or a .npy / .npz:KEY / text file with one integer per line."""

    assignment: Union[np.ndarray, str, "os.PathLike[str]", None] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.assignment is None:
            raise OptionError("method 'assignment' needs an assignment array or file")


class AssignmentMethod(PartitionMethod):
    name = "assignment"
    options_type = AssignmentOptions
    listed = False
    selected_by = ("assignment",)
    replaces = ("metis", "balanced")
    needs_edges = False

    def run(self, graph: Graph, num_parts: int, options: AssignmentOptions,
            context: MethodContext) -> tuple[PartitionBook, dict[str, Any]]:
        owner, origin = load_assignment(options.assignment, graph.num_nodes, num_parts)
        return ArrayBook(owner, num_parts), {"assignment": origin}


def load_assignment(assignment: Any, num_nodes: int, num_parts: int) -> tuple[np.ndarray, Optional[str]]:
    """Validate an owner array (or read it from .npy / text); return it and its file name (None for arrays)."""
    if isinstance(assignment, (str, os.PathLike)):
        path = os.fspath(assignment)
        owner = read_assignment_file(path)
        origin: Optional[str] = path
    else:
        path, origin = "assignment array", None
        owner = np.asarray(assignment)
    if owner.ndim != 1:
        raise InputError(path, f"assignment must be 1-D (one partition per node), got shape {owner.shape}")
    if owner.dtype.kind not in "iu":
        raise InputError(path, f"assignment must hold integers, got dtype {owner.dtype}")
    if owner.shape[0] != num_nodes:
        raise InputError(path, f"assignment has {owner.shape[0]} entries but the graph has {num_nodes} nodes")
    if num_nodes:
        lo, hi = int(owner.min()), int(owner.max())
        if lo < 0 or hi >= num_parts:
            bad = int(np.flatnonzero((owner < 0) | (owner >= num_parts))[0])
            raise InputError(path, f"assignment of node {bad} is {int(owner[bad])}, outside [0, {num_parts})")
    return np.ascontiguousarray(owner, dtype=np.int32), origin
