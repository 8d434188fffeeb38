"""What a partition method needs in memory before it runs: the planner's check for the methods
that hold the whole adjacency (needs_adjacency), and the choice of their compressed path.

The compressed path has two estimates: with KaMinPar on the whole graph (`compressed_bytes`, per node and
per edge), and, where that would not fit, with the graph first coarsened on disk until KaMinPar's share of the
budget holds it (gpart.engines.disk_levels): then only the per-node arrays grow with the graph, and the least
it needs is `least_compressed_bytes`."""

from __future__ import annotations

from typing import Optional, Sequence

from gpart.base.errors import InputError
from gpart.base.memory import FIXED_BYTES
from gpart.engines.kaminpar import lean_preset
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


# The least KaMinPar's process is given on a graph coarsened on disk: its interpreter and a coarsest graph of about
# a million nodes and ten million adjacency entries (gpart.engines.disk_levels.kaminpar_fits)
COARSEST_KAMINPAR_BYTES = 256 << 20


def least_compressed_bytes(method: PartitionMethod, num_nodes: int, num_edges: int) -> Optional[int]:
    """The least the method's compressed path needs: KaMinPar on the whole graph, or on a graph coarsened on disk
    (the per-node arrays and COARSEST_KAMINPAR_BYTES); None for a method without one."""
    whole = compressed_bytes(method, num_nodes, num_edges)
    if whole is None:
        return None
    return min(whole, FIXED_BYTES + method.compressed_bytes_per_node * num_nodes + COARSEST_KAMINPAR_BYTES)


def coarsened_kaminpar_memory(method: PartitionMethod, num_nodes: int, num_edges: int, max_memory: Optional[int],
                              preset: Optional[str] = None) -> Optional[int]:
    """On the compressed path, the memory KaMinPar's process is given where the graph must first be coarsened on
    disk (KaMinPar on the whole graph would not fit `max_memory`: with the memory-lean preset, or with `preset`
    where one is asked for): what the per-node arrays leave; None where no coarsening is needed."""
    whole = compressed_bytes(method, num_nodes, num_edges)
    if whole is not None and preset is not None and not lean_preset(preset):
        whole = own_preset_bytes(method, num_nodes, num_edges)
    if max_memory is None or whole is None or whole <= max_memory:
        return None
    return max(COARSEST_KAMINPAR_BYTES, max_memory - FIXED_BYTES - method.compressed_bytes_per_node * num_nodes)


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
                        instead: Sequence[str], num_nodes: Optional[int] = None) -> None:
    """Stop before an assignment that holds the whole adjacency and would not fit `max_memory`, in memory nor
    (where the method has one and `num_nodes` is given) on its compressed path; the message names the memory
    needed and suggests raising --max-memory or the methods `instead`
    (gpart.partition_methods.registry.bounded_method_names). Any KaMinPar preset fits where the compressed path
    does: the graph is coarsened on disk until the preset's estimate holds it (coarsened_kaminpar_memory)."""
    need = assign_bytes(method, num_edges)
    if need <= max_memory:
        return
    names = ", ".join(instead[:-1]) + " or " + instead[-1] if len(instead) > 1 else "".join(instead)
    compressed = None if num_nodes is None else least_compressed_bytes(method, num_nodes, num_edges)
    if compressed is None:
        raise InputError(where, f"method {method.name!r} needs about {need / 2**30:.1f} GiB for {num_edges:,} edges "
                                f"({method.bytes_per_edge} bytes per edge), more than the {max_memory / 2**30:.1f} GiB allowed "
                                f"(--max-memory); use --method {names}")
    if compressed > max_memory:
        raise InputError(where, f"method {method.name!r} needs about {compressed / 2**30:.1f} GiB even compressed for "
                                f"{num_nodes:,} nodes and {num_edges:,} edges ({method.compressed_bytes_per_node} bytes per "
                                f"node and {method.compressed_partitioner}'s share), more than the {max_memory / 2**30:.1f} GiB "
                                f"allowed; raise --max-memory to at least {-(-compressed // 2**20)}MiB or use --method {names}")
