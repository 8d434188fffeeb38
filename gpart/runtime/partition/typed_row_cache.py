"""The row cache of a typed partition: one RowCache per node type, sized together.

    part = gr.load_partition("typed_parts/", device="cuda", feature_device="cpu", cache="8GB")   # or cache=0.2
    part.cache_stats()      # {(ntype, name): {"hits", "misses", "hit_rate", "rows", "bytes"}}

A typed partition's node data is per node type, each type with its own rows
(SPEC.md 8.4), so each type gets its own RowCache (gpart.runtime.partition.
row_cache: one slot table and one order for that type's arrays). The first
order is the homogeneous one's, per type: how many stored in-edges each row's
node is the source of. A fraction caches that fraction of every type's rows; a
byte budget goes to the hottest rows of all types together (most in-edges
first, each row costing its type's row bytes), so a small type of hubs is not
starved by a large cold one. The count alone is the right key across types:
a cached row spares the bus its reads times its bytes and costs its bytes,
so bytes spared per byte of cache is the count whatever the row size (on
Cora's typed graph, 300 KB held 50 paper rows of 5.7 KB and 350 word rows of
32 B: word reads hit 52%).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Optional

import torch

from gpart.base.memory import parse_memory_size
from gpart.runtime.partition.row_cache import COUNT_PIECE, CacheSize, RowCache, cache_rows, check_host_tables


class TypedRowCache:
    """The RowCache of every node type with node data, offered as one cache keyed by (ntype, name)."""

    def __init__(self, caches: dict[str, RowCache]):
        self.caches = caches
        self.cache_of = {key: cache for cache in caches.values() for key in cache.rows}

    @property
    def rows(self) -> dict[Hashable, torch.Tensor]:
        return {key: cache.rows[key] for key, cache in self.cache_of.items()}

    def holds(self, key: Hashable) -> bool:
        return key in self.cache_of

    def read(self, key: Hashable, rows: torch.Tensor) -> torch.Tensor:
        return self.cache_of[key].read(key, rows)

    def refresh(self) -> None:
        for cache in self.caches.values():
            cache.refresh()

    def stats(self) -> dict[Any, dict[str, Any]]:
        return {key: value for cache in self.caches.values() for key, value in cache.stats().items()}


def build_typed_cache(size: CacheSize, part: Any, where: Any) -> Optional[TypedRowCache]:
    """The TypedRowCache of `size` over typed partition `part`'s node data (None: no cache asked, or no node data)."""
    if size is None or not part.node_data:
        return None
    check_host_tables(part.node_data, where)
    by_type: dict[str, dict[Hashable, torch.Tensor]] = {}
    for key, table in part.node_data.items():
        by_type.setdefault(key[0], {})[key] = table
    num_rows = {ntype: min(t.shape[0] for t in tables.values()) for ntype, tables in by_type.items()}
    counts = typed_source_counts(part, num_rows)
    capacity = _capacities(size, by_type, counts, where)
    return TypedRowCache({ntype: RowCache(tables, part.device, capacity[ntype], torch.argsort(counts[ntype], descending=True, stable=True))
                          for ntype, tables in by_type.items()})


def typed_source_counts(part: Any, num_rows: dict[str, int]) -> dict[str, torch.Tensor]:
    """Per node type in `num_rows`: how many of `part`'s stored in-edges each of its rows' nodes is the source of."""
    type_index = {ntype: t for t, ntype in enumerate(part.node_types)}
    counts = {ntype: torch.zeros(n, dtype=torch.int64, device=part.device) for ntype, n in num_rows.items()}
    for at in range(0, part.indices.numel(), COUNT_PIECE):  # a loop over pieces of millions of edges
        erased = torch.index_select(part.node_ids, 0, part.indices[at:at + COUNT_PIECE].to(torch.int64))
        kind, rows = part.erased_rows(erased)
        for ntype, count in counts.items():
            rows_of_type = rows[(kind == type_index[ntype]) & (rows >= 0) & (rows < count.numel())]
            count += torch.bincount(rows_of_type, minlength=count.numel())
    return counts


def _capacities(size: CacheSize, by_type: dict[str, dict[Hashable, torch.Tensor]], counts: dict[str, torch.Tensor],
                where: Any) -> dict[str, int]:
    """Rows cached per node type: a fraction of each type's rows, or a byte budget filled hottest row first."""
    if isinstance(size, float) and not isinstance(size, bool):
        return {ntype: cache_rows(size, tables, where) for ntype, tables in by_type.items()}
    budget = int(parse_memory_size(size, where) or 0)  # type: ignore[arg-type]
    names = list(by_type)
    row_bytes = torch.tensor([sum(max(1, t[:1].numel()) * t.element_size() for t in by_type[ntype].values()) for ntype in names],
                             dtype=torch.int64)
    kind = torch.cat([torch.full((counts[ntype].numel(),), t, dtype=torch.int64) for t, ntype in enumerate(names)])
    hottest = torch.argsort(torch.cat([counts[ntype].cpu() for ntype in names]), descending=True, stable=True)
    kind = torch.index_select(kind, 0, hottest)
    within = torch.cumsum(torch.index_select(row_bytes, 0, kind), 0) <= budget
    taken = torch.bincount(kind[within], minlength=len(names))
    return {ntype: int(taken[t]) for t, ntype in enumerate(names)}
