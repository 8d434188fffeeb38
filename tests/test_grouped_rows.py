"""Across partitions the hops list the nodes they add held-first (gpart.runtime.sampling.grouped_rows): the nodes the
partition stores first, then the others by owner. The rows are then gathered and copied without scatters, through
byte buffers reused batch after batch, and the last round's rows land in the batch's tensor as received: every
batch must stay exact, and stay as it was after later batches reuse those buffers."""

from __future__ import annotations

import dataclasses
import mmap

import numpy as np
import pytest
import torch

import gpart.runtime as gr
from gpart.bytes.huge_pages import HUGE_FROM_BYTES, empty_huge
from tests.support.gloo_processes import run_distributed
from tests.test_runtime_sampler import LAYOUTS, _cora, check_batch, cora_parts  # noqa: F401 - the fixture

FANOUTS = [4, 3, 2]


def _stored_here(part, ids: torch.Tensor) -> torch.Tensor:
    stored = part.owner(ids) == part.rank
    if part.halo and part.num_halo:  # halo rows stored with the partition
        stored |= torch.isin(ids, part.halo_ids)
    return stored


def _on_cpu(batch):
    return dataclasses.replace(batch, **{k: getattr(batch, k).cpu() for k in ("n_id", "edge_index", "e_id", "x", "y")},
                               node_data={k: v.cpu() for k, v in batch.node_data.items()})


def _ranks(rank: int, world_size: int, parts: dict, device: str = "cpu") -> dict:
    data = _cora()
    indeg = np.bincount(data["dst"], minlength=data["feat"].shape[0])
    out = {}
    for method, _, halo in LAYOUTS[world_size]:
        loaded = gr.load_partition(parts[(world_size, method)], device=device)
        part = gr.load_partition(parts[(world_size, method)], device="cpu")  # for the checks
        ids = gr.node_split(loaded, torch.arange(0, part.num_nodes, 2))
        kept, copies, orders = [], [], []
        for on_device in gr.DistNeighborLoader(loaded, ids, fanouts=FANOUTS, batch_size=64, seed=rank):
            batch = on_device if device == "cpu" else _on_cpu(on_device)
            check_batch(batch, FANOUTS, data, indeg)
            kept.append(batch)
            copies.append({k: getattr(batch, k).clone() for k in ("n_id", "edge_index", "x", "y")})
            at = batch.num_sampled_nodes[0]
            for added in batch.num_sampled_nodes[1:]:  # each hop's nodes: stored here first, then by owner
                seg = batch.n_id[at:at + added]
                key = torch.where(_stored_here(part, seg), 0, part.owner(seg) + 1)
                orders.append(bool((key[1:] >= key[:-1]).all()))
                at += added
        # later batches reused the rounds' buffers: no earlier batch changed
        same = all(torch.equal(getattr(b, k), c[k]) for b, c in zip(kept, copies) for k in c)
        # every row read or received is the node's: x is feat[n_id] for every batch kept
        exact = all(np.array_equal(b.x.numpy(), data["feat"][b.n_id.numpy()]) for b in kept)
        mixed = sum(int((part.owner(b.n_id) != rank).any()) for b in kept)
        out[method] = dict(same=same, exact=exact, orders=orders, mixed=mixed, halo=halo)
    return out


@pytest.mark.parametrize("world_size", [2, 4])
def test_hops_list_stored_nodes_first_and_batches_stay_exact(cora_parts, world_size):  # noqa: F811 - the fixture
    results = run_distributed(_ranks, world_size, cora_parts, timeout_s=300)
    for r in results:
        for method, got in r.items():
            assert got["same"] and got["exact"], (method, got)
            assert got["orders"] and all(got["orders"]), method
            assert got["mixed"] > 0  # the batches do ask other partitions


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_held_first_batches_on_one_gpu_shared_by_two_ranks(cora_parts):  # noqa: F811 - the fixture
    """Two gloo ranks on one GPU: the rows' rounds run on the CPU and land in CUDA batches (no buffer reuse)."""
    for r in run_distributed(_ranks, 2, cora_parts, "cuda", timeout_s=300):
        for method, got in r.items():
            assert got["same"] and got["exact"] and all(got["orders"]), method


def test_empty_huge_is_a_plain_writable_tensor():
    small = empty_huge((3, 4), torch.float32)
    assert small.shape == (3, 4) and small.dtype == torch.float32
    rows = HUGE_FROM_BYTES // 512 + 7
    big = empty_huge((rows, 128), torch.float32)
    assert big.shape == (rows, 128) and big.is_contiguous()
    big.fill_(2.5)
    big[7].copy_(torch.arange(128, dtype=torch.float32))
    assert float(big.sum()) == 2.5 * 128 * (rows - 1) + sum(range(128))
    if hasattr(mmap, "MADV_HUGEPAGE"):
        assert big.untyped_storage().data_ptr() % mmap.PAGESIZE == 0  # its own mapping
    del big  # the mapping goes with the tensor
