"""A collective made by one rank alone: it fails fast, naming the collective and what the missing rank does.

Two real processes joined by gloo on 127.0.0.1 (not the multiprocessing harness: a rank must leave the
way a torchrun script does, through the interpreter's exit). Both load Cora's 2 partitions and build a
loader; then rank 1 leaves the collectives and rank 0 calls, alone, the loader's first batch,
layerwise_inference and gr.barrier:

- rank 1 exits (its script ends), or raises, or calls destroy_process_group and sleeps: every call fails
  on rank 0 in well under 5 s, naming the collective and what rank 1 did;
- rank 1 sits in a plain dist.barrier: rank 0 logs one warning line after about 3 s naming the collective
  and rank 1's last gpart collective, and fails at its (short) limit saying the same.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from support.gloo_processes import free_port, run_distributed

import gpart.runtime as gr
from gpart.collectives import waiting
from gpart.pipeline.partition import partition_graph

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"
FAST_S = 5.0  # the bound on failing when the peer has ended
LIMIT_S = 6.0  # rank 0's limit while rank 1 is alive elsewhere


def _rank_main(rank: int, port: int, case: str, parts: str) -> None:
    """One rank of a scenario (run in a fresh interpreter); rank 0 prints one JSON line of results."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    part = gr.load_partition(parts, device="cpu")
    limit = LIMIT_S if case == "busy" else 30.0
    loader = gr.DistNeighborLoader(part, gr.node_split(part, torch.arange(0, 2708, 7)), fanouts=[3, 3], batch_size=32,
                                   timeout_s=limit)
    if rank == 1:
        _leave(case)
        return
    warnings = _record_warnings()
    calls = {"loader_batch": lambda: next(iter(loader)),
             "layerwise_inference": lambda: gr.layerwise_inference([lambda x, ei: x], part, timeout_s=limit),
             "barrier": lambda: gr.barrier(timeout_s=limit)}
    if case == "busy":  # the loader's exchange would meet rank 1's dist.barrier on the same group: not a gpart check
        calls.pop("loader_batch")
    out = {}
    for name, call in calls.items():
        warnings.clear()
        start = time.monotonic()
        try:
            call()
            out[name] = {"seconds": time.monotonic() - start, "error": "no error"}
        except Exception as exc:  # noqa: BLE001 - the message is what is checked
            out[name] = {"seconds": time.monotonic() - start, "error": f"{type(exc).__name__}: {exc}",
                         "warnings": [(at - start, text) for at, text in warnings]}
    print(json.dumps(out), flush=True)
    os._exit(0)  # rank 1 may still be asleep in a collective: leave without waiting for it


def _leave(case: str) -> None:
    if case == "raise":
        raise ValueError("rank one's own error")
    if case == "destroy":
        dist.destroy_process_group()
        time.sleep(60)
    if case == "busy":
        try:
            dist.barrier()  # a collective outside gpart, which rank 0 never joins
        except RuntimeError:
            pass  # rank 0 gone: gloo says so
    # "exit": the script simply ends


def _record_warnings() -> list:
    seen: list = []

    class Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append((time.monotonic(), record.getMessage()))

    logging.getLogger("gpart.collectives").addHandler(Recorder())
    return seen


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> Path:
    if not CORA.exists():
        pytest.skip("sample_data/cora.npz missing")
    out = tmp_path_factory.mktemp("liveness") / "cora_2"
    partition_graph(CORA, out, 2, "metis")
    return out


def _run(case: str, parts: Path) -> dict:
    port = free_port()
    code = "import sys; sys.path.insert(0, sys.argv[1]); import test_collective_liveness as t; " \
           "t._rank_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(Path(__file__).parent), str(rank), str(port), case,
                               str(parts)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in (0, 1)]
    try:
        stdout, stderr = procs[0].communicate(timeout=150)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert procs[0].returncode == 0 and lines, stderr[-3000:]
    return json.loads(lines[-1])


@pytest.mark.parametrize("case,did", [("exit", "which has exited ("),
                                      ("raise", "which has exited with ValueError: rank one's own error"),
                                      ("destroy", "which called destroy_process_group")])
def test_a_rank_alone_in_a_collective_fails_fast_when_the_other_has_ended(parts, case, did):
    results = _run(case, parts)
    assert set(results) == {"loader_batch", "layerwise_inference", "barrier"}
    for name, r in results.items():
        message = r["error"]
        assert r["seconds"] < FAST_S and message.startswith("RankMismatchError"), (name, r)
        assert f"for rank 1, {did}" in message and "\n" not in message, message
        assert "its last gpart collective: #" in message, message
        if name == "loader_batch":  # an exchange inside the loader: it names the loader it belongs to
            assert "exchanging counts (after this rank's collective #" in message, message
            assert "'the DistNeighborLoader settings'" in message, message
        else:
            assert "rank 0 waits in collective #" in message and f"'{name}' for rank 1" in message, message
            assert "every rank must call it" in message and "as a rank has ended" in message, message


def test_a_rank_alone_in_a_collective_warns_then_fails_at_its_limit_when_the_other_is_elsewhere(parts):
    results = _run("busy", parts)
    assert set(results) == {"layerwise_inference", "barrier"}
    for name, r in results.items():
        message = r["error"]
        assert LIMIT_S - 0.5 <= r["seconds"] < LIMIT_S + 3, (name, r)
        assert f"'{name}' for rank 1, which has not entered a gpart collective for" in message, message
        assert "(its last gpart collective: #" in message and "every rank must call it" in message, message
        assert f"not all 2 ranks reached the check of {name} within {LIMIT_S:g} s" in message, message
        [(at, warning)] = r["warnings"]  # once
        assert 2.5 <= at <= 5.0, r["warnings"]
        assert warning.startswith("gpart: rank 0 waits in collective #") and f"'{name}' for rank 1" in warning
        assert f"(waiting {LIMIT_S:g} s at most)" in warning


class _Work:
    """A gloo-like work: the timed wait raises 'Operation timed out!' until `done_at`, then returns or raises."""

    def __init__(self, done_at: float, error: str = ""):
        self.done_at, self.error, self.waits = time.monotonic() + done_at, error, []

    def is_completed(self) -> bool:
        return time.monotonic() >= self.done_at

    def wait(self, timeout=None):
        self.waits.append(timeout)
        assert timeout is None or timeout.total_seconds() >= 0.001  # c10d reads 0 ms as no limit
        left = self.done_at - time.monotonic()
        if timeout is not None and left > timeout.total_seconds():
            time.sleep(timeout.total_seconds())
            raise RuntimeError("Operation timed out!")
        time.sleep(max(0.0, left))
        if self.error:
            raise RuntimeError(self.error)
        return True


def test_watch_slices_the_wait_warns_once_and_keeps_the_limit(monkeypatch, caplog):
    monkeypatch.setattr(waiting, "GRACE_S", 0.3)
    monkeypatch.setattr(waiting, "SLICE_S", 0.1)
    caplog.set_level(logging.WARNING, logger="gpart.collectives")
    fast = _Work(0.0)
    assert waiting.watch(fast, 5.0, [], lambda waited, late: "never").status == "done" and len(fast.waits) == 1
    late = _Work(0.7)
    assert waiting.watch(late, 5.0, [], lambda waited, late: "late peer").status == "done"
    assert [r.getMessage() for r in caplog.records] == ["late peer"]  # once, after the grace
    caplog.clear()
    start = time.monotonic()
    outcome = waiting.watch(_Work(60.0), 0.25, [], lambda waited, late: "not before the limit")
    assert outcome.status == "timeout" and 0.24 <= time.monotonic() - start < 1.0 and not caplog.records
    broken = waiting.watch(_Work(0.15, "Connection closed by peer"), 5.0, [], lambda waited, late: "")
    assert broken.status == "failed" and "Connection closed" in str(broken.error) and broken.ended == {}


def test_watch_is_silent_while_peers_may_be_computing_and_warns_at_half_the_limit(monkeypatch, caplog):
    monkeypatch.setattr(waiting, "GRACE_S", 0.2)
    monkeypatch.setattr(waiting, "SLICE_S", 0.05)
    caplog.set_level(logging.INFO, logger="gpart.collectives")
    asked = []

    def warning(waited: float, late: bool):
        asked.append((round(waited, 1), late))
        return "half the limit" if late else None  # nobody known to be stuck: a line only when late

    assert waiting.watch(_Work(0.8), 5.0, [], warning).status == "done"  # done long before half of 5 s
    assert not caplog.records and asked and not any(late for _, late in asked)
    asked.clear()
    assert waiting.watch(_Work(1.0), 1.2, [], warning).status == "done"  # past half of 1.2 s: one line
    assert [r.getMessage() for r in caplog.records] == ["half the limit"] and asked[-1][1]


def _gather_after(rank: int, world: int, rank0_busy_s: float, timeout_s: float) -> list[str]:
    """Rank 0 computes for `rank0_busy_s` before the exchange every rank makes; the warnings each rank logged."""
    from gpart.collectives import waiting as w
    from gpart.collectives.comm import Comm

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logging.getLogger("gpart.collectives").addHandler(Keep())
    w.GRACE_S = 0.5
    if rank == 0:
        time.sleep(rank0_busy_s)
    Comm(timeout_s).all_gather_bytes(b"x")
    return lines


def test_a_healthy_wait_for_a_computing_rank_logs_nothing():
    # the case: rank 1 waits in "gathering sizes" while rank 0 computes (a book); 2 s of a 60 s limit
    assert run_distributed(_gather_after, 2, 2.0, 60.0, timeout_s=120) == [[], []]
    # past half of the limit the waiting rank says so, once (the job is then close to failing)
    [zero, one] = run_distributed(_gather_after, 2, 2.5, 4.0, timeout_s=120)
    assert zero == [] and len(one) == 1 and "rank 1 has waited 2 s of its 4 s limit in gathering sizes" in one[0], one
