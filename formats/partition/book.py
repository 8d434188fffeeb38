"""Partition books: which partition owns a global node id, and at which local row.

Owned nodes of a partition are listed in ascending global id and local(g) is
g's position in that list (SPEC.md 4.1). remainder and range books are rules
(gpart.formats.sharding.policies); metis, random and assignment books are arrays.
"""

from __future__ import annotations

from typing import Any, Union

import numpy as np

from gpart.formats.sharding.policies import RangePolicy, RemainderPolicy, ShardPolicy


class RuleBook:
    """A book given by a sharding rule (remainder or range): no arrays stored."""

    def __init__(self, policy: ShardPolicy):
        self.policy = policy
        self.kind = policy.name
        self.num_nodes = policy.num_rows
        self.num_parts = policy.world_size

    def owner(self, ids: np.ndarray) -> np.ndarray:
        return self.policy.owner(np.asarray(ids)).astype(np.int32, copy=False)

    def local(self, ids: np.ndarray) -> np.ndarray:
        return self.policy.local(np.asarray(ids)).astype(np.int64, copy=False)

    def owned(self, part: int) -> np.ndarray:
        return self.policy.global_ids(part)

    def counts(self) -> np.ndarray:
        return self.policy.counts()

    def to_json(self) -> dict[str, Any]:
        # the rule's own fields (range: boundaries) after the book's: the policy says which it has
        return {"kind": self.kind, "num_nodes": self.num_nodes, "num_parts": self.num_parts, **self.policy.fields()}


# Bytes a node an array book costs a partition run: its owner (int32) and local id (int64), and the int32 position
# the bounded write pass builds from them (gpart.pipeline.layout.BookOrder); a rule book costs none
ARRAY_BOOK_NODE_BYTES = 16


class ArrayBook:
    """A book given by an owner array (metis, random, assignment)."""

    kind = "array"

    def __init__(self, owner: np.ndarray, num_parts: int, local: np.ndarray | None = None):
        owner = np.asarray(owner)
        if owner.ndim != 1:
            raise ValueError("owner array must be 1-D")
        self.owner_array = owner.astype(np.int32, copy=False)
        self.num_nodes = int(owner.shape[0])
        self.num_parts = int(num_parts)
        self._counts = np.bincount(self.owner_array, minlength=self.num_parts).astype(np.int64)
        if self._counts.shape[0] != self.num_parts:
            raise ValueError(f"owner array names partitions >= {self.num_parts}")
        self.local_array = self._local_from_owner() if local is None else np.asarray(local, dtype=np.int64)
        self._order: np.ndarray | None = None  # node ids sorted by owner (stable), kept by _local_from_owner

    def _local_from_owner(self) -> np.ndarray:
        # A stable sort by owner lists each partition's nodes in ascending id;
        # position in that list minus the partition's start is the local id.
        order = np.argsort(self.owner_array, kind="stable")
        starts = np.concatenate([[0], np.cumsum(self._counts)[:-1]])
        local = np.empty(self.num_nodes, dtype=np.int64)
        local[order] = np.arange(self.num_nodes, dtype=np.int64) - np.repeat(starts, self._counts)
        self._order = order
        return local

    def owner(self, ids: np.ndarray) -> np.ndarray:
        return self.owner_array[np.asarray(ids)]

    def local(self, ids: np.ndarray) -> np.ndarray:
        return self.local_array[np.asarray(ids)]

    def owned(self, part: int) -> np.ndarray:
        return np.flatnonzero(self.owner_array == part).astype(np.int64)

    def counts(self) -> np.ndarray:
        return self._counts

    def to_json(self) -> dict[str, Any]:
        return {"kind": "array", "num_nodes": self.num_nodes, "num_parts": self.num_parts}


PartitionBook = Union[RuleBook, ArrayBook]


def remainder_book(num_nodes: int, num_parts: int) -> RuleBook:
    return RuleBook(RemainderPolicy(num_nodes, num_parts))


def range_book(num_nodes: int, num_parts: int) -> RuleBook:
    return RuleBook(RangePolicy.even(num_nodes, num_parts))
