"""Fixtures shared by several test files.

What the tests share with the benchmarks lives in tests/support/, imported as `support`: tests/
has no __init__.py, so pytest puts it on sys.path for the test files and this conftest.py.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def kernel_copies(monkeypatch) -> list[int]:
    """Byte counts of the os.copy_file_range calls made during the test, to see which path a command took."""
    calls: list[int] = []
    real = os.copy_file_range

    def counting(*args):
        calls.append(args[2])
        return real(*args)

    monkeypatch.setattr(os, "copy_file_range", counting)
    return calls


@pytest.fixture(scope="session")
def dead_pid() -> int:
    """The pid of a process that has exited: stale work names carry it (issue 15)."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture(scope="module")
def cora_one(tmp_path_factory):
    """sample_data's Cora as one partition (metis): the device-path tests sample it without any exchange."""
    from pathlib import Path

    from gpart.pipeline.partition import partition_graph

    out = tmp_path_factory.mktemp("one") / "one"
    partition_graph(Path(__file__).resolve().parents[1] / "sample_data" / "cora.npz", out, 1, "metis")
    return out
