"""One partition of a typed result on a device: typed lookups and the per-edge-type CSC slices (SPEC.md 8).

    part = gr.load_partition("parts/", rank)          # a HeteroPartition for a typed result
    x = part.gather(("paper", "feat"), paper_ids)    # typed ids in, rows in request order out

The erased partition (topology over erased ids, the book) is a
LoadedPartition (`part.base`); typed node data is loaded per type. A typed id
`i` of type `t` is the erased id `noff[t] + i`; its owner `p` and local id
`l` come from the book, and its row in `p`'s data of type `t` is
`l - S[p][t]` (S: start of type t's block among p's owned nodes, known to
every rank from the manifest). Remote rows come from their owners in the
same two all_to_all exchanges as homogeneous gathers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from gpart.base.errors import InputError, NotLocalError
from gpart.bytes.torch_bridge import numpy_to_tensor
from gpart.formats.partition.reader import PartitionReader
from gpart.formats.partition.typed import HETERO_KEY, edge_data_key, node_data_key
from gpart.runtime.partition.device import place, resolve_device
from gpart.runtime.partition.loaded import LoadedPartition
from gpart.runtime.partition.row_cache import CachedRows
from gpart.runtime.partition.serving import gather_rows, read_rows

TypedKey = tuple[str, str]


class _FromBase:
    """An attribute of the erased partition (`base`) that the typed partition offers as its own."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: Optional[type] = None) -> Any:
        return self if obj is None else getattr(obj.base, self.name)


class HeteroPartition(CachedRows):
    """A typed partition: `base` (the erased LoadedPartition), `meta` (HeteroMeta), typed node data and CSC slices.

    `node_data[(ntype, name)]` holds the owned rows of type `ntype` in typed id order.
    `edge_type` (int64 [num_edges]) is the type index of every stored edge;
    `type_start[r]`, `type_deg[r]` (int64 [num_owned]) locate the in-edges of
    edge type r of each owned column: one contiguous slice (SPEC.md 8.2).
    """

    typed = True
    is_hetero = True  # the same, under the name callers probed for

    # the erased partition's (gpart.runtime.partition.interface.Partition): erased ids, the book, the topology
    directory, manifest, digest = _FromBase(), _FromBase(), _FromBase()
    rank, num_parts, num_nodes, num_edges = _FromBase(), _FromBase(), _FromBase(), _FromBase()
    num_owned, num_halo, halo, halo_ids = _FromBase(), _FromBase(), _FromBase(), _FromBase()
    device, feature_device, timeout_s, topology = _FromBase(), _FromBase(), _FromBase(), _FromBase()
    book, owner, to_local, serving = _FromBase(), _FromBase(), _FromBase(), _FromBase()
    node_ids, indptr, indices, edge_ids = _FromBase(), _FromBase(), _FromBase(), _FromBase()
    place_edge_array = _FromBase()

    def __init__(self, base: LoadedPartition, meta: Any, node_data: dict[TypedKey, torch.Tensor], edge_type: torch.Tensor,
                 owned_counts: np.ndarray, halo_counts: Optional[np.ndarray] = None,
                 edge_data: Optional[dict[tuple[Any, str], torch.Tensor]] = None):
        self.base, self.meta, self.node_data, self.edge_type = base, meta, node_data, edge_type
        dev = base.device
        self.node_types, self.edge_types = list(meta.node_types), list(meta.edge_types)
        self.node_offsets = torch.as_tensor(meta.node_offsets, device=dev)
        self.edge_offsets = torch.as_tensor(meta.edge_offsets, device=dev)
        counts = torch.as_tensor(owned_counts, dtype=torch.int64)
        self.type_starts = (torch.cumsum(counts, 1) - counts).to(dev)  # [P, T]: start of each type's block
        self.num_owned_by_type = counts[base.rank].tolist()
        self._owned_by_type = counts[base.rank].to(dev)
        t_of = torch.repeat_interleave(torch.arange(len(self.node_types)), counts[base.rank])
        self.local_ntype = t_of.to(dev)  # node type index of each owned local node
        self.type_start, self.type_deg = _type_slices(base.indptr, self.edge_type, len(self.edge_types))
        # halo rows (halo 1): halo nodes of type t are the block H[t].. of the sorted halo ids (SPEC.md 8.4)
        halo = np.zeros(len(self.node_types), np.int64) if halo_counts is None else np.asarray(halo_counts[base.rank], np.int64)
        self.halo_rows = bool(base.halo) and int(halo.sum()) > 0
        self.halo_type_start = torch.as_tensor(np.cumsum(halo) - halo, device=dev)
        # typed edge data: rows per edge type in CSC order; edge_rows[k]: row of stored edge k in its type's arrays
        self.edge_data = dict(edge_data or {})
        self.edge_rows = base.place_edge_array(_rank_within_type(self.edge_type, len(self.edge_types)))

    def __repr__(self) -> str:
        return (f"HeteroPartition({str(self.base.directory)!r}, rank={self.base.rank}/{self.base.num_parts}, "
                f"node_types={self.node_types}, edge_types={[':'.join(e) for e in self.edge_types]}, "
                f"node_data={list(self.node_data)})")

    def num_nodes_of(self, ntype: str) -> int:
        return int(self.meta.num_nodes[self.meta.ntype_index(ntype, self.base.directory)])

    def owned_ids(self, ntype: str) -> torch.Tensor:
        """Typed ids of this partition's owned nodes of `ntype` (ascending)."""
        t = self.meta.ntype_index(ntype, self.base.directory)
        start = sum(self.num_owned_by_type[:t])
        return self.base.node_ids[start:start + self.num_owned_by_type[t]] - self.node_offsets[t]

    owned_ids_of = owned_ids  # the interface's name: a homogeneous partition's owned_ids is a property

    def local_rows(self, ntype: str, ids: Any) -> torch.Tensor:
        """Row of each typed id of `ntype` in this partition's arrays of that type (owned, or halo when halo
        rows are stored), -1 elsewhere (as LoadedPartition.local_rows for homogeneous results)."""
        t = self.meta.ntype_index(ntype, self.base.directory)
        owner, rows = self._rows(t, self._typed_ids(t, ids))
        return torch.where(owner == self.base.rank, rows, torch.full_like(rows, -1))

    # -- lookups

    def gather(self, key: Any, ids: Any, *, timeout_s: Optional[float] = None) -> torch.Tensor:
        """Rows of typed node data `key` = (ntype, name) for typed ids `ids`, in request order (a collective
        when torch.distributed is initialised: every rank calls it, with its own ids, possibly none; P x L
        ranks, rank r on partition r // L, as for homogeneous gathers)."""
        ntype, name = key if isinstance(key, (tuple, list)) else str(key).split("/", 1)
        t = self.meta.ntype_index(ntype, self.base.directory)
        table = self._table((ntype, name))
        shape = torch.as_tensor(ids).shape
        rows = gather_rows(self.base.serving, lambda: self._typed_ids(t, ids), lambda flat: self._rows(t, flat),
                           lambda wanted: read_rows(table, wanted, self.base.device), self._not_local(t), timeout_s or self.base.timeout_s)
        return rows.reshape(*shape, *table.shape[1:])

    def _table(self, key: TypedKey) -> torch.Tensor:
        try:
            return self.node_data[key]
        except KeyError:
            have = ", ".join("/".join(k) for k in self.node_data) or "none"
            raise KeyError(f"{self.base.directory}: no typed node data {key!r} (loaded: {have})") from None

    def _typed_ids(self, t: int, ids: Any) -> torch.Tensor:
        ids = torch.as_tensor(ids)
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise TypeError(f"typed node ids must be integers, got {ids.dtype}")
        ids = ids.to(device=self.base.device, dtype=torch.int64).reshape(-1)
        n = int(self.meta.num_nodes[t])
        if ids.numel():
            lo, hi = (int(v) for v in torch.aminmax(ids))
            if lo < 0 or hi >= n:
                raise IndexError(f"typed ids outside 0..{n - 1} of node type {self.node_types[t]!r} (min {lo}, max {hi})")
        return ids

    def _rows(self, t: int, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(owner, row) of typed ids of type t; ids held here as halo nodes with stored rows are answered here."""
        return self._erased_rows(ids + self.node_offsets[t], torch.full_like(ids, t))

    def erased_rows(self, erased: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(node type index, row in this partition's arrays of that type or -1) of each erased id (any types mixed)."""
        kind = torch.searchsorted(self.node_offsets, erased, right=True) - 1
        owner, rows = self._erased_rows(erased, kind)
        return kind, rows.masked_fill_(owner != self.base.rank, -1)

    def owned_rows(self, local: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(node type index, row in this partition's arrays of that type) of owned local ids."""
        kind = torch.index_select(self.local_ntype, 0, local)
        return kind, local - torch.index_select(self.type_starts[self.base.rank], 0, kind)

    def _erased_rows(self, erased: torch.Tensor, kind: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        owner, local = self.base.book.owner_and_local(erased)
        owner = owner.to(torch.int64)
        rows = local - self.type_starts[owner, kind]
        if self.halo_rows:
            foreign = torch.nonzero(owner != self.base.rank).reshape(-1)
            if foreign.numel():
                halo_ids, num_halo = self.base.halo_ids, self.base.num_halo
                wanted = erased[foreign]
                pos = torch.searchsorted(halo_ids, wanted).clamp_(max=num_halo - 1)
                hit = halo_ids[pos] == wanted
                held, t = foreign[hit], kind[foreign[hit]]
                owner[held] = self.base.rank
                rows[held] = pos[hit] - self.halo_type_start[t] + self._owned_by_type[t]
        return owner, rows

    def gather_edges(self, key: Any, positions: Any) -> torch.Tensor:
        """Rows of typed edge data `key` = ((s, r, d), name) for stored edges at local positions `positions`
        (indices into this partition's CSC arrays, as homogeneous `edge_data[name][positions]`)."""
        etype, name = key
        r = self.meta.etype_index(etype, self.base.directory)
        full = (tuple(self.edge_types[r]), name)
        if full not in self.edge_data:
            have = ", ".join(f"{':'.join(e)}/{n}" for e, n in self.edge_data) or "none"
            raise KeyError(f"{self.base.directory}: no typed edge data {':'.join(full[0])}/{name} (loaded: {have})")
        pos = torch.as_tensor(positions, device=self.base.device).to(torch.int64)
        flat = pos.reshape(-1)
        if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= self.edge_type.numel()):
            raise IndexError(f"edge positions outside 0..{self.edge_type.numel() - 1} of partition {self.base.rank}")
        wrong = self.edge_type[flat] != r
        if bool(wrong.any()):
            raise IndexError(f"{int(wrong.sum())} of {flat.numel()} stored edges are not of edge type {':'.join(full[0])}")
        table = self.edge_data[full]
        return torch.index_select(table, 0, self.edge_rows[flat].to(table.device)).reshape(*pos.shape, *table.shape[1:])

    def _not_local(self, t: int) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], NotLocalError]:
        def error(ids: torch.Tensor, owner: torch.Tensor, away: torch.Tensor) -> NotLocalError:
            return NotLocalError(self.base.directory, f"{int(away.sum())} of {ids.numel()} typed ids of {self.node_types[t]!r} "
                                                      f"are not in partition {self.base.rank}; initialise torch.distributed "
                                                      "with one rank per partition")
        return error


def _type_slices(indptr: torch.Tensor, edge_type: torch.Tensor, num_types: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per edge type r: start and length of each owned column's type-r in-edges ([R, num_owned] each)."""
    num_owned = indptr.numel() - 1
    deg = torch.diff(indptr)
    col = torch.repeat_interleave(torch.arange(num_owned, device=indptr.device), deg)
    counts = torch.bincount(edge_type * num_owned + col, minlength=num_types * num_owned).reshape(num_types, num_owned)
    before = torch.cumsum(counts, 0) - counts  # edges of earlier types in the column: they come first
    return indptr[:-1].unsqueeze(0) + before, counts


def _rank_within_type(edge_type: torch.Tensor, num_types: int) -> torch.Tensor:
    """For each stored edge, its rank among the stored edges of its type (CSC order): its row in typed edge data."""
    n = edge_type.numel()
    order = torch.argsort(edge_type, stable=True)
    counts = torch.bincount(edge_type, minlength=num_types)
    first = torch.cumsum(counts, 0) - counts
    rank = torch.empty(n, dtype=torch.int64, device=edge_type.device)
    rank[order] = torch.arange(n, device=edge_type.device) - torch.repeat_interleave(first, counts)
    return rank


def load_hetero_partition(base: LoadedPartition, feature_device: Any = None, verify: bool = False, *,
                          node_data: Optional[Sequence[Any]] = None, edge_data: Optional[Sequence[Any]] = None) -> HeteroPartition:
    """The typed partition over `base`, the erased partition of a typed result loaded without node or edge data
    (what gpart.runtime.load_partition returns for a typed result: it loads `base`, then calls this).

    node_data: `(ntype, name)` keys (or "ntype/name"); edge_data: `((s, r, d), name)` keys (or "s:r:d/name"); None: all."""
    path = base.directory
    fdev = resolve_device(feature_device) if feature_device is not None else base.device
    with PartitionReader(path) as reader:
        meta = reader.hetero
        keys = [(t, n) for t in meta.node_types for n in meta.node_data[t]]
        wanted = keys if node_data is None else [_node_key(k) for k in node_data]
        unknown = [k for k in wanted if k not in keys]
        if unknown:
            raise InputError(Path(path), f"no typed node data {unknown[0]!r} (has: {', '.join('/'.join(k) for k in keys) or 'none'})")

        def host(key: str) -> torch.Tensor:
            entry = reader.entry(base.rank, key)
            return numpy_to_tensor(reader.read_entry(entry, verify, mode="c"), entry.dtype)

        ekeys = [(e, n) for e in meta.edge_types for n in meta.edge_data[e]]
        ewanted = ekeys if edge_data is None else [_edge_key(k) for k in edge_data]
        unknown = [k for k in ewanted if k not in ekeys]
        if unknown:
            raise InputError(Path(path), f"no typed edge data {':'.join(unknown[0][0])}/{unknown[0][1]} "
                                         f"(has: {', '.join(':'.join(e) + '/' + n for e, n in ekeys) or 'none'})")
        pin = fdev.type == "cpu" and base.device.type == "cuda"
        data = {k: place(host(node_data_key(*k)), fdev, pin=pin) for k in wanted}
        # per-edge arrays where the base keeps its topology (load_partition's topology=)
        edata = {k: base.place_edge_array(host(edge_data_key(*k))) for k in ewanted}
        edge_type = base.place_edge_array(host("edge_type").to(torch.int64))
        counts = {c: np.array([reader.part_info(p)[HETERO_KEY][c] for p in range(reader.num_parts)], dtype=np.int64).reshape(reader.num_parts, -1)
                  for c in ("num_owned", "num_halo")}
    return HeteroPartition(base, meta, data, edge_type, counts["num_owned"], counts["num_halo"], edata)


def _node_key(key: Any) -> TypedKey:
    """(ntype, name) from that form or "ntype/name" (other shapes come back as tuples, reported as unknown)."""
    return tuple(key) if isinstance(key, (tuple, list)) else tuple(str(key).split("/", 1))  # type: ignore[return-value]


def _edge_key(key: Any) -> tuple[tuple[str, str, str], str]:
    """((s, r, d), name) from that form or "s:r:d/name"."""
    if isinstance(key, (tuple, list)) and len(key) == 2:
        etype, name = key
        etype = tuple(etype) if isinstance(etype, (tuple, list)) else tuple(str(etype).split(":"))
        return etype, str(name)  # type: ignore[return-value]
    etype, _, name = str(key).partition("/")
    return tuple(etype.split(":")), name  # type: ignore[return-value]
