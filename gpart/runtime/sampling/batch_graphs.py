"""Padded batches replayed from CUDA graphs: one capture per batch shape, then one launch per batch.

    replay = GraphReplay(build, reseed, keep=2)     # build(seeds, buffers) -> PaddedSampled, without a generator
    padded = replay.run(seeds, generator)           # seeds copied in, seeds of the draws written, graph replayed

A fixed-capacity batch (gpart.runtime.sampling.table_hops) has shapes that
depend on its seed count alone and no host synchronisation, so the whole
batch (hops, relabelling, row gathers) can be captured as a CUDA graph
(torch.cuda.CUDAGraph) and replayed: the per-batch cost becomes one launch
instead of one per operation. What changes between batches lives in static
buffers written before each replay: the seeds (copied into the graph's seed
buffer) and the draws' random seeds (the fused kernel's, drawn from the
loader's generator: gpart.runtime.sampling.fused_floyd.FusedFloyd.reseed), so
a replayed batch equals the eager batch of the same generator state. Only
the fused draw replays (the torch-op draw reads its generator inside the
batch). Each shape keeps `keep` graphs with their own buffers, used in turn:
a replayed batch's tensors hold until `keep` later batches of its shape.
CUDA only; a capture that fails (e.g. a row source reading host memory in a
way a graph cannot hold) turns replay off for that shape and the batch runs
eagerly.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

Build = Callable[[torch.Tensor, Any], Any]  # (static seeds, buffer set) -> PaddedSampled


class GraphReplay:
    """Captured batches per seed count (see the module); `failed` lists the shapes that run eagerly."""

    def __init__(self, build: Build, new_buffers: Callable[[int], Any], reseed: Callable[[torch.Generator], None],
                 keep: int = 2):
        self.build, self.new_buffers, self.reseed = build, new_buffers, reseed
        self.keep = max(1, int(keep))
        self._graphs: dict[int, list] = {}
        self.failed: set[int] = set()

    def run(self, seeds: torch.Tensor, gen: torch.Generator) -> Optional[Any]:
        """The replayed padded batch of `seeds`, or None when this shape cannot replay (run it eagerly)."""
        count = int(seeds.numel())
        if count in self.failed:
            return None
        ring = self._graphs.setdefault(count, [0])
        if len(ring) <= self.keep:
            captured = self._capture(seeds)
            if captured is None:
                self.failed.add(count)
                return None
            ring.append(captured)
        ring[0] = ring[0] % (len(ring) - 1) + 1
        graph, static_seeds, out = ring[ring[0]]
        static_seeds.copy_(seeds)
        self.reseed(gen)
        graph.replay()
        return out

    def _capture(self, seeds: torch.Tensor) -> Optional[tuple]:
        """(graph, its seed buffer, its output) for this seed count, or None when capture fails."""
        static_seeds = seeds.clone()
        buffers = self.new_buffers(int(seeds.numel()))
        side = torch.cuda.Stream(device=seeds.device)
        side.wait_stream(torch.cuda.current_stream(seeds.device))
        with torch.cuda.stream(side):  # warm-up outside the capture: lazy allocations and kernel builds happen here
            self.build(static_seeds, buffers)
        torch.cuda.current_stream(seeds.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                out = self.build(static_seeds, buffers)
        except RuntimeError:  # not capturable: this shape runs eagerly
            torch.cuda.synchronize(seeds.device)
            return None
        return graph, static_seeds, out
