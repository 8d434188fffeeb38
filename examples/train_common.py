"""What both training examples share: torchrun set-up, the data-parallel step, the epoch loop.

Imported by examples/train_sage.py and examples/train_rgcn.py (they put this
folder on sys.path, so they run as plain scripts and under torchrun).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import sys
import time
from typing import Callable, NoReturn, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import gpart.runtime as gr

Forward = Callable[[nn.Module, object], torch.Tensor]  # (model, batch) -> logits of the batch's seeds


def add_common_arguments(parser: argparse.ArgumentParser, lr: float) -> None:
    parser.add_argument("--num-parts", type=int, default=2, help="partitions written by --prepare")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="seeds per step over all ranks")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=lr)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--quiet", action="store_true", help="print only the final line")
    parser.add_argument("--force", action="store_true", help="with --prepare: replace an existing --parts (default: refuse)")
    parser.add_argument("--layers", choices=("auto", "pyg", "torch"), default="auto",
                        help="pyg: torch_geometric.nn layers on batch.to_pyg(); torch: the plain-torch layers of this "
                             "script; auto (default): pyg when torch_geometric is importable, else torch")


def fail(message: str, code: int = 2) -> NoReturn:
    """One line on stderr and exit `code` (2: bad arguments or input, as gpart's own commands)."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def pyg_layers(choice: str) -> bool:
    """Whether to build the model from PyG's layers: --layers pyg (PyG required), torch, or auto (PyG if importable)."""
    found = importlib.util.find_spec("torch_geometric") is not None
    if choice == "pyg" and not found:
        fail("--layers pyg needs torch_geometric (pip install torch_geometric); --layers torch uses this script's own layers")
    return found if choice == "auto" else choice == "pyg"


def setup_distributed(device: torch.device) -> tuple[int, int]:
    """Join the torchrun group (WORLD_SIZE > 1) unless a group exists already; (rank, world size)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=datetime.timedelta(seconds=120))
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def all_sum(values: list[float], device: torch.device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_initialized():
        dist.all_reduce(t)
    return t.tolist()


def all_max(value: int, device: torch.device) -> int:
    t = torch.tensor([value], device=device)
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t)


def sync_gradients(model: nn.Module, seeds: int, device: torch.device) -> None:
    """Sum every gradient over ranks and divide by the global seed count: one all_reduce of a flat buffer."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads] + [torch.tensor([float(seeds)], device=device)])
    if dist.is_initialized():
        dist.all_reduce(flat)
    total = max(flat[-1].item(), 1.0)
    for p, g in zip(model.parameters(), flat[:-1].split([g.numel() for g in grads])):
        p.grad = (g / total).reshape(p.shape)


def trainer_share(positions: torch.Tensor, num_parts: int) -> torch.Tensor:
    """This rank's slice of positions in its partition's owned nodes. With L trainers per partition (world size
    P x L, rank r on partition r // L) all L hold the same partition: each takes one contiguous slice, so that
    summed over the ranks every node counts once (not L times)."""
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    per_part = max(1, world_size // num_parts)
    i, n = rank % per_part, positions.numel()
    return positions[n * i // per_part: n * (i + 1) // per_part]


class LayerwiseAccuracy:
    """Accuracy over the nodes of a mask on all ranks from gr.layerwise_inference (every node, every in-neighbour,
    layer by layer): what `fit` evaluates with when given one in place of a loader. `layers_of(model)`: the model
    as a list of layers (gr.layerwise_inference's convention). Typed: `node_type`, whose nodes are classified (its
    mask and labels), and `inputs_of(model)`, layerwise_inference's node_data (default "feat"). Each rank counts
    its trainer_share of its partition's mask nodes: every node of the mask once over all ranks."""

    def __init__(self, part, mask: str, layers_of: Callable[[nn.Module], list], batch_size: int = 4096,
                 node_type: Optional[str] = None, inputs_of: Optional[Callable[[nn.Module], object]] = None):
        self.part, self.layers_of, self.batch_size = part, layers_of, batch_size
        self.node_type, self.inputs_of = node_type, inputs_of or (lambda model: "feat")
        key = (lambda name: (node_type, name)) if node_type is not None else (lambda name: name)
        owned = part.num_owned if node_type is None else int(part.owned_ids(node_type).numel())
        selected = torch.nonzero(part.node_data[key(mask)][:owned].bool()).flatten()
        self.positions = trainer_share(selected, part.num_parts)
        self.labels = part.node_data[key("label")][:owned][self.positions]

    @torch.no_grad()
    def __call__(self, model: nn.Module, device: torch.device) -> tuple[float, int]:
        # every trainer of a partition computes all of its rows (layerwise_inference's contract), counts its share
        _, out = gr.layerwise_inference(self.layers_of(model), self.part, node_data=self.inputs_of(model),
                                        batch_size=self.batch_size)
        out = out if self.node_type is None else out[self.node_type]
        hit = int((out.argmax(1)[self.positions.to(out.device)] == self.labels.to(out.device)).sum())
        hit, total = all_sum([hit, self.positions.numel()], device)
        return hit / max(total, 1), int(total)


@torch.no_grad()
def accuracy(model: nn.Module, loader, forward: Forward, device: torch.device) -> tuple[float, int]:
    """(accuracy, nodes counted) over the seeds of `loader` on all ranks (gr.node_split's shares: each node on
    one rank), or by layer-wise inference (a LayerwiseAccuracy)."""
    model.eval()
    if isinstance(loader, LayerwiseAccuracy):
        return loader(model, device)
    correct = 0
    for batch in loader:
        correct += int((forward(model, batch).argmax(1) == batch.y).sum())
    hit, total = all_sum([correct, loader.seeds.numel()], device)
    return hit / max(total, 1), int(total)


def fit(model: nn.Module, forward: Forward, loaders: tuple, args: argparse.Namespace, device: torch.device,
        rank: int, world_size: int) -> dict:
    """Train on loaders[0], keep the weights of the best validation epoch (loaders[1]), test them (loaders[2])."""
    loader, val_loader, test_loader = loaders
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    report: dict = {}
    best = (-1.0, -1, None)  # (validation accuracy, epoch, weights)
    for epoch in range(args.epochs):
        start = time.perf_counter()
        model.train()
        loss_sum = correct = count = 0.0
        for batch in loader:
            opt.zero_grad()
            out = forward(model, batch)
            loss = F.cross_entropy(out, batch.y, reduction="sum")  # 0 for an empty batch
            loss.backward()
            sync_gradients(model, batch.batch_size, device)
            opt.step()
            loss_sum += float(loss.detach())
            correct += float((out.argmax(1) == batch.y).sum())
            count += batch.batch_size
        loss_sum, correct, count = all_sum([loss_sum, correct, count], device)
        seconds = time.perf_counter() - start
        val, _ = accuracy(model, val_loader, forward, device)
        report = dict(epoch=epoch, loss=loss_sum / max(count, 1), train_acc=correct / max(count, 1), val_acc=val, seconds=seconds)
        if val > best[0]:
            best = (val, epoch, {k: v.clone() for k, v in model.state_dict().items()})
        if rank == 0 and not args.quiet:
            print(f"epoch {epoch:3d}  loss {report['loss']:.4f}  train acc {report['train_acc']:.4f}  "
                  f"val acc {val:.4f}  time {seconds:.3f} s", flush=True)
    if best[2] is not None:
        model.load_state_dict(best[2])
    test_acc, test_nodes = accuracy(model, test_loader, forward, device)
    report.update(test_acc=test_acc, test_nodes=test_nodes, best_val_acc=best[0], best_epoch=best[1], world_size=world_size)
    if rank == 0:
        print(f"test acc {test_acc:.4f} over {test_nodes:,} test nodes at the best validation epoch {best[1]} (val acc "
              f"{best[0]:.4f}; {world_size} rank{'s' if world_size > 1 else ''}, {args.epochs} epochs)", flush=True)
    return report


def run(args: argparse.Namespace, prepare: Callable[[str, str, int, bool], None], train: Callable[[argparse.Namespace], dict]) -> dict:
    """--prepare writes the partitions (an existing --parts only with --force) and exits; otherwise train,
    leaving the process group on every path. gpart's errors (bad input, an existing output) become one line
    on stderr and their exit code in the scripts' `main`, decorated with gr.record."""
    try:
        if args.prepare:
            prepare(args.prepare, args.parts, args.num_parts, args.force)
            return {}
        return train(args)
    finally:
        if dist.is_initialized() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            dist.destroy_process_group()
