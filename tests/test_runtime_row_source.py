"""A row source of the caller's own (gpart.runtime.RowSource): rows computed from the nodes' global ids, read
only on the rank that owns them, travel through the loader's sampling answers; a few training steps on it.

Real data (Cora, 2 gloo ranks, a metis partition with halo rows stored, so a
halo node's rows would be at hand in the partition but not in the source):
every batch's x and y are exactly the source's rows of n_id and of the
seeds, the source is asked for owned rows only, and the sampled sub-graphs
are those of the same loader over the partition's own node data.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.gloo_processes import run_distributed

import gpart.runtime as gr
from gpart.base.errors import InputError

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"
FANOUTS = [4, 3]
CLASSES = 7


def code_of(gids: torch.Tensor) -> torch.Tensor:
    """The rows the source serves for global ids: [id, id mod 7, id div 7] as float32 (exact below 2^24)."""
    return torch.stack([gids, gids % CLASSES, gids // CLASSES], 1).to(torch.float32)


class IdCodes(gr.RowSource):
    """Rows computed from the global ids of this partition's owned nodes; labels id mod 7."""

    def __init__(self, part):
        self.node_ids, self.num_owned = part.node_ids, part.num_owned
        self.largest_row = -1  # the largest row id asked for

    def keys(self):
        return ["code", "klass"]

    def row_spec(self, key):
        return (torch.float32, (3,)) if key == "code" else (torch.int64, ())

    def read(self, key, rows):
        self.largest_row = max(self.largest_row, int(rows.max()) if rows.numel() else -1)
        gids = torch.index_select(self.node_ids, 0, rows)
        return code_of(gids) if key == "code" else gids % CLASSES


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> dict:
    from gpart.pipeline.partition import partition_graph

    if not CORA.exists():
        pytest.skip("sample_data/cora.npz missing")
    root = tmp_path_factory.mktemp("row_source")
    out = {1: root / "one", 2: root / "two"}
    partition_graph(CORA, out[1], 1, "metis")
    partition_graph(CORA, out[2], 2, "metis", halo=1)
    return out


def _train(part, loader) -> dict:
    """A few SGD steps of a linear classifier on the batches' mean-aggregated rows; every batch checked."""
    torch.manual_seed(0)
    model = torch.nn.Linear(6, CLASSES)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    before = model.weight.detach().clone()
    exact, steps = [], 0
    for batch in loader:
        exact.append(torch.equal(batch.x, code_of(batch.n_id)) and
                     torch.equal(batch.y, batch.n_id[: batch.batch_size] % CLASSES) and
                     torch.equal(batch.node_data.get("klass", batch.n_id % CLASSES), batch.n_id % CLASSES))
        src, dst = batch.edge_index
        agg = torch.zeros_like(batch.x).index_add_(0, dst, batch.x[src])
        deg = torch.bincount(dst, minlength=batch.num_nodes).clamp(min=1).unsqueeze(1)
        h = torch.cat([batch.x, agg / deg], 1)[: batch.batch_size]
        loss = torch.nn.functional.cross_entropy(model(h / 1000), batch.y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += int(batch.batch_size > 0 and bool(torch.isfinite(loss)))
    return {"exact": exact, "steps": steps, "moved": not torch.equal(before, model.weight.detach())}


def _rank(rank: int, world_size: int, path: str) -> dict:
    part = gr.load_partition(path, device="cpu")
    seeds = gr.node_split(part, "train_mask")
    source = IdCodes(part)
    loader = gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, batch_size=32, seed=rank, node_data=["code", "klass"],
                                   labels="klass", row_source=source)
    out = _train(part, loader)
    out["largest_row"], out["num_owned"], out["halo_stored"] = source.largest_row, part.num_owned, part.num_halo > 0
    # the source changes the rows, not the sampling: the same sub-graphs as over the partition's own node data
    own = gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, batch_size=32, seed=rank)
    again = gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, batch_size=32, seed=rank, node_data="code", labels=None,
                                  row_source=IdCodes(part))
    out["same_graphs"] = all(torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
                             for a, b in zip(own, again))
    return out


def test_a_row_source_of_our_own_trains_on_two_ranks(parts):
    results = run_distributed(_rank, 2, str(parts[2]), timeout_s=240)
    for r in results:
        assert r["exact"] and all(r["exact"]), r
        assert r["steps"] == len(r["exact"]) and r["moved"]
        assert r["halo_stored"] and 0 <= r["largest_row"] < r["num_owned"]  # owned rows only were read
        assert r["same_graphs"]


def test_one_partition_and_the_errors(parts):
    part = gr.load_partition(parts[1], device="cpu")
    seeds = torch.arange(0, part.num_nodes, 5)
    got = _train(part, gr.DistNeighborLoader(part, seeds, fanouts=FANOUTS, batch_size=64, node_data="code",
                                             labels="klass", row_source=IdCodes(part)))
    assert got["exact"] and all(got["exact"]) and got["moved"]
    # the defaults ("feat", "label") are taken only when the source has them: none here
    batch = next(iter(gr.DistNeighborLoader(part, seeds, fanouts=[2], row_source=IdCodes(part))))
    assert batch.x is None and batch.y is None and batch.node_data == {}
    with pytest.raises(InputError, match=r"no node data 'feat' loaded \(loaded: code, klass\)"):
        gr.DistNeighborLoader(part, seeds, node_data="feat", row_source=IdCodes(part))
    with pytest.raises(InputError, match=r"no node data 'code' loaded"):  # the partition's own rows have no "code"
        gr.DistNeighborLoader(part, seeds, node_data="code")
    # link batches read the same source
    link = next(iter(gr.DistLinkNeighborLoader(part, torch.arange(0, 40), fanouts=[2], batch_size=20,
                                               node_data="code", row_source=IdCodes(part))))
    assert torch.equal(link.x, code_of(link.n_id))
