"""What a loaded partition offers the loaders, the samplers and a training script: one interface that the
homogeneous LoadedPartition and the typed HeteroPartition both implement.

A homogeneous partition is the one-type case of a typed one, as the sampler already treats it: one node type
`PLAIN_NODE_TYPE` ("") and one edge type `PLAIN_EDGE_TYPE` (("", "", "")), erased ids equal to global ids,
node data keyed by name where a typed partition keys it by (node type, name). Callers ask `part.typed`, or
the type lists, instead of probing attributes.

    def train(part: Partition): ...
    for ntype in part.node_types:                      # [""] for a homogeneous partition
        owned = part.owned_ids_of(ntype)               # ids of that type this partition owns
    x = part.gather(key, ids)                          # a collective under torch.distributed (P x L ranks)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Hashable, Optional, Protocol, runtime_checkable

import torch

PLAIN_NODE_TYPE = ""  # the one node type of a homogeneous partition, as the typed code sees it
PLAIN_EDGE_TYPE = ("", "", "")  # its one edge type


@runtime_checkable
class Partition(Protocol):
    """One partition of a gpart result on a device (SPEC.md 4, 8): topology over erased ids, the book, node
    and edge data, and typed views of them (one type when homogeneous).

    Attributes shared by both kinds: `directory`, `manifest`, `digest` (of manifest.json), `rank` (the
    partition), `num_parts`, `num_nodes` / `num_edges` (whole graph, erased), `num_owned`, `num_halo`,
    `halo` (whether the result stores halo data), `device`, `feature_device`, `timeout_s`, `book`
    (DeviceBook over erased ids), `node_ids`, `indptr`, `indices`, `edge_ids` (int64 CSC over local ids),
    `node_data` / `edge_data` (key -> tensor: a name, or (node type, name) / ((s, r, d), name) when typed).
    """

    directory: Path
    manifest: dict[str, Any]
    digest: str
    rank: int
    num_parts: int
    num_nodes: int
    num_edges: int
    num_owned: int
    num_halo: int
    halo: bool
    device: torch.device
    feature_device: torch.device
    timeout_s: float
    book: Any
    node_ids: torch.Tensor
    indptr: torch.Tensor
    indices: torch.Tensor
    edge_ids: torch.Tensor
    node_data: dict[Any, torch.Tensor]
    edge_data: dict[Any, torch.Tensor]
    topology: str  # where the per-edge arrays live: "device", or "pinned" host memory the GPU reads

    def place_edge_array(self, array: torch.Tensor) -> torch.Tensor:
        """Per-edge array `array` (a table made from the topology) where this partition keeps its topology."""

    @property
    def typed(self) -> bool:
        """Whether the result is typed (SPEC.md 8): node data keys are then (node type, name)."""

    @property
    def node_types(self) -> list[str]:
        """Node type names, in type index order ([PLAIN_NODE_TYPE] when homogeneous)."""

    @property
    def edge_types(self) -> list[tuple[str, str, str]]:
        """(src, relation, dst) triplets, in type index order ([PLAIN_EDGE_TYPE] when homogeneous)."""

    @property
    def node_offsets(self) -> torch.Tensor:
        """[T + 1] erased id of the first node of each type (int64, on the device): typed id i of type t is
        erased id node_offsets[t] + i."""

    @property
    def edge_offsets(self) -> torch.Tensor:
        """[R + 1] erased id of the first edge of each edge type (int64, on the device)."""

    @property
    def halo_ids(self) -> torch.Tensor:
        """Erased global ids of the halo nodes (sorted)."""

    def num_nodes_of(self, ntype: str) -> int:
        """Nodes of type `ntype` in the whole graph."""

    def owned_ids_of(self, ntype: str) -> torch.Tensor:
        """Typed ids of the nodes of `ntype` this partition owns (ascending)."""

    def owner(self, gids: Any) -> torch.Tensor:
        """Owning partition of each erased global id."""

    def to_local(self, gids: Any) -> torch.Tensor:
        """Row of each erased global id within its owner's owned nodes."""

    def erased_rows(self, erased: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(node type index, row in this partition's data of that type, or -1) of each erased id."""

    def owned_rows(self, local: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(node type index, row in this partition's data of that type) of owned local ids."""

    def gather(self, key: Hashable, ids: Any, *, timeout_s: Optional[float] = None) -> torch.Tensor:
        """Rows of node data `key` for `ids`, in request order: ids of this partition answered here, the
        others, under torch.distributed, by the serving rank of their owning partition (a collective)."""

    def gather_edges(self, key: Any, positions: Any) -> torch.Tensor:
        """Rows of edge data `key` for stored edges at local CSC positions `positions`."""
