"""gr.layerwise_inference equals the full-graph forward pass of the same model: Cora and the typed Cora
(papers and words), on 1 process, 2 gloo ranks, and 2 partitions x 2 trainers each.

The full-graph pass runs the model once over every node with the whole
stored graph's edge_index (per edge type when typed), read from the
one-partition result's CSC; layer-wise inference runs layer by layer over
each rank's owned nodes in small batches, remote rows through the exchange.
With 2 trainers per partition each trainer computes half of its partition's
nodes (counted) and both return the partition's rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.gloo_processes import run_distributed
from torch import nn

import gpart.runtime as gr
from gpart.base.errors import InputError
from gpart.cli.main import main

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"
HETERO = REPO / "sample_data" / "cora_hetero.npz"
WORD_DIM = 8


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
    from gpart.pipeline.partition import partition_graph

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


# -- typed: papers (features) and words (no features: a fixed random embedding row each, as a learned one would be)


class TypedMeanConv(nn.Module):
    """out[d] = W_self[d] h[d] + sum over edge types (s, r, d) of W_r mean(h[s] of type-r in-neighbours), for the
    node types in `outputs` (the last layer gives papers alone: a type the layer gives no rows has none after it)."""

    def __init__(self, dims_in: dict[str, int], dim_out: int, edge_types: list, outputs: list[str]):
        super().__init__()
        self.edge_types, self.outputs = edge_types, outputs
        self.lin_self = nn.ModuleDict({t: nn.Linear(dims_in[t], dim_out) for t in outputs})
        self.lin_rel = nn.ModuleDict({"__".join(e): nn.Linear(dims_in[e[0]], dim_out, bias=False) for e in edge_types})

    def forward(self, x: dict, edge_index: dict) -> dict:
        out = {t: self.lin_self[t](x[t].float()) for t in self.outputs}
        for etype in self.edge_types:
            s, _, d = etype
            if d not in out:
                continue
            src, dst = edge_index[etype]
            msg = self.lin_rel["__".join(etype)](x[s].float())[src]
            total = torch.zeros(out[d].shape[0], msg.shape[1]).index_add_(0, dst, msg)
            deg = torch.zeros(out[d].shape[0]).index_add_(0, dst, torch.ones_like(dst, dtype=msg.dtype))
            out[d] = out[d] + total / deg.clamp(min=1).unsqueeze(1)
        return out


def _typed_layers(edge_types: list) -> list:
    torch.manual_seed(1)
    convs = [TypedMeanConv({"paper": 1433, "word": WORD_DIM}, 16, edge_types, ["paper", "word"]),
             TypedMeanConv({"paper": 16, "word": 16}, 16, edge_types, ["paper", "word"]),
             TypedMeanConv({"paper": 16, "word": 16}, 7, edge_types, ["paper"])]
    relu = [lambda x, ei, c=c: {t: h.relu() for t, h in c(x, ei).items()} for c in convs[:-1]]
    return relu + [convs[-1]]


def _word_rows() -> torch.Tensor:
    return torch.randn(1433, WORD_DIM, generator=torch.Generator().manual_seed(2))


def _typed_inputs(part) -> dict:
    return {"paper": "feat", "word": _word_rows()[part.owned_ids("word")]}


def _typed_edge_index(part) -> dict:
    """The whole typed graph's edge_index per edge type (typed ids), from a one-partition result's CSC."""
    base, offsets = part.base, part.node_offsets
    dst = torch.repeat_interleave(torch.arange(base.num_owned), torch.diff(base.indptr))
    edge_index = {}
    for r, (s, rel, d) in enumerate(part.edge_types):
        mine = part.edge_type == r
        edge_index[(s, rel, d)] = torch.stack([base.indices[mine] - offsets[part.node_types.index(s)],
                                               dst[mine] - offsets[part.node_types.index(d)]])
    return edge_index


@torch.no_grad()
def _typed_full_graph(parts_one: str) -> dict:
    """The typed model over the whole graph."""
    part = gr.load_partition(parts_one, device="cpu")
    edge_index = _typed_edge_index(part)
    h = {"paper": part.node_data[("paper", "feat")], "word": _word_rows()}
    for layer in _typed_layers(part.edge_types):
        h = layer(h, edge_index)
    return h


@pytest.fixture(scope="module")
def typed_parts(tmp_path_factory) -> dict:
    if not HETERO.exists():
        pytest.skip("sample_data/cora_hetero.npz missing")
    root = tmp_path_factory.mktemp("layerwise_typed")
    out = {}
    for num_parts, method, halo in ((1, "range", "0"), (2, "metis", "1")):  # halo rows stored: the layers must not read them
        out[num_parts] = str(root / f"{method}_{num_parts}")
        assert main(["partition", str(HETERO), "--parts", str(num_parts), "-o", out[num_parts], "--method", method,
                     "--halo", halo, "-q"]) == 0
    return out


def _check_typed(want: dict, ids: dict, rows: dict) -> None:
    assert sorted(rows) == ["paper"]  # the last layer gives papers alone
    assert sorted(ids["paper"]) == list(range(2708)) and len(rows["paper"]) == 2708
    got, expected = torch.tensor(rows["paper"]), want["paper"][torch.tensor(ids["paper"])]
    assert torch.allclose(got, expected, atol=1e-5, rtol=0), float((got - expected).abs().max())


def test_typed_one_process_equals_full_graph(typed_parts):
    want = _typed_full_graph(typed_parts[1])
    part = gr.load_partition(typed_parts[1], device="cpu")
    stats: dict = {}
    ids, rows = gr.layerwise_inference(_typed_layers(part.edge_types), part, node_data=_typed_inputs(part),
                                       batch_size=500, stats=stats)
    _check_typed(want, {t: v.tolist() for t, v in ids.items()}, {t: v.tolist() for t, v in rows.items()})
    # layers 1 and 2 compute both types (2708 papers, 1433 words), the last papers alone; batches of 500
    assert stats == {"rows": 2 * (2708 + 1433) + 2708, "batches": 2 * (6 + 3) + 6}
    with pytest.raises(InputError, match="of node type 'word' has"):
        gr.layerwise_inference(_typed_layers(part.edge_types), part, node_data={"paper": "feat", "word": _word_rows()[:5]})
    with pytest.raises(InputError, match="no typed node data named 'emb'"):
        gr.layerwise_inference(_typed_layers(part.edge_types), part, node_data="emb")


def test_typed_pyg_hetero_conv(typed_parts):
    """PyG's HeteroConv (SAGEConv per edge type) takes the batches as they are: the same rows as its full-graph pass."""
    nn_pyg = pytest.importorskip("torch_geometric.nn")
    part = gr.load_partition(typed_parts[1], device="cpu")
    torch.manual_seed(3)
    conv = nn_pyg.HeteroConv({e: nn_pyg.SAGEConv((1433 if e[0] == "paper" else WORD_DIM, 1433 if e[2] == "paper" else WORD_DIM), 5)
                              for e in part.edge_types}, aggr="sum")

    def layer(x: dict, edge_index: dict) -> dict:
        return conv({t: v.float() for t, v in x.items()}, edge_index)

    ids, rows = gr.layerwise_inference([layer], part, node_data=_typed_inputs(part), batch_size=700)
    with torch.no_grad():
        want = layer({"paper": part.node_data[("paper", "feat")], "word": _word_rows()}, _typed_edge_index(part))
    for t in ("paper", "word"):
        assert torch.allclose(rows[t], want[t][ids[t]], atol=1e-5, rtol=0), (t, float((rows[t] - want[t][ids[t]]).abs().max()))


def _typed_ranks(rank: int, world_size: int, path: str) -> tuple[dict, dict]:
    part = gr.load_partition(path, device="cpu")
    ids, rows = gr.layerwise_inference(_typed_layers(part.edge_types), part, node_data=_typed_inputs(part), batch_size=300)
    return {t: v.tolist() for t, v in ids.items()}, {t: v.tolist() for t, v in rows.items()}


def test_typed_two_ranks_equal_full_graph(typed_parts):
    want = _typed_full_graph(typed_parts[1])
    results = run_distributed(_typed_ranks, 2, typed_parts[2], timeout_s=180)
    ids = {"paper": sum((r[0]["paper"] for r in results), [])}
    rows = {"paper": sum((r[1]["paper"] for r in results), [])}
    _check_typed(want, ids, rows)


# -- 2 partitions x 2 trainers: each trainer computes half of its partition's nodes


def _trainer_ranks(rank: int, world_size: int, path: str, typed_path: str) -> dict:
    part = gr.load_partition(path, device="cpu")  # rank None: this job's partition, rank // 2
    stats: dict = {}
    ids, rows = gr.layerwise_inference(_layers(_model()), part, batch_size=250, stats=stats)
    typed = gr.load_partition(typed_path, device="cpu")
    typed_stats: dict = {}
    t_ids, t_rows = gr.layerwise_inference(_typed_layers(typed.edge_types), typed, node_data=_typed_inputs(typed),
                                           batch_size=300, stats=typed_stats)
    return {"partition": part.rank, "owned": part.num_owned, "ids": ids.tolist(), "rows": rows.tolist(), "stats": stats,
            "typed_owned": typed.num_owned_by_type, "typed_ids": {t: v.tolist() for t, v in t_ids.items()},
            "typed_rows": {t: v.tolist() for t, v in t_rows.items()}, "typed_stats": typed_stats}


def test_two_partitions_two_trainers_share_the_work(parts, typed_parts):
    want, typed_want = _full_graph(parts[1]), _typed_full_graph(typed_parts[1])
    results = run_distributed(_trainer_ranks, 4, str(parts[2]), typed_parts[2], timeout_s=300)
    assert [r["partition"] for r in results] == [0, 0, 1, 1]
    for p in (0, 1):
        first, second = results[2 * p], results[2 * p + 1]
        # both trainers of a partition return its owned nodes and the same rows
        assert first["ids"] == second["ids"] and first["rows"] == second["rows"]
        assert first["typed_ids"] == second["typed_ids"] and first["typed_rows"] == second["typed_rows"]
        # ... each having computed its half: per layer trainer i takes owned[n*i//2 : n*(i+1)//2]
        n = first["owned"]
        assert [first["stats"]["rows"], second["stats"]["rows"]] == [3 * (n // 2), 3 * (n - n // 2)]
        papers, words = first["typed_owned"]
        halves = [2 * (papers // 2 + words // 2) + papers // 2,
                  2 * (papers - papers // 2 + words - words // 2) + papers - papers // 2]
        assert [first["typed_stats"]["rows"], second["typed_stats"]["rows"]] == halves
    ids = torch.tensor(results[0]["ids"] + results[2]["ids"])
    assert sorted(ids.tolist()) == list(range(2708))
    got = torch.tensor(results[0]["rows"] + results[2]["rows"])
    assert torch.allclose(got, want[ids], atol=1e-5, rtol=0), float((got - want[ids]).abs().max())
    _check_typed(typed_want, {"paper": results[0]["typed_ids"]["paper"] + results[2]["typed_ids"]["paper"]},
                 {"paper": results[0]["typed_rows"]["paper"] + results[2]["typed_rows"]["paper"]})
