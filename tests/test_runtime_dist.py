"""gpart.collectives: all_to_all of variable blocks, grouping by owner, rank agreement checks.

Multi-process tests run on gloo over 127.0.0.1 through tests/support/gloo_processes.py;
one spawn per world size carries many checks, since spawning is the slow part.
"""

from __future__ import annotations

import time

import pytest
import torch
from support.gloo_processes import DistributedTestError, run_distributed

from gpart import collectives as gdist

# ---------------------------------------------------------------- single process


def test_world_without_init_is_one():
    assert gdist.world() == (0, 1)
    assert gdist.comm_device() == torch.device("cpu")


def test_group_by_owner_restores_request_order():
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (500,), generator=gen)
    owner = ids % 3
    sorted_ids, counts, order = gdist.group_by_owner(ids, owner, 3)
    assert counts.tolist() == [int((owner == r).sum()) for r in range(3)]
    # blocks by owner, request order kept within a block (stable)
    start = 0
    for r, c in enumerate(counts.tolist()):
        block = sorted_ids[start : start + c]
        assert bool((block % 3 == r).all())
        assert block.tolist() == ids[owner == r].tolist()
        start += c
    back = torch.empty_like(sorted_ids)
    back[order] = sorted_ids
    assert torch.equal(back, ids)


def test_group_by_owner_empty_and_bad_owner():
    ids = torch.zeros(0, dtype=torch.int64)
    sorted_ids, counts, order = gdist.group_by_owner(ids, ids, 4)
    assert sorted_ids.numel() == 0 and counts.tolist() == [0, 0, 0, 0] and order.numel() == 0
    with pytest.raises(ValueError, match="owner ranks"):
        gdist.group_by_owner(torch.arange(3), torch.tensor([0, 5, 1]), 2)


def test_all_to_all_variable_world_of_one():
    rows = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    (got,) = gdist.all_to_all_variable([rows])
    assert torch.equal(got, rows)
    gdist.check_same_across_ranks("anything", "a value")  # no-op in a world of one


# ---------------------------------------------------------------- multi process


def _exchange_checks(rank: int, world_size: int) -> dict:
    gen = torch.Generator().manual_seed(rank)
    # Rank r sends (r + p) % 3 rows to rank p (some blocks empty), each row tagged with (r, p, i).
    out = {}
    for dtype in (torch.float32, torch.int64, torch.bfloat16, torch.bool, torch.float16):
        send = []
        for p in range(world_size):
            n = (rank + p) % 3
            tag = torch.tensor([[rank, p, i, 7] for i in range(n)], dtype=torch.int64).reshape(n, 4)
            send.append(tag.to(dtype) if dtype != torch.bool else (tag % 2 == 1))
        recv = gdist.all_to_all_variable(send)
        assert len(recv) == world_size
        for q, block in enumerate(recv):
            n = (q + rank) % 3
            expect = torch.tensor([[q, rank, i, 7] for i in range(n)], dtype=torch.int64).reshape(n, 4)
            expect = expect.to(dtype) if dtype != torch.bool else (expect % 2 == 1)
            assert block.dtype == dtype and block.shape == (n, 4), (dtype, block.shape)
            assert torch.equal(block, expect), (dtype, q, block, expect)
        out[str(dtype)] = [b.shape[0] for b in recv]
    # 1-D ids, and all-empty exchange
    ids = [torch.randint(0, 100, (int(torch.randint(0, 50, (1,), generator=gen)),), generator=gen) for _ in range(world_size)]
    recv_ids = gdist.all_to_all_variable(ids)
    out["sent_ids"] = [t.tolist() for t in ids]
    out["recv_ids"] = [t.tolist() for t in recv_ids]
    empty = gdist.all_to_all_variable([torch.zeros(0, 5) for _ in range(world_size)])
    assert all(t.shape == (0, 5) for t in empty)
    # agreement check: same value passes, different values raise on every rank
    gdist.check_same_across_ranks("same-directory", "the partition directory", timeout_s=20)
    try:
        gdist.check_same_across_ranks(f"value-of-rank-{rank}", "the partition directory", timeout_s=20)
    except gdist.RankMismatchError as exc:
        out["mismatch"] = str(exc)
    return out


@pytest.mark.parametrize("world_size", [2, 4])
def test_all_to_all_variable_gloo(world_size):
    results = run_distributed(_exchange_checks, world_size, timeout_s=60)
    # what rank r sent to p is what p received from r
    for r in range(world_size):
        for p in range(world_size):
            assert results[p]["recv_ids"][r] == results[r]["sent_ids"][p]
    for rank, res in enumerate(results):
        msg = res["mismatch"]
        assert "ranks disagree about the partition directory" in msg
        assert f"'value-of-rank-{rank}'" in msg and "value-of-rank-" in msg.replace(f"value-of-rank-{rank}", "", 1)


def _late_rank(rank: int, world_size: int) -> str:
    # Rank 1 never takes part in the check: the others must fail in bounded time.
    if rank == 1:
        time.sleep(3)
        return "slept"
    start = time.monotonic()
    try:
        gdist.check_same_across_ranks("v", "the manifest digest", timeout_s=1.5)
    except gdist.RankMismatchError as exc:
        return f"{time.monotonic() - start:.1f}s {exc}"
    return "no error"


def test_check_same_is_bounded_when_a_rank_is_missing():
    results = run_distributed(_late_rank, 2, timeout_s=40)
    assert results[1] == "slept"
    seconds, _, message = results[0].partition("s ")
    assert float(seconds) < 10, results[0]
    assert "not all 2 ranks reached the check of the manifest digest" in message


def _raise_on_rank_one(rank: int, world_size: int) -> None:
    if rank == 1:
        raise ValueError("boom from rank one")
    time.sleep(30)  # would block; the helper must kill it once rank 1 fails


def _hang(rank: int, world_size: int) -> None:
    time.sleep(60)


def test_helper_propagates_errors_and_times_out():
    start = time.monotonic()
    with pytest.raises(DistributedTestError, match=r"rank 1 of 2 raised:(.|\n)*boom from rank one"):
        run_distributed(_raise_on_rank_one, 2, timeout_s=40)
    with pytest.raises(DistributedTestError, match=r"did not finish within 3 s"):
        run_distributed(_hang, 2, timeout_s=3)
    assert time.monotonic() - start < 25
