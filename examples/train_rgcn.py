"""Heterogeneous GraphSAGE (R-GCN style, one weight per edge type) on a typed gpart result, one rank per partition.

    python examples/train_rgcn.py --prepare sample_data/cora_hetero.npz --num-parts 2 --parts hparts/
    torchrun --nproc-per-node 2 examples/train_rgcn.py --parts hparts/ --epochs 10

    python examples/train_rgcn.py --prepare sample_data/cora_hetero.npz --num-parts 1 --parts hwhole/
    python examples/train_rgcn.py --parts hwhole/ --epochs 10     # one process, same code

The Cora-derived graph (sample_data/make_cora_hetero.py) has papers and
words; --prepare keeps its forward relations (paper:cites:paper,
paper:has:word) and partitions them with reverse edges added (gpart's
--add-reverse: cites takes its reverses, has gets word:rev_has:paper), so
papers are classified from their bag-of-words features, the papers that
cite them or that they cite, and their words (word nodes have no features:
a learned embedding per word). A layer computes, for every node
type d, `W_self[d] h_d + sum over edge types (s, r, d) of W_r mean(h_s over
sampled type-r in-neighbours)`. Sampling uses per-edge-type fanouts
(gr.DistNeighborLoader with a dict); evaluation takes every in-neighbour,
layer by layer over every node (gr.layerwise_inference with the model's
typed layers; the words' input rows are their embedding rows). Layers:
with PyG importable, torch_geometric.nn.HeteroConv of one SAGEConv per edge
type (summed per destination type) on `batch.to_pyg()`
(a HeteroData); otherwise the plain-torch HeteroSAGEConv below (the same
formula with one self weight per node type instead of one per edge type);
`--layers pyg|torch` chooses. Each rank trains on the training papers
it owns (the default partitioner balances every node type and the training
mask); gradients are summed over ranks with one all_reduce and divided by
the global seed count. gloo on CPU, NCCL with CUDA.
"""

from __future__ import annotations

import argparse
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

# --prepare keeps the graph's forward relations and lets gpart store their reverses (--add-reverse): cites,
# within papers, takes them itself; has, from papers to words, gets word:rev_has:paper (as DGL and PyG name it)
FORWARD = [("paper", "cites", "paper"), ("paper", "has", "word")]
EDGE_TYPES = FORWARD + [("word", "rev_has", "paper")]
SEED_TYPE = "paper"


def key(etype) -> str:
    return "__".join(etype)


class HeteroSAGEConv(nn.Module):
    """out[d] = W_self[d] h[d] + sum_{(s,r,d)} W_r mean_{type-r in-neighbours}(h[s])."""

    def __init__(self, dims_in: dict[str, int], dim_out: int, edge_types: Sequence[tuple[str, str, str]]):
        super().__init__()
        self.edge_types = list(edge_types)
        self.lin_self = nn.ModuleDict({t: nn.Linear(d, dim_out) for t, d in dims_in.items()})
        self.lin_rel = nn.ModuleDict({key(e): nn.Linear(dims_in[e[0]], dim_out, bias=False) for e in self.edge_types})

    def forward(self, h: dict[str, torch.Tensor], edge_index: dict) -> dict[str, torch.Tensor]:
        out = {t: self.lin_self[t](x) for t, x in h.items()}
        for etype in self.edge_types:
            ei = edge_index.get(etype)
            if ei is None or ei.numel() == 0:
                continue
            s, _, d = etype
            src, dst = ei
            msg = self.lin_rel[key(etype)](h[s])[src]
            total = torch.zeros(h[d].shape[0], msg.shape[1], dtype=msg.dtype, device=msg.device).index_add_(0, dst, msg)
            deg = torch.zeros(h[d].shape[0], dtype=msg.dtype, device=msg.device).index_add_(0, dst, torch.ones_like(dst, dtype=msg.dtype))
            out[d] = out[d] + total / deg.clamp(min=1).unsqueeze(1)
        return out


def pyg_hetero_conv(dims_in: dict[str, int], dim_out: int, edge_types: Sequence[tuple[str, str, str]]) -> nn.Module:
    """PyG's HeteroConv: per edge type (s, r, d) a SAGEConv(W_r mean(h_s) + W_root,r h_d), summed over the types into d."""
    from torch_geometric.nn import HeteroConv, SAGEConv  # optional: only with PyG installed (--layers)

    return HeteroConv({e: SAGEConv((dims_in[e[0]], dims_in[e[2]]), dim_out) for e in edge_types}, aggr="sum")


class HeteroSAGE(nn.Module):
    def __init__(self, feat_dim: int, num_words: int, hidden: int, classes: int, layers: int = 2, dropout: float = 0.5,
                 use_pyg: bool = False):
        super().__init__()
        # Words start at zero: their first-layer representation is then the mean of their papers'
        # features (paper:has:word), not noise; the embedding learns what the papers do not say.
        self.word_emb = nn.Embedding(num_words, hidden)
        nn.init.zeros_(self.word_emb.weight)
        dims = [{"paper": feat_dim, "word": hidden}] + [{"paper": hidden, "word": hidden}] * (layers - 1)
        outs = [hidden] * (layers - 1) + [classes]
        conv = pyg_hetero_conv if use_pyg else HeteroSAGEConv
        self.convs = nn.ModuleList(conv(d, o, EDGE_TYPES) for d, o in zip(dims, outs))
        self.dropout = dropout

    def forward(self, x: dict[str, torch.Tensor], n_id: dict[str, torch.Tensor], edge_index: dict) -> torch.Tensor:
        """Logits of every paper of the batch (the seeds first), from the papers' features, the words' ids and the edges."""
        h = {"paper": x["paper"], "word": self.word_emb(n_id["word"])}
        for i in range(len(self.convs)):
            h = self.step(i, h, edge_index)
        return h[SEED_TYPE]

    def step(self, i: int, h: dict[str, torch.Tensor], edge_index: dict) -> dict[str, torch.Tensor]:
        """Layer i on the rows of every node type (layer 0: the papers' stored features, scaled to sum 1)."""
        if i == 0:
            papers = h["paper"].float()
            h = {**h, "paper": papers / papers.abs().sum(1, keepdim=True).clamp(min=1e-12)}
        h = self.convs[i]({t: F.dropout(v, self.dropout, self.training) for t, v in h.items()}, edge_index)
        return h if i == len(self.convs) - 1 else {t: F.relu(v) for t, v in h.items()}

    def layers(self) -> list:
        """The forward pass as typed layers `layer(x_dict, edge_index_dict)` for gr.layerwise_inference (evaluation
        mode: no dropout); their input is `inputs(part)`."""
        return [lambda x, edge_index, i=i: self.step(i, x, edge_index) for i in range(len(self.convs))]

    def inputs(self, part) -> dict:
        """Layer 0's rows of this partition's nodes: the papers' features, the words' embedding rows."""
        return {"paper": "feat", "word": self.word_emb.weight[part.owned_ids("word").to(self.word_emb.weight.device)]}


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", required=True, help="typed partition result directory (gpart partition -o)")
    parser.add_argument("--prepare", metavar="GRAPH", help="first write --parts from the typed GRAPH (.npz), then exit")
    parser.add_argument("--fanouts", default="10,10", help="in-neighbours per hop of every edge type, comma-separated (-1: all)")
    add_common_arguments(parser, lr=0.01)
    return parser.parse_args(argv)


def owned_seeds(part, mask: str) -> torch.Tensor:
    """Typed ids of the papers this rank owns whose `mask` is set (rows of the local paper table are the owned papers)."""
    return part.owned_ids(SEED_TYPE)[part.node_data[(SEED_TYPE, mask)].to(part.device)]


def forward(model: nn.Module, batch) -> torch.Tensor:
    return model(batch.x, batch.n_id, batch.edge_index)[: batch.batch_size]


def forward_pyg(model: nn.Module, batch) -> torch.Tensor:
    """The batch as PyG's HeteroData (x, n_id, edge_index per type; batch_size of the seed type)."""
    data = batch.to_pyg()
    edges = data.edge_index_dict
    # every edge type, empty where the batch has none, so HeteroConv gives every node type its output
    edges = {e: edges.get(e, torch.empty(2, 0, dtype=torch.long, device=data[SEED_TYPE].n_id.device)) for e in EDGE_TYPES}
    return model(data.x_dict, data.n_id_dict, edges)[: data[SEED_TYPE].batch_size]


def train(args: argparse.Namespace) -> dict:
    """Train and evaluate; returns the final metrics (the same on every rank)."""
    device = resolve_device(args.device)
    rank, world_size = setup_distributed(device)
    part = gr.load_partition(args.parts, device=device)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    hops = [int(f) for f in args.fanouts.split(",")]
    labels = part.node_data[(SEED_TYPE, "label")]
    classes = all_max(int(labels.max()) if labels.numel() else 0, device) + 1
    use_pyg = pyg_layers(args.layers)
    model = HeteroSAGE(part.node_data[("paper", "feat")].shape[1], part.num_nodes_of("word"), args.hidden, classes,
                       len(hops), args.dropout, use_pyg).to(device)
    fanouts = {e: hops for e in EDGE_TYPES}
    loader = gr.DistNeighborLoader(part, {SEED_TYPE: owned_seeds(part, "train_mask")}, fanouts=fanouts,
                                   batch_size=-(-args.batch_size // world_size), seed=args.seed)
    # evaluation: every paper's logits by layer-wise inference (every in-neighbour, every node type, layer by layer)
    val, test = (LayerwiseAccuracy(part, m, HeteroSAGE.layers, node_type=SEED_TYPE, inputs_of=lambda model: model.inputs(part))
                 for m in ("val_mask", "test_mask"))
    loaders = (loader, val, test)
    return fit(model, forward_pyg if use_pyg else forward, loaders, args, device, rank, world_size) | {"layers": "pyg" if use_pyg else "torch"}


def prepare(graph_path: str, out: str, num_parts: int, force: bool) -> None:
    """Partition the typed graph's FORWARD relations with their reverses added (gpart's --add-reverse), by the
    default (balanced: every node type, in-edges, training papers). The graph's own reverse relations
    (cited_by, in) are left out: --add-reverse stores the reverses. An existing `out` is replaced only with `force`."""
    from gpart.formats.input.typed import HeteroGraph, read_hetero_graph
    from gpart.pipeline.typed import partition_hetero

    hg = read_hetero_graph(graph_path)
    forward = HeteroGraph(hg.num_nodes, {e: hg.edges[e] for e in FORWARD}, hg.node_data, {e: hg.edge_data.get(e, {}) for e in FORWARD})
    m = partition_hetero(forward, out, num_parts, force=force, add_reverse=True)
    print(f"wrote {out}: {num_parts} partitions of {graph_path}'s {', '.join(e[1] for e in FORWARD)} with reverse edges "
          f"({m['params'].get('backend', m['method'])})")


@gr.record  # a gpart error: one line per failing rank, also in torchrun's summary
def main(argv: Optional[Sequence[str]] = None) -> dict:
    return run(parse_args(argv), prepare, train)


if __name__ == "__main__":
    main()
