"""gr.layerwise_inference equals the full-graph forward pass of the same model on Cora (1 process, 2 gloo ranks).

The full-graph pass runs the model once over every node with the whole
stored graph's edge_index (Cora with --add-reverse, read from the
one-partition result's CSC); layer-wise inference runs layer by layer over
each rank's owned nodes in small batches, remote rows through the exchange.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import gpart.runtime as gr
from gpart.base.errors import InputError
from support.gloo_processes import run_distributed

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"


class MeanConv(nn.Module):
    """out = W_self x + W_neigh mean(x of in-neighbours)."""

    def __init__(self, dim_in: int, dim_out: int):
        super().__init__()
        self.lin_self, self.lin_neigh = nn.Linear(dim_in, dim_out), nn.Linear(dim_in, dim_out, bias=False)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        src, dst = edge_index
        total = torch.zeros_like(x).index_add_(0, dst, x[src])
        deg = torch.zeros(x.shape[0], dtype=x.dtype).index_add_(0, dst, torch.ones_like(dst, dtype=x.dtype))
        return self.lin_self(x) + self.lin_neigh(total / deg.clamp(min=1).unsqueeze(1))


def _model() -> nn.ModuleList:
    torch.manual_seed(0)
    return nn.ModuleList([MeanConv(1433, 32), MeanConv(32, 16), MeanConv(16, 7)])


def _layers(convs: nn.ModuleList) -> list:
    last = len(convs) - 1
    return [(lambda x, ei, c=c, i=i: c(x.float(), ei) if i == last else c(x.float(), ei).relu()) for i, c in enumerate(convs)]


@torch.no_grad()
def _full_graph(parts_one: Path) -> torch.Tensor:
    part = gr.load_partition(parts_one, device="cpu")
    dst = torch.repeat_interleave(torch.arange(part.num_owned), torch.diff(part.indptr))
    edge_index = torch.stack([part.indices, dst])
    x = part.node_data["feat"].float()
    for layer in _layers(_model()):
        x = layer(x, edge_index)
    return x


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> dict:
    from gpart.partition import partition_graph

    if not CORA.exists():
        pytest.skip("sample_data/cora.npz missing")
    root = tmp_path_factory.mktemp("layerwise_parts")
    out = {1: root / "one", 2: root / "two"}
    partition_graph(CORA, out[1], 1, "metis", add_reverse=True)
    partition_graph(CORA, out[2], 2, "metis", add_reverse=True, halo=1)  # halo rows stored: the layers must not read them
    return out


def test_one_process_equals_full_graph(parts):
    want = _full_graph(parts[1])
    part = gr.load_partition(parts[1], device="cpu")
    ids, got = gr.layerwise_inference(_layers(_model()), part, batch_size=300)
    assert torch.equal(ids, torch.arange(2708)) and got.shape == (2708, 7)
    assert torch.allclose(got, want, atol=1e-5, rtol=0), float((got - want).abs().max())
    with pytest.raises(InputError, match="no node data 'emb'"):
        gr.layerwise_inference(_layers(_model()), part, node_data="emb")


def _ranks(rank: int, world_size: int, path: str) -> tuple[list[int], list]:
    part = gr.load_partition(path, device="cpu")
    ids, rows = gr.layerwise_inference(_layers(_model()), part, batch_size=250)
    return ids.tolist(), rows.tolist()  # plain lists: tensors would travel as shared memory the worker frees


def test_two_ranks_equal_full_graph(parts):
    want = _full_graph(parts[1])
    results = run_distributed(_ranks, 2, str(parts[2]), timeout_s=120)
    ids = sum((r[0] for r in results), [])
    assert sorted(ids) == list(range(2708))
    got = torch.tensor(sum((r[1] for r in results), []))
    assert torch.allclose(got, want[torch.tensor(ids)], atol=1e-5, rtol=0), float((got - want[torch.tensor(ids)]).abs().max())
