"""What a partition method needs in memory before it runs: the planner's check for the methods
that hold the whole adjacency (needs_adjacency)."""

from __future__ import annotations

from typing import Optional, Sequence

from gpart.base.errors import InputError
from gpart.base.memory import FIXED_BYTES
from gpart.partition_methods.method import PartitionMethod


def assign_bytes(method: PartitionMethod, num_edges: int) -> int:
    """Estimated peak of an assignment method that holds the whole adjacency (0 for the others)."""
    return FIXED_BYTES + method.bytes_per_edge * num_edges if method.needs_adjacency else 0


def check_assign_memory(method: PartitionMethod, num_edges: int, max_memory: int, where: Optional[str],
                        instead: Sequence[str]) -> None:
    """Stop before an assignment that holds the whole adjacency and would not fit `max_memory`;
    the message suggests the methods `instead` (gpart.partition_methods.registry.bounded_method_names)."""
    need = assign_bytes(method, num_edges)
    if need > max_memory:
        names = ", ".join(instead[:-1]) + " or " + instead[-1] if len(instead) > 1 else "".join(instead)
        raise InputError(where, f"method {method.name!r} needs about {need / 2**30:.1f} GiB for {num_edges:,} edges "
                                f"({method.bytes_per_edge} bytes per edge), more than the {max_memory / 2**30:.1f} GiB allowed "
                                f"(--max-memory); use --method {names}")


