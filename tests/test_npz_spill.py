"""Compressed `.npz` members and a CSR graph's expanded sources go to scratch files, not memory, where the reader is
given a scratch directory (formats.input.npz: SPILL_MEMBER_BYTES and up): the same graph with mapped arrays, bad
members one line with nothing left behind, an OGB folder's compressed data.npz, and `gpart chunk` of a compressed
graph larger than its memory cap."""

from __future__ import annotations

import numpy as np
import pytest
from support.memcap import available, gpart_capped

from gpart.base.errors import InputError
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.input import npz as npz_module
from gpart.formats.input.readers import read_graph


@pytest.fixture
def spill_everything(monkeypatch):
    """Every compressed member and CSR source array spilled, in blocks of 1000 bytes (many blocks per array)."""
    monkeypatch.setattr(npz_module, "SPILL_MEMBER_BYTES", 0)
    monkeypatch.setattr(npz_module, "CONCAT_BLOCK_BYTES", 1000)


def _coo_arrays(num_nodes: int = 3000, num_edges: int = 20_000) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {"src": rng.integers(0, num_nodes, num_edges), "dst": rng.integers(0, num_nodes, num_edges),
            "num_nodes": np.array(num_nodes), "feat": rng.random((num_nodes, 7), dtype=np.float32),
            "edge_weight": rng.random(num_edges)}


def test_compressed_members_are_mapped_from_scratch(tmp_path, spill_everything):
    arrays = _coo_arrays()
    np.savez_compressed(tmp_path / "g.npz", **arrays)
    with ScratchDir(tmp_path) as scratch:
        graph = read_graph(tmp_path / "g.npz", spill=scratch)
        assert isinstance(graph.src, np.memmap) and isinstance(graph.node_data["feat"], np.memmap)
        assert np.array_equal(graph.src, arrays["src"]) and np.array_equal(graph.dst, arrays["dst"])
        assert np.array_equal(graph.node_data["feat"], arrays["feat"])
        assert np.array_equal(graph.edge_data["edge_weight"], arrays["edge_weight"])
        assert graph.num_nodes == 3000
    assert not [p for p in tmp_path.iterdir() if p.name != "g.npz"]  # scratch removed with its directory


@pytest.mark.parametrize("compressed", [False, True])
def test_a_csr_graphs_sources_are_expanded_into_scratch(tmp_path, spill_everything, compressed):
    rng = np.random.default_rng(6)
    counts = rng.integers(0, 40, 2000)
    counts[100:300] = 0  # runs of nodes without edges
    counts[5] = 5000  # one node past a block
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = rng.integers(0, 2000, int(indptr[-1]))
    (np.savez_compressed if compressed else np.savez)(tmp_path / "csr.npz", indptr=indptr, indices=indices)
    with ScratchDir(tmp_path) as scratch:
        graph = read_graph(tmp_path / "csr.npz", spill=scratch)
        assert isinstance(graph.src, np.memmap)
        assert np.array_equal(graph.src, np.repeat(np.arange(2000), counts))
        assert np.array_equal(graph.dst, indices)
    without = read_graph(tmp_path / "csr.npz")
    assert not isinstance(without.src, np.memmap) and np.array_equal(without.src, np.repeat(np.arange(2000), counts))


def test_a_damaged_compressed_member_is_one_line_and_leaves_nothing(tmp_path, spill_everything):
    np.savez_compressed(tmp_path / "g.npz", **_coo_arrays())
    data = bytearray((tmp_path / "g.npz").read_bytes())
    middle = data.index(b"dst.npy") // 2  # inside src's deflated data
    data[middle:middle + 64] = bytes(64)
    (tmp_path / "g.npz").write_bytes(bytes(data))
    with pytest.raises(InputError) as raised:
        with ScratchDir(tmp_path) as scratch:
            read_graph(tmp_path / "g.npz", spill=scratch)
    message = str(raised.value)
    assert "g.npz" in message and "array 'src'" in message and "\n" not in message
    assert not [p for p in tmp_path.iterdir() if p.name != "g.npz"]


def test_an_ogb_folders_compressed_data_is_mapped_from_scratch(tmp_path, spill_everything):
    rng = np.random.default_rng(7)
    raw = tmp_path / "ogbn_toy" / "raw"
    raw.mkdir(parents=True)
    edge_index = rng.integers(0, 500, (2, 4000))
    feat = rng.random((500, 4), dtype=np.float32)
    np.savez_compressed(raw / "data.npz", edge_index=edge_index, num_nodes_list=np.array([500]),
                        num_edges_list=np.array([4000]), node_feat=feat)
    with ScratchDir(tmp_path) as scratch:
        graph = read_graph(tmp_path / "ogbn_toy", spill=scratch)
        assert isinstance(graph.src.base, np.memmap) or isinstance(graph.src, np.memmap)
        assert np.array_equal(graph.src, edge_index[0]) and np.array_equal(graph.dst, edge_index[1])
        assert np.array_equal(graph.node_data["feat"], feat)


def test_chunk_a_compressed_graph_larger_than_the_cap(tmp_path):
    """12M edges in a compressed .npz: 192 MB of int64 ids once inflated, under a 200 MB cap. Loaded into memory, as
    before this change, the run is killed at the cap."""
    reason = available()
    if reason:
        pytest.skip(f"cgroups cannot be created here: {reason}")
    rng = np.random.default_rng(8)
    num_edges = 12_000_000
    src, dst = rng.integers(0, 1_000_000, num_edges), rng.integers(0, 1_000_000, num_edges)
    np.savez_compressed(tmp_path / "g.npz", src=src, dst=dst, num_nodes=np.array(1_000_000))
    gpart_capped(["chunk", str(tmp_path / "g.npz"), "--chunks", "4", "-o", str(tmp_path / "chunks"), "-q"], 200 << 20)
    chunks = read_graph(tmp_path / "chunks")
    assert chunks.num_edges == num_edges
    assert np.array_equal(np.asarray(chunks.src[:1000]), src[:1000]) and np.array_equal(np.asarray(chunks.dst[-1000:]), dst[-1000:])
    assert not [p for p in tmp_path.iterdir() if "scratch" in p.name or ".gpart-" in p.name]
