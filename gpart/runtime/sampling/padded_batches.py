"""One partition's padded batches with their rows: fixed-capacity hops, eager or replayed from CUDA graphs.

    batches = PaddedBatches(part, sampler, rows)
    padded = batches.run(seeds, generator)               # eager: gpart.runtime.sampling.table_hops
    padded = batches.run(seeds, generator, replay=True)  # CUDA with the fused draw: gpart.runtime.sampling.batch_graphs

The rows of the batch's nodes (its padding's rows unspecified) and the seeds'
labels are read from the row fetcher inside the batch, so a replayed graph
holds the row gathers too. What the distributed sampling protocol
(gpart.runtime.sampling.protocol) calls for a batch it takes as tables.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from gpart.runtime.partition.interface import Partition
from gpart.runtime.sampling.batch_graphs import GraphReplay
from gpart.runtime.sampling.fused_floyd import FusedFloyd
from gpart.runtime.sampling.row_fetcher import RowFetcher
from gpart.runtime.sampling.sampled import Sampled
from gpart.runtime.sampling.table_hops import PaddedSampled, TableHops


class PaddedBatches:
    """The padded batches of `sampler`'s table hops over `part` (see the module)."""

    def __init__(self, part: Partition, sampler: Any, rows: RowFetcher, keep: int = 2):
        self.part, self.rows = part, rows
        fanouts = [sampler.table_fanout(hop) for hop in range(sampler.num_hops)]
        self.draw = sampler.table_draw() if hasattr(sampler, "table_draw") else None
        self.tables = TableHops(part, fanouts, self.draw, keep)
        self._replay: Optional[GraphReplay] = None

    def run(self, seeds: torch.Tensor, gen: Optional[torch.Generator], rows: bool = True,
            replay: bool = False) -> PaddedSampled:
        """The padded batch of `seeds` with its rows (`rows`), replayed from a CUDA graph with `replay` where it can
        (CUDA, the fused draw; otherwise eager)."""
        if rows and replay and seeds.is_cuda and isinstance(self.draw, FusedFloyd) and gen is not None:
            if self._replay is None:
                self._replay = GraphReplay(self._build, self.tables.new_buffers, self.draw.reseed, self.tables.keep)
            replayed = self._replay.run(seeds, gen)
            if replayed is not None:
                return replayed
        padded = self.tables.run(seeds, gen)
        return self._with_rows(padded, seeds) if rows else padded

    def sample(self, seeds: torch.Tensor, gen: torch.Generator) -> Sampled:
        """The compact batch of `seeds`, without rows (TableHops.sample: learned capacities where they apply)."""
        return self.tables.sample(seeds, gen)

    def _build(self, seeds: torch.Tensor, buffers: Any) -> PaddedSampled:
        """A batch on given buffers with draws seeded beforehand (what a graph captures)."""
        return self._with_rows(self.tables.run_into(buffers, seeds, None), seeds)

    def _with_rows(self, padded: PaddedSampled, seeds: torch.Tensor) -> PaddedSampled:
        fetch = self.rows
        ids = torch.clamp(padded.n_id, max=self.part.num_nodes - 1)
        padded.node_data = {key: fetch.read(key, ids) for key in fetch.data_keys}
        padded.y = fetch.read(fetch.label_key, seeds) if fetch.label_key is not None else None
        return padded
