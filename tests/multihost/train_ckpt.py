"""GraphSAGE over node features plus a trainable sharded node embedding, every collective bounded in
time, saving and resuming a gpart checkpoint: the training job of the multihost tests.

    torchrun ... train_ckpt.py --parts parts/ --epochs 3 --timeout 5 --save /shared/run
    python train_ckpt.py --parts parts1/ --epochs 1 --resume run1/ --model /shared/run.model.pt

The model is examples/train_sage.py's SAGE; its input is a row's features
and its row of a gr.ShardedEmbedding (SparseAdam). Unlike the example, every
collective waits at most --timeout seconds (the loader's exchanges, the
gradient sum), so a lost host ends every rank in bounded time. --save writes
the embedding and its optimizer states with gr.save_checkpoint (the ranks must
share that directory) and the dense weights beside it (`<save>.model.pt`, rank
0); --resume loads a checkpoint of any world size (gather-ckpt / scatter-ckpt
output) and --model the dense weights. Prints `test acc X` after loading and
after training (exact inference: every in-neighbour).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

import gpart.runtime as gr
from gpart.base.errors import GpartError
from gpart.collectives import wait, world

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from train_sage import SAGE  # noqa: E402  (examples/ is not a package)

DIM = 16
NODE_DATA = ["feat", "label", "train_mask", "val_mask", "test_mask"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds any collective may wait")
    parser.add_argument("--save", help="checkpoint directory written after the last epoch")
    parser.add_argument("--resume", help="checkpoint directory to start from")
    parser.add_argument("--model", help="dense weights to start from (a --save's <save>.model.pt)")
    parser.add_argument("--fanouts", default="10,10")
    parser.add_argument("--batch-size", type=int, default=64, help="seeds per step over all ranks")
    parser.add_argument("--timing", action="store_true",
                        help="no evaluation; each rank prints one JSON line per epoch: seconds, loader collectives' seconds")
    return parser.parse_args()


def all_sum(t: torch.Tensor, timeout_s: float, what: str) -> torch.Tensor:
    if world()[1] > 1:
        wait(dist.all_reduce(t, async_op=True), timeout_s, what)
    return t


def accuracy(model, emb, part, timeout_s: float) -> float:
    loader = gr.DistNeighborLoader(part, gr.node_split(part, "test_mask"), fanouts=[-1, -1], batch_size=1024,
                                   shuffle=False, timeout_s=timeout_s)
    model.eval()
    hits = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for batch in loader:
            out = model(torch.cat([batch.x, emb(batch.n_id)], 1), batch.edge_index)[: batch.batch_size]
            hits += torch.tensor([float((out.argmax(1) == batch.y).sum()), float(batch.batch_size)], dtype=torch.float64)
    hits = all_sum(hits, timeout_s, "summing the test accuracy")
    return float(hits[0] / max(float(hits[1]), 1.0))


def train_epoch(model, emb, opts, loader, timeout_s: float) -> None:
    model.train()
    dense, sparse = opts
    for batch in loader:
        dense.zero_grad()
        out = model(torch.cat([batch.x, emb(batch.n_id)], 1), batch.edge_index)[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y, reduction="sum")
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()] + [torch.tensor([float(batch.batch_size)])])
        flat = all_sum(flat, timeout_s, "summing gradients")
        for p, g in zip(model.parameters(), flat[:-1].split([p.numel() for p in model.parameters()])):
            p.grad = (g / max(float(flat[-1]), 1.0)).reshape(p.shape)
        dense.step()
        sparse.step()


def main() -> None:
    args = parse_args()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world_size = world()
    part = gr.load_partition(args.parts, rank, node_data=NODE_DATA, timeout_s=args.timeout)
    torch.manual_seed(0)
    emb = gr.ShardedEmbedding(part.num_nodes, DIM, "node_emb", seed=0)
    owned = part.node_data["label"][: part.num_owned]
    classes = torch.tensor([int(owned.max()) + 1 if owned.numel() else 0])
    if world_size > 1:
        wait(dist.all_reduce(classes, op=dist.ReduceOp.MAX, async_op=True), args.timeout, "agreeing on the classes")
    model = SAGE(part.node_data["feat"].shape[1] + DIM, 32, int(classes), 2, 0.5)
    opts = (torch.optim.Adam(model.parameters(), lr=0.05), gr.SparseAdam([emb], lr=0.05))
    if args.resume:
        gr.load_checkpoint(args.resume, [emb], opts[1])
    if args.model:
        model.load_state_dict(torch.load(args.model, weights_only=True))
    if args.resume or args.model:
        print(f"rank {rank}: loaded: test acc {accuracy(model, emb, part, args.timeout):.4f}", flush=True)
    loader = gr.DistNeighborLoader(part, gr.node_split(part, "train_mask"), fanouts=[int(f) for f in args.fanouts.split(",")],
                                   batch_size=-(-args.batch_size // world_size), timeout_s=args.timeout)
    for epoch in range(args.epochs):
        start, before = time.perf_counter(), dict(loader.stats)
        train_epoch(model, emb, opts, loader, args.timeout)
        if args.timing:
            print(json.dumps({"rank": rank, "epoch": epoch, "seconds": time.perf_counter() - start, "seeds": loader.stats["seeds"] - before["seeds"],
                              "loader_collective_s": loader.stats["collective_s"] - before["collective_s"]}), flush=True)
        print(f"rank {rank}: epoch {epoch} done", flush=True)
    if not args.timing:
        acc = accuracy(model, emb, part, args.timeout)
        if args.save:
            gr.save_checkpoint(args.save, [emb], opts[1])
            if rank == 0:
                torch.save(model.state_dict(), f"{args.save}.model.pt")
        print(f"rank {rank} of {world_size}: test acc {acc:.4f}", flush=True)
    if world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except GpartError as exc:  # one line, as the gpart commands print it
        sys.exit(f"error: {exc.one_line()}")
