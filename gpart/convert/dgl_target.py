"""`gpart convert --to dgl`: DGL's partition layout (SPEC.md 7.4; needs DGL importable).

DGL wants each partition's nodes and edges to be one contiguous range of new
ids: owned node `j` of partition `p` becomes `nb[p] + j` (owned nodes in
ascending input id) and its `k`-th stored edge (CSC order) `eb[p] + k`;
orig_nids / orig_eids map back, as DGL's `partition_graph(return_mapping=True)`
does.

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

import numpy as np

from gpart.base.errors import OutputError
from gpart.base.progress import Progress
from gpart.convert.array_keys import keys_plan
from gpart.convert.partition_pass import data_rows, each_partition, scratch_array
from gpart.convert.target import ConvertOptions, ConvertPlan, ConvertTarget, FileEntry, PathLike
from gpart.formats import dgl
from gpart.formats.book import PartitionBook
from gpart.formats.filelist import check_export_name
from gpart.formats.partition_reader import PartitionReader


class DglTarget(ConvertTarget):
    """Every node and edge array, under --rename's key or its own name; the part config is `<graph_name>.json`."""

    name = "dgl"

    def check_options(self, options: ConvertOptions) -> None:
        check_export_name(options.graph_name)

    def require(self) -> None:
        dgl.require_dgl()

    def plan(self, reader: PartitionReader, options: ConvertOptions, where: PathLike) -> ConvertPlan:
        return keys_plan(reader.node_data_names(), reader.edge_data_names(), options.rename, {}, where)

    def write(self, reader: PartitionReader, plan: ConvertPlan, stage: Path, progress: Progress, options: ConvertOptions) -> list[FileEntry]:
        ids = _NewIds(reader, stage)
        out_edges = _collect_out_edges(reader, ids, stage)
        files = each_partition(reader, progress, "converting to dgl", lambda p: _write_part(reader, plan, stage, ids, out_edges[p], p))
        files += dgl.write_orig_ids(stage, ids.orig_nids, ids.orig_eids)
        files.append(dgl.write_meta(stage, options.graph_name, num_nodes=reader.num_nodes, num_edges=reader.num_edges,
                                    part_method=str(reader.manifest.get("method", "gpart")), node_bounds=ids.node_bounds, edge_bounds=ids.edge_bounds))
        return files


class _NewIds:
    """DGL's contiguous new ids: partition p's owned nodes are node_bounds[p]:node_bounds[p + 1], its edges likewise;
    orig_nids / orig_eids (scratch maps, filled partition by partition) give the input id of each new id."""

    def __init__(self, reader: PartitionReader, stage: Path) -> None:
        parts = reader.manifest["partitions"]
        self.owned_counts = np.array([pi["num_owned"] for pi in parts], dtype=np.int64)
        self.node_bounds = np.concatenate([[0], np.cumsum(self.owned_counts)])
        self.edge_bounds = np.concatenate([[0], np.cumsum(np.array([pi["num_edges"] for pi in parts], dtype=np.int64))])
        self.book = reader.book()
        self.orig_nids = scratch_array(stage, "orig_nids", (reader.num_nodes,), np.int64)
        self.orig_eids = scratch_array(stage, "orig_eids", (reader.num_edges,), np.int64)

    def of_nodes(self, global_ids: np.ndarray) -> np.ndarray:
        """New ids of nodes given by input id."""
        return self.node_bounds[self.book.owner(global_ids)] + np.asarray(self.book.local(global_ids), dtype=np.int64)


def _write_part(reader: PartitionReader, plan: ConvertPlan, stage: Path, ids: _NewIds, out_edges: Path, p: int) -> list[FileEntry]:
    """Partition p's graph.dgl and feature files: its in-edges, then the out-edges of its nodes stored elsewhere."""
    n_in = int(ids.owned_counts[p])
    node_ids = np.asarray(reader.array(p, "node_ids"), dtype=np.int64)
    ids.orig_nids[ids.node_bounds[p]: ids.node_bounds[p + 1]] = node_ids[:n_in]
    ids.orig_eids[ids.edge_bounds[p]: ids.edge_bounds[p + 1]] = reader.array(p, "edge_ids")
    src = np.asarray(reader.array(p, "indices"), dtype=np.int64)
    dst = np.repeat(np.arange(n_in, dtype=np.int64), np.diff(np.asarray(reader.array(p, "indptr"), dtype=np.int64)))
    out_src, out_dst, out_eid, local_ids = _out_edges_locally(out_edges, node_ids, n_in, ids.book)
    owners = np.concatenate([np.full(n_in, p, dtype=np.int64), np.asarray(ids.book.owner(local_ids[n_in:]), dtype=np.int64)])
    new_ids = np.concatenate([ids.node_bounds[p] + np.arange(n_in, dtype=np.int64), ids.of_nodes(local_ids[n_in:])])
    edge_ids = np.concatenate([ids.edge_bounds[p] + np.arange(src.size, dtype=np.int64), out_eid])
    files = dgl.write_partition(
        stage, p, src=np.concatenate([src, out_src]), dst=np.concatenate([dst, out_dst]), num_local=local_ids.size, num_inner=n_in,
        new_node_ids=new_ids, owners=owners, new_edge_ids=edge_ids, num_inner_edges=src.size,
        node_feats=data_rows(reader, p, "node", plan.node), edge_feats=data_rows(reader, p, "edge", plan.edge),
    )
    out_edges.unlink(missing_ok=True)
    return files


def _collect_out_edges(reader: PartitionReader, ids: _NewIds, stage: Path) -> list[Path]:
    """Per partition p, a scratch file of (source, destination, new edge id) int64 rows: the cut edges whose source p owns."""
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
        rows = np.stack([node_ids[indices[cut]], node_ids[column], ids.edge_bounds[q] + cut], axis=1)
        owner = np.asarray(ids.book.owner(rows[:, 0]), dtype=np.int64)
        order = np.argsort(owner, kind="stable")
        starts = np.searchsorted(owner[order], np.arange(reader.num_parts + 1))
        for p in np.flatnonzero(np.diff(starts)):
            try:
                with open(paths[p], "ab") as fh:  # one open per (q, p) pair: no limit on open files
                    rows[order[starts[p]: starts[p + 1]]].tofile(fh)
            except OSError as exc:
                raise OutputError(paths[p], f"write failed: {exc.strerror or exc}") from None
    return paths


def _out_edges_locally(path: Path, node_ids: np.ndarray, n_in: int, book: PartitionBook) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(local sources, local destinations, new edge ids) of a partition's out-edges, and its local node list
    extended by the destinations it did not list yet (after gpart's halo nodes, ascending)."""
    rows = np.fromfile(path, dtype=np.int64).reshape(-1, 3)
    halo = node_ids[n_in:]
    new_halo = np.setdiff1d(np.unique(rows[:, 1]), halo)
    local_ids = np.concatenate([node_ids, new_halo])
    src_local = np.asarray(book.local(rows[:, 0]), dtype=np.int64)  # sources are owned here: local id = book's
    known = np.isin(rows[:, 1], halo)  # halo and new_halo are ascending: positions by binary search
    dst_local = np.where(known, n_in + np.searchsorted(halo, rows[:, 1]), node_ids.size + np.searchsorted(new_halo, rows[:, 1]))
    return src_local, dst_local, rows[:, 2].copy(), local_ids
