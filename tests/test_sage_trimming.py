"""examples/train_sage.py's model step: per-layer trimming and the fanout-table mean give the seeds' logits of the
plain forward pass (evaluation mode), on compact and padded batches of the same draws."""

from __future__ import annotations

import pytest
import torch
from support.example_scripts import load_example
from test_runtime_sampler import CORA

import gpart.runtime as gr


@pytest.fixture(scope="module")
def cora_one(tmp_path_factory):
    from gpart.pipeline.partition import partition_graph

    if not CORA.exists():
        pytest.skip("sample_data/cora.npz missing")
    out = tmp_path_factory.mktemp("sage") / "one"
    partition_graph(CORA, out, 1, "metis", add_reverse=True)
    return out


def test_trimmed_and_table_forwards_give_the_seeds_logits(cora_one):
    example = load_example("train_sage")
    part = gr.load_partition(cora_one, device="cpu")
    torch.manual_seed(0)
    model = example.SAGE(part.node_data["feat"].shape[1], 32, 7, layers=3).eval()
    fanouts, seeds = [6, 4, 3], torch.arange(0, part.num_nodes, 7)
    loader = gr.DistNeighborLoader(part, seeds, fanouts=fanouts, batch_size=100, seed=3)
    loader.sampler.table_hops = True
    padded = gr.DistNeighborLoader(part, seeds, fanouts=fanouts, batch_size=100, seed=3, padded=True)
    count = 0
    with torch.no_grad():
        for batch, table in zip(loader, padded):
            full = model(batch.x, batch.edge_index)[: batch.batch_size]
            trimmed = example.forward(model, batch)
            tabled = example.forward(model, table)
            assert torch.allclose(full, trimmed, atol=1e-5) and torch.allclose(full, tabled, atol=1e-5)
            count += 1
    assert count == len(loader) > 1
