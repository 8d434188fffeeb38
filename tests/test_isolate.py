"""gpart.engines.isolate: native calls in forked children, one or several side by side."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from gpart.engines.isolate import call_isolated, call_isolated_many


def filler(value: int, pause: float = 0.0):
    def fill(out: np.ndarray) -> int:
        time.sleep(pause)
        out[:] = value
        return os.getpid()
    return fill


@pytest.mark.skipif(not hasattr(os, "fork"), reason="runs in-process where fork is unavailable")
def test_runs_side_by_side_give_what_each_gives_alone_in_order():
    fns = [filler(v, pause) for v, pause in [(1, 0.3), (2, 0.0), (3, 0.1)]]  # the first finishes last
    alone = [call_isolated(fn, 5, np.int32) for fn in fns]
    side_by_side = call_isolated_many(fns, 5, np.int32, workers=2)
    for (pid_a, a), (pid_b, b), value in zip(alone, side_by_side, [1, 2, 3]):
        assert a.tolist() == b.tolist() == [value] * 5 and a.dtype == b.dtype == np.int32
        assert pid_a != os.getpid() and pid_b != os.getpid() and pid_a != pid_b  # each in its own child
    assert len({pid for pid, _ in side_by_side}) == 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="runs in-process where fork is unavailable")
def test_an_error_in_one_run_kills_the_runs_beside_it(tmp_path):
    pid_file = tmp_path / "sleeper.pid"

    def failing(out: np.ndarray) -> None:
        while not pid_file.exists():  # the sleeper has started
            time.sleep(0.01)
        raise ValueError("bad weights")

    def sleeper(out: np.ndarray) -> None:
        pid_file.write_text(str(os.getpid()))
        time.sleep(120)

    start = time.perf_counter()
    with pytest.raises(ValueError, match="bad weights"):
        call_isolated_many([failing, sleeper], 3, workers=2)
    assert time.perf_counter() - start < 30
    with pytest.raises(ProcessLookupError):  # killed and reaped, not left running or a zombie
        os.kill(int(pid_file.read_text()), 0)
