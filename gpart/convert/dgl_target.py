"""`gpart convert --to dgl`: DGL's partition layout (SPEC.md 7.4, typed 7.6; needs DGL importable).

One writer for both: a homogeneous result is the one-type case (`_N`,
`_N:_E:_N`) of a typed one. DGL wants each partition's nodes and edges to be
one contiguous range of new ids, and within it one range per type
(partition-major, type-minor): owned node `j` of partition `p` becomes
`nb[p] + j` (owned nodes in ascending erased id, which is by type already),
and its `k`-th stored edge in a stable sort by edge type (CSC order within a
type) `eb[p] + k`; orig_nids / orig_eids map each type's ids back to the
input's, as DGL's `partition_graph(return_mapping=True)` does.

A DGL partition also holds, as non-inner edges, the out-edges of its inner
nodes that are stored elsewhere (their destination is owned by another
partition), so that out-degrees and out-edge sampling are local. gpart stores
in-edges only, so one pass over all partitions collects every cut edge
`u -> v` (a halo source in v's partition) under u's owner, appended to one
scratch file per partition; each partition then adds its out-edges, and the
destinations it did not list yet join its halo nodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from gpart.base.errors import InputError, OutputError
from gpart.base.progress import Progress
from gpart.convert.array_keys import keys_plan, typed_keys_plan
from gpart.convert.partition_pass import Rows, data_rows, each_partition, scratch_array
from gpart.convert.target import ConvertOptions, ConvertPlan, ConvertTarget, FileEntry, PathLike
from gpart.convert.typed_partition import edge_type_order, type_starts, typed_data_rows
from gpart.formats.filelist.layout import check_export_name
from gpart.formats.foreign import dgl
from gpart.formats.partition.book import PartitionBook
from gpart.formats.partition.reader import PartitionReader
from gpart.formats.partition.typed import HeteroMeta, etype_key


class DglTarget(ConvertTarget):
    """Every node and edge array, under --rename's key or its own name; the part config is `<graph_name>.json`."""

    name = "dgl"
    accepts_typed = True

    def check_options(self, options: ConvertOptions) -> None:
        check_export_name(options.graph_name)

    def require(self) -> None:
        dgl.require_dgl()

    def plan(self, reader: PartitionReader, options: ConvertOptions, where: PathLike) -> ConvertPlan:
        return keys_plan(reader.node_data_names(), reader.edge_data_names(), options.rename, {}, where)

    def plan_typed(self, meta: HeteroMeta, options: ConvertOptions, where: PathLike) -> ConvertPlan:
        if len(meta.node_types) > dgl.MAX_NODE_TYPES:
            raise InputError(where, f"has {len(meta.node_types)} node types; DGL keeps node type indices as int16 (at most {dgl.MAX_NODE_TYPES})")
        return typed_keys_plan(meta, options.rename, {}, where)

    def write(self, reader: PartitionReader, plan: ConvertPlan, stage: Path, progress: Progress, options: ConvertOptions) -> list[FileEntry]:
        return _write(reader, _Types(reader, plan), stage, progress, options)

    def write_typed(self, reader: PartitionReader, plan: ConvertPlan, stage: Path, progress: Progress, options: ConvertOptions) -> list[FileEntry]:
        return _write(reader, _Types(reader, plan), stage, progress, options)


class _Types:
    """The types of the layout: a typed result's, or the one type `_N` / `_N:_E:_N` of a homogeneous one;
    per partition, where each type's owned nodes and stored edges lie and the rows of its arrays."""

    def __init__(self, reader: PartitionReader, plan: ConvertPlan) -> None:
        self.reader, self.plan, meta = reader, plan, reader.hetero
        self.typed = meta is not None
        self.ntypes = list(meta.node_types) if self.typed else [dgl.NTYPE]
        self.etypes = [etype_key(e) for e in meta.edge_types] if self.typed else [dgl.ETYPE]
        self.edge_tuples = list(meta.edge_types) if self.typed else None
        self.node_offsets = meta.node_offsets if self.typed else np.array([0, reader.num_nodes], dtype=np.int64)
        self.edge_offsets = meta.edge_offsets if self.typed else np.array([0, reader.num_edges], dtype=np.int64)

    def starts(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        """Prefix sums of partition p's owned nodes per node type and stored edges per edge type."""
        if self.typed:
            return type_starts(self.reader, p)
        info = self.reader.part_info(p)
        return np.array([0, info["num_owned"]], dtype=np.int64), np.array([0, info["num_edges"]], dtype=np.int64)

    def edge_order(self, p: int) -> Optional[np.ndarray]:
        """Partition p's stored edges in the layout's order (by type, CSC order within); None: CSC order itself."""
        return edge_type_order(self.reader, p) if self.typed else None

    def edge_type(self, p: int) -> Optional[np.ndarray]:
        """The type index of each stored edge of partition p (CSC order); None for the one type."""
        return np.asarray(self.reader.array(p, "edge_type"), dtype=np.int32) if self.typed else None

    def node_type_of(self, erased: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.node_offsets, erased, side="right") - 1

    def feats(self, p: int) -> tuple[Rows, Rows]:
        """DGL's feature dicts of partition p: {"<ntype>/<key>": rows}, {"s:r:d/<key>": rows}."""
        if not self.typed:
            return ({f"{dgl.NTYPE}/{k}": v for k, v in data_rows(self.reader, p, "node", self.plan.node).items()},
                    {f"{dgl.ETYPE}/{k}": v for k, v in data_rows(self.reader, p, "edge", self.plan.edge).items()})
        nodes, edges = typed_data_rows(self.reader, self.plan, p)
        return ({f"{t}/{k}": v for t, rows in nodes.items() for k, v in rows.items()},
                {f"{etype_key(e)}/{k}": v for e, rows in edges.items() for k, v in rows.items()})


def _write(reader: PartitionReader, types: _Types, stage: Path, progress: Progress, options: ConvertOptions) -> list[FileEntry]:
    ids = _NewIds(reader, types, stage)
    out_edges = _collect_out_edges(reader, types, ids, stage)
    files = each_partition(reader, progress, "converting to dgl", lambda p: _write_part(reader, types, stage, ids, out_edges[p], p))
    files += dgl.write_orig_ids(stage, *ids.orig_ids())
    files.append(dgl.write_meta(stage, options.graph_name, num_nodes=reader.num_nodes, num_edges=reader.num_edges,
                                part_method=str(reader.manifest.get("method", "gpart")), num_parts=reader.num_parts,
                                node_map=ids.type_ranges(ids.node_bounds, ids.node_starts, types.ntypes),
                                edge_map=ids.type_ranges(ids.edge_bounds, ids.edge_starts, types.etypes)))
    return files


class _NewIds:
    """DGL's contiguous new ids: partition p's owned nodes are node_bounds[p]:node_bounds[p + 1], type t's among them
    node_bounds[p] + node_starts[p][t] .. node_starts[p][t + 1]; edges likewise. orig_nids[t] / orig_eids[r] (scratch
    maps, filled partition by partition) give the input's typed id of each of DGL's per-type ids (the ranks of the
    type's new ids, partition after partition)."""

    def __init__(self, reader: PartitionReader, types: _Types, stage: Path) -> None:
        starts = [types.starts(p) for p in range(reader.num_parts)]
        self.node_starts = np.array([s[0] for s in starts], dtype=np.int64).reshape(reader.num_parts, -1)
        self.edge_starts = np.array([s[1] for s in starts], dtype=np.int64).reshape(reader.num_parts, -1)
        self.node_bounds = np.concatenate([[0], np.cumsum(self.node_starts[:, -1])])
        self.edge_bounds = np.concatenate([[0], np.cumsum(self.edge_starts[:, -1])])
        self.book = reader.book()
        self.types = types
        # where partition p's block of each type starts among the type's per-type ids
        self.node_blocks = np.cumsum(np.diff(self.node_starts, axis=1), axis=0) - np.diff(self.node_starts, axis=1)
        self.edge_blocks = np.cumsum(np.diff(self.edge_starts, axis=1), axis=0) - np.diff(self.edge_starts, axis=1)
        self.orig_nids = [scratch_array(stage, f"orig_nids_{t}", (int(types.node_offsets[t + 1] - types.node_offsets[t]),), np.int64)
                          for t in range(len(types.ntypes))]
        self.orig_eids = [scratch_array(stage, f"orig_eids_{r}", (int(types.edge_offsets[r + 1] - types.edge_offsets[r]),), np.int64)
                          for r in range(len(types.etypes))]

    def of_nodes(self, erased_ids: np.ndarray) -> np.ndarray:
        """New ids of nodes given by (erased) input id."""
        return self.node_bounds[self.book.owner(erased_ids)] + np.asarray(self.book.local(erased_ids), dtype=np.int64)

    def record(self, p: int, owned: np.ndarray, edge_ids: np.ndarray) -> None:
        """Partition p's entries of the mappings: its owned nodes (ascending) and stored edges (layout order), erased ids."""
        for t, orig in enumerate(self.orig_nids):
            a, b = self.node_starts[p][t], self.node_starts[p][t + 1]
            orig[self.node_blocks[p][t]: self.node_blocks[p][t] + b - a] = owned[a:b] - self.types.node_offsets[t]
        for r, orig in enumerate(self.orig_eids):
            a, b = self.edge_starts[p][r], self.edge_starts[p][r + 1]
            orig[self.edge_blocks[p][r]: self.edge_blocks[p][r] + b - a] = edge_ids[a:b] - self.types.edge_offsets[r]

    def orig_ids(self) -> tuple:
        """orig_nids, orig_eids as DGL returns them: one array each, or per type ({ntype: ...}, {(s, r, d): ...})."""
        if not self.types.typed:
            return self.orig_nids[0], self.orig_eids[0]
        return dict(zip(self.types.ntypes, self.orig_nids)), dict(zip(self.types.edge_tuples, self.orig_eids))

    @staticmethod
    def type_ranges(bounds: np.ndarray, starts: np.ndarray, names: list[str]) -> dict[str, list[list[int]]]:
        """{type: [[start, end] per partition]}: node_map / edge_map of the part config."""
        return {name: [[int(bounds[p] + starts[p][t]), int(bounds[p] + starts[p][t + 1])] for p in range(len(starts))]
                for t, name in enumerate(names)}


def _write_part(reader: PartitionReader, types: _Types, stage: Path, ids: _NewIds, out_edges: Path, p: int) -> list[FileEntry]:
    """Partition p's graph.dgl and feature files: its in-edges (by type), then the out-edges of its nodes stored elsewhere."""
    n_in = int(ids.node_starts[p][-1])
    node_ids = np.asarray(reader.array(p, "node_ids"), dtype=np.int64)
    order = types.edge_order(p)
    src = np.asarray(reader.array(p, "indices"), dtype=np.int64)
    dst = np.repeat(np.arange(n_in, dtype=np.int64), np.diff(np.asarray(reader.array(p, "indptr"), dtype=np.int64)))
    edge_ids = np.asarray(reader.array(p, "edge_ids"), dtype=np.int64)
    etype = types.edge_type(p)
    if order is not None:
        src, dst, edge_ids, etype = src[order], dst[order], edge_ids[order], etype[order]
    ids.record(p, node_ids[:n_in], edge_ids)
    out_src, out_dst, out_eid, out_type, local_ids = _out_edges_locally(out_edges, node_ids, n_in, ids.book)
    owners = np.concatenate([np.full(n_in, p, dtype=np.int64), np.asarray(ids.book.owner(local_ids[n_in:]), dtype=np.int64)])
    new_ids = np.concatenate([ids.node_bounds[p] + np.arange(n_in, dtype=np.int64), ids.of_nodes(local_ids[n_in:])])
    new_eids = np.concatenate([ids.edge_bounds[p] + np.arange(src.size, dtype=np.int64), out_eid])
    node_feats, edge_feats = types.feats(p)
    local = dgl.LocalGraph(
        src=np.concatenate([src, out_src]), dst=np.concatenate([dst, out_dst]), num_local=local_ids.size, num_inner=n_in,
        new_node_ids=new_ids, owners=owners, new_edge_ids=new_eids, num_inner_edges=src.size,
        node_types=types.node_type_of(local_ids) if types.typed else None,
        edge_types=np.concatenate([etype, out_type]) if types.typed else None,
    )
    files = dgl.write_partition(stage, p, local, node_feats, edge_feats)
    out_edges.unlink(missing_ok=True)
    return files


def _collect_out_edges(reader: PartitionReader, types: _Types, ids: _NewIds, stage: Path) -> list[Path]:
    """Per partition p, a scratch file of (source, destination, new edge id, edge type) int64 rows: the cut edges
    whose source p owns."""
    paths = [stage / f".out_edges_{p}.scratch" for p in range(reader.num_parts)]
    for path in paths:
        path.touch()
    for q in range(reader.num_parts):
        n_in = reader.part_info(q)["num_owned"]
        indices = np.asarray(reader.array(q, "indices"), dtype=np.int64)
        cut = np.flatnonzero(indices >= n_in)  # the source is a halo node: owned elsewhere
        if not cut.size:
            continue
        node_ids = np.asarray(reader.array(q, "node_ids"), dtype=np.int64)
        indptr = np.asarray(reader.array(q, "indptr"), dtype=np.int64)
        column = np.searchsorted(indptr, cut, side="right") - 1  # the owned destination of each cut edge
        order = types.edge_order(q)
        place = cut if order is None else _inverse(order)[cut]  # its position in q's layout order
        etype = np.zeros(cut.size, dtype=np.int64) if order is None else types.edge_type(q)[cut]
        rows = np.stack([node_ids[indices[cut]], node_ids[column], ids.edge_bounds[q] + place, etype], axis=1)
        owner = np.asarray(ids.book.owner(rows[:, 0]), dtype=np.int64)
        by_owner = np.argsort(owner, kind="stable")
        starts = np.searchsorted(owner[by_owner], np.arange(reader.num_parts + 1))
        for p in np.flatnonzero(np.diff(starts)):
            try:
                with open(paths[p], "ab") as fh:  # one open per (q, p) pair: no limit on open files
                    rows[by_owner[starts[p]: starts[p + 1]]].tofile(fh)
            except OSError as exc:
                raise OutputError(paths[p], f"write failed: {exc.strerror or exc}") from None
    return paths


def _inverse(order: np.ndarray) -> np.ndarray:
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size, dtype=order.dtype)
    return inverse


def _out_edges_locally(path: Path, node_ids: np.ndarray, n_in: int, book: PartitionBook) -> tuple[np.ndarray, ...]:
    """(local sources, local destinations, new edge ids, edge types) of a partition's out-edges, and its local node
    list extended by the destinations it did not list yet (after gpart's halo nodes, ascending)."""
    rows = np.fromfile(path, dtype=np.int64).reshape(-1, 4)
    halo = node_ids[n_in:]
    new_halo = np.setdiff1d(np.unique(rows[:, 1]), halo)
    local_ids = np.concatenate([node_ids, new_halo])
    src_local = np.asarray(book.local(rows[:, 0]), dtype=np.int64)  # sources are owned here: local id = book's
    known = np.isin(rows[:, 1], halo)  # halo and new_halo are ascending: positions by binary search
    dst_local = np.where(known, n_in + np.searchsorted(halo, rows[:, 1]), node_ids.size + np.searchsorted(new_halo, rows[:, 1]))
    return src_local, dst_local, rows[:, 2].copy(), rows[:, 3].copy(), local_ids
