"""A device cache of the most-read node data rows, in front of node data kept in (pinned) host memory.

    part = gr.load_partition("parts/", device="cuda", feature_device="cpu", cache="8GB")   # or cache=0.2
    for batch in loader: ...
    part.cache_stats()      # {name: {"hits", "misses", "hit_rate", "rows", "bytes"}}
    part.refresh_cache()    # re-rank by the reads counted since loading (or the last refresh)

Which rows: one order for every array of the partition, hottest first, and
the first k rows of it are cached in every array (k: the budget over the
summed row sizes, or a fraction of the rows). The first order is the
number of the partition's stored in-edges each row's node is the source of
(how often a draw can reach it from an owned column: on a power-law graph
the hubs), seeds aside; `refresh_cache` replaces it by the reads counted
since (GraphBolt's and Quiver's caches rank by degree or by measured
frequency; both are here, the figures in docs/runtime.md).

A read (the loader's row source, gpart.runtime.sampling.row_source) looks
every row id up in one slot table on the device (int32 per row: -1 when not
cached), takes the hits from the device copy, gathers the misses from host
memory (the pinned, piecewise gather when on CUDA) and scatters both into
one output: the same rows as without the cache, tensor operations only.
Counting hits and misses, and the reads per row for refresh_cache, stays
on the device (no host synchronisation for the counts; the misses' ids are
read to the host once per read, which the host gather needs anyway).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from typing import Any, Optional, Union

import torch

from gpart.base.errors import InputError
from gpart.base.memory import parse_memory_size
from gpart.runtime.partition.serving import read_rows

CacheSize = Union[str, int, float, None]


class RowCache:
    """The cached rows of the node data `tables` (one slot table for all of them) and the read counters."""

    def __init__(self, tables: dict[Any, torch.Tensor], device: torch.device, capacity: int, order: torch.Tensor):
        self.tables, self.device, self.capacity = tables, device, int(capacity)
        self.num_rows = min(t.shape[0] for t in tables.values()) if tables else 0
        self.hits = {name: torch.zeros((), dtype=torch.int64, device=device) for name in tables}
        self.misses = {name: torch.zeros((), dtype=torch.int64, device=device) for name in tables}
        self.reads = torch.zeros(self.num_rows, dtype=torch.int32, device=device)  # per row, for refresh
        self.fill(order)

    def fill(self, order: torch.Tensor) -> None:
        """Cache the first `capacity` rows of `order` (row ids, hottest first) of every table."""
        hot = order[: self.capacity].to(torch.int64)
        self.slot_of = torch.full((self.num_rows,), -1, dtype=torch.int32, device=self.device)
        self.slot_of[hot.to(self.device)] = torch.arange(hot.numel(), dtype=torch.int32, device=self.device)
        self.rows = {name: torch.index_select(table, 0, hot.to(table.device)).to(self.device)
                     for name, table in self.tables.items()}

    def holds(self, name: Hashable) -> bool:
        """Whether node data `name` is cached (every array of the cache is)."""
        return name in self.tables

    def read(self, name: Hashable, rows: torch.Tensor) -> torch.Tensor:
        """table[rows] on the cache's device: hits from the cached copy, misses from host memory."""
        rows = rows.to(self.device, torch.int64)
        slots = torch.index_select(self.slot_of, 0, rows).to(torch.int64)
        hit = slots >= 0
        out = torch.index_select(self.rows[name], 0, torch.clamp(slots, min=0))  # misses overwritten below
        missed = torch.nonzero(~hit).reshape(-1)
        if missed.numel():
            out.index_copy_(0, missed, read_rows(self.tables[name], torch.index_select(rows, 0, missed), self.device))
        self.hits[name] += hit.sum()
        self.misses[name] += missed.numel()
        self.reads.index_add_(0, rows, torch.ones_like(rows, dtype=torch.int32))
        return out

    def refresh(self) -> None:
        """Re-rank by the reads counted since the last fill, then count afresh."""
        self.fill(torch.argsort(self.reads, descending=True, stable=True))
        self.reads.zero_()

    def stats(self) -> dict[Any, dict[str, Any]]:
        """Per array: hits, misses, hit rate, cached rows and their bytes (reads the counters to the host)."""
        out = {}
        for name, cached in self.rows.items():
            hits, misses = int(self.hits[name]), int(self.misses[name])
            out[name] = {"hits": hits, "misses": misses, "hit_rate": hits / (hits + misses) if hits + misses else 0.0,
                         "rows": int(cached.shape[0]), "bytes": int(cached.numel() * cached.element_size())}
        return out


class CachedRows:
    """The row cache's view from a partition (LoadedPartition, HeteroPartition): its stats and its refresh."""

    row_cache: Any = None  # RowCache, TypedRowCache or None

    def cache_stats(self) -> dict[Any, dict[str, Any]]:
        """Per node data array: the row cache's hits, misses, hit rate, cached rows and bytes ({} without a cache)."""
        return self.row_cache.stats() if self.row_cache is not None else {}

    def refresh_cache(self) -> None:
        """Re-rank the cached rows by the reads counted since loading or the last refresh (no cache: nothing)."""
        if self.row_cache is not None:
            self.row_cache.refresh()


class CacheStatsView(Mapping):
    """A loader's stats["cache"]: the row cache's stats per array, read when looked at (the counters stay on the
    device between looks)."""

    def __init__(self, cache: Any):
        self.cache = cache

    def __getitem__(self, name: Any) -> dict[str, Any]:
        return self.cache.stats()[name]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.cache.rows)

    def __len__(self) -> int:
        return len(self.cache.rows)

    def __repr__(self) -> str:
        return repr(self.cache.stats())


def check_host_tables(node_data: dict[Any, torch.Tensor], where: Any) -> None:
    """A one-line InputError unless every table is in host memory (what a cache fronts)."""
    held = [key for key, t in node_data.items() if t.device.type == "cuda"]
    if held:
        raise InputError(where, f"cache= needs node data in host memory (feature_device='cpu'); {held[0]!r} is on "
                                f"{node_data[held[0]].device} already")


def cache_rows(size: CacheSize, tables: dict[str, torch.Tensor], where: Any) -> int:
    """How many rows a cache of `size` holds: a fraction of the rows (a float in (0, 1]) or a byte budget over
    the summed row sizes of `tables` (an int or '8GB'); a one-line InputError otherwise."""
    num_rows = min((t.shape[0] for t in tables.values()), default=0)
    if isinstance(size, float) and not isinstance(size, bool):
        if not 0.0 < size <= 1.0:
            raise InputError(where, f"cache fraction must be in (0, 1], got {size}")
        return int(num_rows * size)
    budget = parse_memory_size(size, where)  # type: ignore[arg-type]
    row_bytes = sum(max(1, t[:1].numel()) * t.element_size() for t in tables.values())
    return min(num_rows, int(budget or 0) // max(1, row_bytes))


# stored edges per piece of the source counts: their temporaries stay a few hundred MB whatever the graph
COUNT_PIECE = 1 << 24


def degree_order(indices: torch.Tensor, num_rows: int) -> torch.Tensor:
    """Row ids hottest first by how many stored in-edges each row's node is the source of (ties: lower id)."""
    counts = torch.zeros(num_rows, dtype=torch.int64, device=indices.device)
    for at in range(0, indices.numel(), COUNT_PIECE):  # a loop over pieces of millions of edges
        sources = indices[at:at + COUNT_PIECE].to(torch.int64)
        counts += torch.bincount(sources[sources < num_rows], minlength=num_rows)
    return torch.argsort(counts, descending=True, stable=True)


def build_cache(size: CacheSize, node_data: dict[str, torch.Tensor], indices: torch.Tensor, device: torch.device,
                where: Any) -> Optional[RowCache]:
    """The RowCache of `size` over every node data array (None: no cache asked, or no node data)."""
    if size is None or not node_data:
        return None
    check_host_tables(node_data, where)
    capacity = cache_rows(size, node_data, where)
    num_rows = min(t.shape[0] for t in node_data.values())
    return RowCache(node_data, device, capacity, degree_order(indices, num_rows))
