"""METIS, DIMACS and OGB folders parsed into scratch files (ReadOptions.spill), as the edge lists of test_text_spill.py:
the same graph as the in-memory read, its edge arrays mapped from the run's scratch directory; the same one-line
errors, nothing left of a refused read; `gpart chunk` of a METIS file several times larger than its memory cap."""

from __future__ import annotations

import gzip
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from support.cli_run import run
from support.graph_text import circulant_neighbours, dimacs_sp_text, metis_text, symmetric_edges, write_circulant_metis
from support.memcap import available, run_capped
from support.public_data import ROAD_NY, WALSHAW

import gpart.formats.input.numeric_csv as numeric_csv
import gpart.formats.input.text_tokens as text_tokens
from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.input.readers import read_graph

FIXTURES = Path(__file__).resolve().parent / "data"


def assert_same(spilled: Graph, memory: Graph, spill: ScratchDir) -> None:
    """Equal arrays of equal dtypes; the edge arrays mapped read-only from `spill`."""
    assert spilled.num_nodes == memory.num_nodes
    edge = [("src", spilled.src, memory.src), ("dst", spilled.dst, memory.dst)]
    assert sorted(spilled.edge_data) == sorted(memory.edge_data) and sorted(spilled.node_data) == sorted(memory.node_data)
    edge += [(k, spilled.edge_data[k], memory.edge_data[k]) for k in memory.edge_data]
    for name, got, _ in edge:
        assert isinstance(got, np.memmap) and not got.flags.writeable and Path(got.filename).parent == spill.path, name
    for name, got, want in edge + [(k, spilled.node_data[k], memory.node_data[k]) for k in memory.node_data]:
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want, equal_nan=True), name


def _random_metis(path: Path, weights: bool) -> Path:
    src, dst = symmetric_edges(3000, 20000, seed=5)
    weight = np.random.default_rng(6).integers(1, 50, src.shape[0]) if weights else None
    path.write_bytes(metis_text(3100, src, dst, weight))  # the last 100 vertices: blank lines
    return path


def _random_dimacs(path: Path) -> Path:
    rng = np.random.default_rng(8)
    path.write_bytes(dimacs_sp_text(500, rng.integers(0, 500, 30000), rng.integers(0, 500, 30000), rng.integers(1, 9, 30000)))
    return path


INPUTS = {
    "walshaw uk.graph.gz": lambda tmp: WALSHAW / "uk.graph.gz",
    "weighted.graph (vsize, vwgt, edge weights)": lambda tmp: FIXTURES / "weighted.graph",
    "random.graph": lambda tmp: _random_metis(tmp / "random.graph", weights=False),
    "random weighted.graph": lambda tmp: _random_metis(tmp / "weighted.graph", weights=True),
    "tiny_sp.gr": lambda tmp: FIXTURES / "tiny_sp.gr",
    "random sp.gr": lambda tmp: _random_dimacs(tmp / "sp.gr"),
    "road NY.gr.xz (PACE tw)": lambda tmp: ROAD_NY,
}


@pytest.mark.parametrize("block", [4099, None])
@pytest.mark.parametrize("name", sorted(INPUTS))
def test_metis_and_dimacs_spill_the_same_graph(tmp_path, monkeypatch, name, block):
    """Read into memory and into a scratch directory, in blocks of 4 KiB (the ids of many blocks appended) and of the
    default size."""
    if block is not None:
        monkeypatch.setattr(text_tokens, "TEXT_BLOCK_BYTES", block)
    path = INPUTS[name](tmp_path)
    memory = read_graph(path)
    with ScratchDir(tmp_path, prefix="spill-") as spill:
        assert_same(read_graph(path, spill=spill), memory, spill)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("spill-")]


def csv_gz(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        fh.write(text)


def rows(values: np.ndarray, fmt: str = "{}") -> str:
    return "".join(",".join(fmt.format(v) for v in row) + "\n" for row in values.reshape(values.shape[0], -1).tolist())


@pytest.fixture
def ogb(tmp_path: Path) -> Path:
    """An OGB folder whose edges, node and edge arrays span many 1 KiB blocks; edge_weight holds one decimal value
    past the sniffed start (an integer read that starts over as float32)."""
    rng = np.random.default_rng(11)
    n, e = 400, 3000
    raw = tmp_path / "ogbn_spill" / "raw"
    csv_gz(raw / "edge.csv.gz", rows(rng.integers(0, n, (e, 2))))
    csv_gz(raw / "num-node-list.csv.gz", f"{n}\n")
    csv_gz(raw / "num-edge-list.csv.gz", f"{e}\n")
    csv_gz(raw / "node-feat.csv.gz", rows(rng.standard_normal((n, 5)), "{:.7g}"))
    csv_gz(raw / "node-label.csv.gz", rows(rng.integers(0, 7, (n, 1))))
    csv_gz(raw / "edge-feat.csv.gz", rows(rng.integers(0, 3, (e, 2))))
    csv_gz(raw / "edge_weight.csv.gz", rows(rng.integers(0, 9, (e - 1, 1))) + "2.5\n")
    split = tmp_path / "ogbn_spill" / "split" / "random"
    for stem, ids in zip(("train", "valid", "test"), np.array_split(rng.permutation(n), 3)):
        csv_gz(split / f"{stem}.csv.gz", rows(ids))
    return tmp_path / "ogbn_spill"


@pytest.mark.parametrize("block", [1024, None])
def test_an_ogb_folder_spills_the_same_graph(tmp_path, monkeypatch, ogb, block):
    if block is not None:
        monkeypatch.setattr(text_tokens, "TEXT_BLOCK_BYTES", block)
        monkeypatch.setattr(numeric_csv, "SNIFF_BYTES", 64)
    memory = read_graph(ogb)
    assert memory.edge_data["edge_weight"].dtype == np.float32 and memory.edge_data["edge_feat"].shape == (3000, 2)
    with ScratchDir(tmp_path, prefix="spill-") as spill:
        spilled = read_graph(ogb, spill=spill)
        assert_same(spilled, memory, spill)
        for name in ("feat", "label"):  # node arrays parsed from CSV are mapped too
            assert Path(spilled.node_data[name].filename).parent == spill.path
        assert not isinstance(spilled.node_data["train_mask"], np.memmap)  # masks: one bool per node, in memory


def _open_scratch_fds(spill_path: Path) -> list[str]:
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return [t for t in targets if t.startswith(str(spill_path))]


def _bad_metis(tmp: Path, kind: str) -> tuple[Path, str]:
    src, dst = symmetric_edges(3000, 20000, seed=5)
    text = metis_text(3000, src, dst).decode()
    header, body = text.split("\n", 2)[1], text.split("\n", 2)[2]
    lines = body.split("\n")
    if kind == "count":
        text = f"3000 {20000 + 1}\n" + body
    elif kind == "truncated":
        text = "3001 20000\n" + body
    elif kind == "range":
        lines[2900] += " 3001"
        text = header + "\n" + "\n".join(lines)
    else:  # a token that is not an integer, many blocks in
        lines[2900] += " 7x"
        text = header + "\n" + "\n".join(lines)
    path = tmp / f"{kind}.graph"
    path.write_text(text)
    return path, {"count": "but the file lists 40000", "truncated": "header says n = 3001 vertices but the file has 3000",
                  "range": "neighbour 3001 outside 1..3000", "token": "entry '7x' is not an integer"}[kind]


def _bad_dimacs(tmp: Path, kind: str) -> tuple[Path, str]:
    rng = np.random.default_rng(8)
    text = dimacs_sp_text(500, rng.integers(0, 500, 30000), rng.integers(0, 500, 30000), rng.integers(1, 9, 30000)).decode()
    if kind == "count":
        text = text.replace("p sp 500 30000", "p sp 500 30001")
    elif kind == "range":
        text += "a 1 501 3\n"
    else:
        text += "a 1 2 x\n"
    path = tmp / f"{kind}.gr"
    path.write_text(text)
    return path, {"count": "problem line says 30001 arcs but the file lists 30000", "range": "line 30003: node id 501 > n = 500",
                  "weight": "line 30003: arc weight 'x' is not an integer"}[kind]


BAD = [("metis", k) for k in ("count", "truncated", "range", "token")] + [("dimacs", k) for k in ("count", "range", "weight")]


@pytest.mark.parametrize("fmt, kind", BAD)
def test_bad_text_through_the_spill_is_the_same_line(tmp_path, monkeypatch, fmt, kind):
    """Found many blocks in (a count mismatch at the very end): the in-memory read's message, one line; the scratch
    files closed and removed with their directory."""
    monkeypatch.setattr(text_tokens, "TEXT_BLOCK_BYTES", 4099)
    path, expected = (_bad_metis if fmt == "metis" else _bad_dimacs)(tmp_path, kind)
    with pytest.raises(InputError) as memory:
        read_graph(path)
    with ScratchDir(tmp_path, prefix="spill-") as spill:
        spill_path = spill.path
        with pytest.raises(InputError) as spilled:
            read_graph(path, spill=spill)
    assert str(spilled.value) == str(memory.value) and expected in str(spilled.value) and "\n" not in str(spilled.value)
    assert not spill_path.exists() and not _open_scratch_fds(spill_path)


def test_bad_ogb_files_through_the_spill_are_the_same_line(tmp_path, monkeypatch, ogb):
    monkeypatch.setattr(text_tokens, "TEXT_BLOCK_BYTES", 1024)
    raw = ogb / "raw"
    ids = rows(np.random.default_rng(2).integers(0, 9, (2999, 1)))
    cases = [
        ("edge.csv.gz", "0,1\n" * 2999 + "1,400\n", "edge 2999: node id 400 >= the dataset's 400 nodes (num-node-list)"),
        ("edge.csv.gz", "0,1\n" * 2999, "2999 edges, raw/num-edge-list.csv.gz says 3000"),
        ("edge.csv.gz", "0,1\n" * 2000 + "1,x\n", "line 2001: target id (column 1) 'x' is not an integer"),
        ("node-label.csv.gz", "1\n" * 399 + "abc\n", "line 400, column 1: 'abc' is not a number"),
        ("edge-feat.csv.gz", "1,2\n" * 2999, "2999 rows, the graph has 3000 edges"),
        ("edge-feat.csv.gz", "1,2\n" * 1500 + "1,2,3\n" * 1500, "line 1501: the number of columns changed from 2 to 3"),
        ("edge_weight.csv.gz", ids + "1,2\n", "line 3000: the number of columns changed from 1 to 2"),
    ]
    for name, text, expected in cases:
        saved = (raw / name).read_bytes()
        csv_gz(raw / name, text)
        with pytest.raises(InputError) as memory:
            read_graph(ogb)
        with ScratchDir(tmp_path, prefix="spill-") as spill:
            with pytest.raises(InputError) as spilled:
                read_graph(ogb, spill=spill)
        assert str(spilled.value) == str(memory.value), name
        assert str(spilled.value).endswith(expected) and "\n" not in str(spilled.value), str(spilled.value)
        (raw / name).write_bytes(saved)


def test_chunk_of_a_short_metis_file_leaves_nothing(tmp_path, monkeypatch, capsys):
    """`gpart chunk` of a METIS file whose header promises one more edge than it lists: exit 2, one line, no output
    directory and no scratch beside it."""
    monkeypatch.setattr(text_tokens, "TEXT_BLOCK_BYTES", 4099)
    path, expected = _bad_metis(tmp_path, "count")
    out = tmp_path / "out" / "chunks"
    out.parent.mkdir()
    rc, _, err = run(capsys, "chunk", path, "--chunks", "2", "-o", out)
    assert rc == 2 and err.count("\n") == 1 and expected in err, err
    assert not list(out.parent.iterdir())


def test_chunk_a_metis_file_larger_than_the_cap(tmp_path):
    """16M adjacency entries (1M vertices, 8 offsets of a circulant graph): 256 MB of parsed int64 ids, about 570 MB
    of peak parsed into memory as before this change, under a 160 MB cap."""
    reason = available()
    if reason:
        pytest.skip(f"cgroups cannot be created here: {reason}")
    n, offsets = 1_000_000, (1, 7, 123, 4567, 30011, 98765, 212345, 487651)
    write_circulant_metis(tmp_path / "big.graph", n, offsets)
    gpart = str(Path(sys.executable).with_name("gpart"))
    out = tmp_path / "out" / "chunks"
    out.parent.mkdir()
    run_ = run_capped([gpart, "chunk", str(tmp_path / "big.graph"), "--chunks", "4", "-o", str(out), "-q"], 160 << 20, timeout=600)
    assert run_.returncode == 0 and not run_.oom_killed, (run_.returncode, run_.stderr[-2000:])
    (tmp_path / "big.graph").unlink()
    chunks = read_graph(out)
    assert (chunks.num_nodes, chunks.num_edges) == (n, n * 2 * len(offsets))
    want = circulant_neighbours(n - 1000, n, n, offsets).reshape(-1)
    assert np.array_equal(np.asarray(chunks.dst[-want.shape[0]:]), want)
    assert np.array_equal(np.asarray(chunks.src[:32]), np.repeat([0, 1], 16))
    assert [p.name for p in out.parent.iterdir()] == ["chunks"]
