"""Heterogeneous GraphSAGE (R-GCN style, one weight per edge type) on a typed gpart result, one rank per partition.

    python examples/train_rgcn.py --prepare sample_data/cora_hetero.npz --num-parts 2 --parts hparts/
    torchrun --nproc-per-node 2 examples/train_rgcn.py --parts hparts/ --epochs 10

    python examples/train_rgcn.py --prepare sample_data/cora_hetero.npz --num-parts 1 --parts hwhole/
    python examples/train_rgcn.py --parts hwhole/ --epochs 10     # one process, same code

The Cora-derived graph (sample_data/make_cora_hetero.py) has papers and
words; papers are classified from their bag-of-words features, the papers
that cite them and that they cite, and their words (word nodes have no
features: a learned embedding per word). A layer computes, for every node
type d, `W_self[d] h_d + sum over edge types (s, r, d) of W_r mean(h_s over
sampled type-r in-neighbours)`. Sampling uses per-edge-type fanouts
(gr.DistNeighborLoader with a dict); evaluation takes every in-neighbour
(fanouts -1). Plain torch, no PyG. Each rank trains on the training papers
it owns (the default partitioner balances every node type and the training
mask); gradients are summed over ranks with one all_reduce and divided by
the global seed count. gloo on CPU, NCCL with CUDA.
"""

from __future__ import annotations

import argparse
import datetime
import os
import time
from typing import Optional, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import gpart.runtime as gr
from gpart.runtime.partition import resolve_device

EDGE_TYPES = [("paper", "cites", "paper"), ("paper", "cited_by", "paper"), ("word", "in", "paper"), ("paper", "has", "word")]
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


class HeteroSAGE(nn.Module):
    def __init__(self, feat_dim: int, num_words: int, hidden: int, classes: int, layers: int = 2, dropout: float = 0.5):
        super().__init__()
        # Words start at zero: their first-layer representation is then the mean of their papers'
        # features (paper:has:word), not noise; the embedding learns what the papers do not say.
        self.word_emb = nn.Embedding(num_words, hidden)
        nn.init.zeros_(self.word_emb.weight)
        dims = [{"paper": feat_dim, "word": hidden}] + [{"paper": hidden, "word": hidden}] * (layers - 1)
        outs = [hidden] * (layers - 1) + [classes]
        self.convs = nn.ModuleList(HeteroSAGEConv(d, o, EDGE_TYPES) for d, o in zip(dims, outs))
        self.dropout = dropout

    def forward(self, batch) -> torch.Tensor:
        x = batch.x["paper"].float()
        h = {"paper": x / x.abs().sum(1, keepdim=True).clamp(min=1e-12), "word": self.word_emb(batch.n_id["word"])}
        for i, conv in enumerate(self.convs):
            h = {t: F.dropout(v, self.dropout, self.training) for t, v in h.items()}
            h = conv(h, batch.edge_index)
            if i < len(self.convs) - 1:
                h = {t: F.relu(v) for t, v in h.items()}
        return h[SEED_TYPE][: batch.batch_size]


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", required=True, help="typed partition result directory (gpart partition -o)")
    parser.add_argument("--prepare", metavar="GRAPH", help="first write --parts from the typed GRAPH (.npz), then exit")
    parser.add_argument("--num-parts", type=int, default=2, help="partitions written by --prepare")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--fanouts", default="10,10", help="in-neighbours per hop of every edge type, comma-separated (-1: all)")
    parser.add_argument("--batch-size", type=int, default=32, help="seeds per step over all ranks")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--quiet", action="store_true", help="print only the final line")
    return parser.parse_args(argv)


def setup_distributed(device: torch.device) -> None:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=datetime.timedelta(seconds=120))


def all_sum(values: list[float], device: torch.device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_initialized():
        dist.all_reduce(t)
    return t.tolist()


def sync_gradients(model: nn.Module, seeds: int, device: torch.device) -> None:
    """Sum every gradient over ranks and divide by the global seed count: one all_reduce of a flat buffer."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads] + [torch.tensor([float(seeds)], device=device)])
    if dist.is_initialized():
        dist.all_reduce(flat)
    total = max(flat[-1].item(), 1.0)
    for p, g in zip(model.parameters(), flat[:-1].split([g.numel() for g in grads])):
        p.grad = (g / total).reshape(p.shape)


def owned_seeds(part, mask: str) -> torch.Tensor:
    """Typed ids of the papers this rank owns whose `mask` is set (rows of the local paper table are the owned papers)."""
    return part.owned_ids(SEED_TYPE)[part.node_data[(SEED_TYPE, mask)].to(part.device)]


@torch.no_grad()
def accuracy(model: nn.Module, loader, device: torch.device) -> float:
    model.eval()
    correct = 0
    for batch in loader:
        correct += int((model(batch).argmax(1) == batch.y).sum())
    hit, total = all_sum([correct, loader.seeds.numel()], device)
    return hit / max(total, 1)


def train(args: argparse.Namespace) -> dict:
    """Train and evaluate; returns the final metrics (the same on every rank)."""
    device = resolve_device(args.device)
    setup_distributed(device)
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    part = gr.load_partition(args.parts, rank, device=device)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    hops = [int(f) for f in args.fanouts.split(",")]
    classes = num_classes(part, device)
    model = HeteroSAGE(part.node_data[("paper", "feat")].shape[1], part.num_nodes_of("word"), args.hidden, classes,
                       len(hops), args.dropout).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    fanouts = {e: hops for e in EDGE_TYPES}
    every = {e: [-1] * len(hops) for e in EDGE_TYPES}
    loader = gr.DistNeighborLoader(part, {SEED_TYPE: owned_seeds(part, "train_mask")}, fanouts=fanouts,
                                   batch_size=-(-args.batch_size // world_size), seed=args.seed)
    val_loader, test_loader = (gr.DistNeighborLoader(part, {SEED_TYPE: owned_seeds(part, m)}, fanouts=every, batch_size=1024,
                                                     shuffle=False) for m in ("val_mask", "test_mask"))
    report: dict = {}
    best = (-1.0, -1, None)
    for epoch in range(args.epochs):
        start = time.perf_counter()
        model.train()
        loss_sum = correct = count = 0.0
        for batch in loader:
            opt.zero_grad()
            out = model(batch)
            loss = F.cross_entropy(out, batch.y, reduction="sum")
            loss.backward()
            sync_gradients(model, batch.batch_size, device)
            opt.step()
            loss_sum += float(loss.detach())
            correct += float((out.argmax(1) == batch.y).sum())
            count += batch.batch_size
        loss_sum, correct, count = all_sum([loss_sum, correct, count], device)
        seconds = time.perf_counter() - start
        val = accuracy(model, val_loader, device)
        report = dict(epoch=epoch, loss=loss_sum / max(count, 1), train_acc=correct / max(count, 1), val_acc=val, seconds=seconds)
        if val > best[0]:
            best = (val, epoch, {k: v.clone() for k, v in model.state_dict().items()})
        if rank == 0 and not args.quiet:
            print(f"epoch {epoch:3d}  loss {report['loss']:.4f}  train acc {report['train_acc']:.4f}  "
                  f"val acc {val:.4f}  time {seconds:.3f} s", flush=True)
    if best[2] is not None:
        model.load_state_dict(best[2])
    report.update(test_acc=accuracy(model, test_loader, device), best_val_acc=best[0], best_epoch=best[1], world_size=world_size)
    if rank == 0:
        print(f"test acc {report['test_acc']:.4f} at the best validation epoch {best[1]} (val acc {best[0]:.4f}; "
              f"{world_size} rank{'s' if world_size > 1 else ''}, {args.epochs} epochs)", flush=True)
    return report


def num_classes(part, device: torch.device) -> int:
    labels = part.node_data[(SEED_TYPE, "label")]
    t = torch.tensor([int(labels.max()) if labels.numel() else 0], device=device)
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t) + 1


def prepare(graph_path: str, out: str, num_parts: int) -> None:
    """Partition the typed graph with the default (balanced: every node type, in-edges, training papers)."""
    from gpart.partition import partition_graph

    m = partition_graph(graph_path, out, num_parts, force=True)
    print(f"wrote {out}: {num_parts} partitions of {graph_path} ({m['params'].get('backend', m['method'])})")


def main(argv: Optional[Sequence[str]] = None) -> dict:
    args = parse_args(argv)
    if args.prepare:
        prepare(args.prepare, args.parts, args.num_parts)
        return {}
    try:
        return train(args)
    finally:
        if dist.is_initialized() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
