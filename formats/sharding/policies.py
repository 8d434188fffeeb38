"""Row-sharding policies shared by partition books, exports and checkpoints (SPEC.md, "Sharding policies").

- remainder: row g lives on rank g % W at local row g // W (DGL's NodeEmbedding).
- range: rank r holds the contiguous rows [boundaries[r], boundaries[r+1]).
  `wholegraph_boundaries` gives WholeGraph's default split (ceil(N/W) rows per
  rank, the last ranks possibly short or empty); `even_boundaries` gives sizes
  that differ by at most one row.

All methods are vectorised over numpy arrays of global ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from gpart.base.errors import InputError

POLICIES = ("remainder", "range")


def even_boundaries(num_rows: int, world_size: int) -> np.ndarray:
    """Boundaries of W contiguous blocks whose sizes differ by at most one (larger blocks first)."""
    _check(num_rows, world_size)
    base, extra = divmod(num_rows, world_size)
    sizes = np.full(world_size, base, dtype=np.int64)
    sizes[:extra] += 1
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def wholegraph_boundaries(num_rows: int, world_size: int) -> np.ndarray:
    """WholeGraph's default split: ceil(N/W) rows per rank, clipped at N."""
    _check(num_rows, world_size)
    per_rank = -(-num_rows // world_size)
    return np.minimum(np.arange(world_size + 1, dtype=np.int64) * per_rank, num_rows)


def _check(num_rows: int, world_size: int) -> None:
    if world_size < 1:
        raise ValueError(f"world size must be at least 1, got {world_size}")
    if num_rows < 0:
        raise ValueError(f"row count must be non-negative, got {num_rows}")


@dataclass(frozen=True)
class RemainderPolicy:
    num_rows: int
    world_size: int
    name: str = "remainder"

    def __post_init__(self) -> None:
        _check(self.num_rows, self.world_size)

    def owner(self, ids: np.ndarray) -> np.ndarray:
        return np.asarray(ids) % self.world_size

    def local(self, ids: np.ndarray) -> np.ndarray:
        return np.asarray(ids) // self.world_size

    def count(self, rank: int) -> int:
        return max(0, -(-(self.num_rows - rank) // self.world_size))

    def counts(self) -> np.ndarray:
        return np.array([self.count(r) for r in range(self.world_size)], dtype=np.int64)

    def global_ids(self, rank: int) -> np.ndarray:
        """The global rows rank `rank` holds, in local order."""
        return np.arange(rank, self.num_rows, self.world_size, dtype=np.int64)

    def global_slice(self, rank: int) -> slice:
        """Rows of rank `rank` as a (strided) slice of the global table."""
        return slice(rank, self.num_rows, self.world_size)

    def to_json(self) -> dict[str, Any]:
        return {"name": "remainder", "num_rows": self.num_rows, "world_size": self.world_size}


@dataclass(frozen=True)
class RangePolicy:
    num_rows: int
    world_size: int
    boundaries: tuple[int, ...]
    name: str = "range"

    def __post_init__(self) -> None:
        _check(self.num_rows, self.world_size)
        b = self.boundaries
        if len(b) != self.world_size + 1 or b[0] != 0 or b[-1] != self.num_rows or any(x > y for x, y in zip(b, b[1:])):
            raise ValueError(
                f"range boundaries must be {self.world_size + 1} non-decreasing values from 0 to {self.num_rows}, got {list(b)[:8]}"
            )

    @classmethod
    def even(cls, num_rows: int, world_size: int) -> "RangePolicy":
        return cls(num_rows, world_size, tuple(int(x) for x in even_boundaries(num_rows, world_size)))

    @classmethod
    def wholegraph(cls, num_rows: int, world_size: int) -> "RangePolicy":
        return cls(num_rows, world_size, tuple(int(x) for x in wholegraph_boundaries(num_rows, world_size)))

    @property
    def bounds(self) -> np.ndarray:
        return np.asarray(self.boundaries, dtype=np.int64)

    def owner(self, ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.bounds, np.asarray(ids), side="right") - 1

    def local(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids)
        return ids - self.bounds[self.owner(ids)]

    def count(self, rank: int) -> int:
        return self.boundaries[rank + 1] - self.boundaries[rank]

    def counts(self) -> np.ndarray:
        return np.diff(self.bounds)

    def global_ids(self, rank: int) -> np.ndarray:
        return np.arange(self.boundaries[rank], self.boundaries[rank + 1], dtype=np.int64)

    def global_slice(self, rank: int) -> slice:
        return slice(self.boundaries[rank], self.boundaries[rank + 1])

    def to_json(self) -> dict[str, Any]:
        return {"name": "range", "num_rows": self.num_rows, "world_size": self.world_size, "boundaries": list(self.boundaries)}


ShardPolicy = Union[RemainderPolicy, RangePolicy]


def make_policy(name: str, num_rows: int, world_size: int) -> ShardPolicy:
    """The default policy of a name: remainder, or range with WholeGraph's split."""
    if name == "remainder":
        return RemainderPolicy(num_rows, world_size)
    if name == "range":
        return RangePolicy.wholegraph(num_rows, world_size)
    raise ValueError(f"unknown sharding policy {name!r} (expected one of {', '.join(POLICIES)})")


def policy_from_json(obj: Any, where=None) -> ShardPolicy:
    """Rebuild a policy from its manifest form; InputError naming `where` if malformed."""
    try:
        name = obj["name"]
        n, w = int(obj["num_rows"]), int(obj["world_size"])
        if name == "remainder":
            return RemainderPolicy(n, w)
        if name == "range":
            return RangePolicy(n, w, tuple(int(x) for x in obj["boundaries"]))
        raise ValueError(f"unknown policy {name!r}")
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise InputError(where, f"malformed sharding policy {str(obj)[:120]}: {exc}") from None
