"""Row-sharding policies shared by partition books, exports and checkpoints (SPEC.md, "Sharding policies").

- remainder: row g lives on rank g % W at local row g // W (DGL's NodeEmbedding).
- range: rank r holds the contiguous rows [boundaries[r], boundaries[r+1]).
  `wholegraph_boundaries` gives WholeGraph's default split (ceil(N/W) rows per
  rank, the last ranks possibly short or empty); `even_boundaries` gives sizes
  that differ by at most one row.

Every policy answers for itself (ShardPolicy): which rank owns a row and at
which local row, which global rows a rank holds, whether each rank's rows are
one contiguous run, and its manifest form. Under every policy a rank's rows
are an arithmetic progression of global rows (`first_row(r)`, `stride`), so
callers that move rows between two policies need nothing else. POLICY_CLASSES
lists the policies by the name their manifests carry.

All methods are vectorised over numpy arrays of global ids.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from gpart.base.errors import InputError


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


class ShardPolicy(ABC):
    """How `num_rows` global rows are split over `world_size` ranks.

    Rank r's local row k is global row `first_row(r) + k * stride`, for k < count(r).
    A policy is contiguous when stride is 1 (each rank holds one run of rows,
    `row_bounds()` says where); otherwise its ranks interleave, rank r holding
    rows r, r + stride, r + 2 * stride, ... (the remainder rule).
    """

    name: ClassVar[str]  # the name its manifests carry (POLICY_CLASSES' key)
    # manifest fields beyond name, num_rows and world_size: {field: JSON type}
    FIELDS: ClassVar[Mapping[str, type]] = {}
    num_rows: int
    world_size: int

    @classmethod
    @abstractmethod
    def default(cls, num_rows: int, world_size: int) -> "ShardPolicy":
        """The policy of this kind a name alone asks for (range: WholeGraph's split)."""

    @classmethod
    @abstractmethod
    def from_fields(cls, num_rows: int, world_size: int, fields: Mapping[str, Any]) -> "ShardPolicy":
        """The policy its manifest form describes (`fields` holds at least FIELDS); ValueError, KeyError or
        TypeError when they do not describe one."""

    @abstractmethod
    def owner(self, ids: np.ndarray) -> np.ndarray:
        """The rank holding each global id."""

    @abstractmethod
    def local(self, ids: np.ndarray) -> np.ndarray:
        """Each global id's row on its owner."""

    @abstractmethod
    def count(self, rank: int) -> int:
        """How many rows rank `rank` holds."""

    @abstractmethod
    def first_row(self, rank: int) -> int:
        """The global row of rank `rank`'s local row 0 (where it would be, for a rank holding none)."""

    @property
    @abstractmethod
    def stride(self) -> int:
        """Global rows between a rank's consecutive local rows: 1 for contiguous runs."""

    @abstractmethod
    def fields(self) -> dict[str, Any]:
        """The manifest fields beyond name, num_rows and world_size (FIELDS' keys), JSON-ready."""

    @property
    def is_contiguous(self) -> bool:
        """Whether each rank's rows are one contiguous run of global rows (so files concatenate to the table)."""
        return self.stride == 1

    def counts(self) -> np.ndarray:
        return np.array([self.count(r) for r in range(self.world_size)], dtype=np.int64)

    def row_bounds(self) -> np.ndarray:
        """W + 1 boundaries of the ranks' runs of rows: rank r holds [bounds[r], bounds[r+1]). Contiguous policies only."""
        if not self.is_contiguous:
            raise ValueError(f"the {self.name} policy over {self.world_size} ranks interleaves rows: it has no row boundaries")
        return np.concatenate([[0], np.cumsum(self.counts())]).astype(np.int64)

    def global_rows(self, rank: int, local: np.ndarray) -> np.ndarray:
        """The global ids of rank `rank`'s local rows `local` (without building the rank's whole id list)."""
        return self.first_row(rank) + np.asarray(local) * self.stride

    def global_ids(self, rank: int) -> np.ndarray:
        """The global rows rank `rank` holds, in local order."""
        first = self.first_row(rank)
        return np.arange(first, first + self.count(rank) * self.stride, self.stride, dtype=np.int64)

    def global_slice(self, rank: int) -> slice:
        """Rows of rank `rank` as a (strided) slice of the global table."""
        first = self.first_row(rank)
        return slice(first, first + self.count(rank) * self.stride, self.stride)

    def to_json(self) -> dict[str, Any]:
        """The manifest form: name, num_rows, world_size and the policy's own fields (policy_from_json reads it)."""
        return {"name": self.name, "num_rows": self.num_rows, "world_size": self.world_size, **self.fields()}


@dataclass(frozen=True)
class RemainderPolicy(ShardPolicy):
    num_rows: int
    world_size: int
    name: ClassVar[str] = "remainder"

    def __post_init__(self) -> None:
        _check(self.num_rows, self.world_size)

    @classmethod
    def default(cls, num_rows: int, world_size: int) -> "RemainderPolicy":
        return cls(num_rows, world_size)

    @classmethod
    def from_fields(cls, num_rows: int, world_size: int, fields: Mapping[str, Any]) -> "RemainderPolicy":
        return cls(num_rows, world_size)

    def owner(self, ids: np.ndarray) -> np.ndarray:
        return np.asarray(ids) % self.world_size

    def local(self, ids: np.ndarray) -> np.ndarray:
        return np.asarray(ids) // self.world_size

    def count(self, rank: int) -> int:
        return max(0, -(-(self.num_rows - rank) // self.world_size))

    def first_row(self, rank: int) -> int:
        return rank

    @property
    def stride(self) -> int:
        return self.world_size

    def fields(self) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class RangePolicy(ShardPolicy):
    num_rows: int
    world_size: int
    boundaries: tuple[int, ...]
    name: ClassVar[str] = "range"
    FIELDS: ClassVar[Mapping[str, type]] = {"boundaries": list}

    def __post_init__(self) -> None:
        _check(self.num_rows, self.world_size)
        b = self.boundaries
        if len(b) != self.world_size + 1 or b[0] != 0 or b[-1] != self.num_rows or any(x > y for x, y in zip(b, b[1:])):
            raise ValueError(
                f"range boundaries must be {self.world_size + 1} non-decreasing values from 0 to {self.num_rows}, got {list(b)[:8]}"
            )

    @classmethod
    def default(cls, num_rows: int, world_size: int) -> "RangePolicy":
        return cls.wholegraph(num_rows, world_size)

    @classmethod
    def from_fields(cls, num_rows: int, world_size: int, fields: Mapping[str, Any]) -> "RangePolicy":
        return cls(num_rows, world_size, tuple(int(x) for x in fields["boundaries"]))

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

    def first_row(self, rank: int) -> int:
        return self.boundaries[rank]

    @property
    def stride(self) -> int:
        return 1

    def row_bounds(self) -> np.ndarray:
        return self.bounds

    def fields(self) -> dict[str, Any]:
        return {"boundaries": list(self.boundaries)}


# every policy, by the name its manifests carry; the first is the default
POLICY_CLASSES: dict[str, type[ShardPolicy]] = {"remainder": RemainderPolicy, "range": RangePolicy}
POLICIES = tuple(POLICY_CLASSES)


def make_policy(name: str, num_rows: int, world_size: int) -> ShardPolicy:
    """The default policy of a name: remainder, or range with WholeGraph's split."""
    if name not in POLICY_CLASSES:
        raise ValueError(f"unknown sharding policy {name!r} (expected one of {', '.join(POLICIES)})")
    return POLICY_CLASSES[name].default(num_rows, world_size)


def policy_from_json(obj: Any, where: Any = None) -> ShardPolicy:
    """Rebuild a policy from its manifest form; InputError naming `where` if malformed."""
    try:
        name = obj["name"]
        n, w = int(obj["num_rows"]), int(obj["world_size"])
        if not isinstance(name, str) or name not in POLICY_CLASSES:
            raise ValueError(f"unknown policy {name!r}")
        return POLICY_CLASSES[name].from_fields(n, w, obj)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise InputError(where, f"malformed sharding policy {str(obj)[:120]}: {exc}") from None
