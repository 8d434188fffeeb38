"""Text and Parquet edge lists parsed into scratch files instead of memory (formats.files.scratch.AppendedArray): the same graph,
arrays mapped from the run's scratch directory, a full disk one line, and `gpart chunk` of a text edge list larger
than its memory cap."""

from __future__ import annotations

import errno
import gzip
from pathlib import Path

import numpy as np
import pytest
from support.memcap import available, gpart_capped
from support.public_data import ENRON, FACEBOOK

from gpart.base.errors import OutputError
from gpart.formats.files import scratch as scratch_module
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.input.readers import read_graph


def test_appended_values_are_mapped_read_only(tmp_path):
    with ScratchDir(tmp_path) as scratch:
        values = scratch.appended("ids", np.int64)
        for part in (np.arange(5), np.arange(0), np.arange(10, 13)):
            values.append(part)
        out = values.finish()
        assert isinstance(out, np.memmap) and not out.flags.writeable
        assert out.tolist() == [0, 1, 2, 3, 4, 10, 11, 12] and Path(out.filename).parent == scratch.path
        empty = scratch.appended("none", np.int64).finish()
        assert empty.shape == (0,) and empty.dtype == np.int64
    assert not list(tmp_path.iterdir())


def test_a_full_disk_names_the_scratch_file(tmp_path, monkeypatch):
    def full(fd, values, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(scratch_module, "pwrite_all", full)
    with ScratchDir(tmp_path) as scratch:
        values = scratch.appended("src", np.int64)
        with pytest.raises(OutputError) as err:
            values.append(np.arange(3))
        assert "src" in str(err.value) and "No space left on device" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("source, name", [(FACEBOOK, "facebook.txt.gz"), (ENRON, "enron.csv"), (ENRON, "enron.parquet")])
def test_text_edge_lists_spill_the_same_graph(tmp_path, source, name):
    """SNAP text (gzip), a CSV table with a header and a Parquet table, read into memory and into a scratch directory:
    the same ids."""
    path = tmp_path / name
    if name.endswith(".parquet"):
        pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
        graph = read_graph(source)
        pq.write_table(pa.table({"src": np.asarray(graph.src), "dst": np.asarray(graph.dst)}), path, row_group_size=50_000)
    elif name.endswith(".csv"):
        graph = read_graph(source)
        text = "source,target\n" + "\n".join(f"{s},{d}" for s, d in zip(graph.src.tolist(), graph.dst.tolist())) + "\n"
        path.write_text(text)
    else:
        path.write_bytes(source.read_bytes())
    memory = read_graph(path)
    with ScratchDir(tmp_path, prefix="spill-") as spill:
        spilled = read_graph(path, spill=spill)
        for got, want in ((spilled.src, memory.src), (spilled.dst, memory.dst)):
            assert isinstance(got, np.memmap) and Path(got.filename).parent == spill.path
            assert np.array_equal(got, want)
        assert spilled.num_nodes == memory.num_nodes


BLOCK_EDGES = 1 << 20


def _edge_list(path: Path, num_nodes: int, num_edges: int) -> None:
    """A SNAP text edge list: one block of random edges, formatted once and written until num_edges (a
    multiple of BLOCK_EDGES) are in the file (formatting every edge took 15 of the test's 36 s)."""
    assert num_edges % BLOCK_EDGES == 0, num_edges
    ids = np.random.default_rng(3).integers(0, num_nodes, size=(BLOCK_EDGES, 2))
    block = ("\n".join(f"{s} {d}" for s, d in ids.tolist()) + "\n").encode()
    with gzip.open(path, "wb", compresslevel=1) as fh:
        for _ in range(num_edges // BLOCK_EDGES):
            fh.write(block)


def test_chunk_a_text_edge_list_larger_than_the_cap(tmp_path):
    """12.6M edges of text: 201 MB of parsed int64 ids (252 MB with the in-memory array's growth) under a 200 MB cap.
    Parsed into memory, as before this change, the run is killed at the cap."""
    reason = available()
    if reason:
        pytest.skip(f"cgroups cannot be created here: {reason}")
    num_edges = 12 * BLOCK_EDGES
    _edge_list(tmp_path / "edges.txt.gz", 1_000_000, num_edges)
    gpart_capped(["chunk", str(tmp_path / "edges.txt.gz"), "--chunks", "4", "-o", str(tmp_path / "chunks"), "-q"], 200 << 20)
    chunks = read_graph(tmp_path / "chunks")
    assert chunks.num_edges == num_edges
    first = np.loadtxt(gzip.open(tmp_path / "edges.txt.gz", "rt"), dtype=np.int64, max_rows=1000)
    assert np.array_equal(np.asarray(chunks.src[:1000]), first[:, 0]) and np.array_equal(np.asarray(chunks.dst[:1000]), first[:, 1])
    assert not [p for p in tmp_path.iterdir() if "scratch" in p.name or ".gpart-" in p.name]
