"""Full-neighbour inference over every node, layer by layer (DGL's `inference`), each rank computing its own nodes.

    convs = model.convs
    layers = [lambda x, ei: convs[0](x, ei).relu(), lambda x, ei: convs[1](x, ei)]
    ids, out = gr.layerwise_inference(layers, part, node_data="feat", batch_size=4096)
    # ids: global ids of this partition's nodes; out[i]: the last layer's row of ids[i]

    # typed (PyG HeteroConv convention): {node type: rows} from x_dict and edge_index_dict
    layers = [lambda x, ei: {t: h.relu() for t, h in conv1(x, ei).items()}, conv2]
    ids, out = gr.layerwise_inference(layers, typed_part, node_data={"paper": "feat", "word": word_rows})
    # ids["paper"]: typed ids of this partition's papers; out["paper"][i]: the last layer's row of ids["paper"][i]

Sampling every in-neighbour for L hops grows a batch's sub-graph with L;
layer by layer it does not: layer k runs over this partition's owned nodes in
batches of `batch_size`, each batch with ALL its in-neighbours one hop deep
(the composed loader, fanouts [-1] for every edge type), reading the
neighbours' rows of layer k - 1 (the input's for k = 1, remote rows through
the loader's exchange), and writes layer k's rows of the owned nodes; that
table is the node data of layer k + 1. Memory: one [owned, width] table per
node type and layer (the previous one is dropped) and one batch with its
in-neighbours' rows.

A homogeneous partition is the one-type case of a typed one: its layers are
`layer(x, edge_index) -> rows` (a PyG conv, a closure around one) where x
holds the rows of the batch's nodes, the batch's own nodes first, and
edge_index [2, E] the positions in x (source -> destination, every in-edge
of the batch's nodes). A typed layer is `layer(x_dict, edge_index_dict) ->
{node type: rows}` (PyG's HeteroConv): x_dict[t] the rows of the batch's
nodes of type t (those of the batch's own type first), edge_index_dict[(s,
r, d)] positions in x_dict[s] (row 0) and x_dict[d] (row 1), every edge type
present (empty where the batch has none). Layer k runs once per node type
t, over the owned nodes of type t, and keeps the first rows of its output's
type t; a type the layer gives no rows (as HeteroConv gives none to a type
no edge type leads to) has no rows in layer k, as in the full-graph pass.
Put the activation between layers into the layer. It runs under
torch.no_grad().

With L trainers per partition (gpart.runtime.partition.trainers) each trainer
computes 1/L of its partition's owned nodes of every type per layer (a
contiguous slice), and the L trainers exchange their slices (one all_to_all
within the partition's trainers per type and layer), so each holds the
layer's whole table before the next layer.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Optional, Sequence, Union

import torch

from gpart.collectives.agreement import agree_or_raise
from gpart.collectives.all_to_all import all_to_all_rows
from gpart.runtime.loaders.node import DistNeighborLoader
from gpart.runtime.partition.interface import Partition
from gpart.runtime.partition.trainers import TrainerLayout, partition_group, trainer_layout
from gpart.runtime.sampling.row_source import RowSource

Layer = Callable[..., Any]  # layer(x, edge_index) -> rows, or typed: layer(x_dict, edge_index_dict) -> {type: rows}
LAYER_ROWS = "layer_rows"  # the node data name each layer's input is registered under
KIND = ""  # the one node type of a homogeneous partition, as the typed code sees it
EDGE = ("", "", "")  # its one edge type


@torch.no_grad()
def layerwise_inference(layers: Sequence[Layer], part: Partition, node_data: Any = "feat", batch_size: int = 4096,
                        timeout_s: Optional[float] = None, stats: Optional[dict] = None) -> tuple[Any, Any]:
    """(ids of this partition's owned nodes, the last layer's rows of them), every in-neighbour used.

    Homogeneous partition: (global ids [owned], rows [owned, ...]). Typed
    partition: ({node type: typed ids}, {node type: rows}) for every type the
    last layer gives rows. With L trainers per partition every trainer of a
    partition returns the same: all of its partition's owned nodes and rows.

    layers: callables (see the module). part: gr.load_partition's partition
    (homogeneous or typed). node_data: the input rows: a node data name (of
    every node type that has it, when typed), or the owned nodes' rows (a
    tensor in owned order; typed: {node type: name or tensor in
    part.owned_ids(type) order}, e.g. a learned embedding's rows of the
    owned nodes of a type without features). batch_size: owned nodes per
    batch ON THIS RANK (memory is bounded by one batch and its in-neighbours
    per layer). stats: a dict that gets "batches" (batches with nodes of this
    rank) and "rows" (rows this rank computed, all layers and types) added.

    A collective: every rank calls it, with the same number of layers; per
    layer and node type building a loader (the settings agreed), every batch
    (each rank runs as many as the rank with the most nodes to compute) and,
    with L > 1 trainers per partition, the exchange of the slices; each wait
    bounded by timeout_s (None: the partition's).
    """
    graph = _Graph(part)
    tables, problem = graph.inputs(node_data)
    wait = float(timeout_s if timeout_s is not None else part.timeout_s)
    shapes = {k: (tuple(v.shape[1:]), str(v.dtype)) for k, v in tables.items()}
    # opens the collective: a rank elsewhere (another collective, or a bad argument) fails every rank at once
    agree_or_raise(problem, f"layers={len(layers)} inputs={shapes} manifest={part.digest}", "layerwise_inference",
                   wait, path=part.directory)
    share = _Share(trainer_layout(part.num_parts, wait, path=part.directory), wait)
    counts = stats if stats is not None else {}
    counts.setdefault("batches", 0)
    counts.setdefault("rows", 0)
    for layer in layers:
        tables = _one_layer(graph.typed_layer(layer), graph, tables, share, int(batch_size), wait, counts)
    return graph.result(tables)


class _Graph:
    """The partition as layer-wise inference sees it: node types (one for a homogeneous partition), the owned
    nodes of each, and what the loader takes and gives, in the typed form for both."""

    def __init__(self, part: Partition):
        self.part, self.typed = part, part.typed
        if self.typed:
            self.kinds, self.edge_keys = list(part.node_types), [tuple(e) for e in part.edge_types]
            self.owned = {t: part.owned_ids(t) for t in self.kinds}
            self.fanouts: Any = {e: [-1] for e in self.edge_keys}
        else:
            self.kinds, self.edge_keys = [KIND], [EDGE]
            self.owned = {KIND: part.node_ids[: part.num_owned]}
            self.fanouts = [-1]

    def inputs(self, node_data: Any) -> tuple[dict[str, torch.Tensor], Optional[str]]:
        """Layer 1's input: the owned rows per node type, and None or what is wrong with `node_data`."""
        part = self.part
        if not self.typed:
            given: dict = {KIND: node_data}
        elif isinstance(node_data, str):
            given = {t: node_data for t in self.kinds if (t, node_data) in part.node_data}
            if not given:
                have = ", ".join("/".join(k) for k in part.node_data) or "none"
                return {}, f"no typed node data named {node_data!r} loaded (loaded: {have})"
        elif isinstance(node_data, dict) and node_data:
            given = dict(node_data)
        else:
            return {}, "node_data of a typed partition is a name or {node type: name or owned rows}"
        tables: dict[str, torch.Tensor] = {}
        for kind, value in given.items():
            rows, problem = self._input_rows(kind, value)
            if problem:
                return {}, problem
            tables[kind] = rows
        return tables, None

    def _input_rows(self, kind: str, value: Union[str, torch.Tensor]) -> tuple[Optional[torch.Tensor], Optional[str]]:
        part, typed = self.part, self.typed
        if typed and kind not in self.kinds:
            return None, f"node_data names node type {kind!r}, not one of the partition's ({', '.join(self.kinds)})"
        num_owned = int(self.owned[kind].numel())
        what = f" of node type {kind!r}" if typed else ""
        if isinstance(value, torch.Tensor):
            if value.dim() == 0 or value.shape[0] != num_owned:
                rows = value.shape[0] if value.dim() else "no"
                return None, f"node_data{what} has {rows} rows, but this partition owns {num_owned} nodes{what}"
            return value, None
        if not isinstance(value, str):
            return None, f"node_data{what} must be a node data name or a tensor of the owned rows, got {type(value).__name__}"
        key = (kind, value) if typed else value
        if key not in part.node_data:
            have = ", ".join("/".join(k) if typed else k for k in part.node_data) or "none"
            return None, f"no node data {value!r}{what} loaded (loaded: {have})"
        return part.node_data[key][:num_owned], None  # owned rows: halo rows, where stored, are never read

    def typed_layer(self, layer: Layer) -> Layer:
        if self.typed:
            return layer
        return lambda x, edge_index: {KIND: layer(x[KIND], edge_index[EDGE])}

    def rows(self, tables: dict[str, torch.Tensor]) -> "LayerRows":
        """`tables` (owned rows alone) as the loader's row source: halo nodes are asked of their owners."""
        return LayerRows({((t, LAYER_ROWS) if self.typed else LAYER_ROWS): rows for t, rows in tables.items()})

    def seeds(self, kind: str, ids: torch.Tensor) -> Any:
        return {kind: ids} if self.typed else ids

    def dicts(self, batch: Any) -> tuple[dict, dict]:
        """(x_dict, edge_index_dict) of a loader's batch."""
        if self.typed:
            return batch.x, batch.edge_index
        return {KIND: batch.x}, {EDGE: batch.edge_index}

    def empty(self, tables: dict[str, torch.Tensor]) -> tuple[dict, dict]:
        """(x_dict, edge_index_dict) of a batch without nodes: the layer's output width when no rank has a batch."""
        dev = self.part.device
        return ({t: rows[:0].to(dev) for t, rows in tables.items()},
                {e: torch.zeros((2, 0), dtype=torch.int64, device=dev) for e in self.edge_keys})

    def result(self, tables: dict[str, torch.Tensor]) -> tuple[Any, Any]:
        if self.typed:
            return {t: self.owned[t] for t in tables}, tables
        return self.owned[KIND], tables[KIND]


class LayerRows(RowSource):
    """A layer's input rows of the owned nodes, keyed as the loader asks for them (LAYER_ROWS, or (type,
    LAYER_ROWS) when typed); row i of a type is its i-th owned node, as the partition's own rows."""

    def __init__(self, tables: dict[Hashable, torch.Tensor]):
        self.tables = tables

    def keys(self) -> list[Hashable]:
        return list(self.tables)

    def row_spec(self, key: Hashable) -> tuple[torch.dtype, tuple[int, ...]]:
        return self.tables[key].dtype, tuple(self.tables[key].shape[1:])

    def read(self, key: Hashable, rows: torch.Tensor) -> torch.Tensor:
        table = self.tables[key]
        return torch.index_select(table, 0, rows.to(table.device))


class _Share:
    """This trainer's slice of a partition's owned nodes (1 of L contiguous slices), and the slices put together."""

    def __init__(self, layout: TrainerLayout, timeout_s: float):
        self.count, self.index, self.timeout_s = layout.trainers_per_part, layout.local, timeout_s
        self.group = partition_group(layout, timeout_s)  # a collective the first time (L > 1)

    def bounds(self, n: int) -> list[int]:
        return [n * i // self.count for i in range(self.count + 1)]

    def mine(self, ids: torch.Tensor) -> torch.Tensor:
        bounds = self.bounds(ids.numel())
        return ids[bounds[self.index]:bounds[self.index + 1]]

    def gather(self, rows: torch.Tensor, n: int) -> torch.Tensor:
        """The rows of all `n` nodes from every trainer's slice (`rows`: this trainer's)."""
        if self.count == 1:
            return rows
        bounds = self.bounds(n)
        sizes = [b - a for a, b in zip(bounds[:-1], bounds[1:])]
        # each trainer sends its slice to every trainer of the partition (itself included): an all-gather of
        # slices of different sizes, bounded by timeout_s as every exchange of the loader
        return all_to_all_rows(torch.cat([rows] * self.count), [rows.shape[0]] * self.count, sizes,
                               group=self.group, timeout_s=self.timeout_s)


def _one_layer(layer: Layer, graph: _Graph, tables: dict[str, torch.Tensor], share: _Share, batch_size: int,
               timeout_s: float, stats: dict) -> dict[str, torch.Tensor]:
    """The layer's rows of the owned nodes of every node type it gives rows, from `tables` (the previous layer's)."""
    source = graph.rows(tables)
    out = {}
    for kind in graph.kinds:
        owned = graph.owned[kind]
        rows = _rows_of(layer, graph, source, kind, share.mine(owned), tables, batch_size, timeout_s, stats)
        if rows is not None:
            out[kind] = share.gather(rows, owned.numel())
    return out


def _rows_of(layer: Layer, graph: _Graph, source: RowSource, kind: str, seeds: torch.Tensor,
             tables: dict[str, torch.Tensor], batch_size: int, timeout_s: float, stats: dict) -> Optional[torch.Tensor]:
    """The layer's rows of `seeds` (owned nodes of type `kind`), None when the layer gives that type no rows."""
    loader = DistNeighborLoader(graph.part, graph.seeds(kind, seeds), graph.fanouts, batch_size, shuffle=False,
                                node_data=[LAYER_ROWS], labels=None, timeout_s=timeout_s, row_source=source)
    out: Optional[torch.Tensor] = None
    done = 0
    for batch in loader:  # every batch, even once the layer has shown it gives no rows: the peers need this rank
        got = layer(*graph.dicts(batch)).get(kind)
        if got is None:
            continue
        if out is None:
            out = torch.empty((seeds.numel(), *got.shape[1:]), dtype=got.dtype, device=got.device)
        out[done:done + batch.batch_size] = got[: batch.batch_size]
        done += batch.batch_size
        stats["batches"] += int(batch.batch_size > 0)
        stats["rows"] += batch.batch_size
    if len(loader) == 0:  # no rank has nodes of this type: the layer's width (or none) from an empty input
        got = layer(*graph.empty(tables)).get(kind)
        out = got[:0] if got is not None else None
    return out
