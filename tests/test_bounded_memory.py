"""Bounded memory (SPEC.md 4.6): --max-memory's default under a cgroup limit, the bounded pass without node
arrays for rule books, page cache written back and dropped, and a cgroup-capped remainder run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.memcap import available, run_capped
from support.synthetic import write_powerlaw_npz

from gpart.base.errors import InputError
from gpart.base.memory import DEFAULT_FRACTION, cgroup_memory_limit, default_max_memory
from gpart.bytes.sink import ByteSink
from gpart.bytes.written_pages import WrittenPages, drop_written
from gpart.formats.partition.book import range_book, remainder_book
from gpart.partition_methods.random_method import random_book
from gpart.pipeline import write_result as write_module
from gpart.pipeline.layout import BookOrder, node_order
from gpart.pipeline.partition import partition_graph

UNLIMITED_V1 = "9223372036854771712"  # what a v1 group without a limit reads


def fake_cgroups(tmp_path: Path, self_lines: str, files: dict[str, str]) -> tuple[Path, Path]:
    """A cgroup mount under tmp_path/root holding `files` (path -> content) and a /proc/self/cgroup."""
    root = tmp_path / "root"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "\n")
    self_file = tmp_path / "self_cgroup"
    self_file.write_text(self_lines)
    return root, self_file


def test_v1_limit_of_the_own_group(tmp_path):
    root, me = fake_cgroups(tmp_path, "9:pids:/\n4:memory:/jobs/run7\n0::/\n", {
        "memory/memory.limit_in_bytes": UNLIMITED_V1,
        "memory/jobs/memory.limit_in_bytes": UNLIMITED_V1,
        "memory/jobs/run7/memory.limit_in_bytes": "500000000",
        "memory/other/memory.limit_in_bytes": "1000"})  # another group's limit is not ours
    assert cgroup_memory_limit(root, me) == 500_000_000
    assert default_max_memory(root, me) <= int(500_000_000 * DEFAULT_FRACTION)


def test_an_ancestor_limit_holds_the_group(tmp_path):
    root, me = fake_cgroups(tmp_path, "4:cpuacct,memory:/jobs/run7\n", {
        "memory/jobs/memory.limit_in_bytes": "200000000",
        "memory/jobs/run7/memory.limit_in_bytes": "500000000"})
    assert cgroup_memory_limit(root, me) == 200_000_000


@pytest.mark.parametrize("mount", ["", "unified/"])
def test_v2_memory_max(tmp_path, mount):
    root, me = fake_cgroups(tmp_path, "0::/user.slice/job\n", {
        f"{mount}user.slice/memory.max": "max",
        f"{mount}user.slice/job/memory.max": "300000000"})
    assert cgroup_memory_limit(root, me) == 300_000_000
    assert default_max_memory(root, me) <= int(300_000_000 * DEFAULT_FRACTION)


@pytest.mark.parametrize("value", ["max", UNLIMITED_V1, str(1 << 60), "garbage", ""])
def test_no_limit_is_none(tmp_path, value):
    root, me = fake_cgroups(tmp_path, "4:memory:/a\n0::/a\n", {"memory/a/memory.limit_in_bytes": value, "a/memory.max": value})
    assert cgroup_memory_limit(root, me) is None


def test_no_cgroup_files_is_none(tmp_path):
    assert cgroup_memory_limit(tmp_path / "none", tmp_path / "missing") is None
    root, me = fake_cgroups(tmp_path, "not a cgroup line\n", {})
    assert cgroup_memory_limit(root, me) is None
    # without a limit the default is the fraction of what the machine has
    assert default_max_memory(tmp_path / "none", tmp_path / "missing") > 0


def test_memory_pool_is_the_kernel_and_the_memory_group(tmp_path):
    """Processes on one kernel in one memory group share a pool; another group (v1 or v2) or kernel is another pool."""
    from gpart.base.memory import memory_pool

    boot = tmp_path / "boot_id"
    boot.write_text("b1\n")
    _, one = fake_cgroups(tmp_path, "12:memory:/job/rank\n3:cpu,cpuacct:/x\n", {})
    (tmp_path / "other").write_text("12:memory:/job/other\n3:cpu,cpuacct:/x\n")
    (tmp_path / "v2").write_text("0::/job/rank\n")
    pools = [memory_pool(one, boot), memory_pool(tmp_path / "other", boot), memory_pool(tmp_path / "v2", boot)]
    assert pools[0] == memory_pool(one, boot) and len(set(pools)) == 3
    boot.write_text("b2\n")
    assert memory_pool(one, boot) != pools[0]


def test_real_v1_group_sets_the_default():
    reason = available()
    if reason:
        pytest.skip(f"cgroups cannot be created here: {reason}")
    cap = 400 << 20
    code = "from gpart.base.memory import cgroup_memory_limit, default_max_memory; print(cgroup_memory_limit(), default_max_memory())"
    run = run_capped([sys.executable, "-c", code], cap, timeout=120)
    assert run.returncode == 0, run.stderr
    limit, default = (int(v) for v in run.stdout.split())
    assert limit == cap and default <= int(cap * DEFAULT_FRACTION)


# --------------------------------------------------------------------------- the bounded pass's node order


@pytest.mark.parametrize("make", [lambda n, p: remainder_book(n, p), lambda n, p: range_book(n, p),
                                  lambda n, p: random_book(n, p, 3)])
def test_book_order_agrees_with_node_order(make):
    book = make(1001, 7)
    arrays, lazy = node_order(book), BookOrder(book)
    ids = np.random.default_rng(0).integers(0, 1001, 5000)
    assert np.array_equal(arrays.offsets, lazy.offsets)
    assert np.array_equal(arrays.position_of(ids), lazy.position_of(ids))
    assert np.array_equal(arrays.owner_of(100, 900), lazy.owner_of(100, 900))
    for part in range(7):
        assert np.array_equal(arrays.owned(part), lazy.owned(part))


def test_random_book_is_the_permutation_of_arange_mod_p():
    """The lean random book (int32 shuffle, local ids in chunks) is the book the manifests record."""
    from gpart.formats.partition.book import ArrayBook
    from gpart.partition_methods.random_method import local_ids

    rng = np.random.default_rng(11)
    expected = ArrayBook(rng.permutation((np.arange(100_003, dtype=np.int64) % 6).astype(np.int32)), 6)
    book = random_book(100_003, 6, 11)
    assert np.array_equal(book.owner_array, expected.owner_array) and np.array_equal(book.local_array, expected.local_array)
    assert np.array_equal(local_ids(book.owner_array, 6, chunk=999), expected.local_array)


@pytest.mark.parametrize("method, packed", [("remainder", True), ("range", True), ("random", True), ("random", False)])
def test_bounded_pass_writes_the_in_memory_bytes(tmp_path, monkeypatch, method, packed):
    """The bounded pass's bytes are the in-memory pass's, with CSC keys packed in 63 bits or (graphs too large for
    that: forced here) edge ids and positions in buckets of their own."""
    from gpart.pipeline import csc_order

    graph = write_powerlaw_npz(tmp_path / "g.npz", 3000, 40_000, feat_dim=4, seed=1)
    memory = partition_graph(graph, tmp_path / "memory", 5, method, halo=1, max_memory="1TB")
    monkeypatch.setattr(write_module, "block_edges_for", lambda budget: 777)  # many blocks per partition
    monkeypatch.setattr(write_module, "layout_threads", lambda *args: 0)  # the bounded pass
    if not packed:
        shift = csc_order.key_shift
        monkeypatch.setattr(csc_order, "key_shift", lambda n, e: (shift(n, e)[0], False))
    bounded = partition_graph(graph, tmp_path / "bounded", 5, method, halo=1, max_memory="1TB")
    assert bounded == memory
    files = sorted(p.relative_to(tmp_path / "memory") for p in (tmp_path / "memory").rglob("*") if p.is_file())
    assert files and all((tmp_path / "memory" / f).read_bytes() == (tmp_path / "bounded" / f).read_bytes() for f in files)


# --------------------------------------------------------------------------- sizes past a path: one line, up front


@pytest.mark.parametrize("method, per_node", [("remainder", 16), ("random", 32)])
def test_too_small_max_memory_names_the_need_and_the_flag(tmp_path, method, per_node):
    graph = write_powerlaw_npz(tmp_path / "g.npz", 2_000_000, 1000, feat_dim=0, seed=0)  # 32 or 64 MB of node arrays
    with pytest.raises(InputError) as caught:
        partition_graph(graph, tmp_path / "out", 4, method, max_memory="20MB")
    message = str(caught.value)
    assert "\n" not in message and f"{per_node} bytes per node" in message and "raise --max-memory to" in message
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# --------------------------------------------------------------------------- page cache


def test_written_pages_windows(tmp_path):
    """The window before the last is written back and dropped; at most two windows are pending."""
    path = tmp_path / "f.bin"
    with open(path, "wb", buffering=0) as fh:
        pages = WrittenPages(fh.fileno(), window=1 << 16)
        fh.write(b"x" * (1 << 16))
        assert pages.due(1 << 16)
        pages.wrote(1 << 16)
        assert (pages.started, pages.dropped) == (1 << 16, 0)
        fh.write(b"y" * (1 << 17))
        pages.wrote(3 << 16)
        assert (pages.started, pages.dropped) == (3 << 16, 1 << 16)
        drop_written(fh.fileno())
    assert path.read_bytes() == b"x" * (1 << 16) + b"y" * (1 << 17)


def test_sink_settles_as_it_writes(tmp_path, monkeypatch):
    """A ByteSink hands every completed window to WrittenPages and drops the file after its fsync; the bytes and
    the CRC are those written."""
    import zlib

    from gpart.bytes import written_pages

    calls = []
    real = written_pages.WrittenPages.wrote
    monkeypatch.setattr(written_pages.WrittenPages, "wrote", lambda self, end: (calls.append(end), real(self, end))[1])
    data = np.arange(3 << 20, dtype=np.int64)  # 24 MiB: three 8 MiB windows
    with ByteSink(tmp_path / "a.bin", header=b"HDR", buffered=True) as sink:
        for chunk in np.array_split(data, 7):
            sink.write(chunk)
    assert calls and calls == sorted(calls) and calls[-1] <= 3 + data.nbytes
    assert (tmp_path / "a.bin").read_bytes() == b"HDR" + data.tobytes()
    assert sink.crc == zlib.crc32(data.tobytes())


# --------------------------------------------------------------------------- under a real cap


def test_remainder_under_a_cgroup_cap(tmp_path):
    """The issue's case (4M/50M under 350 MB) scaled down: 2M nodes and 16M edges (256 MB of int64 ids, as
    much again in scratch buckets and in written topology) under a 250 MB cap with --max-memory 200MB.
    Before the bounded pass asked the book for owners (64 bytes a node of arrays), kept the writer's queue
    small and dropped the page cache of what it wrote, this run was killed at the cap (exit -9)."""
    reason = available()
    if reason:
        pytest.skip(f"cgroups cannot be created here: {reason}")
    graph = write_powerlaw_npz(tmp_path / "g.npz", 2_000_000, 16_000_000, feat_dim=8, seed=2)
    out = tmp_path / "out"
    gpart = str(Path(sys.executable).with_name("gpart"))
    run = run_capped([gpart, "partition", str(graph), "--parts", "8", "--method", "remainder", "--max-memory", "200MB",
                      "-o", str(out), "--json"], 250 << 20, timeout=900)
    assert run.returncode == 0 and not run.oom_killed, (run.returncode, run.stderr[-2000:])
    assert json.loads(run.stdout)["num_edges"] == 16_000_000
    check = subprocess.run([gpart, "verify", str(out)], capture_output=True, text=True, timeout=600)
    assert check.returncode == 0, check.stderr[-2000:]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RssAnon from /proc")
def test_release_freed_memory_hands_retained_heap_pages_back():
    """Freed numpy buffers of a few MiB stay in malloc's heap (glibc raises its mmap threshold after the first large
    free); release_freed_memory gives them back, so a process waiting on KaMinPar is not charged for them."""
    code = """
import numpy as np
from gpart.base.memory import release_freed_memory
def anon():
    return int([l for l in open("/proc/self/status") if l.startswith("RssAnon")][0].split()[1]) // 1024
big = np.ones(4 << 20, np.uint8); del big
arrays = [np.ones(2 << 20, np.uint8) for _ in range(100)]
keep = arrays[-1]; del arrays
before = anon(); release_freed_memory(); print(before, anon())
"""
    before, after = map(int, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                            check=True).stdout.split())
    if before - after < 10:
        pytest.skip(f"this allocator kept nothing to release ({before} -> {after} MiB): not glibc's heap")
    assert before - after > 150, (before, after)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads RssAnon from /proc")
def test_return_large_frees_gives_freed_buffers_back_at_once():
    """After return_large_frees (the partition entry points call it), freed buffers of a few MiB go back to the system
    when freed, with no trim: the same allocations as above keep 200 MiB without it."""
    code = """
import sys
import numpy as np
from gpart.base.memory import return_large_frees
def anon():
    return int([l for l in open("/proc/self/status") if l.startswith("RssAnon")][0].split()[1]) // 1024
if sys.argv[1] == "set":
    return_large_frees()
big = np.ones(4 << 20, np.uint8); del big
arrays = [np.ones(2 << 20, np.uint8) for _ in range(100)]
keep = arrays[-1]; del arrays
print(anon())
"""
    held = {mode: int(subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True,
                                     check=True).stdout) for mode in ("unset", "set")}
    if held["unset"] < 150:
        pytest.skip(f"this allocator keeps nothing after frees ({held}): not glibc's heap")
    assert held["set"] < 60, held
