"""load_partition(topology="pinned"): the topology in pinned host memory that the GPU reads in place (UVA).

On the CPU: the interface handed to torch, and the one-line refusals. The placement tests run twice: with CUDA
(skipped without), where the per-edge arrays lie in registered host memory, not in the GPU allocator's; and
on the CPU with a stand-in for the mapping (a recorded copy), which checks that every per-edge array and every
table made from them goes through the placement and that the draws (uniform, weighted, temporal, typed) give
the same batches as with the topology on the device.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import gpart.runtime as gr
import gpart.runtime.partition.device as device_module
import gpart.runtime.partition.load as load_module
from gpart.base.errors import GpartError, InputError
from gpart.runtime.partition.device import check_topology, place_topology
from gpart.runtime.partition.host_mapped import cuda_array_interface, is_host_mapped, map_to_device

CORA = Path(__file__).resolve().parents[1] / "sample_data" / "cora.npz"


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> Path:
    from gpart.pipeline.partition import partition_graph

    root = tmp_path_factory.mktemp("pinned_topology")
    with np.load(CORA) as graph:
        arrays = dict(graph)
    rng = np.random.default_rng(3)
    arrays["edge_w"] = rng.exponential(1.0, arrays["src"].shape[0]).astype(np.float32)  # per edge: edge data
    arrays["edge_t"] = rng.random(arrays["src"].shape[0])
    np.savez(root / "weighted.npz", **arrays)
    partition_graph(root / "weighted.npz", root / "one", 1, "metis")
    partition_graph(CORA.with_name("cora_hetero.npz"), root / "typed", 1, "metis")
    return root


@pytest.mark.parametrize("dtype, typestr", [(torch.int64, "<i8"), (torch.int32, "<i4"), (torch.float32, "<f4"),
                                            (torch.float64, "<f8"), (torch.uint8, "|u1")])
def test_the_interface_torch_wraps(dtype, typestr):
    face = cuda_array_interface(0x7F00_0000_1000, (5, 3), dtype)
    # writable (torch refuses read-only data), C-contiguous, version 2: what tensor_from_cuda_array_interface reads
    assert face == {"shape": (5, 3), "typestr": typestr, "data": (0x7F00_0000_1000, False), "version": 2, "strides": None}


def test_pinned_topology_needs_a_gpu(parts):
    with pytest.raises(InputError, match="topology='pinned' keeps the topology in host memory for a GPU") as err:
        gr.load_partition(parts / "one", device="cpu", topology="pinned")
    assert str(parts / "one") in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(GpartError, match="topology must be one of 'device', 'pinned', got 'host'"):
        gr.load_partition(parts / "one", device="cpu", topology="host")
    with pytest.raises(InputError, match="needs a CUDA device, not cpu"):
        map_to_device(torch.arange(4), torch.device("cpu"))


def test_device_topology_is_left_where_it_is(parts):
    part = gr.load_partition(parts / "one", device="cpu")
    assert part.topology == "device" and part.place_edge_array(part.indices) is part.indices
    assert not is_host_mapped(part.indices)
    moved = place_topology(torch.arange(6), torch.device("cpu"), "device")
    assert torch.equal(moved, torch.arange(6))


@pytest.fixture(params=["cuda", "cpu-stand-in"])
def mapped(request, monkeypatch):
    """(device, is_mapped): the real mapping on CUDA, or on the CPU a recorded copy standing in for it."""
    if request.param == "cuda":
        if not torch.cuda.is_available():
            pytest.skip("needs CUDA")
        return "cuda", is_host_mapped
    copies: set[int] = set()

    def stand_in(host: torch.Tensor, device: torch.device) -> torch.Tensor:
        out = host.clone()
        copies.add(out.untyped_storage().data_ptr())
        return out

    def recorded(tensor: torch.Tensor) -> bool:
        return tensor.untyped_storage().data_ptr() in copies

    monkeypatch.setattr(device_module, "map_to_device", stand_in)
    monkeypatch.setattr(device_module, "is_host_mapped", recorded)
    monkeypatch.setattr(load_module, "check_topology", lambda topology, dev, where: check_topology(topology, torch.device("cuda"), where))
    return "cpu", recorded


def _batches(part, **loader_options) -> list:
    seeds = torch.arange(0, 2708, 7)
    loader = gr.DistNeighborLoader(part, seeds, fanouts=[5, 3], batch_size=128, seed=11, **loader_options)
    return [(b.n_id.cpu(), b.edge_index.cpu(), b.e_id.cpu()) for b in loader]


@pytest.mark.parametrize("options", [{}, {"replace": True}, {"weight": "edge_w"}, {"weight": "edge_w", "replace": True},
                                     {"time": "edge_t", "seed_time": 0.5, "disjoint": True}],
                         ids=["uniform", "uniform-replace", "weighted", "weighted-replace", "temporal"])
def test_pinned_topology_gives_the_batches_of_device_topology(parts, mapped, options):
    dev, is_mapped = mapped
    if "seed_time" in options:
        options = {**options, "seed_time": torch.full((len(range(0, 2708, 7)),), options["seed_time"], dtype=torch.float64)}
    on_device = gr.load_partition(parts / "one", device=dev)
    pinned = gr.load_partition(parts / "one", device=dev, topology="pinned")
    assert pinned.topology == "pinned"
    for key in ("indptr", "indices", "edge_ids"):
        assert is_mapped(getattr(pinned, key)) and not is_mapped(getattr(on_device, key))
        assert torch.equal(getattr(pinned, key).cpu(), getattr(on_device, key).cpu())
    assert pinned.edge_data and all(is_mapped(t) for t in pinned.edge_data.values())
    assert not is_mapped(pinned.node_ids)  # per-node arrays stay on the device
    for a, b in zip(_batches(on_device, **options), _batches(pinned, **options), strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_pinned_topology_keeps_the_tables_made_from_it_in_host_memory(parts, mapped):
    dev, is_mapped = mapped
    pinned = gr.load_partition(parts / "one", device=dev, topology="pinned")
    weights = gr.DistNeighborLoader(pinned, torch.arange(100), fanouts=[5], batch_size=50, weight="edge_w").sampler.weights
    assert all(is_mapped(t) for t in (weights.weights, weights.prefix, weights.positive_prefix, weights.alias.packed))
    temporal = gr.DistNeighborLoader(pinned, torch.arange(100), fanouts=[5], batch_size=50, time="edge_t",
                                     seed_time=torch.full((100,), 0.5, dtype=torch.float64), disjoint=True)
    index = temporal.sampler.temporal[0]
    assert all(is_mapped(t) for t in (index.ranks, index.perm, index.sources, index.edge_ids))
    if dev == "cuda":  # a pinned partition holds its per-node arrays on the GPU, not its edges
        before = torch.cuda.memory_allocated()
        again = gr.load_partition(parts / "one", device=dev, topology="pinned")
        assert torch.cuda.memory_allocated() - before < 8 * again.indices.numel()


def test_pinned_topology_typed(parts, mapped):
    dev, is_mapped = mapped
    on_device = gr.load_partition(parts / "typed", device=dev)
    pinned = gr.load_partition(parts / "typed", device=dev, topology="pinned")
    assert all(is_mapped(t) for t in (pinned.indices, pinned.edge_type, pinned.edge_rows))
    fanouts = {("paper", "cites", "paper"): [4, 3], ("word", "in", "paper"): [5, 2], ("paper", "has", "word"): [3, 2]}
    seeds = {"paper": torch.arange(0, 2708, 9)}
    first = list(gr.DistNeighborLoader(on_device, seeds, fanouts=fanouts, batch_size=64, seed=5))
    second = list(gr.DistNeighborLoader(pinned, seeds, fanouts=fanouts, batch_size=64, seed=5))
    for a, b in zip(first, second, strict=True):
        assert all(torch.equal(a.n_id[t].cpu(), b.n_id[t].cpu()) for t in on_device.node_types)
        assert all(torch.equal(a.e_id[r].cpu(), b.e_id[r].cpu()) for r in a.e_id)


def test_layerwise_inference_reads_pinned_topology_and_cached_rows(parts, mapped):
    """Inference over every node (every in-edge, gr.layerwise_inference) gives the same rows from a partition with
    its topology in host memory and x behind the row cache."""
    dev, _ = mapped

    def mean_layer(x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        summed = torch.zeros_like(x).index_add_(0, edge_index[1], x[edge_index[0]])
        count = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device).index_add_(0, edge_index[1], torch.ones_like(edge_index[1], dtype=x.dtype))
        return x + summed / count.clamp(min=1).unsqueeze(1)

    plain = gr.load_partition(parts / "one", device=dev)
    pinned = gr.load_partition(parts / "one", device=dev, topology="pinned", feature_device="cpu", cache=0.3)
    ids, rows = gr.layerwise_inference([mean_layer, mean_layer], plain, batch_size=500)
    ids_pinned, rows_pinned = gr.layerwise_inference([mean_layer, mean_layer], pinned, batch_size=500)
    assert torch.equal(ids.cpu(), ids_pinned.cpu()) and torch.allclose(rows.cpu(), rows_pinned.cpu())
