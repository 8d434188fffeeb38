"""Full-neighbour inference over every node, layer by layer (DGL's `inference`), each rank computing its own nodes.

    convs = model.convs
    layers = [lambda x, ei: convs[0](x, ei).relu(), lambda x, ei: convs[1](x, ei)]
    ids, out = gr.layerwise_inference(layers, part, node_data="feat", batch_size=4096)
    # ids: global ids of this partition's nodes; out[i]: the last layer's row of ids[i]

Sampling every in-neighbour for L hops grows a batch's sub-graph with L;
layer by layer it does not: layer k runs over this partition's owned nodes in
batches of `batch_size`, each batch with ALL its in-neighbours one hop deep
(the composed loader, fanouts [-1]), reading the neighbours' rows of layer
k - 1 (the input's node data for k = 1, remote rows through the loader's
exchange), and writes layer k's rows of the owned nodes; that table is the
node data of layer k + 1. Memory: one [owned, width] table per layer (the
previous one is dropped) and one batch with its in-neighbours' rows.

A layer is any callable `layer(x, edge_index) -> rows` (a PyG conv, a
closure around one) where x holds the rows of the batch's nodes, the batch's
own nodes first, and edge_index [2, E] the positions in x (source ->
destination, every in-edge of the batch's nodes); the first `batch_size`
output rows are kept, so a layer computing rows for every node of x (as
PyG's convs do) works as it is. Put the activation between layers into the
layer. It runs under torch.no_grad().
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

import torch

from gpart.collectives.agreement import agree_or_raise
from gpart.runtime.loader import NeighborLoader

Layer = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
LAYER_ROWS = "layer_rows"  # the node data name each layer's input is registered under


@torch.no_grad()
def layerwise_inference(layers: Sequence[Layer], part: Any, node_data: str = "feat", batch_size: int = 4096,
                        timeout_s: Optional[float] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(global ids of this partition's owned nodes, the last layer's rows of them), every in-neighbour used.

    layers: callables `layer(x, edge_index)` (see the module). part: a
    homogeneous LoadedPartition (gr.load_partition). node_data: the input
    rows' name. batch_size: owned nodes per batch ON THIS RANK (memory is
    bounded by one batch and its in-neighbours per layer).

    A collective: every rank calls it, with the same number of layers; per
    layer building a loader (the settings agreed) and every batch (each rank
    runs as many as the rank with the most owned nodes), each wait bounded by
    timeout_s (None: the partition's). With several trainers per partition
    each computes all of its partition's nodes (the same rows).
    """
    problem = None
    if getattr(part, "is_hetero", False):
        problem = "layerwise_inference takes a homogeneous partition (typed ones are not supported)"
    elif node_data not in part.node_data:
        problem = f"no node data {node_data!r} loaded (loaded: {', '.join(part.node_data) or 'none'})"
    wait = float(timeout_s if timeout_s is not None else part.timeout_s)
    # opens the collective: a rank elsewhere (another collective, or a bad argument) fails every rank at once
    agree_or_raise(problem, f"layers={len(layers)} node_data={node_data} manifest={part.digest}", "layerwise_inference",
                   wait, path=part.directory)
    owned = part.node_ids[: part.num_owned]
    rows = part.node_data[node_data][: part.num_owned]
    for layer in layers:
        rows = _one_layer(layer, part, rows, owned, int(batch_size), wait)
    return owned, rows


def _one_layer(layer: Layer, part: Any, rows: torch.Tensor, owned: torch.Tensor, batch_size: int,
               timeout_s: float) -> torch.Tensor:
    """The layer's rows of the owned nodes, from `rows` (the previous layer's rows of the owned nodes)."""
    # the partition seen with `rows` as its only node data, held for owned nodes alone (no halo rows)
    view = dataclasses.replace(part, halo=False, node_data={LAYER_ROWS: rows})
    loader = NeighborLoader(view, owned, [-1], batch_size, shuffle=False, node_data=[LAYER_ROWS], labels=None,
                            timeout_s=timeout_s)
    out: Optional[torch.Tensor] = None
    done = 0
    for batch in loader:
        got = layer(batch.x, batch.edge_index)[: batch.batch_size]
        if out is None:
            out = torch.empty((owned.numel(), *got.shape[1:]), dtype=got.dtype, device=got.device)
        out[done:done + batch.batch_size] = got
        done += batch.batch_size
    if out is None:  # no owned nodes: the layer's width from an empty input
        got = layer(rows[:0], torch.zeros((2, 0), dtype=torch.int64, device=rows.device))
        out = got[:0]
    return out
