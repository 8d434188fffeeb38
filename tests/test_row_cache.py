"""load_partition(cache=...): the hot node data rows in a device cache; the same batches, counted hits and misses.

Without a GPU the cache's device is the CPU too, so every piece of the logic runs here: the slot lookup,
hits from the cached copy, misses from the host table, the counters and the re-ranking by measured reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import gpart.runtime as gr
from gpart.base.errors import GpartError
from gpart.runtime.partition.row_cache import cache_rows, degree_order

CORA = Path(__file__).resolve().parents[1] / "sample_data" / "cora.npz"


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> Path:
    from gpart.pipeline.partition import partition_graph

    root = tmp_path_factory.mktemp("row_cache")
    partition_graph(CORA, root / "one", 1, "metis")
    with np.load(CORA.with_name("cora_hetero.npz")) as z:  # and node data of the second type (word) too
        typed = dict(z)
    typed["word/vec"] = np.random.default_rng(1).random((int(typed["word/num_nodes"]), 8), dtype=np.float32)
    np.savez(root / "typed.npz", **typed)
    partition_graph(root / "typed.npz", root / "typed", 1, "metis")
    return root


def _epoch(part, seed: int = 0, seeds: Any = None, fanouts: Any = (5, 5), node_data: Any = ("feat", "train_mask")) -> list:
    """One epoch's batches (every third paper node as seeds unless given); the loader's stats show the partition's
    cache counters, read when looked at."""
    loader = gr.DistNeighborLoader(part, torch.arange(0, 2708, 3) if seeds is None else seeds, fanouts=fanouts,
                                   batch_size=128, seed=seed, node_data=list(node_data))
    batches = list(loader)
    assert (dict(loader.stats["cache"]) == part.cache_stats()) if part.row_cache is not None else "cache" not in loader.stats
    return batches


def _plain_and_cached(path: Path, cache: Any, **epoch: Any) -> tuple[list, Any, list]:
    """(the batches without a cache, the cached partition, its batches): the same seeds and draws."""
    plain = _epoch(gr.load_partition(path, device="cpu"), **epoch)
    part = gr.load_partition(path, device="cpu", feature_device="cpu", cache=cache)
    return plain, part, _epoch(part, **epoch)


@pytest.mark.parametrize("cache", [0.2, "200KB", 1.0])
def test_batches_are_the_same_with_the_cache_and_reads_are_counted(parts, cache):
    plain, part, cached = _plain_and_cached(parts / "one", cache)
    for a, b in zip(plain, cached, strict=True):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
        assert torch.equal(a.node_data["train_mask"], b.node_data["train_mask"])
    stats = part.cache_stats()
    read = sum(int(b.n_id.numel()) for b in cached)
    for name in ("feat", "train_mask"):
        assert stats[name]["hits"] + stats[name]["misses"] == read
    assert stats["feat"]["rows"] == cache_rows(cache, {k: part.node_data[k] for k in part.node_data}, None)
    if cache == 1.0:
        assert stats["feat"]["misses"] == 0 and stats["feat"]["hit_rate"] == 1.0
    else:
        assert 0.0 < stats["feat"]["hit_rate"] < 1.0
        assert stats["feat"]["bytes"] == stats["feat"]["rows"] * 1433 * 4


def test_degree_order_caches_the_hubs_and_refresh_ranks_by_reads(parts):
    part = gr.load_partition(parts / "one", device="cpu", cache=0.1)
    cache = part.row_cache
    counts = torch.bincount(part.indices.to(torch.int64), minlength=part.num_owned)
    cached = torch.nonzero(cache.slot_of >= 0).reshape(-1)
    assert int(counts[cached].min()) >= int(counts[cache.slot_of < 0].max())  # the hottest by source count
    _epoch(part)
    by_degree = part.cache_stats()["feat"]["hit_rate"]
    reads = cache.reads.clone()
    part.refresh_cache()
    cached = torch.nonzero(cache.slot_of >= 0).reshape(-1)
    assert int(reads[cached].min()) >= int(reads[cache.slot_of < 0].max())  # now the most read
    assert int(cache.reads.sum()) == 0
    before = part.cache_stats()["feat"]
    _epoch(part)  # the same seeds and draws: the measured order serves them at least as well
    after = part.cache_stats()["feat"]
    rate = (after["hits"] - before["hits"]) / (after["hits"] + after["misses"] - before["hits"] - before["misses"])
    assert rate >= by_degree


def test_degree_order_breaks_ties_by_row():
    order = degree_order(torch.tensor([2, 2, 0, 5, 9]), 4)
    assert order.tolist() == [2, 0, 1, 3]


@pytest.mark.parametrize("cache, words", [(1.5, r"cache fraction must be in \(0, 1\]"), ("lots", "is not a number"),
                                          (-3, "must be positive")])
def test_bad_cache_sizes_are_one_line(parts, cache, words):
    with pytest.raises(GpartError, match=words):
        gr.load_partition(parts / "one", device="cpu", cache=cache)


TYPED_FANOUTS = {("paper", "cites", "paper"): [4, 3], ("word", "in", "paper"): [5, 2], ("paper", "has", "word"): [3, 2]}


TYPED_EPOCH = {"seeds": {"paper": torch.arange(0, 2708, 3)}, "fanouts": TYPED_FANOUTS, "seed": 2,
               "node_data": ["feat", "train_mask", "vec"]}


@pytest.mark.parametrize("cache", [0.2, "300KB", 1.0])
def test_typed_cache_gives_the_same_batches_and_counts_reads_per_type(parts, cache):
    plain, part, cached = _plain_and_cached(parts / "typed", cache, **TYPED_EPOCH)
    for a, b in zip(plain, cached, strict=True):
        assert torch.equal(a.n_id["paper"], b.n_id["paper"]) and torch.equal(a.x["paper"], b.x["paper"])
        assert torch.equal(a.node_data["paper"]["train_mask"], b.node_data["paper"]["train_mask"])
        assert torch.equal(a.n_id["word"], b.n_id["word"]) and torch.equal(a.node_data["word"]["vec"], b.node_data["word"]["vec"])
    stats = part.cache_stats()
    assert set(stats) == set(part.node_data)  # every typed array, keyed (ntype, name)
    read = sum(int(b.n_id["paper"].numel()) for b in cached)
    feat, vec = stats[("paper", "feat")], stats[("word", "vec")]
    assert feat["hits"] + feat["misses"] == read
    assert vec["hits"] + vec["misses"] == sum(int(b.n_id["word"].numel()) for b in cached)
    assert feat["hit_rate"] == 1.0 if cache == 1.0 else 0.0 < feat["hit_rate"] < 1.0
    if cache == "300KB":  # the budget over all types' rows together, hottest first
        assert sum(v["bytes"] for v in stats.values()) <= 300 * 1024
    before = feat["hits"]
    part.refresh_cache()
    _epoch(part, **TYPED_EPOCH)
    assert part.cache_stats()[("paper", "feat")]["hits"] >= before  # the measured order serves the same epoch as well


def test_typed_cache_orders_each_type_by_its_source_counts(parts):
    from gpart.runtime.partition.typed_row_cache import typed_source_counts

    part = gr.load_partition(parts / "typed", device="cpu", cache=0.1)
    rows = {ntype: part.node_data[(ntype, next(n for t, n in part.node_data if t == ntype))].shape[0]
            for ntype in {t for t, _ in part.node_data}}
    counts = typed_source_counts(part, rows)
    # against a plain count: each stored edge's source, as (type, row), tallied with numpy
    src = part.node_ids[part.indices.to(torch.int64)].numpy()
    kinds = np.searchsorted(part.node_offsets.numpy(), src, side="right") - 1
    for ntype, count in counts.items():
        t = part.node_types.index(ntype)
        expected = np.bincount(src[kinds == t] - int(part.node_offsets[t]), minlength=rows[ntype])
        assert np.array_equal(count.numpy(), expected)
        cache = part.row_cache.caches[ntype]
        held, left = cache.slot_of >= 0, cache.slot_of < 0
        assert int(held.sum()) == int(rows[ntype] * 0.1)
        assert int(count[held].min()) >= int(count[left].max())


def test_no_cache_no_stats(parts):
    assert gr.load_partition(parts / "one", device="cpu").cache_stats() == {}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_cache_serves_the_same_batches_from_pinned_host_memory(parts):
    plain = _epoch(gr.load_partition(parts / "one", device="cuda"))
    part = gr.load_partition(parts / "one", device="cuda", feature_device="cpu", cache=0.2)
    assert part.node_data["feat"].is_pinned() and part.row_cache.rows["feat"].is_cuda
    for a, b in zip(plain, _epoch(part), strict=True):
        assert torch.equal(a.x, b.x) and torch.equal(a.n_id, b.n_id)
    assert part.cache_stats()["feat"]["hits"] > 0
