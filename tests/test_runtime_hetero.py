"""The runtime on typed results (SPEC.md 8.5): typed gather and the per-edge-type sampler, 1 process and 2 gloo ranks.

Real data: the Cora-derived typed graph (sample_data/cora_hetero.npz). Every
sampled typed edge must exist in the input with its typed edge id, every
frontier node of a hop gets exactly min(fanout, in-degree of that type) edges
of each sampled type, and x / y equal the input's rows.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from support.example_scripts import load_example
from support.gloo_processes import error_text, run_distributed

import gpart.runtime as gr
from gpart.cli.main import main

REPO = Path(__file__).resolve().parents[1]
HETERO = REPO / "sample_data" / "cora_hetero.npz"
FANOUTS = {("paper", "cites", "paper"): [4, 3], ("word", "in", "paper"): [5, 2], ("paper", "has", "word"): [3, 2]}


def _input() -> dict[str, np.ndarray]:
    with np.load(HETERO, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("hetero_parts")
    out = {}
    for num_parts, method, storage in ((1, "range", "binary"), (2, "metis", "binary"), (2, "random", "hdf5")):
        path = root / f"{method}_{num_parts}"
        assert main(["partition", str(HETERO), "--parts", str(num_parts), "-o", str(path), "--method", method,
                     "--format", storage, "-q"]) == 0
        out[(num_parts, method)] = str(path)
    return out


def check_batch(batch, fanouts: dict, data: dict) -> int:
    """Edges exist in the input, per-type fanouts hold exactly, rows equal the input's. Returns the edges checked."""
    count = 0
    for etype, ei in batch.edge_index.items():
        key = ":".join(etype)
        src, dst = data[f"{key}/src"], data[f"{key}/dst"]
        e = batch.e_id[etype].numpy()
        s_ids = batch.n_id[etype[0]][ei[0]].numpy()
        d_ids = batch.n_id[etype[2]][ei[1]].numpy()
        assert np.array_equal(src[e], s_ids) and np.array_equal(dst[e], d_ids), etype
        indeg = np.bincount(dst, minlength=int(data[f"{etype[2]}/num_nodes"]))
        start_e = 0
        nodes = batch.num_sampled_nodes[etype[2]]
        for hop, f in enumerate(fanouts[etype]):
            n_edges = batch.num_sampled_edges[etype][hop]
            lo, hi = sum(nodes[:hop]), sum(nodes[:hop + 1])  # the hop's frontier of the destination type
            got = np.bincount(ei[1, start_e:start_e + n_edges].numpy() - lo, minlength=hi - lo)
            frontier = batch.n_id[etype[2]][lo:hi].numpy()
            assert got.shape[0] == hi - lo and np.array_equal(got, np.minimum(f, indeg[frontier])), (etype, hop)
            start_e += n_edges
        count += start_e
    assert torch.equal(batch.x["paper"], torch.from_numpy(data["paper/feat"][batch.n_id["paper"].numpy()]))
    seeds = batch.n_id["paper"][: batch.batch_size].numpy()
    assert torch.equal(batch.y, torch.from_numpy(data["paper/label"][seeds]))
    return count


def test_one_process_typed_gather_and_sampler(parts):
    data = _input()
    part = gr.load_partition(parts[(1, "range")], device="cpu")
    assert isinstance(part, gr.HeteroPartition) and part.node_types == ["paper", "word"]
    ids = torch.tensor([2707, 0, 5, 5])
    assert torch.equal(part.gather(("paper", "feat"), ids), torch.from_numpy(data["paper/feat"][ids.numpy()]))
    assert torch.equal(part.gather("paper/label", ids.reshape(2, 2)), torch.from_numpy(data["paper/label"][ids.numpy()]).reshape(2, 2))
    with pytest.raises(IndexError, match="outside 0..2707"):
        part.gather(("paper", "feat"), torch.tensor([2708]))
    with pytest.raises(Exception, match="unknown node type 'author'"):
        part.gather(("author", "feat"), torch.tensor([0]))
    train = np.flatnonzero(data["paper/train_mask"])
    loader = gr.DistNeighborLoader(part, {"paper": train}, fanouts=FANOUTS, batch_size=50, seed=1)
    assert type(loader).__name__ == "HeteroNeighborLoader" and len(loader) == 3
    seen, edges = [], 0
    for batch in loader:
        edges += check_batch(batch, FANOUTS, data)
        seen += batch.n_id["paper"][: batch.batch_size].tolist()
    assert sorted(seen) == train.tolist() and edges > 0
    assert ("paper", "cited_by", "paper") not in batch.edge_index  # edge types without a fanout are not sampled
    pyg = pytest.importorskip("torch_geometric")
    assert pyg is not None
    data_pyg = next(iter(gr.DistNeighborLoader(part, {"paper": train}, fanouts=FANOUTS, batch_size=50, pyg=True)))
    assert data_pyg["paper"].batch_size == 50 and data_pyg["paper", "cites", "paper"].edge_index.shape[0] == 2


@pytest.mark.parametrize("fanouts, message", [
    ({("paper", "cites"): [2]}, "not a (src, relation, dst) triplet"),
    ({("paper", "likes", "paper"): [2]}, "unknown edge type"),
    ({("paper", "cites", "paper"): [2, 2], ("word", "in", "paper"): [3]}, "same number of hops"),
    ([4, 3], "fanouts of a typed graph are a dict"),
])
def test_bad_typed_loader_arguments(parts, fanouts, message):
    part = gr.load_partition(parts[(1, "range")], device="cpu")
    with pytest.raises(Exception, match=re.escape(message)):
        gr.DistNeighborLoader(part, {"paper": [0, 1]}, fanouts=fanouts)
    with pytest.raises(Exception, match="unknown seed node type"):
        gr.DistNeighborLoader(part, {"author": [0]}, fanouts=FANOUTS)


def _ranks_check(rank: int, world_size: int, parts: dict) -> dict:
    data = _input()
    out = {}
    for method in ("metis", "random"):
        part = gr.load_partition(parts[(2, method)], device="cpu")
        every = torch.arange(2708)
        assert torch.equal(part.gather(("paper", "feat"), every), torch.from_numpy(data["paper/feat"]))  # remote rows too
        owned = part.owned_ids("paper")
        train = owned[part.node_data[("paper", "train_mask")]]
        loader = gr.DistNeighborLoader(part, {"paper": train}, fanouts=FANOUTS, batch_size=32, seed=rank)
        seen, edges = [], 0
        for batch in loader:
            edges += check_batch(batch, FANOUTS, data)
            seen += batch.n_id["paper"][: batch.batch_size].tolist()
        out[method] = {"seen": sorted(seen), "train": sorted(train.tolist()), "batches": len(loader), "edges": edges}
    # a bad fanout on one rank fails both ranks in bounded time, naming the problem
    bad = {("paper", "cites"): [2]} if rank == 1 else FANOUTS
    out["bad"] = error_text(lambda: gr.DistNeighborLoader(part, {"paper": train}, fanouts=bad, timeout_s=20))
    return out


def test_two_ranks_sample_typed_edges(parts):
    results = run_distributed(_ranks_check, 2, parts, timeout_s=150)
    train = np.flatnonzero(_input()["paper/train_mask"]).tolist()
    for method in ("metis", "random"):
        per_rank = [r[method] for r in results]
        assert sorted(sum((r["train"] for r in per_rank), [])) == train
        assert all(r["seen"] == r["train"] and r["edges"] > 0 for r in per_rank)
        assert len({r["batches"] for r in per_rank}) == 1
    assert all("not a (src, relation, dst) triplet" in r["bad"] for r in results), [r["bad"] for r in results]


# ---------------------------------------------------------------- the training example


def _example():
    return load_example("train_rgcn")


RGCN_ARGS = ["--epochs", "8", "--seed", "0", "--quiet"]


def _train_rank(rank: int, world_size: int, path: str) -> dict:
    return _example().main(["--parts", path, *RGCN_ARGS])


def test_train_rgcn_example_on_two_ranks(tmp_path):
    """Hetero-SAGE on the Cora-derived graph, 2 partitions on 2 gloo ranks: a sensible accuracy, the same on both ranks."""
    path = tmp_path / "hparts"
    _example().main(["--prepare", str(HETERO), "--num-parts", "2", "--parts", str(path)])
    first, second = run_distributed(_train_rank, 2, str(path), timeout_s=300)
    assert first["world_size"] == 2 and first["test_acc"] == second["test_acc"]
    assert first["test_acc"] >= 0.6, first  # 7 classes: chance is 0.14, the largest class 0.30
