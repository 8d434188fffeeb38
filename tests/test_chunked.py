"""Chunked graph directories (SPEC.md 10.1): `gpart chunk`, the reader, and their errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.cli_run import run

from gpart.base.errors import InputError
from gpart.formats.input.chunked import ChunkedGraph, chunk_bounds, read_chunked_graph
from gpart.formats.input.readers import read_graph

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"


@pytest.fixture
def cora_chunks(tmp_path, capsys) -> Path:
    out = tmp_path / "chunks"
    rc, _, err = run(capsys, "chunk", CORA, "--chunks", 3, "-o", out, "-q")
    assert rc == 0, err
    return out


def test_chunk_bounds_cover_the_rows():
    assert chunk_bounds(10, 4).tolist() == [0, 3, 6, 9, 10]
    assert chunk_bounds(5, 4).tolist() == [0, 2, 4, 5, 5]
    assert chunk_bounds(0, 2).tolist() == [0, 0, 0]


def test_chunked_cora_reads_back_as_the_same_graph(cora_chunks):
    cora, back = read_graph(CORA), read_graph(cora_chunks)
    assert back.input_format == "chunked" and back.source == str(cora_chunks)
    assert back.num_nodes == cora.num_nodes and np.array_equal(back.src, cora.src) and np.array_equal(back.dst, cora.dst)
    assert set(back.node_data) == set(cora.node_data)
    for name, arr in cora.node_data.items():
        assert back.node_data[name].dtype == arr.dtype and np.array_equal(back.node_data[name], arr)
    meta = json.loads((cora_chunks / "manifest.json").read_text())
    assert meta["num_edges_per_chunk"] == [[1810, 1810, 1809]] and meta["node_type"] == ["_N"]
    assert not [p for p in cora_chunks.parent.iterdir() if ".gpart-" in p.name]


def test_chunk_json_and_refuses_existing_output(tmp_path, capsys, cora_chunks):
    rc, _, err = run(capsys, "chunk", CORA, "--chunks", 2, "-o", cora_chunks)
    assert rc == 2 and "already exists" in err and err.count("\n") == 1
    rc, out, _ = run(capsys, "chunk", CORA, "--chunks", 2, "-o", tmp_path / "c2", "--json")
    assert rc == 0 and json.loads(out)["num_edges"] == 5429


def test_edge_data_chunks_follow_the_edge_chunks(tmp_path):
    from gpart.base.graph import Graph
    from gpart.formats.input.chunked import write_chunked

    g = Graph.from_arrays([0, 1, 2, 3, 4], [1, 2, 3, 4, 0], 5)
    g.edge_data["edge_w"] = np.arange(10, dtype=np.float32).reshape(5, 2)
    write_chunked(g, tmp_path / "c", 2)
    back = read_chunked_graph(tmp_path / "c")
    assert np.array_equal(back.edge_data["edge_w"], g.edge_data["edge_w"])


def test_spilled_chunks_are_mapped_scratch_files_with_the_same_rows(tmp_path, monkeypatch, cora_chunks):
    """Joined into a scratch directory (a partition run's), a chunked graph costs page cache, not anonymous memory:
    every array is a read-only map of a file there, with the rows of the in-memory join, in blocks of any size."""
    import gpart.formats.files.scratch as scratch_module
    from gpart.base.graph import Graph
    from gpart.formats.files.scratch import ScratchDir
    from gpart.formats.input.chunked import write_chunked

    g = Graph.from_arrays(np.arange(7) % 5, (np.arange(7) + 1) % 5, 5, feat=np.arange(15, dtype=np.float16).reshape(5, 3))
    g.edge_data["edge_w"] = np.arange(14, dtype=np.float32).reshape(7, 2)
    write_chunked(g, tmp_path / "c", 3)
    monkeypatch.setattr(scratch_module, "CONCAT_BLOCK_BYTES", 24)  # several blocks per chunk
    for directory in (tmp_path / "c", cora_chunks):
        in_memory = read_chunked_graph(directory)
        with ScratchDir(tmp_path) as spill:
            back = read_graph(directory, spill=spill)
            arrays = {"src": back.src, "dst": back.dst, **back.node_data, **back.edge_data}
            expected = {"src": in_memory.src, "dst": in_memory.dst, **in_memory.node_data, **in_memory.edge_data}
            assert arrays.keys() == expected.keys()
            for name, arr in arrays.items():
                assert isinstance(arr, np.memmap) and not arr.flags.writeable, name
                assert Path(arr.filename).parent == spill.path, name
                assert arr.dtype == expected[name].dtype and np.array_equal(arr, expected[name]), name
    assert not [p for p in tmp_path.iterdir() if ".gpart-scratch" in p.name]


def test_a_chunked_input_is_partitioned_from_scratch_files_to_the_same_bytes(tmp_path, capsys, cora_chunks):
    rc, _, err = run(capsys, "partition", cora_chunks, "--parts", 3, "-o", tmp_path / "from_chunks", "-q")
    assert rc == 0, err
    rc, _, err = run(capsys, "partition", CORA, "--parts", 3, "-o", tmp_path / "from_npz", "-q")
    assert rc == 0, err
    for path in sorted((tmp_path / "from_npz").rglob("*")):
        if path.is_file() and path.name != "manifest.json":
            assert path.read_bytes() == (tmp_path / "from_chunks" / path.relative_to(tmp_path / "from_npz")).read_bytes()
    assert not [p for p in tmp_path.iterdir() if ".gpart-" in p.name]


def _error(directory) -> str:
    with pytest.raises(InputError) as info:
        read_graph(directory)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_bad_chunks_are_one_line_errors_naming_the_file(cora_chunks):
    dst1 = cora_chunks / "edges" / "dst-1.npy"
    good = dst1.read_bytes()
    dst1.write_bytes(good[: len(good) // 2])
    assert _error(cora_chunks).startswith(f"{dst1}: dst-1.npy: truncated data")
    bad = np.load(CORA)["dst"][1810:3620].copy()
    bad[7] = 99999
    np.save(dst1, bad)
    assert _error(cora_chunks) == f"{dst1}: dst chunk holds id 99999 outside [0, 2708)"
    np.save(dst1, bad[:10])
    assert _error(cora_chunks) == f"{dst1}: dst chunk has 10 entries, num_edges_per_chunk says 1810"
    feat = cora_chunks / "node_data" / "feat-2.npy"
    np.save(feat, np.zeros((3, 1433), np.float32))
    np.save(dst1, np.load(CORA)["dst"][1810:3620])
    assert _error(cora_chunks) == f"{feat}: node data 'feat' chunk has 3 rows, the manifest's chunk size is 902"


def test_bad_metadata_is_refused(cora_chunks):
    path = cora_chunks / "manifest.json"
    meta = json.loads(path.read_text())
    for change, expect in ((("num_nodes", 5), "num_nodes_per_chunk sums to 2708, num_nodes is 5"),
                           (("edge_type", ["a:b:c"]), "only homogeneous graphs are supported"),
                           (("version", 7), "version 7 is not supported")):
        path.write_text(json.dumps({**meta, change[0]: change[1]}))
        assert expect in _error(cora_chunks)
    escape = json.loads(json.dumps(meta))
    escape["edges"]["_N:_E:_N"]["data"][0][0] = "../../etc/passwd"
    path.write_text(json.dumps(escape))
    assert "chunk file name" in _error(cora_chunks)
    path.write_text(json.dumps(meta))
    assert ChunkedGraph(cora_chunks).num_edges == 5429
