"""The discoverable runtime API: real signatures and docstrings for every public name of gpart.runtime, named
collectives that fail fast when ranks are in different ones, loader defaults on a graph without feat / label.

Real data: the repository's Cora sample, on 2 gloo ranks.
"""

from __future__ import annotations

import inspect
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from support.gloo_processes import error_text, run_distributed

import gpart.runtime as gr

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"


def test_every_public_name_has_a_signature_and_a_docstring():
    for name in gr.__all__:
        obj = getattr(gr, name)
        if inspect.ismodule(obj):
            assert obj.__doc__, name
            continue
        assert callable(obj) and inspect.getdoc(obj), name
        params = inspect.signature(obj).parameters.values()
        kinds = {p.kind for p in params}
        # no signature hidden behind (*args, **kwargs) alone
        assert not (kinds and kinds <= {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}), name
    for name in ("DistNeighborLoader", "DistLinkNeighborLoader", "layerwise_inference"):
        doc = inspect.getdoc(getattr(gr, name))
        assert "ON THIS RANK" in doc and "ollective" in doc, name  # batch_size per rank; what is a collective
    assert "fanouts" in str(inspect.signature(gr.DistNeighborLoader))


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> dict:
    from gpart.pipeline.partition import partition_graph

    if not CORA.exists():
        pytest.skip("sample_data/cora.npz missing")
    root = tmp_path_factory.mktemp("names")
    with np.load(CORA) as z:  # Cora's topology alone: no feat, no label
        np.savez(root / "bare.npz", src=z["src"], dst=z["dst"], num_nodes=np.int64(z["feat"].shape[0]))
    out = {}
    for n in (1, 2):
        out[n] = root / f"bare_{n}"
        partition_graph(root / "bare.npz", out[n], n, "metis")
        out[("cora", n)] = root / f"cora_{n}"
        partition_graph(CORA, out[("cora", n)], n, "metis")
    out[4] = root / "bare_4"
    partition_graph(root / "bare.npz", out[4], 4, "random")
    return out


def test_defaults_on_a_graph_without_feat_or_label(parts):
    part = gr.load_partition(parts[1], device="cpu")
    assert part.node_data == {}
    batch = next(iter(gr.DistNeighborLoader(part, [0, 1, 2], fanouts=[3])))
    assert batch.x is None and batch.y is None and batch.edge_index.shape[1] > 0
    link = next(iter(gr.DistLinkNeighborLoader(part, [0, 1, 2], fanouts=[3], neg_sampling="binary")))
    assert link.x is None and link.edge_label.tolist() == [1, 1, 1, 0, 0, 0]


def _mismatch(rank: int, world_size: int, parts: dict) -> dict:
    out = {}
    part = gr.load_partition(parts[("cora", 2)], device="cpu")
    identity = [lambda x, ei: x]
    cases = {
        "layerwise_vs_barrier": (lambda: gr.layerwise_inference(identity, part), lambda: gr.barrier()),
        "loader_vs_split": (lambda: gr.DistNeighborLoader(part, [0]), lambda: gr.node_split(part, "train_mask")),
    }
    for case, (on_zero, on_one) in cases.items():
        start = time.monotonic()
        try:
            (on_zero if rank == 0 else on_one)()
            out[case] = (0.0, "no error")
        except Exception as exc:  # noqa: BLE001 - the message is what is checked
            out[case] = (time.monotonic() - start, f"{type(exc).__name__}: {exc}")
    # batch sizes differ: every rank would count the batches differently, so building fails on both at once
    out["batch_sizes"] = error_text(lambda: gr.DistNeighborLoader(part, [rank], batch_size=8 + rank))
    gr.barrier()  # both still in step: the failed checks counted on both ranks
    bare = gr.load_partition(parts[2], device="cpu")
    ids = gr.node_split(bare, torch.arange(0, 2708, 5))
    out["bare_batches"] = sum(1 for b in gr.DistNeighborLoader(bare, ids, fanouts=[2, 2], batch_size=64) if b.x is None)
    return out


def test_collectives_in_different_places_fail_at_once_naming_both(parts):
    results = run_distributed(_mismatch, 2, parts, timeout_s=120)
    for r in results:
        seconds, message = r["layerwise_vs_barrier"]
        assert seconds < 2 and message.startswith("RankMismatchError"), r
        assert "'layerwise_inference'" in message and "'barrier'" in message, message
        seconds, message = r["loader_vs_split"]
        assert seconds < 2 and "'the DistNeighborLoader settings'" in message and "'node_split'" in message, message
        assert r["bare_batches"] > 0
        assert "ranks disagree about the DistNeighborLoader settings" in r["batch_sizes"] and "batch_size=8" in r["batch_sizes"]


def _wrong_layout(rank: int, world_size: int, parts: dict) -> dict:
    out = {}
    for case, call in (("four_on_two", lambda: gr.load_partition(parts[4], device="cpu")),
                       ("four_on_two_split", lambda: gr.node_split(gr.load_partition(parts[4], rank, device="cpu"), [0])),
                       ("swapped", lambda: gr.node_split(gr.load_partition(parts[2], 1 - rank, device="cpu"), [0]))):
        out[case] = error_text(call)
    return out


def test_wrong_layout_messages_say_what_fits_and_how_to_fix(parts):
    for rank, r in enumerate(run_distributed(_wrong_layout, 2, parts, timeout_s=120)):
        for case in ("four_on_two", "four_on_two_split"):
            message = r[case]
            assert message.startswith("InputError") and "has 4 partitions but the job has 2 ranks" in message, message
            assert "4 x L ranks (4, 8, 12, 16, ...)" in message and "2 ranks fit results of 1, 2 partitions" in message
            assert "torchrun --nnodes 4 --nproc-per-node L" in message and "--parts one of 1, 2" in message
        message = r["swapped"]
        assert f"rank {rank} of 2 loaded partition {1 - rank} of 2" in message and f"rank {rank} on partition {rank}" in message
        assert "gr.load_partition(path) (rank left out)" in message and "\n" not in message
