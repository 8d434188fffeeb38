"""`gpart convert --to pyg`: torch_geometric.distributed's partition layout, homogeneous (SPEC.md 7.2)
and typed (SPEC.md 7.5, PyG's HeteroData layout).

PyG's Partitioner builds CSC clusters, so PyG stores each edge with the
partition that owns its destination, as gpart does: a result maps onto it
without moving an edge, and ids stay gpart's (typed results: typed ids).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from gpart.base.progress import Progress
from gpart.convert.array_keys import keys_plan, typed_keys_plan
from gpart.convert.partition_pass import PartitionEdges, pass_in_global_ids, write_in_global_ids
from gpart.convert.target import ConvertOptions, ConvertPlan, ConvertTarget, FileEntry, PathLike
from gpart.convert.typed_partition import per_type, typed_partition
from gpart.formats.foreign import pyg
from gpart.formats.foreign import pyg_typed as pyg_hetero
from gpart.formats.partition.reader import PartitionReader
from gpart.formats.partition.typed import HeteroMeta

# gpart data array -> the key PyG's loaders look up (x: node features, y: labels, edge_attr: edge features)
PYG_DEFAULT_KEYS = {"feat": "x", "label": "y", "edge_feat": "edge_attr"}


class PygTarget(ConvertTarget):
    """Every node and edge array, under --rename's key or PYG_DEFAULT_KEYS or its own name."""

    name = "pyg"
    accepts_typed = True

    def plan(self, reader: PartitionReader, options: ConvertOptions, where: PathLike) -> ConvertPlan:
        return keys_plan(reader.node_data_names(), reader.edge_data_names(), options.rename, PYG_DEFAULT_KEYS, where)

    def write(self, reader: PartitionReader, plan: ConvertPlan, stage: Path, progress: Progress, options: ConvertOptions) -> list[FileEntry]:
        write_partition = partial(pyg.write_partition, num_nodes=reader.num_nodes)
        files, node_map, edge_map = write_in_global_ids(reader, plan, stage, progress, "converting to pyg", write_partition)
        return files + pyg.write_maps(stage, node_map, edge_map) + [pyg.write_meta(stage, reader.num_parts)]

    def plan_typed(self, meta: HeteroMeta, options: ConvertOptions, where: PathLike) -> ConvertPlan:
        pyg_hetero.check_edge_types(meta.edge_types, where)
        return typed_keys_plan(meta, options.rename, PYG_DEFAULT_KEYS, where)

    def write_typed(self, reader: PartitionReader, plan: ConvertPlan, stage: Path, progress: Progress, options: ConvertOptions) -> list[FileEntry]:
        def write_part(p: int, edges: PartitionEdges) -> list[FileEntry]:
            nodes, typed_edges = typed_partition(reader, plan, p, edges)
            return pyg_hetero.write_partition(stage, p, nodes=nodes, edges=typed_edges)

        meta = reader.hetero
        files, node_map, edge_map = pass_in_global_ids(reader, stage, progress, "converting to pyg (typed)", write_part)
        files += pyg_hetero.write_maps(stage, *per_type(meta, node_map, edge_map))
        files.append(pyg_hetero.write_meta(stage, reader.num_parts, meta.node_types, meta.edge_types, meta.node_offsets[:-1].tolist()))
        return files
