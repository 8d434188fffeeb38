"""The row fetcher: which node data rows a batch carries, where they are, and how an owner packs them.

Nodes sort into kinds (one kind for a homogeneous partition, the node types
of a typed one); each kind has its own node data arrays, so its own row
layout (gpart.runtime.sampling.packed_rows). Per request round the loader asks the
fetcher which arrays each kind carries (`keys`), where the requester holds a
node's rows (`locate`: owned, or a halo node with stored data), which
requests must be answered with rows (`requests`), packs the rows an owner
sends (`pack_owned`) and puts the frontier's rows together from the held
rows and the answers (`frontier_rows`). Rows are read from node data on
the row source (gpart.runtime.sampling.row_source: the partition's node
data by default, or the caller's) and land on the loader's device.

    PlainRows(part, source, ["feat"], "label")                 # homogeneous: one kind
    TypedRows(part, source, ["feat"], "label", "paper")        # typed: one kind per node type
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Hashable, Optional, Sequence

import torch

from gpart.runtime.partition.interface import Partition
from gpart.runtime.sampling.packed_rows import RowLayout
from gpart.runtime.sampling.row_source import RowSource


@dataclass
class Requests:
    """The requester's side of one round: what it sent, in group (owner) order."""

    kind: torch.Tensor  # kind of each frontier node (frontier order)
    held: torch.Tensor  # its row here, -1 where the owner sends it (frontier order)
    order: torch.Tensor  # frontier positions in group order
    need: torch.Tensor  # flagged requests (group order)
    per_kind: list[list[int]]  # [peer][kind]: flagged requests
    sent_kind: Optional[torch.Tensor] = None  # kind of each request (group order)


class RowFetcher(ABC):
    """The rows of `data_keys` (keys of the row source) per kind; `label_key`'s rows of the seeds."""

    part: Partition
    source: RowSource
    device: torch.device
    kind_keys: list[list[Hashable]]  # per kind: its node data keys, in the loader's name order
    label_key: Optional[Hashable]
    seed_kind: int

    @property
    def data_keys(self) -> list[Hashable]:
        return [key for keys in self.kind_keys for key in keys]

    def keys(self, first_hop: bool) -> list[list[Hashable]]:
        """Per kind, the arrays whose rows a hop's requests carry: the first hop's add the seeds' labels."""
        keys = [list(k) for k in self.kind_keys]
        if first_hop and self.label_key is not None and self.label_key not in keys[self.seed_kind]:
            keys[self.seed_kind].append(self.label_key)
        return keys

    def only(self, key: Hashable, kind: int) -> list[list[Hashable]]:
        """Per kind, `key` alone in kind `kind` (one array fetched on its own)."""
        return [[key] if t == kind else [] for t in range(len(self.kind_keys))]

    def layouts(self, keys: list[list[Hashable]]) -> list[RowLayout]:
        """Per kind, the layout of the rows of `keys` (cached: every hop asks)."""
        cache = self.__dict__.setdefault("_layouts", {})
        marker = repr(keys)
        if marker not in cache:
            cache[marker] = [RowLayout(tuple(_spec(self.source, key) for key in kind)) for kind in keys]
        return cache[marker]

    def describe(self) -> str:
        """The kinds' layouts (every rank must agree: they size the answers' bytes)."""
        return "; ".join(f"{k}: {layout.fields}" for k, layout in zip(self.kind_keys, self.layouts(self.keys(True))))

    @abstractmethod
    def locate(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(kind, row here or -1) of global ids."""

    @abstractmethod
    def owned(self, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(kind, row) of owned local columns."""

    # -- the requester's side

    def located(self, frontier: torch.Tensor, widths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(kind, row here or -1) of every frontier node; with nothing to carry, every node counts as held."""
        if any(widths):
            return self.locate(frontier)
        return torch.zeros_like(frontier), torch.zeros_like(frontier)

    @staticmethod
    def needs(kind: torch.Tensor, held: torch.Tensor, widths: list[int]) -> torch.Tensor:
        """Whether the owner must send each node's rows: not held here, of a kind that carries rows."""
        if len(widths) == 1:  # one kind: no per-kind lookup
            return held < 0 if widths[0] else torch.zeros_like(held, dtype=torch.bool)
        return (held < 0) & (torch.index_select(torch.tensor(widths, device=kind.device), 0, kind) > 0)

    def requests(self, located: tuple[torch.Tensor, torch.Tensor], order: torch.Tensor, widths: list[int]) -> Requests:
        """The requests in group order and those flagged for rows (`per_kind`, how many of each kind go to each peer,
        is filled in by the round's count table); no host read."""
        kind, held = located
        sent_kind = torch.index_select(kind, 0, order)
        need = self.needs(sent_kind, torch.index_select(held, 0, order), widths)
        return Requests(kind, held, order, need, [], sent_kind)

    def frontier_rows(self, keys: list[list[Hashable]], layouts: list[RowLayout], row_bytes: list[Optional[torch.Tensor]],
                      req: Requests, into: Optional[dict[Hashable, torch.Tensor]] = None) -> dict[Hashable, torch.Tensor]:
        """Per key, the rows of the frontier nodes of its kind, in frontier order: held ones read here, the
        others unpacked from the answers (`row_bytes[kind]`: [n, row_bytes] in group order); written into
        `into[key]` where given (a slice of the batch's rows: no copy afterwards)."""
        out = {}
        for t, (kind_keys, layout) in enumerate(zip(keys, layouts)):
            if not kind_keys:
                continue
            if len(keys) == 1:  # one kind: positions in the frontier are positions among its kind
                remote = torch.index_select(req.order, 0, torch.nonzero(req.need).reshape(-1))
                local_at = torch.nonzero(req.held >= 0).reshape(-1)
                local_rows, count = torch.index_select(req.held, 0, local_at), int(req.kind.numel())
            else:
                remote, local_at, local_rows, count = _kind_positions(req, t)
            if local_rows.numel() == count:  # every row held here: one read, no scatter
                out.update((key, self.read(key, local_rows)) for key in kind_keys)
                continue
            for key, answered, (dtype, shape) in zip(kind_keys, layout.unpack(row_bytes[t]), layout.fields):
                rows = into[key] if into is not None and key in into else \
                    torch.empty((count, *shape), dtype=dtype, device=self.device)
                rows.index_copy_(0, remote, answered.to(self.device))
                rows.index_copy_(0, local_at, self.read(key, local_rows))
                out[key] = rows
        return out

    def read_into(self, key: Hashable, local: torch.Tensor, out: torch.Tensor) -> None:
        """Rows `local` of `key` written into `out` (the source's read_into where it has one: no buffer between)."""
        into = getattr(self.source, "read_into", None)
        if into is not None and out.device == self.device:
            into(key, local, out)
        else:
            out.copy_(self.read(key, local))

    # -- the owner's side

    def pack_owned(self, keys: list[list[Hashable]], layouts: list[RowLayout], cols: torch.Tensor,
                   wanted: torch.Tensor, buffer: Optional[Callable[[int], Optional[torch.Tensor]]] = None
                   ) -> list[Optional[torch.Tensor]]:
        """Per kind, the packed rows [n, row_bytes] of the flagged requests `wanted` among owned columns `cols`, in
        peer order then request order, None for a kind that carries nothing (how many each peer gets of each kind
        the round's count table says). `buffer(nbytes)`: a reused byte buffer the rows of one array of one kind are
        read straight into (None: a fresh one)."""
        kind, rows = self.owned(cols)
        packed: list[Optional[torch.Tensor]] = []
        for t, (kind_keys, layout) in enumerate(zip(keys, layouts)):
            if not layout.row_bytes:
                packed.append(None)
                continue
            at = torch.masked_select(rows, wanted if len(layouts) == 1 else wanted & (kind == t))
            reused = buffer(int(at.numel()) * layout.row_bytes) if buffer is not None and len(layouts) == 1 \
                and len(kind_keys) == 1 and at.numel() else None
            if reused is not None and reused.data_ptr() % 16 == 0:  # read into it, viewed as the array's rows
                (dtype, shape), = layout.fields
                self.read_into(kind_keys[0], at, reused.view(dtype).view(int(at.numel()), *shape))
                packed.append(reused.view(int(at.numel()), layout.row_bytes))
                continue
            packed.append(layout.pack([self.read(key, at) for key in kind_keys]))
        return packed

    def read(self, key: Hashable, local: torch.Tensor) -> torch.Tensor:
        """Rows `local` of `key` from the row source, on the fetcher's device."""
        rows = self.source.read(key, local)
        return rows if rows.device == self.device else rows.to(self.device)


class PlainRows(RowFetcher):
    """A homogeneous LoadedPartition: one kind, rows at local ids (owned first, then halo)."""

    def __init__(self, part: Partition, source: RowSource, names: Sequence[str], labels: Optional[str]):
        self.part, self.source, self.device = part, source, part.device
        self.kind_keys, self.label_key, self.seed_kind = [list(names)], labels, 0

    def locate(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.part.num_parts == 1:  # every node is here at its global id (the loader's ids are checked)
            return torch.zeros_like(ids), ids
        # the loader's own ids: no range check (2 host reads), and the halo looked up without a data-dependent shape
        part = self.part
        owner, rows = part.book.owner_and_local(ids)
        mine = owner == part.rank
        if not (self.source.holds_halo and stores_halo(part)):  # halo rows are asked of their owners
            return torch.zeros_like(ids), rows.masked_fill_(~mine, -1)
        return torch.zeros_like(ids), torch.where(mine, rows, halo_rows(part, ids, mine))

    def owned(self, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros_like(cols), cols


class TypedRows(RowFetcher):
    """A HeteroPartition over erased ids: one kind per node type, the arrays of `names` that type has."""

    def __init__(self, part: Partition, source: RowSource, names: Sequence[str], labels: Optional[str], input_type: str):
        self.part, self.source, self.device = part, source, part.device
        have = set(source.keys())
        self.kind_keys = [[(ntype, name) for name in names if (ntype, name) in have] for ntype in part.node_types]
        self.label_key = (input_type, labels) if labels is not None else None
        self.seed_kind = part.node_types.index(input_type)
        self.owned_counts = torch.as_tensor(part.num_owned_by_type, dtype=torch.int64, device=part.device)

    def locate(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        kind, rows = self.part.erased_rows(ids)
        if not self.source.holds_halo:  # halo rows are asked of their owners
            rows = rows.masked_fill_(rows >= torch.index_select(self.owned_counts, 0, kind), -1)
        return kind, rows

    def owned(self, cols: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.part.owned_rows(cols)


def stores_halo(part: Partition) -> bool:
    """Whether a homogeneous partition stores rows of halo nodes (SPEC.md 4: after its owned rows)."""
    return bool(part.halo and part.num_halo)


def halo_rows(part: Partition, ids: torch.Tensor, mine: torch.Tensor) -> torch.Tensor:
    """The stored row of each of `ids` that is a halo node of `part` (stores_halo), -1 for the others (`mine`: the
    owned ones, never halo); no data-dependent shape."""
    pos = torch.searchsorted(part.halo_ids, ids).clamp_(max=part.num_halo - 1)
    halo = (torch.index_select(part.halo_ids, 0, pos) == ids) & ~mine
    return torch.where(halo, pos + part.num_owned, -1)


def _spec(source: RowSource, key: Hashable) -> tuple[torch.dtype, tuple[int, ...]]:
    dtype, shape = source.row_spec(key)
    return dtype, tuple(int(d) for d in shape)


def _kind_positions(req: Requests, t: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Among the frontier nodes of kind t: positions of the flagged ones (in the answers' order), positions and rows
    here of the held ones, and their number."""
    mine = req.kind == t
    within = torch.cumsum(mine, 0) - 1  # each node's position among the frontier nodes of its kind
    sent = torch.nonzero(req.need & (torch.index_select(req.kind, 0, req.order) == t)).reshape(-1)
    remote = torch.index_select(within, 0, torch.index_select(req.order, 0, sent))
    local = torch.nonzero(mine & (req.held >= 0)).reshape(-1)
    return remote, torch.index_select(within, 0, local), torch.index_select(req.held, 0, local), int(mine.sum())
