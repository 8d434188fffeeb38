"""The pass every conversion makes: one partition at a time (SPEC.md 7.1).

Memory holds one partition's edge arrays, not the graph: each partition's
CSC over local ids becomes global `row` / `col` arrays (`node_ids[indices]`,
owned ids repeated by column length), its node and edge data rows are handed
to the writer as memory maps, and whatever spans the whole graph (the
partition of every node and edge, labels in global order, DGL's id mapping)
fills scratch memory maps in the staging directory, removed before commit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from gpart.base.errors import InputError
from gpart.base.progress import Progress
from gpart.bytes.sink import map_new_file
from gpart.convert.target import ConvertPlan, FileEntry, PathLike
from gpart.formats.partition.reader import PartitionReader

Rows = dict[str, tuple[np.ndarray, str]]  # the target's key -> (rows, dtype name), as the format writers take them


class PartitionEdges(NamedTuple):
    """One partition's stored edges in global ids, in its CSC order (by destination)."""

    owned: np.ndarray  # global ids of the owned nodes, ascending
    row: np.ndarray  # global source of each edge
    col: np.ndarray  # global destination of each edge (owned here)
    edge_ids: np.ndarray


def refuse_halo_rows(reader: PartitionReader, target: str, where: PathLike) -> None:
    """A homogeneous result with node data for halo nodes has no place in any target's layout (SPEC.md 7.1)."""
    if reader.halo and reader.node_data_names():
        raise InputError(
            where, f"stores node data for halo nodes (halo: 1), which {target}'s layout has no place for; partition with --halo 0 to convert"
        )


def scratch_array(stage: Path, name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A writable memory map in the staging directory (deleted before commit), its space reserved
    first (a full disk is an OutputError naming the file, not a SIGBUS), or an empty array."""
    return map_new_file(stage / f".{name}.scratch", dtype, shape)


def remove_scratch(stage: Path) -> None:
    """Delete the scratch files of scratch_array (and any other `.*.scratch`) before the result is committed."""
    for scratch in stage.glob(".*.scratch"):
        scratch.unlink()


def partition_edges(reader: PartitionReader, part: int) -> PartitionEdges:
    """Partition `part`'s owned nodes and stored edges in global ids."""
    info = reader.part_info(part)
    owned = np.asarray(reader.array(part, "node_ids")[: info["num_owned"]], dtype=np.int64)
    indptr = np.asarray(reader.array(part, "indptr"), dtype=np.int64)
    node_ids = reader.array(part, "node_ids")
    row = np.asarray(node_ids[np.asarray(reader.array(part, "indices"))], dtype=np.int64)
    col = np.repeat(owned, np.diff(indptr))
    edge_ids = np.asarray(reader.array(part, "edge_ids"), dtype=np.int64)
    return PartitionEdges(owned, row, col, edge_ids)


def data_rows(reader: PartitionReader, part: int, kind: str, keys: Mapping[str, str]) -> Rows:
    """{the target's key: (rows, dtype)} of partition `part`'s `kind` ("node" or "edge") arrays, as copy-on-write maps."""
    specs = reader.manifest[f"{kind}_data"]
    return {key: (reader.array(part, f"{kind}_data/{name}", mode="c"), specs[name]["dtype"]) for name, key in keys.items()}


def each_partition(reader: PartitionReader, progress: Progress, what: str, write_part: Callable[[int], list[FileEntry]]) -> list[FileEntry]:
    """write_part(p) for every partition in order, as one progress stage `what`; the files written, in order."""
    files: list[FileEntry] = []
    with progress.stage(what, total=reader.num_parts) as bar:
        for p in range(reader.num_parts):
            files += write_part(p)
            bar.advance(1)
    return files


def pass_in_global_ids(
    reader: PartitionReader, stage: Path, progress: Progress, what: str, write_part: Callable[[int, PartitionEdges], list[FileEntry]]
) -> tuple[list[FileEntry], np.ndarray, np.ndarray]:
    """each_partition handing write_part each partition's edges in global ids; (files, node map, edge map),
    the maps giving the partition of every node and every edge (its destination's), over gpart's ids."""
    node_map = scratch_array(stage, "node_map", (reader.num_nodes,), np.int64)
    edge_map = scratch_array(stage, "edge_map", (reader.num_edges,), np.int64)

    def visit(p: int) -> list[FileEntry]:
        edges = partition_edges(reader, p)
        node_map[edges.owned] = p
        edge_map[edges.edge_ids] = p
        return write_part(p, edges)

    return each_partition(reader, progress, what, visit), node_map, edge_map


def write_in_global_ids(
    reader: PartitionReader, plan: ConvertPlan, stage: Path, progress: Progress, what: str, write_partition: Callable[..., list[FileEntry]]
) -> tuple[list[FileEntry], np.ndarray, np.ndarray]:
    """pass_in_global_ids for a layout in global ids whose writer takes `write_partition(directory, part, *, node_ids,
    row, col, edge_ids, node_feats, edge_feats)`, the feats being the plan's node and edge rows."""

    def write_part(p: int, edges: PartitionEdges) -> list[FileEntry]:
        return write_partition(stage, p, node_ids=edges.owned, row=edges.row, col=edges.col, edge_ids=edges.edge_ids,
                               node_feats=data_rows(reader, p, "node", plan.node), edge_feats=data_rows(reader, p, "edge", plan.edge))

    return pass_in_global_ids(reader, stage, progress, what, write_part)
