"""The batch a loader yields (PyG's NeighborLoader convention), and the presentation of a sampled graph as one.

    batch = present(sampled, part, input_type, sampled_types, first_name)
    # a Batch (homogeneous) or a HeteroBatch split by type (gpart.runtime.loaders.typed_batch)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

import torch

from gpart.runtime.loaders.typed_batch import HeteroBatch, typed_batch
from gpart.runtime.partition.interface import Partition
from gpart.runtime.sampling.sampled import Sampled


@dataclass
class Batch:
    """A sampled sub-graph in PyG's NeighborLoader convention, on the partition's device.

    n_id: global ids of the batch's nodes, the `batch_size` seeds first, then
    the nodes each hop added. edge_index: [2, E] positions in n_id, row 0 the
    sampled in-neighbour (source), row 1 the node it was sampled for
    (destination). e_id: the input's edge id of each column of edge_index.
    num_sampled_nodes: [seeds, added by hop 1, ...]; num_sampled_edges: per hop.
    x: rows of the first requested node data for n_id; node_data: every
    requested name -> rows of n_id; y: labels of the seeds (None without labels).
    batch: with disjoint sampling, the seed (its position among the batch's
    seeds) each node was sampled for; n_id then repeats a node once per seed
    that reached it (None when not disjoint).
    """

    n_id: torch.Tensor
    batch_size: int
    edge_index: torch.Tensor
    e_id: torch.Tensor
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]
    x: Optional[torch.Tensor] = None
    y: Optional[torch.Tensor] = None
    node_data: dict[str, torch.Tensor] = field(default_factory=dict)
    batch: Optional[torch.Tensor] = None

    @property
    def num_nodes(self) -> int:
        return int(self.n_id.numel())

    @property
    def num_edges(self) -> int:
        return int(self.e_id.numel())

    def to_pyg(self) -> Any:
        """This batch as a `torch_geometric.data.Data` (needs PyG, which gpart does not depend on)."""
        try:  # here, not at the top: torch_geometric is optional
            from torch_geometric.data import Data
        except ImportError:
            raise ImportError("Batch.to_pyg() needs torch_geometric (pip install torch_geometric); the Batch itself has the same fields") from None
        return Data(x=self.x, edge_index=self.edge_index, y=self.y, n_id=self.n_id, e_id=self.e_id, batch_size=self.batch_size,
                    num_sampled_nodes=self.num_sampled_nodes, num_sampled_edges=self.num_sampled_edges, batch=self.batch)


def present(sampled: Sampled, part: Partition, input_type: Optional[str], sampled_types: Sequence[int],
            first_name: Optional[str]) -> Union[Batch, HeteroBatch]:
    """The batch as the user sees it: a Batch whose x holds `first_name`'s rows (homogeneous: input_type None), or
    the graph split by type (the edge types `sampled_types` listed)."""
    if input_type is not None:
        return typed_batch(sampled, part, list(sampled_types), input_type, sampled.node_data, sampled.y, first_name)
    node_data = dict(sampled.node_data)
    return Batch(sampled.n_id, sampled.batch_size, sampled.edge_index, sampled.e_id, sampled.num_sampled_nodes,
                 sampled.num_sampled_edges, x=node_data[first_name] if first_name is not None else None, y=sampled.y,
                 node_data=node_data, batch=sampled.batch)
