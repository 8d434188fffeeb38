"""Partition a heterogeneous graph (SPEC.md section 8): typed input -> erased graph -> typed result.

    partition_hetero("hetero.npz", "parts/", 4)        # what `gpart partition` does for a typed .npz

The typed graph is erased into one homogeneous graph (node ids offset per
type, edges concatenated per type), assigned with a per-type rule or by a
partitioner with one balance constraint per node type (`typed_book`), and
written by gpart.partition's one pass; `TypedArrays` adds, per partition,
the edge type of every stored edge, the typed node and edge data rows and
the per-type counts, and the manifest's `hetero` object.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from gpart.balance import BALANCE_BOUND, in_degrees, share_balance
from gpart.formats.book import ArrayBook
from gpart.bytes.reader import release_rows
from gpart.bounded import check_assign_memory, check_node_memory, default_max_memory, parse_memory_size, symmetric_bytes
from gpart.base.errors import GpartError, InputError
from gpart.bytes.crc import CHUNK_BYTES
from gpart.formats.commit import check_output_dir
from gpart.formats.dtypes import dtype_name
from gpart.formats.hetero_input import HeteroGraph, read_hetero_graph
from gpart.formats.hetero_partition import (EDGE_TYPE_DTYPE, EDGE_TYPE_KEY, HETERO_KEY, HeteroMeta, edge_data_key, etype_key,
                                            node_data_key, part_counts_json)
from gpart.formats.partition_writer import part_dir
from gpart.formats.scratch import ScratchDir
from gpart.base.graph import Graph
from gpart.base.progress import or_null
from gpart.hetero_edges import edge_types_of, write_typed_edges
from gpart.write_arrays import gather_chunks
from gpart.write_result import partition_with_book
from gpart.formats.shard import RangePolicy
from gpart.assign import assign
from gpart.refine import part_loads, repair_balance
from gpart.reverse_edges import hetero_with_reverse_edges
from gpart.symmetric import symmetric_csr

PathLike = Union[str, "os.PathLike[str]"]
PER_TYPE_METHODS = ("remainder", "range", "random")
TRAIN_MASK = "train_mask"
DEFAULT_IMBALANCE = 0.03


def partition_hetero(
    input: Union[PathLike, HeteroGraph],
    out_dir: PathLike,
    num_parts: int,
    method: str = "balanced",
    **options: Any,
) -> dict[str, Any]:
    """Partition a typed graph (a typed `.npz` path or a HeteroGraph); returns the manifest written.

    `options` are gpart.partition.partition_graph's keywords (storage, halo,
    force, max_memory, progress, verbose_log, add_reverse) and the method's parameters.
    """
    add_reverse = options.pop("add_reverse", False)
    write = {key: options.pop(key) for key in ("storage", "halo", "force", "verbose_log") if key in options}
    progress, force, method_params = options.pop("progress", None), write.get("force", False), options
    hg = input if isinstance(input, HeteroGraph) else read_hetero_graph(input)
    where = hg.source
    for key in ("node_data", "edge_data"):
        if method_params.pop(key, None):
            raise InputError(where, f"--{key.replace('_', '-')} adds arrays to homogeneous inputs; put typed arrays into the typed .npz")
    limit = parse_memory_size(method_params.pop("max_memory", None)) or default_max_memory()
    given = method_params.get("assignment") is not None
    total = sum(hg.num_nodes.values())
    check_node_memory("assignment" if given else method, total, limit, where)
    if not given:  # methods holding the whole adjacency stop up front (SPEC.md 4.6)
        check_assign_memory(method, sum(hg.num_edges(e) for e in hg.edge_types), limit, where)
    if num_parts < 1 or num_parts > total:
        raise InputError(where, f"cannot split {total} nodes into {num_parts} parts")
    check_output_dir(out_dir, force, [where] if where else [])  # before any work: an existing result without --force
    parent = Path(os.path.abspath(out_dir)).parent
    if method == "stream" and not given:
        method_params.setdefault("scratch_dir", parent)  # spill next to the output, as for homogeneous input
    # the erased ids live in scratch files next to the output (mapped, pages released as the pass goes)
    with ScratchDir(parent) as scratch:
        reverse = None
        if add_reverse:  # the reverse relations become edge types of the typed graph (gpart.reverse_edges)
            with or_null(progress).stage("add reverse edges"):
                hg, reverse = hetero_with_reverse_edges(hg, scratch, limit)
            if not given:
                check_assign_memory(method, sum(hg.num_edges(e) for e in hg.edge_types), limit, where)
        erased = hg.erased(scratch)
        book, params = typed_book(hg, erased, num_parts, method, progress=progress, max_memory=limit, **method_params)
        ext = TypedArrays(hg, erased, book.owner_array, book.num_parts)
        # the writer chooses the in-memory or the bounded pass within `limit`, as for homogeneous input
        return partition_with_book(erased, book, out_dir, method="assignment" if given else method, params=params,
                                   progress=progress, extension=ext, max_memory=limit, reverse=reverse, **write)


# --------------------------------------------------------------------------- assignment


def typed_book(hg: HeteroGraph, erased: Graph, num_parts: int, method: str, *, seed: int = 0, balance: Sequence[str] = (),
               progress: Any = None, max_memory: Optional[int] = None, **params: Any) -> tuple[ArrayBook, dict[str, Any]]:
    """The book over erased ids: per-type rules, or a partitioner with one constraint per node type
    (`max_memory`: the repair after `stream` is skipped where it would not fit, repair_types)."""
    if params.get("assignment") is not None:
        method = "assignment"
    if method in PER_TYPE_METHODS:
        rng = np.random.default_rng(seed)  # one generator, drawn type after type (SPEC.md 8.3)
        owner = np.concatenate([_per_type_owner(method, hg.num_nodes[t], num_parts, rng) for t in hg.node_types])
        out: dict[str, Any] = {"num_parts": num_parts, "per_type": True}
        if method == "random":
            out.update(seed=int(seed), rng="default_rng(seed).permutation(arange(N_t) % P), type after type")
        return ArrayBook(owner, num_parts), out

    masks = hg.type_masks()
    g = Graph(erased.num_nodes, erased.src, erased.dst, dict(masks), source=erased.source, input_format=erased.input_format)
    train = _erased_mask(hg, TRAIN_MASK)
    if train is not None:
        g.node_data[TRAIN_MASK] = train
    names = list(masks) + [b for b in ([balance] if isinstance(balance, str) else balance)]
    for name in names[len(masks):]:
        if name not in g.node_data:
            g.node_data[name] = _erased_mask(hg, name, required=True)
    if method == "balanced":
        return repair_types(g, *_balanced(g, num_parts, list(masks), seed, params.get("threads"), progress), masks)
    if method == "metis" and params.get("algorithm", "auto") == "auto":
        return repair_types(g, *_metis_recursive_first(g, num_parts, names, {m: masks[m] for m in masks}, seed, progress, params), masks)
    if method in ("metis", "kaminpar", "stream"):
        a = assign(g, num_parts, method, seed=seed, balance=names, progress=progress, **params)
        return repair_types(g, a.book, dict(a.params, type_constraints=list(masks)), masks, max_memory)
    a = assign(g, num_parts, method, seed=seed, progress=progress, **params)  # an assignment given by the user
    return a.book, dict(a.params)


def repair_types(g: Graph, book: ArrayBook, params: dict[str, Any], masks: dict[str, np.ndarray],
                 max_memory: Optional[int] = None) -> tuple[ArrayBook, dict[str, Any]]:
    """The partitioner's book, or, when a node type's balance exceeds the bound, the book after moving the
    cheapest nodes of over-full types to parts with room (gpart.refine.repair_balance with one share column
    per node type, as the homogeneous default repairs its shares; recorded in params.repair). The repair
    holds the symmetric adjacency: past `max_memory` it is skipped (params.repair.skipped) and the book kept."""
    shares = np.column_stack([masks[m] for m in masks]).astype(np.float64)
    before = type_balance(book.owner_array, shares, book.num_parts)
    if max(before, default=1.0) <= BALANCE_BOUND:
        return book, params
    need = symmetric_bytes(g.num_edges)
    if max_memory is not None and need > max_memory:  # `stream` runs in bounded memory; the repair would not
        return book, dict(params, repair={"bound": BALANCE_BOUND, "skipped": f"needs about {need} bytes, more than --max-memory",
                                          "before": dict(zip(masks, before))})
    xadj, adjncy = symmetric_csr(g)
    owner = repair_balance(book.owner_array, shares, book.num_parts, BALANCE_BOUND, xadj, adjncy)
    del xadj, adjncy
    after = type_balance(owner, shares, book.num_parts)
    params = dict(params, repair={"bound": BALANCE_BOUND, "moved": int(np.count_nonzero(owner != book.owner_array)),
                                  "before": dict(zip(masks, before)), "after": dict(zip(masks, after))})
    return ArrayBook(owner, book.num_parts), params


def type_balance(owner: np.ndarray, shares: np.ndarray, num_parts: int) -> list[float]:
    """max/mean over parts of every column of `shares` (one per node type)."""
    return [share_balance(column) for column in part_loads(owner, shares, num_parts).T]


def _metis_recursive_first(g: Graph, num_parts: int, names: list[str], masks: dict[str, np.ndarray], seed: int, progress: Any,
                           params: dict[str, Any]) -> tuple[ArrayBook, dict[str, Any]]:
    """METIS with one constraint per node type: recursive bisection first, k-way if a type's balance exceeds the bound.

    Recursive bisection does not hold multi-constraint tolerances exactly (a few percent over), but it is
    2-4x faster than k-way with constraints on power-law graphs (benchmarks/bench_hetero.py); k-way holds them."""
    params = {k: v for k, v in params.items() if k != "algorithm"}
    tried = []
    for algorithm in ("recursive", "kway"):
        a = assign(g, num_parts, "metis", seed=seed, balance=names, algorithm=algorithm, progress=progress, **params)
        measured = {m: share_balance(np.bincount(a.book.owner_array[mask], minlength=num_parts)) for m, mask in masks.items()}
        tried.append({"algorithm": algorithm, **measured})
        if max(measured.values(), default=1.0) <= BALANCE_BOUND:
            break
    return a.book, dict(a.params, type_constraints=list(masks), bound=BALANCE_BOUND, tried=tried)


def _per_type_owner(method: str, n: int, num_parts: int, rng: np.random.Generator) -> np.ndarray:
    ids = np.arange(n, dtype=np.int64)
    if method == "remainder":
        return (ids % num_parts).astype(np.int32)
    if method == "range":
        return RangePolicy.even(n, num_parts).owner(ids).astype(np.int32)
    return rng.permutation(ids % num_parts).astype(np.int32)


def _erased_mask(hg: HeteroGraph, name: str, required: bool = False) -> Optional[np.ndarray]:
    """Node array `name` of every type that has it, as one bool [N] over erased ids (False elsewhere)."""
    noff = hg.node_offsets()
    out = np.zeros(int(noff[-1]), dtype=bool)
    found = False
    for t, ntype in enumerate(hg.node_types):
        arr = hg.node_data.get(ntype, {}).get(name)
        if arr is not None:
            if arr.ndim != 1 or (arr.dtype != np.bool_ and arr.dtype.kind not in "iu"):
                raise InputError(hg.source, f"node array '{ntype}/{name}' must be 1-D boolean or 0/1 to balance on")
            out[noff[t]:noff[t + 1]] = np.asarray(arr) != 0
            found = True
    if not found and required:
        raise InputError(hg.source, f"balance array {name!r} is no node array of any type")
    return out if found else None


def typed_balances(owner: np.ndarray, num_parts: int, masks: dict[str, np.ndarray], degree: np.ndarray,
                   train: Optional[np.ndarray]) -> dict[str, Optional[float]]:
    """Balance (max/mean) of every node type, of in-edges and of training nodes."""
    out: dict[str, Optional[float]] = {name: share_balance(np.bincount(owner[mask], minlength=num_parts)) for name, mask in masks.items()}
    out["in_edges"] = share_balance(np.bincount(owner, weights=degree, minlength=num_parts))
    out[TRAIN_MASK] = None if train is None else share_balance(np.bincount(owner[train], minlength=num_parts))
    return out


def _balanced(g: Graph, num_parts: int, masks: list[str], seed: int, threads: Any, progress: Any) -> tuple[ArrayBook, dict[str, Any]]:
    """KaMinPar with one combined weight (nodes, in-edges, every type, training nodes), repaired share by share
    when a measured balance exceeds the bound; METIS k-way with them as separate constraints when the repair
    does not reach it (as the homogeneous default, SPEC 4.5)."""
    train = g.node_data.get(TRAIN_MASK)
    weighted = masks + ([TRAIN_MASK] if train is not None else [])
    degree = in_degrees(g)
    type_masks = {m: g.node_data[m] for m in masks}
    tried: list[dict[str, Any]] = []
    params: dict[str, Any] = {"bound": BALANCE_BOUND, "constraints": ["nodes", "in_edges"] + weighted, "type_constraints": masks}
    try:
        a = assign(g, num_parts, "kaminpar", seed=seed, imbalance=DEFAULT_IMBALANCE, balance=weighted, balance_edges=True,
                   threads=threads or 1, progress=progress)
        owner, backend = a.book.owner_array, a.params
        measured = typed_balances(owner, num_parts, type_masks, degree, train)
        tried.append({"backend": "kaminpar", **measured})
        if not _within_bound(measured):  # a share past the bound: move the cheapest nodes share by share first
            owner = _repair_shares(g, owner, num_parts, type_masks, degree, train)
            measured = typed_balances(owner, num_parts, type_masks, degree, train)
            tried.append({"backend": "kaminpar", "repaired": "gpart.refine.repair_balance", **measured})
            backend = dict(backend, repaired=True)
        if _within_bound(measured):
            params.update(backend="kaminpar", backend_params=backend, tried=tried)
            return ArrayBook(owner, num_parts), params
    except GpartError as exc:
        tried.append({"backend": "kaminpar", "error": exc.problem})
    a = assign(g, num_parts, "metis", seed=seed, imbalance=DEFAULT_IMBALANCE, algorithm="kway", balance=weighted,
               balance_edges=True, progress=progress)
    tried.append({"backend": "metis", **typed_balances(a.book.owner_array, num_parts, type_masks, degree, train)})
    params.update(backend="metis", backend_params=a.params, tried=tried)
    return a.book, params


def _within_bound(measured: dict[str, Optional[float]]) -> bool:
    return all(v is None or v <= BALANCE_BOUND for v in measured.values())


def _repair_shares(g: Graph, owner: np.ndarray, num_parts: int, type_masks: dict[str, np.ndarray], degree: np.ndarray,
                   train: Optional[np.ndarray]) -> np.ndarray:
    """gpart.refine.repair_balance over one share per node type, in-edges and (when given) training nodes."""
    columns = [np.asarray(m, dtype=np.float64) for m in type_masks.values()] + [np.asarray(degree, dtype=np.float64)]
    if train is not None:
        columns.append(np.asarray(train, dtype=np.float64))
    xadj, adjncy = symmetric_csr(g)
    return repair_balance(owner, np.column_stack(columns), num_parts, BALANCE_BOUND, xadj, adjncy)


# --------------------------------------------------------------------------- typed arrays of the result


class TypedArrays:
    """The extension gpart.write_result.partition_with_book calls to write the typed part of a result (SPEC.md 8.4)."""

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
        path) gpart.hetero_edges streams the blocks of `chunks()` (edge ids, sources)."""
        if topology is None:
            self.counts.setdefault(p, {}).update(write_typed_edges(writer, p, part, chunks, self.owner, self.mark, self.noff, self.eoff,
                                                                   self.meta.edge_types, self.hg.edge_data))
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
        split by owner (as gpart.partition writes homogeneous node data), never gathered.
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
