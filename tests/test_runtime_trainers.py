"""Several trainers per partition (gpart.runtime.partition.trainers) and the composed loader's pieces.

Real data: the repository's Cora sample. 2 partitions x 2 trainers on 4 gloo
ranks: each rank loads its machine's partition (rank // 2) through the
memory-mapped files, node_split divides the training nodes over all four,
every batch is exact against the input and one epoch covers the split once.
The partition's arrays are mapped, not copied: /proc/self/smaps shows the
partition files mapped in every trainer without private dirty pages, their
pages shared between the two trainers of a partition.
A world size that fits no layout gets a one-line error naming those that fit.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from support.gloo_processes import run_distributed

import gpart.runtime as gr
from gpart.base.errors import InputError
from gpart.runtime.loaders.node import unfused_loader
from gpart.runtime.partition.trainers import layout_problem

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"
HETERO = REPO / "sample_data" / "cora_hetero.npz"
TYPED_FANOUTS = {("paper", "cites", "paper"): [4, 3], ("word", "in", "paper"): [5, 2]}
FANOUTS = [4, 3]


def _cora() -> dict[str, np.ndarray]:
    with np.load(CORA, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def two_parts(tmp_path_factory) -> Path:
    from gpart.pipeline.partition import partition_graph

    if not CORA.exists() or not HETERO.exists():
        pytest.skip("sample_data/cora.npz or cora_hetero.npz missing")
    root = tmp_path_factory.mktemp("trainers")
    partition_graph(CORA, root / "metis_2", 2, "metis")
    partition_graph(HETERO, root / "typed_2", 2, "metis")
    return root / "metis_2"


def _mapped(directory: Path, partition: int) -> dict[str, dict[str, int]]:
    """Per file of partition `partition` of `directory` mapped into this process: its Rss and Private_Dirty bytes (from /proc/self/smaps)."""
    found: dict[str, dict[str, int]] = {}
    current = None
    prefix = str(directory / f"part_{partition}")
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):  # a mapping's header (anonymous ones have no path)
            mapped = len(fields) >= 6 and fields[5].startswith(prefix)
            current = found.setdefault(Path(fields[5]).name, {"Rss": 0, "Private_Dirty": 0, "Shared_Clean": 0}) if mapped else None
        elif current is not None and fields and fields[0].rstrip(":") in current:
            current[fields[0].rstrip(":")] += int(fields[1]) * 1024
    return found


def _check_batch(batch, data: dict, indeg: np.ndarray) -> None:
    n_id, ei, e_id = batch.n_id.numpy(), batch.edge_index.numpy(), batch.e_id.numpy()
    assert np.array_equal(data["src"][e_id], n_id[ei[0]]) and np.array_equal(data["dst"][e_id], n_id[ei[1]])
    first, edge_start = 0, 0
    for hop, fanout in enumerate(FANOUTS):
        size = batch.num_sampled_nodes[hop]
        got = np.bincount(ei[1, edge_start:edge_start + batch.num_sampled_edges[hop]] - first, minlength=size)
        assert np.array_equal(got, np.minimum(indeg[n_id[first:first + size]], fanout)), hop
        first, edge_start = first + size, edge_start + batch.num_sampled_edges[hop]
    assert np.array_equal(batch.x.numpy(), data["feat"][n_id])
    assert np.array_equal(batch.y.numpy(), data["label"][n_id[: batch.batch_size]])


def _trainer(rank: int, world_size: int, path: str) -> dict:
    data = _cora()
    indeg = np.bincount(data["dst"], minlength=data["feat"].shape[0])
    part = gr.load_partition(path, device="cpu")  # rank None: this job's partition, rank // 2
    ids = gr.node_split(part, "train_mask")
    out = {"partition": part.rank, "split": ids.tolist(), "owned": int((part.owner(ids) == part.rank).sum())}
    for fuse in (True, False):
        loader = (gr.DistNeighborLoader if fuse else unfused_loader)(part, ids, fanouts=FANOUTS, batch_size=32, seed=5)
        seen = []
        for batch in loader:
            _check_batch(batch, data, indeg)
            seen += batch.n_id[: batch.batch_size].tolist()
        out[f"seen_{fuse}"], out[f"batches_{fuse}"] = seen, len(loader)
        out[f"collectives_{fuse}"] = loader.stats["collectives"]
    out["mapped"] = _mapped(Path(path).resolve(), part.rank)
    # a typed partition, 2 trainers each: the same loader, typed batches whose edges are the input's
    typed = gr.load_partition(Path(path).parent / "typed_2", device="cpu")
    with np.load(HETERO, allow_pickle=False) as z:
        hetero = {k: z[k] for k in z.files}
    train = gr.node_split(typed.base, torch.from_numpy(np.flatnonzero(hetero["paper/train_mask"])))  # paper ids come first
    seen = []
    for batch in gr.DistNeighborLoader(typed, {"paper": train}, fanouts=TYPED_FANOUTS, batch_size=16, seed=rank):
        for etype, ei in batch.edge_index.items():
            key = ":".join(etype)
            e = batch.e_id[etype].numpy()
            assert np.array_equal(hetero[f"{key}/src"][e], batch.n_id[etype[0]][ei[0]].numpy())
            assert np.array_equal(hetero[f"{key}/dst"][e], batch.n_id[etype[2]][ei[1]].numpy())
        assert np.array_equal(batch.y.numpy(), hetero["paper/label"][batch.n_id["paper"][: batch.batch_size].numpy()])
        seen += batch.n_id["paper"][: batch.batch_size].tolist()
    out["typed_split"], out["typed_seen"] = train.tolist(), seen
    return out


def test_two_partitions_two_trainers_each(two_parts):
    results = run_distributed(_trainer, 4, str(two_parts), timeout_s=240)
    train = np.flatnonzero(_cora()["train_mask"]).tolist()
    assert [r["partition"] for r in results] == [0, 0, 1, 1]
    splits = [r["split"] for r in results]
    assert sorted(sum(splits, [])) == train  # every training node on exactly one trainer
    assert max(map(len, splits)) - min(map(len, splits)) <= 1
    for fuse in (True, False):
        # one epoch covers each trainer's split exactly once; every rank ran the same number of batches
        assert all(sorted(r[f"seen_{fuse}"]) == sorted(r["split"]) for r in results)
        assert len({r[f"batches_{fuse}"] for r in results}) == 1
    batches = results[0]["batches_True"]
    assert all(r["collectives_True"] == batches * (3 * len(FANOUTS) + 3) for r in results)
    typed_train = np.flatnonzero(np.load(HETERO)["paper/train_mask"]).tolist()
    assert sorted(sum((r["typed_split"] for r in results), [])) == typed_train
    assert all(sorted(r["typed_seen"]) == sorted(r["typed_split"]) for r in results)
    for r in results:  # the partition's files are mapped in every trainer, their pages shared, none copied
        assert {"indptr.bin", "indices.bin"} <= set(r["mapped"]), sorted(r["mapped"])
        assert all(v["Private_Dirty"] == 0 for v in r["mapped"].values()), r["mapped"]
        # the other trainer of the partition maps the same pages (both sampled in lockstep): counted as shared
        assert r["mapped"]["indices.bin"]["Shared_Clean"] > 0 and r["mapped"]["feat.bin"]["Shared_Clean"] > 0, r["mapped"]


def _bad_world(rank: int, world_size: int, path: str) -> str:
    try:
        gr.load_partition(path, device="cpu")
    except InputError as exc:
        return str(exc)
    return "no error"


def test_world_size_that_fits_no_layout(two_parts):
    messages = run_distributed(_bad_world, 3, str(two_parts), timeout_s=120)
    for message in messages:
        assert "has 2 partitions but the job has 3 ranks" in message and "2 x L ranks (2, 4, 6, 8, ...)" in message
        assert "\n" not in message
    assert layout_problem(2, 4) is None and layout_problem(2, 1) is None
    assert "fit results of 1, 5 partitions" in layout_problem(2, 5)


def test_loader_signature_and_docstring():
    params = inspect.signature(gr.DistNeighborLoader).parameters
    assert list(params)[:4] == ["part", "seeds", "fanouts", "batch_size"]
    doc = gr.DistNeighborLoader.__doc__
    assert "ON THIS RANK" in doc and "Collectives" in doc
