"""One partition of a typed result (SPEC.md 8.2) per node and edge type, in typed ids (SPEC.md 7.5).

gpart stores a typed result as the type-erased graph plus an `edge_type` per
stored edge and per-type data; a typed layout is per type with typed ids. A
stable sort by edge type splits a partition's erased (source, destination,
edge id) triples into per-type runs that keep CSC order (so each type's
destinations stay non-decreasing), and subtracting the type offsets gives
typed ids. Owned nodes of a type are one contiguous block of the partition's
node ids (SPEC.md 8.2), so their typed ids and data rows are slices.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from gpart.base.errors import InputError
from gpart.convert.partition_pass import PartitionEdges, Rows
from gpart.convert.target import ConvertPlan
from gpart.formats.partition.reader import PartitionReader
from gpart.formats.partition.typed import EdgeType, HeteroMeta, edge_data_key, etype_key, node_data_key, part_counts

TypedNodes = dict[str, tuple[np.ndarray, Rows]]  # ntype -> (typed ids of the owned nodes, rows)
# edge type -> (typed edge ids, typed sources, typed destinations, (N_s, N_d), rows)
TypedEdges = dict[EdgeType, tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int], Rows]]


def typed_partition(reader: PartitionReader, plan: ConvertPlan, p: int, erased: PartitionEdges) -> tuple[TypedNodes, TypedEdges]:
    """Partition p's owned nodes and stored edges (`erased`: partition_edges of p) per type, every edge type present."""
    meta = reader.hetero
    noff, eoff = meta.node_offsets, meta.edge_offsets
    node_start, edge_start = type_starts(reader, p)
    node_rows, edge_rows = typed_data_rows(reader, plan, p)
    nodes = {}
    for t, ntype in enumerate(meta.node_types):
        ids = _typed(erased.owned[node_start[t]: node_start[t + 1]], noff[t], meta.num_nodes[t], f"partition {p}: owned {ntype!r} node", reader)
        nodes[ntype] = (ids, node_rows[ntype])
    order = edge_type_order(reader, p)
    edges = {}
    for r, etype in enumerate(meta.edge_types):
        sel = order[edge_start[r]: edge_start[r + 1]]
        s, d = meta.node_types.index(etype[0]), meta.node_types.index(etype[2])
        what = f"partition {p}: {etype_key(etype)!r}"
        eid = _typed(erased.edge_ids[sel], eoff[r], meta.num_edges[r], f"{what} edge", reader)
        src = _typed(erased.row[sel], noff[s], meta.num_nodes[s], f"{what} source", reader)
        dst = _typed(erased.col[sel], noff[d], meta.num_nodes[d], f"{what} destination", reader)
        edges[etype] = (eid, src, dst, (meta.num_nodes[s], meta.num_nodes[d]), edge_rows[etype])
    return nodes, edges


def type_starts(reader: PartitionReader, p: int) -> tuple[np.ndarray, np.ndarray]:
    """Prefix sums of partition p's owned nodes per node type and stored edges per edge type (validated counts):
    type t's owned nodes are positions node_start[t]:node_start[t+1] of its node ids, type r's edges likewise of
    the edge-type order."""
    counts = part_counts(reader.part_info(p), reader.hetero, p, reader.directory)
    return (np.concatenate([[0], np.cumsum(counts["num_owned"], dtype=np.int64)]),
            np.concatenate([[0], np.cumsum(counts["num_edges"], dtype=np.int64)]))


def edge_type_order(reader: PartitionReader, p: int) -> np.ndarray:
    """Partition p's stored edges (CSC positions) stably sorted by edge type: per type, a run in CSC order."""
    # int16 keys: numpy sorts them by radix, O(E)
    return np.argsort(np.asarray(reader.array(p, "edge_type")), kind="stable")


def typed_data_rows(reader: PartitionReader, plan: ConvertPlan, p: int) -> tuple[dict[str, Rows], dict[EdgeType, Rows]]:
    """Partition p's rows of the plan's typed arrays: {ntype: Rows} (owned nodes) and {edge type: Rows} (stored edges)."""
    meta = reader.hetero
    node_start, edge_start = type_starts(reader, p)
    nodes = {ntype: _rows(reader, p, plan.node[ntype], meta.node_data[ntype], lambda n, t=ntype: node_data_key(t, n),
                          int(node_start[t + 1] - node_start[t]))
             for t, ntype in enumerate(meta.node_types)}
    edges = {etype: _rows(reader, p, plan.edge[etype_key(etype)], meta.edge_data[etype], lambda n, e=etype: edge_data_key(e, n),
                          int(edge_start[r + 1] - edge_start[r]))
             for r, etype in enumerate(meta.edge_types)}
    return nodes, edges


def per_type(meta: HeteroMeta, node_map: np.ndarray, edge_map: np.ndarray) -> tuple[dict[str, np.ndarray], dict[EdgeType, np.ndarray]]:
    """Maps over erased ids (pass_in_global_ids's) split into one map per node type and per edge type, over typed ids."""
    noff, eoff = meta.node_offsets, meta.edge_offsets
    return ({t: node_map[noff[i]: noff[i + 1]] for i, t in enumerate(meta.node_types)},
            {e: edge_map[eoff[r]: eoff[r + 1]] for r, e in enumerate(meta.edge_types)})


def _typed(erased: np.ndarray, offset: int, count: int, what: str, reader: PartitionReader) -> np.ndarray:
    """Typed ids of erased ids of one type; an id outside the type's range means a damaged result (one-line error)."""
    typed = erased - offset
    if typed.size and (typed.min() < 0 or typed.max() >= count):
        raise InputError(reader.directory, f"{what} ids fall outside their type's range 0..{count - 1} (edge_type or hetero counts damaged)")
    return typed


def _rows(reader: PartitionReader, p: int, keys: Mapping[str, str], specs: Mapping[str, tuple[str, Any]], key_of: Callable[[str], str], n: int) -> Rows:
    """{the target's key: (the first n rows of the typed array, dtype)}: owned rows come first, halo rows (halo 1) are left out."""
    return {key: (reader.array(p, key_of(name), mode="c")[:n], specs[name][0]) for name, key in keys.items()}
