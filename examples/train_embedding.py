"""GraphSAGE over node features plus a trainable sharded node embedding, saved as a gpart checkpoint.

    gpart partition sample_data/cora.npz --parts 2 --add-reverse -o parts2/
    torchrun --nproc-per-node 2 examples/train_embedding.py --parts parts2/ --save run/
    gpart gather-ckpt run/ -o full/            # what the gpart checkpoint commands read

Each node's input is its `feat` row and its row of a gr.ShardedEmbedding
(`--dim` columns, rows spread over the ranks by the remainder policy, as
DGL's NodeEmbedding), trained by gr.SparseAdam beside torch's Adam for the
dense SAGE weights (examples/train_sage.py's model). After the last epoch
gr.save_checkpoint writes the table with its Adam states (per-row step
counts, both moments) to `--save`, the directory `gpart gather-ckpt`,
`scatter-ckpt` and `export-ckpt` read, and rank 0 prints the test accuracy
(every test node once, with all its in-neighbours, whatever the number of
trainers per partition). Any world size the partitions allow: one rank per
partition, or L per partition (`--nproc-per-node` P x L). gloo on CPU, NCCL
when CUDA is present.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F

import gpart.runtime as gr
from gpart.base.errors import GpartError
from gpart.runtime.partition.device import resolve_device

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_common and train_sage beside this file, also under torchrun
from train_common import all_max, all_sum, fail, setup_distributed, sync_gradients  # noqa: E402
from train_sage import SAGE  # noqa: E402

NODE_DATA = ["feat", "label", "train_mask", "test_mask"]


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", required=True, help="partition result directory (gpart partition -o)")
    parser.add_argument("--save", required=True, help="checkpoint directory to write (replaced if it holds a checkpoint)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--dim", type=int, default=16, help="columns of the node embedding")
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05, help="of both optimizers")
    parser.add_argument("--batch-size", type=int, default=64, help="seeds per step over all ranks")
    parser.add_argument("--fanouts", default="10,10", help="in-neighbours per hop, comma-separated (-1: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    return parser.parse_args(argv)


def inputs(batch, emb: gr.ShardedEmbedding) -> torch.Tensor:
    """A batch's node inputs: features beside embedding rows (remote rows come by all_to_all: every rank calls this)."""
    return torch.cat([batch.x.float(), emb(batch.n_id).to(batch.x.device)], 1)


@torch.no_grad()
def test_accuracy(model: SAGE, emb: gr.ShardedEmbedding, part, batch_size: int, device: torch.device) -> float:
    """Accuracy over the test nodes: each rank's disjoint share (gr.node_split), every in-neighbour (fanout -1)."""
    model.eval()
    loader = gr.DistNeighborLoader(part, gr.node_split(part, "test_mask"), fanouts=[-1] * len(model.convs), batch_size=batch_size,
                                   shuffle=False)
    hit = 0
    for batch in loader:
        hit += int((model(inputs(batch, emb), batch.edge_index)[: batch.batch_size].argmax(1) == batch.y).sum())
    hit, total = all_sum([hit, loader.seeds.numel()], device)
    return hit / max(total, 1)


def train(args: argparse.Namespace) -> float:
    device = resolve_device(args.device)
    rank, world_size = setup_distributed(device)
    part = gr.load_partition(args.parts, device=device, node_data=NODE_DATA)
    torch.manual_seed(args.seed)  # the same dense weights on every rank; the table's rows depend on its seed only
    emb = gr.ShardedEmbedding(part.num_nodes, args.dim, "node_emb", seed=args.seed, device=device)
    owned = part.node_data["label"][: part.num_owned]
    classes = all_max(int(owned.max()) if owned.numel() else 0, device) + 1
    fanouts = [int(f) for f in args.fanouts.split(",")]
    model = SAGE(part.node_data["feat"].shape[1] + args.dim, args.hidden, classes, len(fanouts), row_normalize=False).to(device)
    dense, sparse = torch.optim.Adam(model.parameters(), lr=args.lr), gr.SparseAdam([emb], lr=args.lr)
    per_rank = -(-args.batch_size // world_size)
    loader = gr.DistNeighborLoader(part, gr.node_split(part, "train_mask"), fanouts=fanouts, batch_size=per_rank, seed=args.seed)
    for epoch in range(args.epochs):
        model.train()
        loss_sum = 0.0
        for batch in loader:
            dense.zero_grad()
            sparse.zero_grad()
            loss = F.cross_entropy(model(inputs(batch, emb), batch.edge_index)[: batch.batch_size], batch.y, reduction="sum")
            loss.backward()
            sync_gradients(model, batch.batch_size, device)  # dense weights: summed over ranks / global seeds
            dense.step()
            sparse.step()  # embedding rows: gradients sent to the ranks that own them
            loss_sum += float(loss.detach())
        total, seeds = all_sum([loss_sum, float(loader.seeds.numel())], device)
        if rank == 0:
            print(f"epoch {epoch}  loss {total / max(seeds, 1.0):.4f}", flush=True)
    acc = test_accuracy(model, emb, part, per_rank * 4, device)
    gr.save_checkpoint(args.save, [emb], sparse, extra={"epochs": args.epochs, "test_acc": acc})
    if rank == 0:
        print(f"test acc {acc:.4f}; saved node_emb ({part.num_nodes} x {args.dim}, SparseAdam states) from {world_size} "
              f"rank{'s' if world_size > 1 else ''} to {args.save}", flush=True)
    return acc


def main(argv: Optional[Sequence[str]] = None) -> float:
    args = parse_args(argv)
    try:
        return train(args)
    except GpartError as exc:  # one line and gpart's exit code, as the gpart commands print it
        fail(exc.one_line(), exc.exit_code)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
