"""Typed results with halo rows (`--halo 1`, SPEC.md 8.4), typed edge data in the runtime (SPEC.md 8.5), the sampler's split by type."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from support.cli_run import run
from support.gloo_processes import run_distributed

import gpart.runtime as gr
from gpart.base.errors import NotLocalError
from gpart.cli.main import main
from gpart.formats.input.typed import read_hetero_graph
from gpart.formats.partition.reader import PartitionReader

REPO = Path(__file__).resolve().parents[1]
HETERO = REPO / "sample_data" / "cora_hetero.npz"
FANOUTS = {("paper", "cites", "paper"): [4, 3], ("word", "in", "paper"): [5, 2], ("paper", "has", "word"): [3, 2]}


@pytest.fixture(scope="module")
def halo_parts(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hetero_halo")
    out = {}
    for storage in ("binary", "hdf5"):
        out[storage] = root / storage
        assert main(["partition", str(HETERO), "--parts", "2", "-o", str(out[storage]), "--method", "metis", "--halo", "1",
                     "--format", storage, "-q"]) == 0
    return out


@pytest.mark.parametrize("storage", ["binary", "hdf5"])
def test_halo_rows_follow_owned_rows_per_type(capsys, halo_parts, storage):
    """Independently of verify: each typed array is owned rows, then the type's halo rows, ascending typed id."""
    out = halo_parts[storage]
    g = read_hetero_graph(HETERO)
    with PartitionReader(out) as r:
        meta, noff = r.hetero, r.hetero.node_offsets
        assert r.halo == 1
        total_halo = 0
        for p in range(r.num_parts):
            info = r.part_info(p)
            node_ids = np.asarray(r.array(p, "node_ids"))
            num_owned, c = info["num_owned"], info["hetero"]
            halo = node_ids[num_owned:]
            assert np.array_equal(np.diff(np.searchsorted(halo, noff)), c["num_halo"])
            assert sum(c["num_halo"]) == info["num_halo"] > 0 and min(c["num_halo"]) > 0  # both types have halo nodes
            total_halo += info["num_halo"]
            for t, ntype in enumerate(meta.node_types):
                own = node_ids[:num_owned][(node_ids[:num_owned] >= noff[t]) & (node_ids[:num_owned] < noff[t + 1])] - noff[t]
                hal = halo[(halo >= noff[t]) & (halo < noff[t + 1])] - noff[t]
                for name, arr in g.node_data.get(ntype, {}).items():
                    stored = np.asarray(r.array(p, f"node_data/{ntype}/{name}"))
                    assert stored.shape[0] == own.shape[0] + hal.shape[0] == c["num_owned"][t] + c["num_halo"][t]
                    assert np.array_equal(stored, np.asarray(arr)[np.concatenate([own, hal])]), (p, ntype, name)
    rc, text, err = run(capsys, "verify", out, "--graph", HETERO)
    assert rc == 0 and "reconstruction" in text, text + err
    rc, text, _ = run(capsys, "info", out, "--json")
    h = json.loads(text)["hetero"]
    assert rc == 0 and h["halo_rows"] is True and sum(sum(t["halo"]) for t in h["node_types"]) == total_halo
    rc, text, _ = run(capsys, "info", out)
    assert rc == 0 and "halo per part" in text and "halo nodes stored" in text
    if storage == "binary":  # export-feat reads the owned rows only: typed id order, no halo row twice
        wg = out.parent / "wg_halo"
        assert run(capsys, "export-feat", out, "--node-type", "paper", "--name", "label", "-o", wg, "--files", 1, "-q")[0] == 0
        label = g.node_data["paper"]["label"]
        assert np.array_equal(np.fromfile(next(wg.glob("paper.label/paper.label_part_*")), label.dtype), label)


def test_verify_finds_a_damaged_halo_row(capsys, halo_parts, tmp_path):
    import shutil

    out = tmp_path / "parts"
    shutil.copytree(halo_parts["binary"], out)
    m = json.loads((out / "manifest.json").read_text())
    part = m["partitions"][0]
    entry = part["arrays"]["node_data/paper/label"]
    path = out / entry["file"]
    data = np.fromfile(path, np.dtype(entry["dtype"]))
    row = part["hetero"]["num_owned"][0]  # the first halo row of type paper
    data[row] += 1
    data.tofile(path)
    entry["crc32"] = f"{zlib.crc32(data.tobytes()):08x}"  # a matching checksum: only the comparison with the input sees it
    (out / "manifest.json").write_text(json.dumps(m))
    rc, text, err = run(capsys, "verify", out, "--graph", HETERO)
    # the result's checksums and invariants hold: verify names the input as the side that disagrees (exit 3)
    assert rc == 3 and "node_data/paper/label" in text + err and f"first: row {row}" in text + err


def test_gather_answers_halo_ids_from_local_rows(halo_parts):
    """Without torch.distributed only local rows can answer: halo ids work, ids neither owned nor halo do not."""
    with np.load(HETERO) as z:
        feat = z["paper/feat"]
    part = gr.load_partition(halo_parts["binary"], 0, device="cpu")
    noff = int(part.node_offsets[0])
    halo = part.base.halo_ids
    halo_papers = halo[halo < noff + 2708] - noff
    assert halo_papers.numel() > 0
    mixed = torch.cat([halo_papers, part.owned_ids("paper")[:5]])
    assert torch.equal(part.gather(("paper", "feat"), mixed), torch.from_numpy(feat[mixed.numpy()]))
    elsewhere = np.setdiff1d(np.arange(2708), np.concatenate([mixed.numpy(), part.owned_ids("paper").numpy()]))
    with pytest.raises(NotLocalError, match="not in partition 0"):
        part.gather(("paper", "feat"), torch.from_numpy(elsewhere[:3]))


def _halo_ranks(rank: int, world_size: int, path: str) -> dict:
    data = {k: v for k, v in np.load(HETERO).items()}
    part = gr.load_partition(path, device="cpu")
    every = torch.arange(2708)
    rows = part.local_rows("paper", every)
    held_here = int((rows >= 0).sum())
    assert torch.equal(part.gather(("paper", "feat"), every[rows >= 0]), part.node_data[("paper", "feat")][rows[rows >= 0]])
    assert torch.equal(part.gather(("paper", "feat"), every), torch.from_numpy(data["paper/feat"]))
    owned = part.owned_ids("paper")
    train = owned[part.node_data[("paper", "train_mask")][: owned.numel()]]
    loader = gr.DistNeighborLoader(part, {"paper": train}, fanouts=FANOUTS, batch_size=32, seed=rank)
    seen, edges = [], 0
    for batch in loader:
        for etype, ei in batch.edge_index.items():
            key = ":".join(etype)
            e = batch.e_id[etype].numpy()
            assert np.array_equal(data[f"{key}/src"][e], batch.n_id[etype[0]][ei[0]].numpy())
            assert np.array_equal(data[f"{key}/dst"][e], batch.n_id[etype[2]][ei[1]].numpy())
            edges += e.shape[0]
        assert torch.equal(batch.x["paper"], torch.from_numpy(data["paper/feat"][batch.n_id["paper"].numpy()]))
        seen += batch.n_id["paper"][: batch.batch_size].tolist()
    return {"held": held_here, "owned": owned.numel(), "seen": sorted(seen), "train": sorted(train.tolist()), "edges": edges}


def test_two_ranks_gather_and_sample_on_halo_partitions(halo_parts):
    results = run_distributed(_halo_ranks, 2, str(halo_parts["binary"]), timeout_s=150)
    train = np.flatnonzero(np.load(HETERO)["paper/train_mask"]).tolist()
    assert sorted(sum((r["train"] for r in results), [])) == train
    for r in results:
        assert r["seen"] == r["train"] and r["edges"] > 0
        assert r["held"] > r["owned"]  # halo papers are answered locally, not only owned ones


# ---------------------------------------------------------------- typed edge data in the runtime


def _edge_graph(path: Path) -> Path:
    rng = np.random.default_rng(3)
    n_p, n_a = 40, 15
    arrays = {"paper/num_nodes": np.int64(n_p), "author/num_nodes": np.int64(n_a),
              "paper/feat": rng.random((n_p, 3), dtype=np.float32),
              "author:writes:paper/src": rng.integers(0, n_a, 90), "author:writes:paper/dst": rng.integers(0, n_p, 90),
              "author:writes:paper/weight": rng.random((90, 2), dtype=np.float32),
              "author:writes:paper/year": rng.integers(1990, 2020, 90).astype(np.int16),
              "paper:cites:paper/src": rng.integers(0, n_p, 70), "paper:cites:paper/dst": rng.integers(0, n_p, 70),
              "paper:cites:paper/weight": rng.random(70, dtype=np.float32)}
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("halo", [0, 1])
def test_load_partition_loads_typed_edge_data(capsys, tmp_path, halo):
    src = _edge_graph(tmp_path / "g.npz")
    out = tmp_path / "parts"
    assert run(capsys, "partition", src, "--parts", 2, "-o", out, "--method", "random", "--halo", halo, "-q")[0] == 0
    z = np.load(src)
    writes, cites = ("author", "writes", "paper"), ("paper", "cites", "paper")
    for rank in range(2):
        part = gr.load_partition(out, rank, device="cpu")
        assert set(part.edge_data) == {(writes, "weight"), (writes, "year"), (cites, "weight")}
        eoff = part.edge_offsets
        for r, etype in enumerate(part.edge_types):
            positions = torch.nonzero(part.edge_type == r).reshape(-1)
            typed = (part.base.edge_ids[positions] - eoff[r]).numpy()
            for (et, name), table in part.edge_data.items():
                if et != etype:
                    continue
                want = z[f"{':'.join(et)}/{name}"][typed]
                assert np.array_equal(table.numpy(), want)  # rows of the type's stored edges, CSC order
                shuffled = positions.flip(0).reshape(-1, 1)
                got = part.gather_edges((et, name), shuffled)
                assert got.shape == (positions.numel(), 1, *want.shape[1:])
                assert np.array_equal(got.reshape(positions.numel(), *want.shape[1:]).numpy(), want[::-1])
        some_cites = torch.nonzero(part.edge_type == part.meta.etype_index(cites)).reshape(-1)[:1]
        with pytest.raises(IndexError, match="not of edge type author:writes:paper"):
            part.gather_edges((writes, "weight"), some_cites)
    only = gr.load_partition(out, 0, device="cpu", edge_data=["author:writes:paper/year"])
    assert list(only.edge_data) == [(writes, "year")]
    with pytest.raises(KeyError, match="no typed edge data paper:cites:paper/weight"):
        only.gather_edges((cites, "weight"), [0])
    with pytest.raises(Exception, match="no typed edge data author:writes:paper/nope"):
        gr.load_partition(out, 0, device="cpu", edge_data=[(writes, "nope")])


# ---------------------------------------------------------------- the sampler's split by type


def test_split_by_type_counting_and_sorting_paths_agree(monkeypatch, tmp_path):
    """The counting sort (small batches) and the stable-sort fallback give the same typed batches, which hold
    only input edges, grouped by type with the batch order kept, per-hop counts adding up."""
    from gpart.runtime.loaders import typed_batch as hetero_loader

    out = tmp_path / "parts"
    assert main(["partition", str(HETERO), "--parts", "1", "-o", str(out), "--method", "range", "-q"]) == 0
    data = {k: v for k, v in np.load(HETERO).items()}
    part = gr.load_partition(out, device="cpu")
    seeds = np.flatnonzero(data["paper/train_mask"])

    def batches():
        loader = gr.DistNeighborLoader(part, {"paper": seeds}, fanouts=FANOUTS, batch_size=40, seed=7, shuffle=False)
        return list(loader)

    counted = batches()
    monkeypatch.setattr(hetero_loader, "ONE_HOT_LIMIT", 0)
    sorted_ = batches()
    assert len(counted) == len(sorted_) == 4
    for i, (a, b) in enumerate(zip(counted, sorted_)):
        assert a.n_id.keys() == b.n_id.keys() and all(torch.equal(a.n_id[t], b.n_id[t]) for t in a.n_id)
        assert a.edge_index.keys() == b.edge_index.keys() == set(FANOUTS)
        assert all(torch.equal(a.edge_index[e], b.edge_index[e]) and torch.equal(a.e_id[e], b.e_id[e]) for e in a.edge_index)
        assert a.num_sampled_nodes == b.num_sampled_nodes and a.num_sampled_edges == b.num_sampled_edges
        for etype, ei in a.edge_index.items():
            key = ":".join(etype)
            e = a.e_id[etype].numpy()
            assert np.array_equal(data[f"{key}/src"][e], a.n_id[etype[0]][ei[0]].numpy())
            assert np.array_equal(data[f"{key}/dst"][e], a.n_id[etype[2]][ei[1]].numpy())
            assert sum(a.num_sampled_edges[etype]) == e.shape[0] > 0
        for t, ids in a.n_id.items():
            assert sum(a.num_sampled_nodes[t]) == ids.numel() and np.unique(ids.numpy()).shape[0] == ids.numel()
        assert torch.equal(a.n_id["paper"][: a.batch_size], torch.from_numpy(seeds[40 * i: 40 * i + a.batch_size]))  # seeds first, in order
