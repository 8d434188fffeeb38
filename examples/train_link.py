"""GraphSAGE link prediction on a gpart partition result, one rank per partition; prints test AUC and MRR.

    python examples/train_link.py --prepare sample_data/cora.npz --num-parts 2 --parts link_parts/
    torchrun --nproc-per-node 2 examples/train_link.py --parts link_parts/

    python examples/train_link.py --prepare sample_data/cora.npz --num-parts 1 --parts link_whole/
    python examples/train_link.py --parts link_whole/        # one process, same code

Measured on Cora (sample_data/cora.npz; the defaults: 10 epochs of 512
seed edges per step, fanouts 5,5, lr 0.02, seed 0, validation every epoch;
PyG layers; CPU): test AUC 0.861, test MRR 0.360 on 1 process (1 partition;
best validation epoch 7, val AUC 0.892) and test AUC 0.868, test MRR 0.352
under torchrun on 2 gloo ranks (2 METIS partitions; best epoch 8, val AUC
0.905). Random scoring gives AUC 0.5 and MRR about 0.052. (Before the
held-out pairs were removed from the graph, 3 epochs reported AUC 0.877 /
0.882: message passing saw the very edges it was scoring.)
tests/test_link_example.py runs a shorter schedule (4 epochs of 1024-edge
steps, lr 0.01, validation every 2 epochs: test AUC 0.742 / MRR 0.103 on 1
rank, 0.770 / 0.119 on 2 ranks) and asserts AUC > 0.70 and MRR > 0.08.

Split (--prepare, as PyG's RandomLinkSplit for an undirected graph): the
input's distinct node pairs {u, v} (an edge and its reverse are one pair;
Cora: 5,429 edges, 5,278 pairs) are split 85/5/10 into train/val/test by a
seeded permutation. The partitioned graph holds the input edges of the
TRAINING pairs only, every one in both directions (METIS, `gpart partition
--add-reverse`, SPEC.md 4.7): message passing, in training batches and in
evaluation, never sees a validation or test pair. Those pairs are kept in
the side file PARTS/link_split.npz (numpy .npz of int64 arrays, no pickle;
written in the result's staging directory, so it appears with the result or
not at all): val_pos / test_pos [2, P] the pairs (u < v); val_neg / test_neg
[2, P] one negative pair per positive for the AUC (a uniform node u, a
uniform node v != u, {u, v} not a pair of the whole input graph); val_rank_neg
/ test_rank_neg [P, 100] the MRR candidates (per positive (u, v), 100
destinations drawn uniformly among the nodes w != u with {u, w} not a pair of
the whole input graph). All drawn once at --prepare, seeded by --seed.

Metrics (on the embeddings of every node from gr.layerwise_inference over
the training graph, all in-neighbours, gathered on every rank; score = dot
product): AUC = P(score of a positive > score of a negative pair), ties
counted half (Mann-Whitney). MRR as OGB's link-prediction evaluator
(ogbl-citation2): each positive (u, v) is ranked against its 100 candidates
(u, w), rank = 1 + #(candidates scoring higher) + #(tied) / 2, MRR = the
mean of 1 / rank. Model selection: val AUC every --eval-every epochs; the
weights of the best validation epoch (the earliest on a tie) are restored
and give the test AUC and test MRR.

Training: seeds are this rank's share of the stored (training) edges, both
directions (gr.edge_split), drawn by gr.DistLinkNeighborLoader with one
uniformly drawn negative pair per positive (neg_sampling="binary") and
exclude_seed_edges=True, so a batch's positives never carry their own
message. Model: 2-layer GraphSAGE encoder (train_sage.py's SAGE:
torch_geometric's SAGEConv when importable, else the plain-torch layer;
`--layers`), dot-product decoder, binary cross-entropy; gradients summed
over ranks with one all_reduce and divided by the global number of labelled
pairs (train_common.sync_gradients). Every rank reads the same side file and
scores the same pairs on the same gathered embeddings (Cora is small), so
every rank reports the same figures and picks the same epoch. gloo on CPU,
NCCL when CUDA is present. Needs node data feat.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import sys
import time
import zipfile
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import gpart.runtime as gr
from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.formats.files.commit import staged_output
from gpart.formats.input.readers import read_graph
from gpart.pipeline.partition import partition_graph
from gpart.runtime.partition.device import resolve_device

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_common / train_sage beside this file, also under torchrun
from train_common import add_common_arguments, all_sum, pyg_layers, run, setup_distributed, sync_gradients  # noqa: E402
from train_sage import SAGE, conv_class  # noqa: E402

SPLIT = (0.85, 0.05, 0.10)  # train / val / test shares of the input's node pairs
DEFAULT_EPOCHS = 10
SPLIT_FILE = "link_split.npz"  # the held-out pairs, in the --parts directory
RANK_NEGATIVES = 100  # MRR candidates per positive
MAX_DRAW_ROUNDS = 1000  # rejection rounds for negatives (Cora needs 2 or 3)
HELD_OUT = ("val", "test")
ARRAYS = tuple(f"{s}_{k}" for s in HELD_OUT for k in ("pos", "neg", "rank_neg"))


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", required=True, help="partition result directory written by --prepare")
    parser.add_argument("--prepare", metavar="GRAPH", help="first split GRAPH's node pairs and write --parts (the training "
                                                          "edges, reverse edges added, and the held-out pairs), then exit")
    parser.add_argument("--fanouts", default="5,5", help="in-neighbours per hop, comma-separated (-1: all)")
    parser.add_argument("--eval-every", type=int, default=1, help="validate every k epochs (and after the last)")
    parser.add_argument("--json", action="store_true", help="print only the final metrics, as one JSON line (rank 0)")
    add_common_arguments(parser, lr=0.02)
    parser.set_defaults(epochs=DEFAULT_EPOCHS, batch_size=512, dropout=0.0, weight_decay=0.0)
    return parser.parse_args(argv)


def pair_keys(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> np.ndarray:
    """One int64 key per node pair {src, dst}, whatever the direction: min * num_nodes + max."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    return np.minimum(src, dst) * num_nodes + np.maximum(src, dst)


def split_pairs(src: np.ndarray, dst: np.ndarray, num_nodes: int, seed: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(the split of every input edge, 0 train / 1 val / 2 test, the same for both directions of a pair; the
    val and test pairs as [2, P] (u < v)), from one seeded permutation of the distinct pairs."""
    keys, edge_pair = np.unique(pair_keys(src, dst, num_nodes), return_inverse=True)
    order = np.random.default_rng(seed).permutation(keys.shape[0])
    cuts = np.round(np.cumsum(SPLIT)[:-1] * keys.shape[0]).astype(np.int64)
    pair_split = np.zeros(keys.shape[0], dtype=np.int8)
    held_out = {}
    for code, (name, ids) in enumerate(zip(("train", *HELD_OUT), np.split(order, cuts))):
        pair_split[ids] = code
        if code:
            chosen = np.sort(keys[ids])
            held_out[name] = np.stack([chosen // num_nodes, chosen % num_nodes])
    return pair_split[edge_pair.reshape(-1)], held_out


def draw_negatives(sources: np.ndarray, count: int, num_nodes: int, known: np.ndarray, rng: np.random.Generator,
                   where: Optional[str]) -> np.ndarray:
    """[len(sources), count] destinations, each uniform among the nodes w != its source u with {u, w} not in the
    sorted pair keys `known` (drawn again where one is, in whole-array rounds; a source joined to nearly every
    node is an InputError naming `where` rather than a loop without end)."""
    out = rng.integers(num_nodes, size=(sources.shape[0], count))
    src = np.broadcast_to(sources[:, None], out.shape)
    retry = np.arange(out.size)
    for _ in range(MAX_DRAW_ROUNDS):
        keys = pair_keys(src.flat[retry], out.flat[retry], num_nodes)
        hit = np.minimum(np.searchsorted(known, keys), max(known.shape[0] - 1, 0))
        retry = retry[(src.flat[retry] == out.flat[retry]) | (known[hit] == keys if known.size else False)]
        if not retry.size:
            return out
        out.flat[retry] = rng.integers(num_nodes, size=retry.size)
    raise InputError(where, f"cannot draw negative pairs: after {MAX_DRAW_ROUNDS} draws {retry.size} still join "
                            f"a node to itself or to a neighbour (a graph this dense has too few non-edges)")


def held_out_arrays(held_out: dict[str, np.ndarray], known: np.ndarray, num_nodes: int, seed: int,
                    where: Optional[str] = None) -> dict[str, np.ndarray]:
    """The side file's arrays (the module docstring): the held-out pairs, their AUC negatives and MRR candidates."""
    rng = np.random.default_rng([seed, 1])  # a stream of its own: the split above stays what it was
    arrays = {}
    for name in HELD_OUT:
        pos = held_out[name]
        neg_src = rng.integers(num_nodes, size=pos.shape[1])
        arrays[f"{name}_pos"] = pos
        arrays[f"{name}_neg"] = np.stack([neg_src, draw_negatives(neg_src, 1, num_nodes, known, rng, where)[:, 0]])
        arrays[f"{name}_rank_neg"] = draw_negatives(pos[0], RANK_NEGATIVES, num_nodes, known, rng, where)
    return arrays


def prepare(graph_path: str, out: str, num_parts: int, force: bool, seed: int = 0) -> None:
    """Read `graph_path`, split its pairs, partition the training edges into `out` with reverse edges and write
    the held-out pairs beside them (an existing `out` is replaced only with `force`; all of it appears at once)."""
    graph = read_graph(graph_path)
    split, held_out = split_pairs(graph.src, graph.dst, graph.num_nodes, seed)
    train = np.flatnonzero(split == 0)
    known = np.unique(pair_keys(graph.src, graph.dst, graph.num_nodes))  # every pair of the input: never a negative
    arrays = held_out_arrays(held_out, known, graph.num_nodes, seed, graph.source)
    train_graph = Graph(graph.num_nodes, graph.src[train], graph.dst[train], graph.node_data,
                        {k: v[train] for k, v in graph.edge_data.items()}, source=graph.source)
    with staged_output(out, force=force, inputs=[graph_path]) as stage:
        m = partition_graph(train_graph, stage, num_parts, "metis", add_reverse=True)
        np.savez(stage / SPLIT_FILE, **arrays)
    print(f"wrote {out}: {num_parts} METIS partitions of the training edges of {graph_path} with reverse edges "
          f"({m['graph']['num_edges']} edges) and {SPLIT_FILE} ({held_out['val'].shape[1]} val, "
          f"{held_out['test'].shape[1]} test pairs); the input's {known.shape[0]} node pairs split "
          f"{'/'.join(str(round(s * 100)) for s in SPLIT)}", flush=True)


def embed(model: nn.Module, batch, use_pyg: bool) -> torch.Tensor:
    if use_pyg:
        data = batch.to_pyg()  # the batch as PyG's Data, what a PyG model takes
        return model(data.x, data.edge_index)
    return model(batch.x, batch.edge_index)


def train_epoch(model: nn.Module, loader, opt: torch.optim.Optimizer, use_pyg: bool, device: torch.device) -> float:
    """One pass over the loader; the mean loss over every rank's labelled pairs."""
    model.train()
    loss_sum = count = 0.0
    for batch in loader:
        opt.zero_grad()
        h = embed(model, batch, use_pyg)
        src, dst = batch.edge_label_index
        score = (h[src] * h[dst]).sum(-1)
        loss = F.binary_cross_entropy_with_logits(score, batch.edge_label.float(), reduction="sum")  # 0 for an empty batch
        loss.backward()
        sync_gradients(model, int(batch.edge_label.numel()), device)
        opt.step()
        loss_sum += float(loss.detach())
        count += batch.edge_label.numel()
    loss_sum, count = all_sum([loss_sum, count], device)
    return loss_sum / max(count, 1)


def roc_auc(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """P(positive score > negative score), ties counted half (the area under the ROC curve)."""
    neg = neg.sort().values
    below = torch.searchsorted(neg, pos, right=False).double()
    below_or_tied = torch.searchsorted(neg, pos, right=True).double()
    return float((below + below_or_tied).sum() / 2 / max(pos.numel() * neg.numel(), 1))


def gather(t: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's tensor (sizes may differ), on every rank."""
    if not dist.is_initialized():
        return [t]
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, t.cpu())
    return out


def read_held_out(parts: str, num_nodes: int) -> dict[str, torch.Tensor]:
    """The side file's arrays (PARTS/link_split.npz, the module docstring), checked; a bad file is one InputError."""
    path = Path(parts) / SPLIT_FILE
    if not path.is_file():
        raise InputError(path, f"not found: {parts} was not written by this example's --prepare (the held-out pairs are missing)")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: np.asarray(npz[name]) for name in ARRAYS if name in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(path, f"cannot read: {exc}") from None
    for name in ARRAYS:
        if name not in arrays:
            raise InputError(path, f"no array {name!r}; write it again with --prepare --force")
        pos = arrays[f"{name.split('_')[0]}_pos"]  # checked first (ARRAYS order): its shape gives the pair count
        a, pairs = arrays[name], pos.shape[-1] if pos.ndim else -1
        wanted = (pairs, RANK_NEGATIVES) if name.endswith("rank_neg") else (2, pairs)
        if a.dtype.kind not in "iu" or a.shape != wanted:
            raise InputError(path, f"{name} must be integers of shape {wanted}, got {a.dtype} {a.shape}")
        if a.size and (a.min() < 0 or a.max() >= num_nodes):
            raise InputError(path, f"{name} holds node ids outside 0..{num_nodes - 1}")
    return {name: torch.from_numpy(a.astype(np.int64)) for name, a in arrays.items()}


def mrr(pos: torch.Tensor, candidates: torch.Tensor) -> float:
    """OGB's link-prediction MRR: each positive's score [P] ranked among its candidates' [P, K], ties half."""
    higher = (candidates > pos[:, None]).sum(1).double()
    tied = (candidates == pos[:, None]).sum(1).double()
    return float((1.0 / (1.0 + higher + tied / 2)).mean()) if pos.numel() else 0.0


@torch.no_grad()
def embeddings(model: nn.Module, part) -> torch.Tensor:
    """[num_nodes, hidden] rows of every node from layer-wise inference, gathered on every rank (a collective)."""
    model.eval()
    ids, rows = gr.layerwise_inference(SAGE.layers(model), part)
    emb = torch.zeros(part.num_nodes, rows.shape[1], device=rows.device)
    for i, r in zip(gather(ids), gather(rows)):  # on the CPU where gloo gathered rows computed on a GPU
        emb[i.to(emb.device)] = r.to(emb.device, torch.float32)
    return emb


def evaluate(emb: torch.Tensor, held_out: dict[str, torch.Tensor], name: str) -> dict[str, float]:
    """AUC and MRR of split `name` ("val" or "test") on the embeddings (the module docstring)."""
    def score(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return (emb[u] * emb[v]).sum(-1)

    pos_pairs, neg_pairs, candidates = (held_out[f"{name}_{k}"] for k in ("pos", "neg", "rank_neg"))
    pos = score(pos_pairs[0], pos_pairs[1])
    ranked = score(pos_pairs[0][:, None].expand_as(candidates), candidates)
    return {f"{name}_auc": roc_auc(pos, score(neg_pairs[0], neg_pairs[1])), f"{name}_mrr": mrr(pos, ranked)}


def build(args: argparse.Namespace, part, world_size: int):
    """(model, loader, optimizer, whether PyG layers) for `part`: every stored edge is a training seed."""
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    fanouts = [int(f) for f in args.fanouts.split(",")]
    use_pyg = pyg_layers(args.layers)
    model = SAGE(part.node_data["feat"].shape[1], args.hidden, args.hidden, len(fanouts), args.dropout, True,
                 conv_class(use_pyg)).to(part.device)
    seeds = gr.edge_split(part, torch.ones(part.num_edges, dtype=torch.bool))
    loader = gr.DistLinkNeighborLoader(part, seeds, fanouts=fanouts, batch_size=-(-args.batch_size // world_size),
                                       neg_sampling="binary", neg_ratio=1, exclude_seed_edges=True, seed=args.seed)
    return model, loader, torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay), use_pyg


def fit(args: argparse.Namespace, model: nn.Module, loader, opt, use_pyg: bool, part, held_out: dict, rank: int) -> dict:
    """Train args.epochs epochs, validating every args.eval_every and after the last; leaves the model at the
    best validation epoch (val AUC, the earliest on a tie) and returns that epoch's val figures and final loss."""
    best: dict = {}
    loss = float("nan")
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        start = time.perf_counter()
        loss = train_epoch(model, loader, opt, use_pyg, part.device)
        line = f"epoch {epoch:3d}  loss {loss:.4f}  time {time.perf_counter() - start:.3f} s"
        if (epoch + 1) % max(args.eval_every, 1) == 0 or epoch == args.epochs - 1:
            val = evaluate(embeddings(model, part), held_out, "val")
            line += f"  val AUC {val['val_auc']:.4f}  val MRR {val['val_mrr']:.4f}"
            if not best or val["val_auc"] > best["val_auc"]:
                best = {**val, "best_epoch": epoch, "state": copy.deepcopy(model.state_dict())}
        if rank == 0 and not (args.quiet or args.json):
            print(line, flush=True)
    if not best:  # no epoch: the initial weights
        best = {**evaluate(embeddings(model, part), held_out, "val"), "best_epoch": -1}
    if "state" in best:
        model.load_state_dict(best.pop("state"))
    return {**best, "loss": loss}


def train(args: argparse.Namespace) -> dict:
    """Train, select the epoch by val AUC, test it; returns the metrics (the same on every rank)."""
    device = resolve_device(args.device)
    rank, world_size = setup_distributed(device)
    part = gr.load_partition(args.parts, device=device, node_data=["feat"])
    held_out = read_held_out(args.parts, part.num_nodes)
    model, loader, opt, use_pyg = build(args, part, world_size)
    best = fit(args, model, loader, opt, use_pyg, part, held_out, rank)
    report = {**evaluate(embeddings(model, part), held_out, "test"), **best, "world_size": world_size,
              "layers": "pyg" if use_pyg else "torch", "epochs": args.epochs}
    if rank == 0 and args.json:
        print(json.dumps(report), flush=True)
    elif rank == 0:
        print(f"test AUC {report['test_auc']:.4f}  test MRR {report['test_mrr']:.4f} at the best validation epoch "
              f"{report['best_epoch']} (val AUC {report['val_auc']:.4f}, val MRR {report['val_mrr']:.4f}; "
              f"{world_size} rank{'s' if world_size > 1 else ''}, {args.epochs} epochs, {report['layers']} layers). "
              f"Message passing over the training edges only; AUC against one random non-edge pair per positive, "
              f"MRR as OGB: each pair ranked against {RANK_NEGATIVES} sampled negative destinations of its source",
              flush=True)
    return report


@gr.record  # a gpart error: one line per failing rank, also in torchrun's summary
def main(argv: Optional[Sequence[str]] = None) -> dict:
    args = parse_args(argv)
    return run(args, functools.partial(prepare, seed=args.seed), train)


if __name__ == "__main__":
    main()
