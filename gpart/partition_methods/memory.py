"""What a partition method needs in memory before it runs: the planner's check for the methods
that hold the whole adjacency (needs_adjacency), and the choice of their compressed path."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from gpart.base.errors import InputError
from gpart.base.memory import FIXED_BYTES
from gpart.partition_methods.method import PartitionMethod


def assign_bytes(method: PartitionMethod, num_edges: int) -> int:
    """Estimated peak of an assignment method that holds the whole adjacency (0 for the others)."""
    return FIXED_BYTES + method.bytes_per_edge * num_edges if method.needs_adjacency else 0


def compressed_bytes(method: PartitionMethod, num_nodes: int, num_edges: int) -> Optional[int]:
    """Estimated peak of the method's compressed path (adjacency on disk, KaMinPar's compressed graph);
    None for a method without one."""
    if not method.compressed_bytes_per_edge:
        return None
    return FIXED_BYTES + method.compressed_bytes_per_node * num_nodes + method.compressed_bytes_per_edge * num_edges


def needs_lean_preset(method: PartitionMethod, num_nodes: int, num_edges: int, max_memory: Optional[int]) -> bool:
    """Whether the compressed path fits `max_memory` only with KaMinPar's memory-lean preset (terapart), not with
    the method's own (fast or default): gpart.partition_methods.options.KaminparRunOptions.preset_for."""
    if max_memory is None or not method.own_preset_bytes_per_edge:
        return False
    return own_preset_bytes(method, num_nodes, num_edges) > max_memory


def own_preset_bytes(method: PartitionMethod, num_nodes: int, num_edges: int) -> int:
    """Estimated peak of the compressed path with the method's own KaMinPar preset (0 for a method without one)."""
    return FIXED_BYTES + method.own_preset_bytes_per_node * num_nodes + method.own_preset_bytes_per_edge * num_edges


def runs_compressed(method: PartitionMethod, num_nodes: int, num_edges: int, max_memory: Optional[int]) -> bool:
    """Whether the method takes its compressed path: it has one and the in-memory path would not fit `max_memory`."""
    return (max_memory is not None and compressed_bytes(method, num_nodes, num_edges) is not None
            and assign_bytes(method, num_edges) > max_memory)


def check_assign_memory(method: PartitionMethod, num_edges: int, max_memory: int, where: Optional[str],
                        instead: Sequence[str], num_nodes: Optional[int] = None, options: Any = None) -> None:
    """Stop before an assignment that holds the whole adjacency and would not fit `max_memory`, in memory nor
    (where the method has one and `num_nodes` is given) on its compressed path, nor there with the KaMinPar
    preset that `options` asks for; the message names the memory needed and suggests raising --max-memory or
    the methods `instead` (gpart.partition_methods.registry.bounded_method_names)."""
    need = assign_bytes(method, num_edges)
    if need <= max_memory:
        return
    names = ", ".join(instead[:-1]) + " or " + instead[-1] if len(instead) > 1 else "".join(instead)
    compressed = None if num_nodes is None else compressed_bytes(method, num_nodes, num_edges)
    if compressed is None:
        raise InputError(where, f"method {method.name!r} needs about {need / 2**30:.1f} GiB for {num_edges:,} edges "
                                f"({method.bytes_per_edge} bytes per edge), more than the {max_memory / 2**30:.1f} GiB allowed "
                                f"(--max-memory); use --method {names}")
    if compressed > max_memory:
        raise InputError(where, f"method {method.name!r} needs about {compressed / 2**30:.1f} GiB even compressed for "
                                f"{num_nodes:,} nodes and {num_edges:,} edges ({method.compressed_bytes_per_node} bytes per "
                                f"node, {method.compressed_bytes_per_edge} per edge), more than the {max_memory / 2**30:.1f} GiB "
                                f"allowed; raise --max-memory to at least {-(-compressed // 2**20)}MiB or use --method {names}")
    if num_nodes is not None:
        _check_preset_memory(method, num_nodes, num_edges, max_memory, where, getattr(options, "preset", None))


def _check_preset_memory(method: PartitionMethod, num_nodes: int, num_edges: int, max_memory: int, where: Optional[str],
                         preset: Optional[str]) -> None:
    """On the compressed path, a KaMinPar preset asked for that only the memory-lean one's estimate fits: stop."""
    if preset is None or preset.startswith("terapart") or not needs_lean_preset(method, num_nodes, num_edges, max_memory):
        return
    need = own_preset_bytes(method, num_nodes, num_edges)
    raise InputError(where, f"--preset {preset} needs about {need / 2**30:.1f} GiB on the compressed path for {num_nodes:,} "
                            f"nodes and {num_edges:,} edges, more than the {max_memory / 2**30:.1f} GiB allowed; drop --preset "
                            f"(the memory-lean terapart is then chosen) or raise --max-memory to at least {-(-need // 2**20)}MiB")
