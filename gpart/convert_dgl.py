"""`gpart convert --to dgl`: DGL's partition layout from a gpart result (SPEC.md 7.4).

DGL wants each partition's nodes and edges to be one contiguous range of new
ids: owned node `j` of partition `p` becomes `nb[p] + j` and its `k`-th stored
edge (CSC order) `eb[p] + k`; orig_nids / orig_eids map back, as DGL's
`partition_graph(return_mapping=True)` does.

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
from typing import Any

import numpy as np

from gpart.base.errors import OutputError
from gpart.formats import dgl
from gpart.formats.partition_reader import PartitionReader


def write_dgl(reader: PartitionReader, plan: dict[str, Any], stage: Path, progress, graph_name: str) -> list[dict[str, Any]]:
    from gpart.convert import scratch_array

    m = reader.manifest
    owned_counts = np.array([pi["num_owned"] for pi in m["partitions"]], dtype=np.int64)
    edge_counts = np.array([pi["num_edges"] for pi in m["partitions"]], dtype=np.int64)
    node_bounds = np.concatenate([[0], np.cumsum(owned_counts)])
    edge_bounds = np.concatenate([[0], np.cumsum(edge_counts)])
    book = reader.book()
    orig_nids = scratch_array(stage, "orig_nids", (reader.num_nodes,), np.int64)
    orig_eids = scratch_array(stage, "orig_eids", (reader.num_edges,), np.int64)
    out_edges = _collect_out_edges(reader, book, edge_bounds, stage)
    new_id = lambda g: node_bounds[book.owner(g)] + np.asarray(book.local(g), dtype=np.int64)  # noqa: E731
    files: list[dict[str, Any]] = []
    with progress.stage("converting to dgl", total=reader.num_parts) as bar:
        for p in range(reader.num_parts):
            n_in = int(owned_counts[p])
            node_ids = np.asarray(reader.array(p, "node_ids"), dtype=np.int64)
            orig_nids[node_bounds[p] : node_bounds[p + 1]] = node_ids[:n_in]
            orig_eids[edge_bounds[p] : edge_bounds[p + 1]] = reader.array(p, "edge_ids")
            src = np.asarray(reader.array(p, "indices"), dtype=np.int64)
            dst = np.repeat(np.arange(n_in, dtype=np.int64), np.diff(np.asarray(reader.array(p, "indptr"), dtype=np.int64)))
            out_src, out_dst, out_eid, local_ids = _out_edges_locally(out_edges[p], node_ids, n_in, book)
            owners = np.concatenate([np.full(n_in, p, dtype=np.int64), np.asarray(book.owner(local_ids[n_in:]), dtype=np.int64)])
            new_ids = np.concatenate([node_bounds[p] + np.arange(n_in, dtype=np.int64), new_id(local_ids[n_in:])])
            rows = {key: (reader.array(p, f"node_data/{n}", mode="c"), m["node_data"][n]["dtype"]) for n, key in plan["node"].items()}
            erows = {key: (reader.array(p, f"edge_data/{n}", mode="c"), m["edge_data"][n]["dtype"]) for n, key in plan["edge"].items()}
            edge_ids = np.concatenate([edge_bounds[p] + np.arange(src.size, dtype=np.int64), out_eid])
            files += dgl.write_partition(
                stage, p, src=np.concatenate([src, out_src]), dst=np.concatenate([dst, out_dst]), num_local=local_ids.size, num_inner=n_in,
                new_node_ids=new_ids, owners=owners, new_edge_ids=edge_ids, num_inner_edges=src.size, node_feats=rows, edge_feats=erows,
            )
            out_edges[p].unlink(missing_ok=True)
            bar.advance(1)
    files += dgl.write_orig_ids(stage, orig_nids, orig_eids)
    files.append(dgl.write_meta(stage, graph_name, num_nodes=reader.num_nodes, num_edges=reader.num_edges, part_method=str(m.get("method", "gpart")),
                                  node_bounds=node_bounds, edge_bounds=edge_bounds))
    for scratch in stage.glob(".*.scratch"):
        scratch.unlink()
    return files


def _collect_out_edges(reader: PartitionReader, book, edge_bounds: np.ndarray, stage: Path) -> list[Path]:
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
        rows = np.stack([node_ids[indices[cut]], node_ids[column], edge_bounds[q] + cut], axis=1)
        owner = np.asarray(book.owner(rows[:, 0]), dtype=np.int64)
        order = np.argsort(owner, kind="stable")
        starts = np.searchsorted(owner[order], np.arange(reader.num_parts + 1))
        for p in np.flatnonzero(np.diff(starts)):
            try:
                with open(paths[p], "ab") as fh:  # one open per (q, p) pair: no limit on open files
                    rows[order[starts[p] : starts[p + 1]]].tofile(fh)
            except OSError as exc:
                raise OutputError(paths[p], f"write failed: {exc.strerror or exc}") from None
    return paths


def _out_edges_locally(path: Path, node_ids: np.ndarray, n_in: int, book) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
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
