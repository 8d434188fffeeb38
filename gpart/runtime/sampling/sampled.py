"""One sampled batch on erased ids, as the distributed sampling protocol gives it, before a loader presents it.

The field names are those of PyG's NeighborLoader batches (n_id, batch_size,
edge_index, e_id, num_sampled_nodes, num_sampled_edges, batch), so a loader
presents it as a gpart.runtime.Batch, or splits it by type
(gpart.runtime.loaders.typed_batch), without renaming anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Optional

import torch


@dataclass
class Sampled:
    """A sampled sub-graph on erased global ids (a typed node's id shifted by its type's offset).

    n_id: the batch's nodes, the `batch_size` seeds first, then the nodes each
    hop added; edge_index: [2, E] positions in n_id (row 0 the sampled
    in-neighbour, row 1 the node it was sampled for); e_id: each column's
    edge id; num_sampled_nodes / num_sampled_edges: per hop (seeds first);
    batch: with disjoint sampling each node's seed (None otherwise);
    node_data: rows of n_id keyed as the row source's keys; y: the seeds'
    labels (None without labels).
    """

    n_id: torch.Tensor
    batch_size: int
    edge_index: torch.Tensor
    e_id: torch.Tensor
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]
    batch: Optional[torch.Tensor] = None
    node_data: dict[Hashable, torch.Tensor] = field(default_factory=dict)
    y: Optional[torch.Tensor] = None

    @property
    def num_edges(self) -> int:
        return int(self.e_id.numel())
