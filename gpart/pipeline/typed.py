"""Partition a heterogeneous graph (SPEC.md section 8): typed input -> erased graph -> typed result.

    partition_hetero("hetero.npz", "parts/", 4)        # what `gpart partition` does for a typed .npz

The typed graph is erased into one homogeneous graph (node ids offset per
type, edges concatenated per type), assigned by the method's run_typed
(gpart.partition_methods: a per-type rule, or a partitioner with one balance
constraint per node type), and written by gpart.pipeline.partition's one pass; `TypedArrays` adds, per partition,
the edge type of every stored edge, the typed node and edge data rows and
the per-type counts, and the manifest's `hetero` object.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Callable, Optional, Union

import numpy as np

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.base.memory import default_max_memory, parse_memory_size
from gpart.base.progress import or_null
from gpart.bytes.crc import CHUNK_BYTES
from gpart.bytes.reader import release_rows
from gpart.engines.balance import share_balance
from gpart.formats.files.commit import check_output_dir
from gpart.formats.files.dtypes import dtype_name
from gpart.formats.files.scratch import ScratchDir, checked_parent
from gpart.formats.input.typed import HeteroGraph, read_hetero_graph
from gpart.formats.partition.typed import EDGE_TYPE_DTYPE, EDGE_TYPE_KEY, HETERO_KEY, HeteroMeta, edge_data_key, etype_key, node_data_key, part_counts_json
from gpart.formats.partition.writer import part_dir
from gpart.partition_methods.memory import check_assign_memory
from gpart.partition_methods.method import MethodContext
from gpart.partition_methods.registry import bounded_method_names, method_options, resolve_method
from gpart.partition_methods.typed_input import TypedInput
from gpart.pipeline.memory_plan import check_node_memory
from gpart.pipeline.request import PartitionRequest
from gpart.pipeline.reverse_edges import hetero_with_reverse_edges
from gpart.pipeline.typed_edges import ErasedTypes, edge_types_of, write_typed_edges
from gpart.pipeline.write_arrays import gather_chunks
from gpart.pipeline.write_plan import PathLike, ResultPlan
from gpart.pipeline.write_result import partition_with_book


def partition_hetero(
    input: Union[PathLike, HeteroGraph],
    out_dir: PathLike,
    num_parts: int,
    method: Optional[str] = None,
    **options: Any,
) -> dict[str, Any]:
    """Partition a typed graph (a typed `.npz` path or a HeteroGraph); returns the manifest written.

    `options` are gpart.pipeline.partition.partition_graph's keywords (storage, halo,
    force, max_memory, progress, verbose_log, add_reverse) and the method's parameters,
    packed at once into a gpart.pipeline.request.PartitionRequest (`partition_typed`).
    """
    return partition_typed(input, out_dir, PartitionRequest.of(num_parts, method, options))


def partition_typed(input: Union[PathLike, HeteroGraph], out_dir: PathLike, request: PartitionRequest) -> dict[str, Any]:
    """partition_hetero with its keywords packed; `request.node_data` / `edge_data` are refused (typed arrays
    live in the typed .npz)."""
    num_parts, progress, force = request.num_parts, request.progress, request.force
    hg = input if isinstance(input, HeteroGraph) else read_hetero_graph(input)
    where = hg.source
    for key, given in (("node_data", request.node_data), ("edge_data", request.edge_data)):
        if given:
            raise InputError(where, f"--{key.replace('_', '-')} adds arrays to homogeneous inputs; put typed arrays into the typed .npz")
    limit = parse_memory_size(request.max_memory) or default_max_memory()
    chosen = resolve_method(request.method, request.method_params, where)
    run_options = method_options(chosen, request.method_params, where)
    total = sum(hg.num_nodes.values())
    check_node_memory(chosen.name, total, limit, where)
    # methods holding the whole adjacency stop up front (SPEC.md 4.6)
    check_assign_memory(chosen, sum(hg.num_edges(e) for e in hg.edge_types), limit, where, bounded_method_names())
    if num_parts < 1 or num_parts > total:
        raise InputError(where, f"cannot split {total} nodes into {num_parts} parts")
    check_output_dir(out_dir, force, [where] if where else [])  # before any work: an existing result without --force
    # spill next to the output (or into the scratch directory asked for), as for homogeneous input; the repair
    # after `stream` is skipped past `limit`
    spill = Path(os.path.abspath(out_dir)).parent if request.scratch_dir is None else checked_parent(request.scratch_dir)
    context = MethodContext(or_null(progress), limit, spill)
    # the erased ids live in scratch files there (mapped, pages released as the pass goes)
    with ScratchDir(spill) as scratch:
        reverse = None
        if request.add_reverse:  # the reverse relations become edge types of the typed graph (gpart.pipeline.reverse_edges)
            with or_null(progress).stage("add reverse edges"):
                hg, reverse = hetero_with_reverse_edges(hg, scratch, limit)
            check_assign_memory(chosen, sum(hg.num_edges(e) for e in hg.edge_types), limit, where, bounded_method_names())
        erased = hg.erased(scratch)
        book, params = chosen.run_typed(TypedInput(hg, erased), num_parts, run_options, context)
        ext = TypedArrays(hg, erased, book.owner_array, book.num_parts)
        # the writer chooses the in-memory or the bounded pass within `limit`, as for homogeneous input
        plan = ResultPlan(chosen.name, params, request.storage, request.halo, extension=ext, reverse=reverse)
        return partition_with_book(erased, book, out_dir, plan, force=force, progress=progress,
                                   verbose_log=request.verbose_log, max_memory=limit,
                                   scratch_dir=request.scratch_dir)


# --------------------------------------------------------------------------- typed arrays of the result


class TypedArrays:
    """The extension gpart.pipeline.write_result.partition_with_book calls to write the typed part of a result (SPEC.md 8.4)."""

    def __init__(self, hg: HeteroGraph, erased: Graph, owner: np.ndarray, num_parts: int):
        self.hg, self.erased, self.owner = hg, erased, owner
        self.meta = HeteroMeta(hg.node_types, [hg.num_nodes[t] for t in hg.node_types], hg.edge_types,
                               [hg.num_edges(e) for e in hg.edge_types],
                               {t: _specs(hg.node_data.get(t, {})) for t in hg.node_types},
                               {e: _specs(hg.edge_data.get(e, {})) for e in hg.edge_types})
        self.noff, self.eoff = self.meta.node_offsets, self.meta.edge_offsets
        self.counts: dict[int, dict[str, Any]] = {}
        self.mark = np.zeros(erased.num_nodes, dtype=bool)
        # owned nodes per partition and node type
        self.owner_counts = np.stack([np.bincount(owner[self.noff[t]:self.noff[t + 1]], minlength=num_parts)
                                      for t in range(len(hg.node_types))], axis=1).astype(np.int64)

    def edges(self, writer: Any, p: int, part: dict[str, Any], chunks: Callable[[], Any], topology: Any = None) -> None:
        """Edge types, per-type edge data rows, per-type edge, cut and halo counts of partition p.

        With `topology` (node_ids, indices, num_owned: in memory) the cut and halo come from it
        (halo sources have local ids >= num_owned; halo ids ascend); without it (the bounded
        path) gpart.pipeline.typed_edges streams the blocks of `chunks()` (edge ids, sources)."""
        if topology is None:
            types = ErasedTypes(self.noff, self.eoff, self.meta.edge_types, self.hg.edge_data)
            self.counts.setdefault(p, {}).update(write_typed_edges(writer, p, part, chunks, types, self.owner, self.mark))
            return
        ids = np.concatenate([np.asarray(c, dtype=np.int64) for c, _ in chunks()] or [np.zeros(0, np.int64)])
        etype = edge_types_of(ids, self.eoff)
        part["arrays"][EDGE_TYPE_KEY] = writer.write_array(f"{part_dir(p)}/{EDGE_TYPE_KEY}", etype, EDGE_TYPE_DTYPE).to_json()
        num_types = len(self.meta.edge_types)
        node_ids, indices, num_owned = topology
        remote = indices >= num_owned
        halo = node_ids[num_owned:]
        self.counts.setdefault(p, {}).update(num_edges=np.bincount(etype, minlength=num_types), num_halo=np.diff(np.searchsorted(halo, self.noff)),
                                             num_cut=np.bincount(etype[remote], minlength=num_types))
        del remote, halo
        for r, et in enumerate(self.meta.edge_types):
            data = self.hg.edge_data.get(et, {})
            if not data:
                continue
            typed_ids = ids[etype == r] - self.eoff[r]
            for name, arr in data.items():
                key = edge_data_key(et, name)
                part["arrays"][key] = writer.write_chunks(f"{part_dir(p)}/{key}", dtype_name(arr.dtype), arr.shape[1:],
                                                          typed_ids.shape[0], gather_chunks(arr, typed_ids, writer.after_writes)).to_json()

    def nodes(self, writer: Any, owned: Callable[[int], np.ndarray], halos: Optional[list[np.ndarray]] = None) -> list[dict[str, Any]]:
        """Typed node data of every partition (array entries per partition); records per-type owned counts.

        Owned nodes of a type are one block of each partition's owned list, ascending in typed
        id, so each typed array is written in one sequential pass over its rows, each chunk
        split by owner (as gpart.pipeline.partition writes homogeneous node data), never gathered.
        With `halos` (erased halo ids per partition, ascending: halo 1) the rows of the halo
        nodes of the type follow, gathered in ascending id order (SPEC.md 8.4)."""
        num_parts = self.owner_counts.shape[0]
        halos = halos if halos is not None else [np.zeros(0, np.int64)] * num_parts
        for p in range(num_parts):
            self.counts.setdefault(p, {})["num_owned"] = self.owner_counts[p]
        # typed ids of each partition's halo nodes of each type: one block per type (erased ids ascend)
        halo_typed = [[h[b0:b1] - self.noff[t] for t, (b0, b1) in enumerate(zip(bnd[:-1], bnd[1:]))]
                      for h, bnd in ((h, np.searchsorted(h, self.noff)) for h in halos)]
        entries: list[dict[str, Any]] = [{} for _ in range(num_parts)]
        for t, ntype in enumerate(self.meta.node_types):
            owner = self.owner[self.noff[t]:self.noff[t + 1]]
            for name, arr in self.hg.node_data.get(ntype, {}).items():
                key = node_data_key(ntype, name)
                writers = [writer.array(f"{part_dir(p)}/{key}", dtype_name(arr.dtype), arr.shape[1:],
                                        int(self.owner_counts[p][t]) + halo_typed[p][t].shape[0]) for p in range(num_parts)]
                for start, block, bounds in split_by_owner(arr, owner, num_parts):
                    for p in np.flatnonzero(bounds[1:] > bounds[:-1]):
                        writers[p].write(block[bounds[p]:bounds[p + 1]])
                    # pieces may be views of the mapped input, written later: release its pages after that
                    writer.after_writes(functools.partial(release_rows, arr, start, start + block.shape[0]))
                for p in range(num_parts):
                    for chunk in gather_chunks(arr, halo_typed[p][t], writer.after_writes):
                        writers[p].write(chunk)
                    entries[p][key] = writers[p].finish().to_json()
        return entries

    def manifest(self, m: dict[str, Any]) -> None:
        """Add `hetero` to the manifest, its partitions and its stats."""
        m[HETERO_KEY] = self.meta.to_json()
        for p, part in enumerate(m["partitions"]):
            c = self.counts[p]
            part[HETERO_KEY] = part_counts_json(c["num_owned"], c["num_halo"], c["num_edges"], c["num_cut"])
        m["stats"][HETERO_KEY] = typed_stats(self.meta, m["partitions"])


def typed_stats(meta: HeteroMeta, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Per node type: nodes and node balance; per edge type: edges, cut and edge balance (SPEC.md 8.4 stats.hetero)."""
    owned = np.array([p[HETERO_KEY]["num_owned"] for p in parts], dtype=np.int64).reshape(len(parts), -1)
    edges = np.array([p[HETERO_KEY]["num_edges"] for p in parts], dtype=np.int64).reshape(len(parts), -1)
    cut = np.array([p[HETERO_KEY]["num_cut"] for p in parts], dtype=np.int64).reshape(len(parts), -1)
    return {
        "node_types": {t: {"num_nodes": int(owned[:, i].sum()), "node_balance": share_balance(owned[:, i])}
                       for i, t in enumerate(meta.node_types)},
        "edge_types": {etype_key(e): {"num_edges": int(edges[:, r].sum()), "edge_cut": int(cut[:, r].sum()),
                                      "edge_balance": share_balance(edges[:, r])}
                       for r, e in enumerate(meta.edge_types)},
    }


def split_by_owner(arr: np.ndarray, owner: np.ndarray, num_parts: int, chunk_bytes: int = CHUNK_BYTES):
    """(start, rows, bounds) per chunk of `arr`: the chunk's rows ordered by owner (stable, so ascending ids
    within each owner), partition p's rows being rows[bounds[p]:bounds[p+1]]."""
    row_bytes = max(1, int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize)
    step = max(1, chunk_bytes // row_bytes)
    for start in range(0, arr.shape[0], step):
        own = owner[start:start + step]
        block = arr[start:start + step]
        if num_parts > 1 and not bool(np.all(own[1:] >= own[:-1])):
            block = np.take(block, np.argsort(own, kind="stable"), axis=0)
        bounds = np.zeros(num_parts + 1, dtype=np.int64)
        np.cumsum(np.bincount(own, minlength=num_parts), out=bounds[1:])
        yield start, block, bounds


def _specs(data: dict[str, np.ndarray]) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {name: (dtype_name(arr.dtype), tuple(int(s) for s in arr.shape[1:])) for name, arr in data.items()}
