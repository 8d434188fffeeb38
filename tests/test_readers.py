"""Input readers (SPEC.md section 3), the Cora sample and the synthetic generator."""

from __future__ import annotations

import gzip
import lzma
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import synthetic
from support.public_data import PUBLIC_DATA
from support.synthetic import powerlaw_graph

import gpart.formats.input.readers as readers
import gpart.formats.input.text_tokens as text_tokens
from gpart.base.errors import InputError
from gpart.cli.options.params import parse_name_paths
from gpart.formats.input.checks import scan_range
from gpart.formats.input.npz import open_array_input, read_npz_arrays
from gpart.formats.input.readers import read_graph

REPO = Path(__file__).resolve().parents[1]
DATA = PUBLIC_DATA
FIXTURES = Path(__file__).resolve().parent / "data"
CORA_SAMPLE = REPO / "sample_data" / "cora.npz"


def needs(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"{path} is missing: the public graphs ship in tests/data/public (a broken checkout)")
    return path


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(InputError) as info:
        fn(*args, **kwargs)
    text = str(info.value)
    assert "\n" not in text
    return text


def undirected_pairs(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    lo = np.minimum(src, dst).astype(np.int64)
    hi = np.maximum(src, dst).astype(np.int64)
    return np.unique(lo * n + hi)


# ---------------------------------------------------------------------------
# Real data (counts from each SOURCE.md)
# ---------------------------------------------------------------------------


def test_cora_sample() -> None:
    g = read_graph(CORA_SAMPLE)
    g.check()
    assert g.input_format == "npz"
    assert (g.num_nodes, g.num_edges) == (2708, 5429)  # cora.cites entries, directed as given
    assert g.src.dtype == np.int64 and g.dst.dtype == np.int64
    assert undirected_pairs(g.src, g.dst, g.num_nodes).shape[0] == 5278
    assert not np.any(g.src == g.dst)
    feat, label = g.node_data["feat"], g.node_data["label"]
    assert feat.dtype == np.float32 and feat.shape == (2708, 1433)
    assert int(np.count_nonzero(feat)) == 49216 and set(np.unique(feat)) == {0.0, 1.0}
    assert label.dtype == np.int64 and set(np.unique(label)) == set(range(7))
    masks = [g.node_data[k] for k in ("train_mask", "val_mask", "test_mask")]
    assert all(m.dtype == np.bool_ for m in masks)
    assert [int(m.sum()) for m in masks] == [140, 500, 1000]
    assert np.all(np.bincount(label[masks[0]], minlength=7) == 20)
    assert not np.any((masks[0] & masks[1]) | (masks[0] & masks[2]) | (masks[1] & masks[2]))
    assert set(g.node_data) == {"feat", "label", "train_mask", "val_mask", "test_mask"} and not g.edge_data


def test_cora_sample_matches_source_and_is_reproducible(tmp_path: Path) -> None:
    source = needs(DATA / "cora" / "cora.npz")
    sys.path.insert(0, str(REPO / "sample_data"))
    try:
        import make_cora
    finally:
        sys.path.pop(0)
    out = tmp_path / "cora.npz"
    make_cora.convert(source, out)
    assert out.read_bytes() == CORA_SAMPLE.read_bytes()
    with np.load(source, allow_pickle=False) as z:
        indptr, indices = z["adj_indptr"], z["adj_indices"]
        labels = z["labels"]
    g = read_graph(out)
    assert np.array_equal(g.src, np.repeat(np.arange(2708), np.diff(indptr)))
    assert np.array_equal(g.dst, indices)
    assert np.array_equal(g.node_data["label"], labels)


def test_original_cora_npz_is_refused_with_its_keys() -> None:
    msg = error_of(read_graph, needs(DATA / "cora" / "cora.npz"))
    # class_names / node_names are string arrays, but the structure is missing first
    assert "no graph structure" in msg and "adj_indptr" in msg


def test_email_enron() -> None:
    path = needs(DATA / "email-enron" / "email-Enron.txt.gz")
    g = read_graph(path)
    g.check()
    assert g.input_format == "snap"
    assert (g.num_nodes, g.num_edges) == (36692, 367662)
    assert undirected_pairs(g.src, g.dst, g.num_nodes).shape[0] == 183831
    assert not np.any(g.src == g.dst)
    assert (int(g.src[0]), int(g.dst[0]), int(g.src[1]), int(g.dst[1])) == (0, 1, 1, 0)
    reference = np.loadtxt(path, dtype=np.int64, comments="#")
    assert np.array_equal(g.src, reference[:, 0]) and np.array_equal(g.dst, reference[:, 1])


def test_facebook() -> None:
    g = read_graph(needs(DATA / "facebook-combined" / "facebook_combined.txt.gz"))
    assert (g.num_nodes, g.num_edges) == (4039, 88234)
    assert undirected_pairs(g.src, g.dst, g.num_nodes).shape[0] == 88234


def test_road_ny() -> None:
    path = needs(DATA / "road-ny" / "NY.gr.xz")
    g = read_graph(path)
    g.check()
    assert g.input_format == "dimacs"
    assert (g.num_nodes, g.num_edges) == (264346, 365050)
    assert undirected_pairs(g.src, g.dst, g.num_nodes).shape[0] == 365050
    degree = np.bincount(np.concatenate([g.src, g.dst]), minlength=g.num_nodes)
    assert int(degree.max()) == 8 and int(degree.min()) >= 1
    assert (int(g.src[0]), int(g.dst[0])) == (0, 1)  # first line "1 2"
    assert not g.edge_data


WALSHAW = {  # name: (nodes, undirected edges, max degree)
    "add20": (2395, 7462, 123),
    "data": (2851, 15093, 17),
    "3elt": (4720, 13722, 9),
    "uk": (4824, 6837, 3),
    "whitaker3": (9800, 28989, 8),
    "crack": (10240, 30380, 9),
    "4elt": (15606, 45878, 10),
}


@pytest.mark.parametrize("name", sorted(WALSHAW))
def test_walshaw(name: str) -> None:
    path = needs(DATA / "walshaw-small" / f"{name}.graph.gz")
    g = read_graph(path)
    g.check()
    n, m, max_degree = WALSHAW[name]
    assert g.input_format == "metis"
    assert (g.num_nodes, g.num_edges) == (n, 2 * m)
    assert undirected_pairs(g.src, g.dst, n).shape[0] == m
    assert int(np.bincount(g.src, minlength=n).max()) == max_degree
    # both directions of every edge are listed
    forward = np.unique(g.src.astype(np.int64) * n + g.dst)
    backward = np.unique(g.dst.astype(np.int64) * n + g.src)
    assert np.array_equal(forward, backward)
    assert np.all(np.diff(g.src) >= 0)  # adjacency lists in vertex order


def _reference_metis(text: str) -> tuple[int, list[int], list[int]]:
    lines = [line for line in text.split("\n") if not line.startswith("%")]
    n = int(lines[0].split()[0])
    src, dst = [], []
    for i, line in enumerate(lines[1 : n + 1]):
        for token in line.split():
            src.append(i)
            dst.append(int(token) - 1)
    return n, src, dst


@pytest.mark.parametrize("block", [64, 1000, 4099])
def test_text_block_boundaries(monkeypatch, block: int) -> None:
    """Tiny decompression blocks split lines, comments and vertex lists anywhere."""
    path = needs(DATA / "walshaw-small" / "uk.graph.gz")
    fb = needs(DATA / "facebook-combined" / "facebook_combined.txt.gz")
    n, src, dst = _reference_metis(gzip.open(path, "rt").read())
    enron = needs(DATA / "email-enron" / "email-Enron.txt.gz")
    whole_enron = read_graph(enron)
    monkeypatch.setattr(text_tokens, "TEXT_BLOCK_BYTES", block)
    g = read_graph(path)
    assert g.num_nodes == n and np.array_equal(g.src, src) and np.array_equal(g.dst, dst)
    if block >= 1000:  # (smaller blocks would make these slow, not different)
        pairs = np.loadtxt(fb, dtype=np.int64)
        h = read_graph(fb)
        assert np.array_equal(h.src, pairs[:, 0]) and np.array_equal(h.dst, pairs[:, 1])
    if block == 4099:  # CRLF text with a 4-line comment header, split everywhere
        e = read_graph(enron)
        assert np.array_equal(e.src, whole_enron.src) and np.array_equal(e.dst, whole_enron.dst)
    w = read_graph(FIXTURES / "weighted.graph")
    assert w.num_edges == 22


_SEP = st.sampled_from([" ", "\t", "  ", " \t "])


@st.composite
def _snap_text(draw):
    """Random SNAP text: edge lines with odd spacing and extra columns, comments, blank lines."""
    lines, edges = [], []
    for _ in range(draw(st.integers(0, 40))):
        kind = draw(st.sampled_from(["edge", "edge", "edge", "comment", "blank"]))
        if kind == "edge":
            u, v = draw(st.integers(0, 10**9)), draw(st.integers(0, 10**9))
            extra = draw(st.sampled_from(["", " 1.5", "\tw x", " -3"]))
            lines.append(draw(st.sampled_from(["", " ", "\t"])) + f"{u}{draw(_SEP)}{v}{extra}" + draw(st.sampled_from(["", " "])))
            edges.append((u, v))
        elif kind == "comment":
            lines.append(draw(st.sampled_from(["#", "%", "# x y", "%% 1 2"])))
        else:
            lines.append(draw(st.sampled_from(["", " ", "\t"])))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    text = newline.join(lines) + draw(st.sampled_from(["", newline]))
    return text, edges


@settings(max_examples=40, deadline=None)
@given(data=_snap_text(), block=st.sampled_from([7, 64, 1 << 20]))
def test_snap_random_text_matches_reference(tmp_path_factory, data, block: int) -> None:
    text, edges = data
    path = tmp_path_factory.mktemp("snap") / "g.txt"
    path.write_bytes(text.encode())
    saved = text_tokens.TEXT_BLOCK_BYTES
    text_tokens.TEXT_BLOCK_BYTES = block
    try:
        g = read_graph(path)
    finally:
        text_tokens.TEXT_BLOCK_BYTES = saved
    expected = np.array(edges, dtype=np.int64).reshape(-1, 2)
    assert np.array_equal(g.src, expected[:, 0]) and np.array_equal(g.dst, expected[:, 1])
    assert g.num_nodes == (int(expected.max()) + 1 if edges else 0)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 30), seed=st.integers(0, 2**31), block=st.sampled_from([5, 50, 1 << 20]))
def test_metis_random_graph_round_trip(tmp_path_factory, n: int, seed: int, block: int) -> None:
    rng = np.random.default_rng(seed)
    pairs = {(int(a), int(b)) for a, b in rng.integers(0, n, (rng.integers(0, 3 * n + 1), 2)) if a != b}
    adj = {i: [] for i in range(n)}
    for a, b in pairs:
        adj[a].append(b)
        adj[b].append(a)
    out = ["% random graph", f"{n} {sum(len(v) for v in adj.values()) // 2}"]
    src, dst = [], []
    for i in range(n):
        if rng.random() < 0.2:
            out.append("% interleaved comment")
        out.append(" ".join(str(j + 1) for j in adj[i]))  # blank for isolated vertices
        src += [i] * len(adj[i])
        dst += adj[i]
    path = tmp_path_factory.mktemp("metis") / "g.graph"
    path.write_text("\n".join(out) + "\n")
    saved = text_tokens.TEXT_BLOCK_BYTES
    text_tokens.TEXT_BLOCK_BYTES = block
    try:
        g = read_graph(path)
    finally:
        text_tokens.TEXT_BLOCK_BYTES = saved
    assert g.num_nodes == n and g.src.tolist() == src and g.dst.tolist() == dst


# ---------------------------------------------------------------------------
# Small fixtures: METIS with weights, DIMACS sp, SNAP CRLF
# ---------------------------------------------------------------------------


def test_metis_weights_and_sizes() -> None:
    g = read_graph(FIXTURES / "weighted.graph")
    g.check()
    assert (g.num_nodes, g.num_edges) == (7, 22)
    assert g.node_data["vsize"].tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert g.node_data["vwgt"].shape == (7, 2)
    assert g.node_data["vwgt"].tolist() == [[4, 2], [2, 1], [5, 3], [0, 1], [1, 2], [6, 3], [2, 1]]
    assert g.src.tolist()[:4] == [0, 0, 0, 1] and g.dst.tolist()[:4] == [1, 2, 4, 0]
    weight = g.edge_data["edge_weight"]
    assert weight.dtype == np.int64 and weight.shape == (22,)
    expected = {(1, 2): 1, (1, 3): 2, (1, 5): 1, (2, 3): 2, (2, 4): 3, (3, 4): 2, (3, 5): 3, (4, 6): 2, (5, 6): 1, (5, 7): 5, (6, 7): 6}
    for s, d, w in zip(g.src.tolist(), g.dst.tolist(), weight.tolist()):
        key = (min(s, d) + 1, max(s, d) + 1)
        assert expected[key] == w


def test_metis_isolated_vertex_blank_line(tmp_path: Path) -> None:
    path = tmp_path / "iso.graph"
    path.write_text("3 1\n2\n1\n\n")  # vertex 3 has no neighbours: a blank line
    g = read_graph(path)
    assert g.num_nodes == 3 and g.src.tolist() == [0, 1] and g.dst.tolist() == [1, 0]


def test_dimacs_sp_arcs_and_weights() -> None:
    g = read_graph(FIXTURES / "tiny_sp.gr")
    assert g.input_format == "dimacs"
    assert g.num_nodes == 4
    assert g.src.tolist() == [0, 1, 2, 3, 0] and g.dst.tolist() == [1, 2, 3, 0, 2]
    assert g.edge_data["edge_weight"].tolist() == [10, 20, 30, 40, 7]


def test_dimacs_compressed_variants(tmp_path: Path) -> None:
    text = (FIXTURES / "tiny_sp.gr").read_bytes()
    for name, opener in (("t.gr.gz", gzip.open), ("t.gr.xz", lzma.open)):
        with opener(tmp_path / name, "wb") as fh:
            fh.write(text)
        assert read_graph(tmp_path / name).edge_data["edge_weight"].tolist() == [10, 20, 30, 40, 7]


def test_snap_crlf_extra_columns_comments() -> None:
    g = read_graph(FIXTURES / "tiny_crlf.txt")
    assert g.num_nodes == 4 and g.src.tolist() == [0, 1, 3] and g.dst.tolist() == [1, 2, 0]


@pytest.mark.parametrize("suffix", [".edges", ".el", ".txt.gz", ".el.xz", ".txt.bz2"])  # .tsv: a table (test_edge_tables)
def test_snap_suffixes(tmp_path: Path, suffix: str) -> None:
    import bz2

    path = tmp_path / f"g{suffix}"
    data = b"# c\n5 6\n6 5\n"
    opener = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}.get(path.suffix, open)
    with opener(path, "wb") as fh:
        fh.write(data)
    g = read_graph(path)
    assert g.num_nodes == 7 and g.src.tolist() == [5, 6] and g.dst.tolist() == [6, 5]


def test_snap_empty_and_comment_only(tmp_path: Path) -> None:
    path = tmp_path / "e.txt"
    path.write_text("# nothing\n")
    g = read_graph(path)
    assert g.num_nodes == 0 and g.num_edges == 0
    (tmp_path / "z.txt").write_bytes(b"")
    assert read_graph(tmp_path / "z.txt").num_edges == 0
    (tmp_path / "nonl.txt").write_bytes(b"1 2\n3 4")  # no final newline
    assert read_graph(tmp_path / "nonl.txt").dst.tolist() == [2, 4]


# ---------------------------------------------------------------------------
# .npz: COO, CSR, memory mapping, dtypes, extra .npy
# ---------------------------------------------------------------------------


def test_npz_stored_members_are_memory_mapped(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    src = rng.integers(0, 50, 300).astype(np.int32)
    dst = rng.integers(0, 50, 300).astype(np.int32)
    feat = rng.standard_normal((50, 3)).astype(np.float32)
    edge_w = rng.random(300)
    path = tmp_path / "g.npz"
    np.savez(path, src=src, dst=dst, num_nodes=np.int64(50), feat=feat, edge_w=edge_w, label=np.arange(50))
    g = read_graph(path)
    for arr in (g.src, g.dst, g.node_data["feat"], g.edge_data["edge_w"], g.node_data["label"]):
        assert isinstance(arr, np.memmap)
    assert g.src.dtype == np.int32 and g.dst.dtype == np.int32  # input dtype kept
    assert np.array_equal(g.src, src) and np.array_equal(g.dst, dst)
    assert np.array_equal(g.node_data["feat"], feat) and np.array_equal(g.edge_data["edge_w"], edge_w)
    assert g.num_nodes == 50 and set(g.node_data) == {"feat", "label"} and set(g.edge_data) == {"edge_w"}


def test_npz_compressed_members_are_loaded(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    np.savez_compressed(path, src=np.array([0, 1], np.uint16), dst=np.array([1, 2], np.uint16), feat=np.eye(3))
    g = read_graph(path)
    assert not isinstance(g.src, np.memmap) and g.src.dtype == np.uint16
    assert g.num_nodes == 3 and np.array_equal(g.node_data["feat"], np.eye(3))


def test_npz_fortran_order_member(tmp_path: Path) -> None:
    feat = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(4, 3))
    path = tmp_path / "g.npz"
    np.savez(path, src=np.array([0]), dst=np.array([3]), feat=feat)
    assert np.array_equal(read_graph(path).node_data["feat"], feat)


def test_npz_zip64_and_empty_graph(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    np.savez(path, src=np.zeros(0, np.int64), dst=np.zeros(0, np.int64))
    g = read_graph(path)
    assert g.num_nodes == 0 and g.num_edges == 0
    np.savez(path, src=np.zeros(0, np.int64), dst=np.zeros(0, np.int64), num_nodes=np.array([5]), feat=np.ones((5, 2)))
    g = read_graph(path)
    assert g.num_nodes == 5 and g.node_data["feat"].shape == (5, 2)


def _random_csr(rng: np.random.Generator, n: int, e: int, dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    src = np.sort(rng.integers(0, n, e)).astype(dtype)
    dst = rng.integers(0, n, e).astype(dtype)
    indptr = np.searchsorted(src, np.arange(n + 1)).astype(np.int64)
    return src, dst, indptr, dst.copy()


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 40), e=st.integers(0, 120), seed=st.integers(0, 2**31), dtype=st.sampled_from([np.int32, np.int64, np.uint32]))
def test_csr_equals_coo(tmp_path_factory, n: int, e: int, seed: int, dtype) -> None:
    rng = np.random.default_rng(seed)
    src, dst, indptr, indices = _random_csr(rng, n, e, dtype)
    d = tmp_path_factory.mktemp("csr")
    feat = rng.random((n, 2))
    ew = rng.random(e)
    np.savez(d / "coo.npz", src=src, dst=dst, num_nodes=np.int64(n), feat=feat, edge_w=ew)
    np.savez(d / "csr.npz", indptr=indptr, indices=indices, feat=feat, edge_w=ew)
    coo, csr = read_graph(d / "coo.npz"), read_graph(d / "csr.npz")
    assert coo.num_nodes == csr.num_nodes == n
    assert np.array_equal(coo.src, csr.src) and np.array_equal(coo.dst, csr.dst)
    assert csr.dst.dtype == np.dtype(dtype) and csr.src.dtype == np.dtype(dtype)
    assert np.array_equal(coo.edge_data["edge_w"], csr.edge_data["edge_w"])


def test_csr_num_nodes_consistent(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    np.savez(path, indptr=np.array([0, 1, 1]), indices=np.array([1], np.int8), num_nodes=np.int64(2))
    g = read_graph(path)
    assert g.src.tolist() == [0] and g.dst.dtype == np.int8
    np.savez(path, indptr=np.zeros(300, np.int64), indices=np.zeros(0, np.int8))
    assert read_graph(path).src.dtype == np.int64  # 298 does not fit in int8


def test_extra_npy_node_and_edge_data(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    np.savez(path, src=np.array([0, 1, 2]), dst=np.array([1, 2, 0]), feat=np.ones((3, 2)))
    np.save(tmp_path / "emb.npy", np.arange(6, dtype=np.float16).reshape(3, 2))
    np.save(tmp_path / "w.npy", np.array([1.0, 2.0, 3.0]))
    g = read_graph(path, node_data={"emb": tmp_path / "emb.npy"}, edge_data={"weight": str(tmp_path / "w.npy")})
    assert isinstance(g.node_data["emb"], np.memmap) and g.node_data["emb"].dtype == np.float16
    assert g.edge_data["weight"].tolist() == [1.0, 2.0, 3.0]
    # extra arrays work with text inputs too
    snap = FIXTURES / "tiny_crlf.txt"
    np.save(tmp_path / "lab.npy", np.arange(4))
    h = read_graph(snap, node_data={"label": tmp_path / "lab.npy"})
    assert h.node_data["label"].tolist() == [0, 1, 2, 3]


def test_scan_range_chunks(monkeypatch, tmp_path: Path) -> None:
    arr = np.random.default_rng(1).integers(-5, 1000, 10_000)
    np.save(tmp_path / "a.npy", arr)
    mapped = readers.open_npy(tmp_path / "a.npy")
    assert isinstance(mapped, np.memmap)
    assert scan_range(mapped, chunk_bytes=4096) == (int(arr.min()), int(arr.max()))
    assert np.array_equal(mapped, arr)  # pages dropped by the scan come back on access
    assert scan_range(np.zeros(0, np.int32)) == (0, -1)


# ---------------------------------------------------------------------------
# Bad inputs: one-line errors naming the file and the problem
# ---------------------------------------------------------------------------


def _npz(tmp_path: Path, name: str = "g.npz", **arrays) -> Path:
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


E3 = dict(src=np.array([0, 1, 2]), dst=np.array([1, 2, 0]))

BAD_NPZ = {
    "no structure": (dict(feat=np.ones(3)), "no graph structure: expected keys 'src' and 'dst'"),
    "only src": (dict(src=np.array([0])), "has 'src' but no 'dst'"),
    "only indices": (dict(indices=np.array([0])), "has 'indices' but no 'indptr'"),
    "both": (dict(**E3, indptr=np.array([0, 1]), indices=np.array([0])), "both COO keys"),
    "float ids": (dict(src=np.array([0.0, 1.0]), dst=np.array([1, 0])), "'src' has floating-point dtype float64; node ids must be integers"),
    "nan ids": (dict(src=np.array([0, 1]), dst=np.array([np.nan, 0.0])), "floating-point dtype float64 and NaN"),
    "bool ids": (dict(src=np.array([True]), dst=np.array([0])), "'src' has bool dtype"),
    "string ids": (dict(src=np.array(["0"]), dst=np.array([0])), "'src' has string dtype"),
    "structured ids": (dict(src=np.zeros(2, dtype=[("a", "i4")]), dst=np.zeros(2, np.int64)), "structured dtype"),
    "2-d ids": (dict(src=np.zeros((2, 2), np.int64), dst=np.zeros((2, 2), np.int64)), "'src' must be 1-D, has shape [2, 2]"),
    "ragged": (dict(src=np.array([0, 1, 2]), dst=np.array([1, 2])), "'src' has 3 entries but 'dst' has 2"),
    "negative": (dict(src=np.array([0, -1, 2]), dst=np.array([1, 2, 0])), "'src' holds a negative id -1 (first at index 1)"),
    "too large": (dict(**E3, num_nodes=np.int64(2)), "'src' holds id 2 >= num_nodes 2 (first bad at index 2)"),
    "dst too large": (dict(src=np.array([0]), dst=np.array([9]), num_nodes=np.int64(5)), "'dst' holds id 9 >= num_nodes 5"),
    "num_nodes float": (dict(**E3, num_nodes=np.float64(3)), "'num_nodes' must be an integer scalar"),
    "num_nodes vector": (dict(**E3, num_nodes=np.array([3, 4])), "'num_nodes' must be an integer scalar"),
    "num_nodes negative": (dict(src=np.zeros(0, int), dst=np.zeros(0, int), num_nodes=np.int64(-1)), "'num_nodes' is negative (-1)"),
    "node rows": (dict(**E3, feat=np.ones((2, 4))), "node array 'feat' has 2 rows, expected num_nodes = 3"),
    "edge rows": (dict(**E3, edge_w=np.ones(4)), "edge array 'edge_w' has 4 rows, expected num_edges = 3"),
    "object data": (dict(**E3, names=np.array(["a", "b", "c"])), "node array 'names' has string dtype"),
    "complex data": (dict(**E3, feat=np.ones(3, np.complex64)), "node array 'feat' has unsupported dtype complex64"),
    "scalar data": (dict(**E3, alpha=np.float32(1)), "node array 'alpha' is a scalar"),
    "indptr empty": (dict(indptr=np.zeros(0, np.int64), indices=np.zeros(0, np.int64)), "'indptr' is empty"),
    "indptr start": (dict(indptr=np.array([1, 1]), indices=np.array([0])), "'indptr' must start with 0, starts with 1"),
    "indptr end": (dict(indptr=np.array([0, 1, 1]), indices=np.array([0, 1])), "'indptr' ends with 1 but 'indices' has 2 entries"),
    "indptr decreasing": (dict(indptr=np.array([0, 2, 1, 2]), indices=np.array([0, 1])), "'indptr' decreases at index 2 (2 -> 1)"),
    "indptr vs num_nodes": (dict(indptr=np.array([0, 1]), indices=np.array([0]), num_nodes=np.int64(3)), "'num_nodes' is 3 but 'indptr' has 2 entries"),
    "indices range": (dict(indptr=np.array([0, 1]), indices=np.array([1])), "'indices' holds id 1 >= num_nodes 1"),
    "indices negative": (dict(indptr=np.array([0, 1]), indices=np.array([-3])), "'indices' holds a negative id -3"),
    "float indptr": (dict(indptr=np.array([0.0, 1.0]), indices=np.array([0])), "'indptr' has floating-point dtype"),
}


@pytest.mark.parametrize("case", sorted(BAD_NPZ))
def test_bad_npz(tmp_path: Path, case: str) -> None:
    arrays, expected = BAD_NPZ[case]
    path = _npz(tmp_path, **arrays)
    msg = error_of(read_graph, path)
    assert msg.startswith(f"{path}: ") and expected in msg, msg


def test_object_array_is_never_unpickled(tmp_path: Path) -> None:
    path = tmp_path / "g.npz"
    np.savez(path, src=np.array([0]), dst=np.array([0]), obj=np.array([{"a": 1}], dtype=object))
    assert "object arrays are refused" in error_of(read_graph, path)
    np.save(tmp_path / "o.npy", np.array([1, None], dtype=object), allow_pickle=True)
    msg = error_of(read_graph, FIXTURES / "tiny_crlf.txt", node_data={"o": tmp_path / "o.npy"})
    assert "object arrays are refused" in msg and "o.npy" in msg


def test_bad_paths(tmp_path: Path) -> None:
    assert error_of(read_graph, tmp_path / "missing.npz") == f"{tmp_path / 'missing.npz'}: no such file"
    assert error_of(read_graph, tmp_path).startswith(f"{tmp_path}: is a directory, expected a file, a chunked graph")
    (tmp_path / "g.xlsx").write_text("0,1\n")
    assert "unknown input format" in error_of(read_graph, tmp_path / "g.xlsx")
    (tmp_path / "g.npz.gz").write_bytes(b"x")
    assert "unknown input format" in error_of(read_graph, tmp_path / "g.npz.gz")


def test_unreadable_file(tmp_path: Path) -> None:
    import os

    path = _npz(tmp_path, **E3)
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as a user that ignores permissions")
        assert "cannot read: permission denied" in error_of(read_graph, path)
    finally:
        path.chmod(0o644)


def test_corrupt_and_truncated_npz(tmp_path: Path) -> None:
    path = _npz(tmp_path, src=np.arange(1000), dst=np.arange(1000))
    data = path.read_bytes()
    (tmp_path / "t.npz").write_bytes(data[: len(data) // 2])
    assert "corrupt or truncated" in error_of(read_graph, tmp_path / "t.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip at all" * 10)
    assert "not a valid .npz (zip) file" in error_of(read_graph, tmp_path / "junk.npz")
    # a stored member whose data is cut short, inside an otherwise valid zip
    with zipfile.ZipFile(tmp_path / "short.npz", "w") as zf:
        with zf.open("src.npy", "w") as fh:
            np.lib.format.write_array_header_1_0(fh, {"descr": "<i8", "fortran_order": False, "shape": (100,)})
            fh.write(np.arange(10).tobytes())
        zf.writestr("dst.npy", b"")
    msg = error_of(read_graph, tmp_path / "short.npz")
    assert "truncated data" in msg or "not a .npy array" in msg
    # a compressed member with damaged deflate data
    comp = tmp_path / "c.npz"
    np.savez_compressed(comp, src=np.arange(5000), dst=np.arange(5000))
    raw = bytearray(comp.read_bytes())
    raw[200:260] = b"\xff" * 60
    comp.write_bytes(bytes(raw))
    assert "corrupt" in error_of(read_graph, comp)
    # a member that is not .npy
    with zipfile.ZipFile(tmp_path / "odd.npz", "w") as zf:
        zf.writestr("readme.txt", b"hi")
    assert "member 'readme.txt' is not a .npy array" in error_of(read_graph, tmp_path / "odd.npz")


def test_bad_npy_header(tmp_path: Path) -> None:
    (tmp_path / "bad.npy").write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': 'xx'")
    msg = error_of(read_graph, FIXTURES / "tiny_crlf.txt", node_data={"x": tmp_path / "bad.npy"})
    assert "bad.npy" in msg and ("corrupt .npy header" in msg or "not a .npy array" in msg)
    np.save(tmp_path / "ok.npy", np.arange(4.0))
    (tmp_path / "cut.npy").write_bytes((tmp_path / "ok.npy").read_bytes()[:-8])
    assert "truncated data" in error_of(read_graph, FIXTURES / "tiny_crlf.txt", node_data={"x": tmp_path / "cut.npy"})


def test_bad_extra_arrays(tmp_path: Path) -> None:
    graph = _npz(tmp_path, **E3, feat=np.ones(3))
    np.save(tmp_path / "n3.npy", np.ones(3))
    np.save(tmp_path / "n4.npy", np.ones(4))
    np.save(tmp_path / "s.npy", np.float64(1.0))
    cases = [
        (dict(node_data={"": tmp_path / "n3.npy"}), "empty array name"),
        (dict(node_data={"a/b": tmp_path / "n3.npy"}), "array name 'a/b' is not allowed"),
        (dict(node_data={"feat": tmp_path / "n3.npy"}), "data array name 'feat' given twice"),
        (dict(node_data={"x": tmp_path / "n3.npy"}, edge_data={"x": tmp_path / "n3.npy"}), "'x' given twice"),
        (dict(node_data={"x": tmp_path / "n4.npy"}), "node array 'x' has 4 rows, expected num_nodes = 3"),
        (dict(edge_data={"w": tmp_path / "n4.npy"}), "edge array 'w' has 4 rows, expected num_edges = 3"),
        (dict(node_data={"x": tmp_path / "s.npy"}), "node array 'x' is a scalar"),
        (dict(node_data={"x": tmp_path / "nope.npy"}), "no such file"),
        (dict(node_data={"x": graph}), "expected a .npy file"),
    ]
    for kwargs, expected in cases:
        msg = error_of(read_graph, graph, **kwargs)
        assert expected in msg, (kwargs, msg)


def test_parse_name_paths() -> None:
    assert parse_name_paths(["feat=a.npy", "w=b=c.npy"]) == {"feat": "a.npy", "w": "b=c.npy"}
    assert "expects NAME=PATH.npy" in error_of(parse_name_paths, ["feat"])
    assert "empty array name" in error_of(parse_name_paths, ["=a.npy"])
    assert "name 'x' given twice" in error_of(parse_name_paths, ["x=a.npy", "x=b.npy"], what="--edge-data")


BAD_TEXT = {
    "g.txt": ("# c\n0 1\n1 x\n", "line 3: target id 'x' is not an integer"),
    "single.txt": ("0 1\n\n7\n", "line 3: expected 'src dst', found a single token '7'"),
    "neg.txt": ("0 1\n-2 1\n", "line 2: negative id -2"),
    "float.txt": ("0 1.0\n", "line 1: target id '1.0' is not an integer"),
    "big.txt": ("0 12345678901234567890\n", "is not an integer"),
    "h.graph": ("2 1 0x1\n2\n1\n", "METIS fmt '0x1' must be up to three 0/1 digits"),
    "hdr.graph": ("2\n2\n1\n", "METIS header must be 'n m [fmt [ncon]]', found 1 fields"),
    "few.graph": ("3 1\n2\n1\n", "header says n = 3 vertices but the file has 2 vertex lines"),
    "many.graph": ("1 0\n\n2\n", "line 3: more vertex lines than n = 1"),
    "range.graph": ("2 1\n3\n1\n", "line 2: neighbour 3 outside 1..2"),
    "zero.graph": ("2 1\n0\n1\n", "line 2: neighbour 0 outside 1..2"),
    "count.graph": ("2 2\n2\n1\n", "header says m = 2 edges (2m = 4 adjacency entries) but the file lists 2"),
    "tok.graph": ("2 1\n2\nz\n", "line 3: entry 'z' is not an integer"),
    "ew.graph": ("2 1 001\n2 5\n1\n", "line 3: with edge weights (fmt xx1) each neighbour needs a weight"),
    "vw.graph": ("2 1 010\n1 2\n\n", "vertex 2: its line lacks the 1 size/weight fields"),
    "ncon.graph": ("2 1 000 2\n2\n1\n", "ncon 2 needs vertex weights"),
    "empty.graph": ("% only a comment\n", "no METIS header line"),
    "p.gr": ("c x\na 1 2 3\n", "line 2: expected the problem line 'p sp|tw n m' first"),
    "arc.gr": ("p sp 2 1\na 1 2\n", "line 2: expected 'a u v w' for problem 'sp'"),
    "arcid.gr": ("p sp 2 1\na 1 3 5\n", "line 2: node id 3 > n = 2"),
    "arc0.gr": ("p sp 2 1\na 0 1 5\n", "line 2: id below 1 0"),
    "arcw.gr": ("p sp 2 1\na 1 2 x\n", "line 2: arc weight 'x' is not an integer"),
    "tw.gr": ("p tw 3 2\n1 2\n", "problem line says 2 edges but the file lists 1"),
    "tw2.gr": ("p tw 3 1\n1 2 3\n", "line 2: expected 'u v' for problem 'tw'"),
    "twice.gr": ("p tw 3 1\n1 2\np tw 3 1\n", "line 3: second problem line"),
    "nop.gr": ("c only comments\n", "no problem line"),
}


@pytest.mark.parametrize("name", sorted(BAD_TEXT))
def test_bad_text(tmp_path: Path, name: str) -> None:
    text, expected = BAD_TEXT[name]
    path = tmp_path / name
    path.write_text(text)
    msg = error_of(read_graph, path)
    assert msg.startswith(f"{path}: ") and expected in msg, msg


def test_truncated_compressed_text(tmp_path: Path) -> None:
    src = needs(DATA / "facebook-combined" / "facebook_combined.txt.gz").read_bytes()
    (tmp_path / "cut.txt.gz").write_bytes(src[: len(src) // 2])
    assert "corrupt or truncated compressed text" in error_of(read_graph, tmp_path / "cut.txt.gz")
    (tmp_path / "fake.graph.xz").write_bytes(b"plain text, not xz")
    assert "corrupt or truncated compressed text" in error_of(read_graph, tmp_path / "fake.graph.xz")


# ---------------------------------------------------------------------------
# open_array_input
# ---------------------------------------------------------------------------


def test_open_array_input(tmp_path: Path) -> None:
    feat = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.save(tmp_path / "feat.npy", feat)
    arr, name = open_array_input(str(tmp_path / "feat.npy"))
    assert name == "feat" and isinstance(arr, np.memmap) and np.array_equal(arr, feat)
    np.savez(tmp_path / "s.npz", emb=feat, other=np.ones(2))
    arr, name = open_array_input(f"{tmp_path / 's.npz'}:emb")
    assert name == "emb" and isinstance(arr, np.memmap) and np.array_equal(arr, feat)
    np.savez_compressed(tmp_path / "c.npz", emb=feat)
    arr, name = open_array_input(f"{tmp_path / 'c.npz'}:emb")
    assert not isinstance(arr, np.memmap) and np.array_equal(arr, feat)
    assert read_npz_arrays(tmp_path / "s.npz", only=["other"])["other"].tolist() == [1.0, 1.0]


def test_open_array_input_errors(tmp_path: Path) -> None:
    np.savez(tmp_path / "s.npz", emb=np.ones((2, 2)), other=np.ones(2))
    np.save(tmp_path / "f.npy", np.asfortranarray(np.ones((3, 2))))
    np.save(tmp_path / "str.npy", np.array(["a", "b"]))
    np.save(tmp_path / "scalar.npy", np.float32(3))
    s = tmp_path / "s.npz"
    cases = [
        (f"{s}:missing", f"{s}: no array 'missing' (available: emb, other)"),
        (str(s), "name the array inside the .npz as"),
        (f"{s}:", "empty array key"),
        (str(tmp_path / "f.npy"), "not C-contiguous"),
        (str(tmp_path / "str.npy"), "array 'str' has string dtype"),
        (str(tmp_path / "scalar.npy"), "array 'scalar' is a scalar"),
        (str(tmp_path / "none.npy"), "no such file"),
        (str(tmp_path), "is a directory"),
        (str(FIXTURES / "tiny_crlf.txt"), "expected a .npy file or FILE.npz:KEY"),
    ]
    for spec, expected in cases:
        msg = error_of(open_array_input, spec)
        assert expected in msg, (spec, msg)


# ---------------------------------------------------------------------------
# Synthetic power-law graphs
# ---------------------------------------------------------------------------


def test_powerlaw_graph_properties() -> None:
    g = powerlaw_graph(20_000, 200_000, feat_dim=8, seed=3)
    g.check()
    assert g.src.dtype == np.int64 and g.dst.dtype == np.int64
    feat, label, train = g.node_data["feat"], g.node_data["label"], g.node_data["train_mask"]
    assert feat.dtype == np.float32 and feat.shape == (20_000, 8)
    assert label.dtype == np.int64 and train.dtype == np.bool_
    assert 0.08 < train.mean() < 0.12
    degree = np.bincount(np.concatenate([g.src, g.dst]), minlength=g.num_nodes)
    assert degree.max() > 50 * degree.mean()  # heavy tail
    hubs = np.argsort(degree)[-100:]
    assert hubs.min() < 2_000 and hubs.max() > 18_000  # hubs spread over the id range
    again = powerlaw_graph(20_000, 200_000, feat_dim=8, seed=3)
    assert np.array_equal(g.src, again.src) and np.array_equal(feat, again.node_data["feat"])
    other = powerlaw_graph(20_000, 200_000, feat_dim=8, seed=4)
    assert not np.array_equal(g.src, other.src)


def test_powerlaw_npz_streams_the_same_graph(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(synthetic, "CHUNK_ROWS", 4096)  # several chunks per array
    monkeypatch.setattr(synthetic, "FEAT_CHUNK_BYTES", 8192)
    g = synthetic.powerlaw_graph(10_000, 30_000, feat_dim=4, seed=7)
    path = synthetic.write_powerlaw_npz(tmp_path / "p.npz", 10_000, 30_000, feat_dim=4, seed=7)
    h = read_graph(path)
    assert isinstance(h.src, np.memmap) and isinstance(h.node_data["feat"], np.memmap)
    assert h.num_nodes == 10_000
    assert np.array_equal(g.src, h.src) and np.array_equal(g.dst, h.dst)
    for key, arr in g.node_data.items():
        assert np.array_equal(arr, h.node_data[key]), key
    assert not (tmp_path / "p.npz.tmp").exists()


def test_make_powerlaw_script(tmp_path: Path) -> None:
    out = tmp_path / "g.npz"
    cmd = [sys.executable, str(REPO / "benchmarks" / "make_powerlaw.py"), str(out), "--nodes", "1000", "--edges", "5000", "--feat-dim", "4"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert "size" in done.stdout and "peak RSS" in done.stdout
    g = read_graph(out)
    assert (g.num_nodes, g.num_edges, g.node_data["feat"].shape) == (1000, 5000, (1000, 4))
    with zipfile.ZipFile(out) as zf:
        assert all(info.compress_type == zipfile.ZIP_STORED for info in zf.infolist())
    refused = subprocess.run(cmd, capture_output=True, text=True)
    assert refused.returncode != 0 and "exists" in refused.stderr
