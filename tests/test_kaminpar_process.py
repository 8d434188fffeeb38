"""KaMinPar in a fresh interpreter (gpart.engines.kaminpar_process): the compressed path's terapart runs partition
the file, fail in one line, and never outlive the process that started them."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import numpy as np
import pytest

from gpart.base.graph import Graph
from gpart.engines.kaminpar_process import _die_with_parent, run_fresh
from gpart.engines.symmetric_file import symmetric_parhip
from gpart.formats.files.scratch import ScratchDir

kaminpar = pytest.importorskip("kaminpar")


def _cycle_with_chords(n: int) -> Graph:
    ring = np.arange(n, dtype=np.int64)
    src = np.concatenate([ring, ring])
    dst = np.concatenate([(ring + 1) % n, (ring * 7 + 3) % n])
    return Graph.from_arrays(src, dst, n)


def test_fresh_run_partitions_the_file_and_leaves_nothing(tmp_path):
    """KaMinPar's terapart in a fresh interpreter: an owner for every node, parts within the tolerance, the owners
    file gone. (Whether its partition equals a run in another process is not asserted: see the module.)"""
    graph = _cycle_with_chords(2000)
    with ScratchDir(tmp_path) as scratch:
        on_disk, _ = symmetric_parhip(graph, scratch, 1 << 24)
        on_disk.write_weights(None)
        owner = run_fresh(on_disk.path, "terapart", threads=1, seed=3, num_parts=4, tolerance=0.03,
                          num_nodes=graph.num_nodes)
        assert owner.shape == (graph.num_nodes,) and owner.min() >= 0 and owner.max() <= 3
        assert np.bincount(owner, minlength=4).max() <= 1.03 * graph.num_nodes / 4 + 1
        assert sorted(p.name for p in on_disk.path.parent.iterdir()) == [on_disk.path.name]


@pytest.mark.parametrize("case", ["missing", "other graph"])
def test_a_failed_run_is_one_line(tmp_path, case):
    """A file KaMinPar cannot read, or one of another node count than the caller's: one line, no owners file left."""
    bad = tmp_path / "graph.parhip"
    if case == "other graph":
        bad.write_bytes(np.array([3, 0, 0, 24], dtype="<u8").tobytes())  # a valid empty graph: 0 nodes, not 4
    with pytest.raises(RuntimeError) as caught:
        run_fresh(bad, "fast", threads=1, seed=0, num_parts=2, tolerance=0.03, num_nodes=4)
    message = str(caught.value)
    assert message and "\n" not in message, message
    if case == "other graph":
        assert message == "KaMinPar's process gave 0 owners for the 4 nodes of graph.parhip"
    assert sorted(p.name for p in tmp_path.iterdir()) == (["graph.parhip"] if case == "other graph" else [])


def test_the_child_dies_with_the_process_that_started_it():
    """A process started with _die_with_parent is killed when its parent is (a killed partition leaves no KaMinPar
    running): the parent here is a forked process that starts `sleep` and is then SIGKILLed."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the parent of `sleep`
        os.close(read_fd)
        child = subprocess.Popen(["sleep", "60"], preexec_fn=_die_with_parent)
        os.write(write_fd, str(child.pid).encode())
        time.sleep(60)
        os._exit(0)
    os.close(write_fd)
    sleeper = int(os.read(read_fd, 32))
    os.close(read_fd)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(sleeper):
        time.sleep(0.05)
    assert not _alive(sleeper)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, reaped by init, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
