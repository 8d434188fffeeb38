"""prefetch=k: the same batches as without it (node and link loaders, one process and 2 gloo ranks), the caller's
own collectives between batches, an early stop, and an error in the background raised in the caller as one line."""

from __future__ import annotations

import hashlib

import pytest
import torch
import torch.distributed as dist

import gpart.runtime as gr
from gpart.base.errors import BackgroundBatchError, InputError
from gpart.runtime.loaders.prefetch import prefetched
from gpart.runtime.sampling.neighbor_sampler import LocalSampler
from tests.support.gloo_processes import run_distributed
from tests.test_runtime_sampler import cora_parts  # noqa: F401 - the fixture

KEYS = ("n_id", "edge_index", "e_id", "x", "y", "edge_label_index", "edge_label")


def _sig(batch) -> str:
    h = hashlib.sha256()
    for key in KEYS:
        value = getattr(batch, key, None)
        if isinstance(value, torch.Tensor):
            h.update(key.encode() + value.contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _epochs(loader, stop_at: int = 2) -> list[list[str]]:
    """An epoch stopped after `stop_at` batches, then two whole ones: the signatures of every batch taken."""
    out = []
    first = []
    for i, batch in enumerate(loader):
        first.append(_sig(batch))
        if i + 1 == stop_at:
            break
    out.append(first)
    out += [[_sig(b) for b in loader] for _ in range(2)]
    return out


def test_prefetch_same_batches_one_process(cora_parts):  # noqa: F811 - the fixture
    part = gr.load_partition(cora_parts[1], device="cpu")
    train = gr.node_split(part, "train_mask")
    for disjoint in (False, True):
        plain = _epochs(gr.DistNeighborLoader(part, train, fanouts=[5, 3], batch_size=16, seed=2, disjoint=disjoint))
        ahead = _epochs(gr.DistNeighborLoader(part, train, fanouts=[5, 3], batch_size=16, seed=2, disjoint=disjoint,
                                              prefetch=3))
        assert plain == ahead and len(plain[1]) > 3
    edges = gr.edge_split(part, torch.arange(0, part.num_edges, 7))
    link = dict(fanouts=[4, 2], batch_size=64, neg_sampling="binary", seed=1)
    assert _epochs(gr.DistLinkNeighborLoader(part, edges, **link)) == \
        _epochs(gr.DistLinkNeighborLoader(part, edges, prefetch=2, **link))


class _FailingSampler(LocalSampler):
    """A LocalSampler whose `fail_at`-th call raises a multi-line error."""

    def __init__(self, *args, fail_at: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls, self.fail_at = 0, fail_at

    def sample(self, cols, hop, gen):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("the sampler broke\nsecond line of the message")
        return super().sample(cols, hop, gen)


def test_background_error_surfaces_on_its_batch(cora_parts):  # noqa: F811 - the fixture
    part = gr.load_partition(cora_parts[1], device="cpu")
    train = gr.node_split(part, "train_mask")
    sampler = _FailingSampler(part, [[5], [3]], fail_at=2 * 3 + 1)  # 2 hops a batch: the 4th batch fails
    loader = gr.DistNeighborLoader(part, train, fanouts=[5, 3], batch_size=16, sampler=sampler, prefetch=2)
    taken = []
    with pytest.raises(BackgroundBatchError) as info:
        for batch in loader:
            taken.append(batch)
    assert len(taken) == 3
    text = str(info.value)
    assert "\n" not in text and "batch 3" in text and "the sampler broke second line" in text, text
    assert isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(InputError, match="prefetch must be a number of batches >= 0, got -1"):
        gr.DistNeighborLoader(part, train, fanouts=[5, 3], prefetch=-1)


def test_prefetched_depth_and_early_stop():
    made = []

    def make(i):
        made.append(i)
        return torch.tensor([i])

    stream = prefetched(make, 10, 3, torch.device("cpu"))
    assert int(next(stream)) == 0 and int(next(stream)) == 1
    stream.close()  # the thread makes up to 3 past the last batch taken (1), then stops: the same on every rank
    assert made == [0, 1, 2, 3, 4]
    assert [int(t) for t in prefetched(make, 4, 1, torch.device("cpu"))] == [0, 1, 2, 3]


def _ranks(rank: int, world_size: int, parts: str) -> dict:
    part = gr.load_partition(parts, device="cpu")
    ids = gr.node_split(part, torch.arange(0, part.num_nodes, 2))
    out = {}
    for depth in (0, 1, 3):
        loader = gr.DistNeighborLoader(part, ids, fanouts=[4, 3], batch_size=48, seed=6, prefetch=depth)
        got = []
        for epoch in range(2):
            for i, batch in enumerate(loader):
                # the caller's own collectives between batches, on the default group, while the thread samples
                total = torch.tensor([batch.n_id.numel()])
                dist.all_reduce(total)
                got.append((_sig(batch), int(total)))
                if epoch == 0 and i == 1:
                    break
        out[f"node{depth}"] = got
    edges = gr.edge_split(part, torch.arange(0, part.num_edges, 5))
    for depth in (0, 2):
        link = gr.DistLinkNeighborLoader(part, edges, fanouts=[3, 2], batch_size=100, neg_sampling="triplet", seed=3,
                                         prefetch=depth)
        out[f"link{depth}"] = [_sig(b) for b in link]
    return out


@pytest.mark.parametrize("method", ["metis", "random"])
def test_prefetch_same_batches_across_ranks(cora_parts, method):  # noqa: F811 - the fixture
    results = run_distributed(_ranks, 2, str(cora_parts[(2, method)]), timeout_s=300)
    for r in results:
        assert r["node0"] == r["node1"] == r["node3"] and len(r["node0"]) > 4
        assert r["link0"] == r["link2"] and r["link0"]
