"""GraphSAGE node classification on a gpart partition result, one rank per partition.

    python examples/train_sage.py --prepare sample_data/cora.npz --num-parts 2 --parts parts/
    torchrun --nproc-per-node 2 examples/train_sage.py --parts parts/ --epochs 10

    python examples/train_sage.py --prepare sample_data/cora.npz --num-parts 1 --parts whole/
    python examples/train_sage.py --parts whole/ --epochs 10       # the whole graph, one process, same code

--prepare partitions the graph with every edge in both directions (METIS,
`gpart partition --add-reverse`):
the sampler follows in-edges, and a citation graph's in-edges alone are only
the citing papers, which loses most of the signal (GraphSAGE's Cora, as DGL's
and PyG's, is undirected). Any `gpart partition` result works as --parts.

Layers: torch_geometric.nn.SAGEConv (mean aggregation) on `batch.to_pyg()`
when PyG is importable, otherwise the plain-torch SAGEConv below (the same
formula, mean with index_add_); `--layers pyg|torch` chooses. The plain-torch
model trims each layer to the nodes the next one reads (the batch's
num_sampled_nodes / num_sampled_edges, as PyG's trim_to_layer); on a GPU with
one partition it trains on padded batches (no host synchronisation) and
takes the mean over their fanout tables (no atomic adds), with bfloat16
autocast and TF32 matmuls. Each rank loads its
partition, takes its equal share of the training nodes (gr.node_split), and
draws mini-batches with gr.DistNeighborLoader; gradients are summed over
ranks with one all_reduce and divided by the global number of seeds, so a
step is the same whatever the world size. Validation and test accuracy come
from gr.layerwise_inference: every node's logits layer by layer with every
in-neighbour, i.e. the exact model. gloo on CPU,
NCCL when CUDA is present. Needs node data feat, label, train_mask,
val_mask and test_mask.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

import gpart.runtime as gr
from gpart.runtime.partition.device import resolve_device

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_common beside this file, also under torchrun
from train_common import LayerwiseAccuracy, add_common_arguments, all_max, fit, pyg_layers, run, setup_distributed  # noqa: E402


class SAGEConv(nn.Module):
    """out = W_self x + W_neigh mean(x of in-neighbours), over a batch's edge_index (source -> destination).

    num_dst: outputs for the first num_dst nodes only (every destination is among them: a trimmed layer);
    forward_tables: the mean over a padded batch's fanout tables instead (no atomic adds, see `tables`)."""

    def __init__(self, dim_in: int, dim_out: int):
        super().__init__()
        self.lin_self = nn.Linear(dim_in, dim_out)
        self.lin_neigh = nn.Linear(dim_in, dim_out, bias=False)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, num_dst: Optional[int] = None) -> torch.Tensor:
        src, dst = edge_index
        n = x.shape[0] if num_dst is None else num_dst
        total = x.new_zeros((n, x.shape[1])).index_add_(0, dst, x[src])
        deg = x.new_zeros(n).index_add_(0, dst, x.new_ones(dst.shape[0]))
        return self.lin_self(x[:n]) + self.lin_neigh(total / deg.clamp(min=1).unsqueeze(1))

    def forward_tables(self, x: torch.Tensor, tables: list[tuple[torch.Tensor, torch.Tensor]], num_dst: int) -> torch.Tensor:
        """Outputs for the first num_dst positions from (source table [C, F] (-1: unused slot), the C rows'
        positions) per hop: each row's mean over its valid slots, written at its position, hop after hop (a padding
        row's position is a later hop's row, which overwrites it, or past what the next layer reads)."""
        agg = x.new_zeros((num_dst, x.shape[1]))
        for src, rows in tables:
            valid = (src >= 0).unsqueeze(2).to(x.dtype)
            total = (x[src.clamp(min=0)] * valid).sum(1)
            agg = agg.index_copy(0, rows, total / valid.sum(1).clamp(min=1))
        return self.lin_self(x[:num_dst]) + self.lin_neigh(agg)


def tables(batch) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A padded batch's hops as (source positions [C_h, F_h], -1 unused; the positions of the C_h rows), static views."""
    out, at = [], 0
    for cap, fanout, size in zip(batch.node_caps, batch.fanouts, batch.edge_caps):
        src = batch.edge_index[0, at:at + size].view(cap, fanout)
        out.append((src, batch.edge_index[1, at:at + size:fanout]))
        at += size
    return out


def conv_class(use_pyg: bool) -> type:
    """PyG's SAGEConv (mean aggregation: lin_l(mean of neighbours) + lin_r(x), the formula above) or ours."""
    if not use_pyg:
        return SAGEConv
    from torch_geometric.nn import SAGEConv as PyGSAGEConv  # optional: only with PyG installed (--layers)

    return PyGSAGEConv


class SAGE(nn.Module):
    def __init__(self, dim_in: int, hidden: int, classes: int, layers: int = 2, dropout: float = 0.5, row_normalize: bool = True,
                 conv: type = SAGEConv):
        super().__init__()
        self.row_normalize = row_normalize
        dims = [dim_in] + [hidden] * (layers - 1) + [classes]
        self.convs = nn.ModuleList(conv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, num_sampled_nodes: Optional[list[int]] = None,
                num_sampled_edges: Optional[list[int]] = None) -> torch.Tensor:
        """Logits of every node, or, given a batch's per-hop counts (as many hops as layers), trimmed per layer as
        PyG's trim_to_layer: layer i computes only the nodes within layers - 1 - i hops of the seeds, from the edges
        of the first layers - i hops; the first batch_size rows are the seeds' logits either way."""
        x = self._first(x)
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, self.dropout, self.training)
            if num_sampled_nodes is None or num_sampled_edges is None:
                x = conv(x, edge_index)
            else:
                keep = len(self.convs) - 1 - i  # hops whose nodes this layer outputs
                x = conv(x, edge_index[:, :sum(num_sampled_edges[:keep + 1])], sum(num_sampled_nodes[:keep + 1]))
            x = self._between(x, i)
        return x

    def forward_padded(self, x: torch.Tensor, batch) -> torch.Tensor:
        """forward over a padded batch (DistNeighborLoader(padded=True)): means over its fanout tables, trimmed per
        layer by capacity; the first batch_size rows are the seeds' logits."""
        hops = tables(batch)
        x = self._first(x)
        for i, conv in enumerate(self.convs):
            x = F.dropout(x, self.dropout, self.training)
            keep = len(self.convs) - 1 - i
            x = self._between(conv.forward_tables(x, hops[:keep + 1], sum(batch.node_caps[:keep + 1])), i)
        return x

    def _first(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        return x / x.abs().sum(1, keepdim=True).clamp(min=1e-12) if self.row_normalize else x

    def _between(self, x: torch.Tensor, i: int) -> torch.Tensor:
        return F.relu(x) if i < len(self.convs) - 1 else x

    def layers(self) -> list:
        """The forward pass as layers `layer(x, edge_index)` (evaluation mode: no dropout), for gr.layerwise_inference."""
        def first(x: torch.Tensor) -> torch.Tensor:
            x = x.float()
            return x / x.abs().sum(1, keepdim=True).clamp(min=1e-12) if self.row_normalize else x
        last = len(self.convs) - 1
        return [(lambda x, ei, i=i, conv=conv: (lambda h: h if i == last else F.relu(h))(conv(first(x) if i == 0 else x, ei)))
                for i, conv in enumerate(self.convs)]


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", required=True, help="partition result directory (gpart partition -o)")
    parser.add_argument("--prepare", metavar="GRAPH", help="first write --parts from GRAPH with reverse edges added, then exit")
    parser.add_argument("--fanouts", default="10,10", help="in-neighbours per hop, comma-separated (-1: all)")
    parser.add_argument("--no-row-normalize", dest="row_normalize", action="store_false",
                        help="use features as stored (default: scale each row to sum 1, as for Cora's bag of words)")
    add_common_arguments(parser, lr=0.02)
    return parser.parse_args(argv)


def forward(model: nn.Module, batch) -> torch.Tensor:
    """The seeds' logits: trimmed per layer, over the fanout tables of a padded batch; bfloat16 matmuls on CUDA."""
    with torch.autocast("cuda", dtype=torch.bfloat16) if batch.x.is_cuda else contextlib.nullcontext():
        if hasattr(batch, "node_caps"):  # a padded batch
            out = model.forward_padded(batch.x, batch)
        else:
            out = model(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges)
    return out[: batch.batch_size].float()


def forward_pyg(model: nn.Module, batch) -> torch.Tensor:
    """The batch as PyG's Data (x, edge_index, y, n_id, batch_size, ...): what a PyG model takes."""
    data = batch.to_pyg()
    return model(data.x, data.edge_index)[: data.batch_size]


def train(args: argparse.Namespace) -> dict:
    """Train and evaluate; returns the final metrics (the same on every rank)."""
    device = resolve_device(args.device)
    rank, world_size = setup_distributed(device)
    part = gr.load_partition(args.parts, device=device, node_data=["feat", "label", "train_mask", "val_mask", "test_mask"])
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    fanouts = [int(f) for f in args.fanouts.split(",")]
    owned = part.node_data["label"][: part.num_owned]
    classes = all_max(int(owned.max()) if owned.numel() else 0, device) + 1
    use_pyg = pyg_layers(args.layers)
    model = SAGE(part.node_data["feat"].shape[1], args.hidden, classes, len(fanouts), args.dropout, args.row_normalize,
                 conv_class(use_pyg)).to(device)
    per_rank = -(-args.batch_size // world_size)
    # on a GPU with one partition: padded batches (no host synchronisation, fanout-table means) and TF32 matmuls
    fast = device.type == "cuda" and part.num_parts == 1 and not use_pyg and min(fanouts) > 0
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = device.type == "cuda"
    loader = gr.DistNeighborLoader(part, gr.node_split(part, "train_mask"), fanouts=fanouts, batch_size=per_rank, seed=args.seed,
                                   padded=fast)
    # evaluation: every node's logits by layer-wise inference (all in-neighbours), accuracy over the mask's nodes
    loaders = (loader, LayerwiseAccuracy(part, "val_mask", SAGE.layers), LayerwiseAccuracy(part, "test_mask", SAGE.layers))
    return fit(model, forward_pyg if use_pyg else forward, loaders, args, device, rank, world_size) | {"layers": "pyg" if use_pyg else "torch"}


def prepare(graph_path: str, out: str, num_parts: int, force: bool) -> None:
    """Partition `graph_path` into `out` with every edge in both directions (gpart's --add-reverse: a reverse
    copy of each edge whose reverse is missing, SPEC.md 4.7); an existing `out` is replaced only with `force`."""
    from gpart.pipeline.partition import partition_graph

    m = partition_graph(graph_path, out, num_parts, "metis", add_reverse=True, force=force)
    print(f"wrote {out}: {num_parts} METIS partitions of {graph_path} with reverse edges ({m['graph']['num_edges']} edges)")


@gr.record  # a gpart error: one line per failing rank, also in torchrun's summary
def main(argv: Optional[Sequence[str]] = None) -> dict:
    return run(parse_args(argv), prepare, train)


if __name__ == "__main__":
    main()
