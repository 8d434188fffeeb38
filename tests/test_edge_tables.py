"""CSV, TSV and Parquet edge tables (SPEC.md 3.8, 3.9): headers, named and numbered columns, gzip,
the same graph as the .txt reader, and one line per bad input (through read_graph and the CLI)."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import numpy as np
import pytest
from support.cli_run import run

import gpart.formats.input.text_tokens as text_tokens
from gpart.base.errors import InputError
from gpart.formats.input.options import GraphInput, ReadOptions
from gpart.formats.input.readers import read_graph

SRC = np.array([0, 5, 2, 2, 7, 1, 0, 3])
DST = np.array([1, 2, 6, 3, 0, 7, 7, 3])


def error_of(path, **options) -> str:
    with pytest.raises(InputError) as info:
        read_graph(GraphInput(path, ReadOptions(**options)) if options else path)
    message = str(info.value)
    assert "\n" not in message
    return message


def write(path: Path, text: str) -> Path:
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


def table(sep: str, header: str = "", rows=None, extra=False) -> str:
    src, dst = rows if rows is not None else (SRC, DST)
    lines = [header] if header else []
    lines += [sep.join([str(a), str(b)] + (["0.5", "x y"] if extra else [])) for a, b in zip(src, dst)]
    return "\n".join(lines) + "\n"


def same_edges(path, **options) -> None:
    g = read_graph(GraphInput(path, ReadOptions(**options)) if options else path)
    assert g.src.tolist() == SRC.tolist() and g.dst.tolist() == DST.tolist()
    assert g.num_nodes == 8 and g.src.dtype == np.int64


@pytest.mark.parametrize("name", ["e.csv", "e.csv.gz"])
@pytest.mark.parametrize("header", ["src,dst", "source,target", "SRC,DST", '"src","dst"', ""])
def test_csv_headers_and_gzip(tmp_path: Path, name: str, header: str) -> None:
    same_edges(write(tmp_path / name, table(",", header)))


def test_tsv_and_text_tables(tmp_path: Path) -> None:
    same_edges(write(tmp_path / "e.tsv", table("\t", "from\tto")))
    same_edges(write(tmp_path / "e.tsv.gz", table("\t")))
    # a SNAP .txt with a header: read as a whitespace table with --header (or named columns)
    text = write(tmp_path / "e.txt", table(" ", "# made by hand\nsrc dst"))
    same_edges(text, header=True)
    same_edges(text, src_col="src", dst_col="dst")
    same_edges(write(tmp_path / "snap.txt", table("\t", "FromNodeId\tToNodeId")), header=True)


def test_named_and_numbered_columns(tmp_path: Path) -> None:
    rows = "\n".join(f"{b},0.25,{a},\"n, {a}\"" for a, b in zip(SRC, DST))
    path = write(tmp_path / "w.csv", "to_id,weight,from_id,name\n" + rows + "\n")
    same_edges(path, src_col="from_id", dst_col="to_id")
    same_edges(path, src_col="2", dst_col="0")
    headless = write(tmp_path / "h.csv", rows + "\n")
    same_edges(headless, src_col="2", dst_col="0")
    same_edges(headless, src_col="2", dst_col="0", header=False)


def test_padding_crlf_comments_blank_lines_bom(tmp_path: Path) -> None:
    body = "".join(f" {a} ,\t{b}\r\n" + ("\n" if a == 2 else "") for a, b in zip(SRC, DST))
    same_edges(write(tmp_path / "p.csv", "# exported\nsrc , dst\r\n" + body))
    same_edges(write(tmp_path / "bom.csv", "\ufeffsrc,dst\r\n" + body))  # as spreadsheets save UTF-8 CSV


def test_blocks_do_not_change_the_result(tmp_path: Path, monkeypatch) -> None:
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 10**12, 5000), rng.integers(0, 50, 5000)
    path = write(tmp_path / "big.csv.gz", table(",", "src,dst,w,name", (src, dst), extra=True))
    whole = read_graph(path)
    monkeypatch.setattr(text_tokens, "TEXT_BLOCK_BYTES", 97)
    small = read_graph(path)
    assert small.src.tolist() == whole.src.tolist() == src.tolist() and small.dst.tolist() == dst.tolist()
    assert small.num_nodes == int(max(src.max(), dst.max())) + 1


def test_same_graph_as_snap_text(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 300, 2000), rng.integers(0, 300, 2000)
    snap = read_graph(write(tmp_path / "g.txt", table("\t", "", (src, dst))))
    csv = read_graph(write(tmp_path / "g.csv", table(",", "src,dst", (src, dst))))
    assert np.array_equal(snap.src, csv.src) and np.array_equal(snap.dst, csv.dst) and snap.num_nodes == csv.num_nodes
    assert csv.input_format == "csv" and csv.source == str(tmp_path / "g.csv")


def test_empty_and_header_only(tmp_path: Path) -> None:
    for text in ("", "src,dst\n", "# nothing\n\n"):
        g = read_graph(write(tmp_path / "e.csv", text))
        assert g.num_nodes == 0 and g.num_edges == 0


@pytest.mark.parametrize("text, options, expected", [
    ("src,dst\n0,1\n2,x\n", {}, "line 3: target id (column 'dst') 'x' is not an integer"),
    ("src,dst\n0,1\n2,-4\n", {}, "line 3: negative id -4"),
    ("src,dst\n0,1\n2,3,4\n", {}, "line 3: 3 fields, the header has 2"),
    ("0,1\n2\n", {}, "line 2: 1 fields, the first line has 2"),
    ("src,dst\n0,1\n1,\n", {}, "line 3: target id (column 'dst') '' is not an integer"),
    ("src,dst\n0,1\n\"1,2\n", {}, "line 3: a double quote opens a field that the line does not close"),
    ("src,dst\n0,1.5\n", {}, "line 2: target id (column 'dst') '1.5' is not an integer"),
    ("a,b,c\n0,1,2\n", {}, "no source/destination columns among 'a', 'b', 'c'"),
    ("a,b,c\n0,1,2\n", {"src_col": "a", "dst_col": "z"}, "--dst-col 'z': no such column (the columns are 'a', 'b', 'c')"),
    ("a,b,c\n0,1,2\n", {"src_col": "a"}, "name both columns: --src-col and --dst-col go together"),
    ("a,b,c\n0,1,2\n", {"src_col": "0", "dst_col": "3"}, "--dst-col 3: column number out of range, the file has 3 columns"),
    ("a,b,c\n0,1,2\n", {"src_col": "b", "dst_col": "1"}, "--src-col and --dst-col name the same column (1)"),
    ("0,1,2\n", {"src_col": "a", "dst_col": "b"}, "--src-col 'a' names a column, but the file has no header"),
    ("7\n", {}, "1 column, an edge list needs two"),
])
def test_bad_tables_one_line(tmp_path: Path, text: str, options: dict, expected: str) -> None:
    path = write(tmp_path / "bad.csv", text)
    assert error_of(path, **options).startswith(f"{path}: {expected}")


def test_truncated_gzip_and_options_on_other_formats(tmp_path: Path) -> None:
    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress(table(",", "src,dst").encode())[:-12])
    assert "corrupt or truncated compressed text" in error_of(path)
    npz = tmp_path / "g.npz"
    np.savez(npz, src=SRC, dst=DST)
    assert error_of(npz, src_col="a", dst_col="b").endswith("apply to edge tables (.csv, .tsv, .parquet, text edge lists), not to this npz input")
    assert error_of(npz, split="time").endswith("--split applies to OGB dataset folders, not to this npz input")


def test_snap_header_hint(tmp_path: Path) -> None:
    path = write(tmp_path / "h.txt", "# comment\nsource target\n0 1\n")
    assert error_of(path) == (f"{path}: line 2: 'source target' looks like a header, not an edge: "
                              "name the file .csv or .tsv, or pass --header (SPEC.md 3.8)")
    assert "line 3: source id 'x' is not an integer" in error_of(write(tmp_path / "x.txt", "0 1\n\nx 1\n"))


# --------------------------------------------------------------------------- Parquet


def parquet(path: Path, columns: dict, row_group_size: int = 3) -> Path:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


def test_parquet_columns_and_types(tmp_path: Path, monkeypatch) -> None:
    same_edges(parquet(tmp_path / "a.parquet", {"src": SRC, "dst": DST.astype(np.int32)}))
    same_edges(parquet(tmp_path / "b.parquet", {"w": np.ones(8), "source": SRC.astype(np.uint16), "target": DST}))
    named = parquet(tmp_path / "c.parquet", {"to_id": DST, "from_id": SRC, "label": ["x"] * 8})
    same_edges(named, src_col="from_id", dst_col="to_id")
    same_edges(named, src_col="1", dst_col="0")
    import gpart.formats.input.parquet_edges as parquet_edges

    monkeypatch.setattr(parquet_edges, "BATCH_ROWS", 2)
    same_edges(named, src_col="from_id", dst_col="to_id")


def test_parquet_bad_inputs_one_line(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    floats = parquet(tmp_path / "f.parquet", {"src": SRC.astype(float), "dst": DST})
    assert error_of(floats) == f"{floats}: column 'src' has type double; node ids must be integers"
    nulls = parquet(tmp_path / "n.parquet", {"src": pa.array([0, 1, None, 3, 4], pa.int64()), "dst": [1, 2, 3, 4, 5]})
    assert error_of(nulls) == f"{nulls}: column 'src': row 2 is null (every edge needs both ids)"
    negative = parquet(tmp_path / "m.parquet", {"src": [0, 1, 2, 3, 4], "dst": [1, 2, 3, -4, 5]})
    assert error_of(negative) == f"{negative}: column 'dst': row 3 holds a negative id -4"
    other = parquet(tmp_path / "o.parquet", {"a": [0], "b": [1], "c": [2]})
    assert "no source/destination columns among 'a', 'b', 'c'" in error_of(other)
    assert "--no-header applies to text tables only" in error_of(other, header=False)
    damaged = tmp_path / "d.parquet"
    damaged.write_bytes(floats.read_bytes()[:-30])
    assert error_of(damaged).startswith(f"{damaged}: not a readable Parquet file: ")
    assert "unknown input format" in error_of(write(tmp_path / "z.parquet.gz", "x"))


def test_parquet_without_pyarrow(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "a.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    assert error_of(path) == f"{path}: reading Parquet needs pyarrow, which is not installed (pip install pyarrow)"


# --------------------------------------------------------------------------- CLI


def test_cli_partition_csv_and_verify(tmp_path: Path, capsys) -> None:
    path = write(tmp_path / "e.csv.gz", "to_id,from_id\n" + "".join(f"{b},{a}\n" for a, b in zip(SRC, DST)))
    rc, out, err = run(capsys, "partition", path, "--src-col", "from_id", "--dst-col", "to_id", "--parts", "2",
                       "--method", "random", "-o", tmp_path / "parts", "--quiet")
    assert rc == 0, err
    npz = tmp_path / "same.npz"
    np.savez(npz, src=SRC, dst=DST)
    rc, out, err = run(capsys, "verify", tmp_path / "parts", "--graph", npz)
    assert rc == 0 and out.startswith("OK"), out + err
    rc, out, err = run(capsys, "partition", path, "--parts", "2", "-o", tmp_path / "p2")
    assert rc == 2 and err.strip().splitlines() == [f"error: {path}: no source/destination columns among 'to_id', "
                                                    "'from_id' (looked for src/dst, source/target, from/to, u/v, ...): "
                                                    "name them with --src-col and --dst-col"]
    assert not (tmp_path / "p2").exists()


def test_cli_chunk_takes_the_table_options(tmp_path: Path, capsys) -> None:
    path = write(tmp_path / "e.tsv", "a\tb\n" + "".join(f"{b}\t{a}\n" for a, b in zip(SRC, DST)))
    rc, out, err = run(capsys, "chunk", path, "--src-col", "b", "--dst-col", "a", "--chunks", "2", "-o", tmp_path / "c", "--quiet")
    assert rc == 0, err
    same_edges(tmp_path / "c")
    rc, out, err = run(capsys, "chunk", path, "--chunks", "2", "-o", tmp_path / "d")
    assert rc == 2 and "no source/destination columns among 'a', 'b'" in err and not (tmp_path / "d").exists()


def test_cli_verify_reads_graph_with_the_table_options(tmp_path: Path, capsys) -> None:
    path = write(tmp_path / "e.csv", "to_id,from_id\n" + "".join(f"{b},{a}\n" for a, b in zip(SRC, DST)))
    columns = ("--src-col", "from_id", "--dst-col", "to_id")
    rc, out, err = run(capsys, "partition", path, *columns, "--parts", "2", "--method", "random", "-o", tmp_path / "p", "--quiet")
    assert rc == 0, err
    rc, out, err = run(capsys, "verify", tmp_path / "p", "--graph", path, *columns)
    assert rc == 0 and out.startswith("OK") and "reconstruction" in out, out + err
    rc, out, err = run(capsys, "verify", tmp_path / "p", "--graph", path, "--src-col", "to_id", "--dst-col", "from_id")
    assert rc == 3, out + err  # the same file read the other way round is another graph
    rc, out, err = run(capsys, "verify", tmp_path / "p", *columns)
    assert rc == 2 and "give --graph" in err


@pytest.mark.parametrize("seed", range(6))
def test_random_tables_match_pythons_csv_module(tmp_path: Path, monkeypatch, seed: int) -> None:
    """Padding, quotes, quoted commas, CRLF, comments and blank lines at random, in blocks of a few bytes:
    the ids are those Python's csv module reads from the same text."""
    import csv
    import io

    rng = np.random.default_rng(seed)
    lines = ["\ufeff" * (seed % 2) + "name,src,w,dst"]
    for i in range(300):
        if rng.random() < 0.05:
            lines.append(rng.choice(["", "# note, with a comma", "   "]))
            continue
        a, b = (str(int(x)) for x in rng.integers(0, 10**int(rng.integers(1, 12)), 2))
        pad = [" " * int(rng.integers(0, 3)) for _ in range(4)]
        if rng.random() < 0.3:
            a = f'"{a}"'
        name = f'"n{i}, ""x"""' if rng.random() < 0.3 else f"n{i}"
        lines.append(f"{name},{pad[0]}{a}{pad[1]},{rng.random():.3f},{pad[2]}{b}{pad[3]}")
    text = ("\r\n" if seed % 3 == 0 else "\n").join(lines) + "\n"
    path = tmp_path / "r.csv"
    path.write_bytes(text.encode())
    rows = [r for r in csv.reader(io.StringIO(text.lstrip("\ufeff"))) if r and r[0].strip() and not r[0].startswith("#")]
    want_src = [int(r[1].strip().strip('"')) for r in rows[1:]]
    want_dst = [int(r[3].strip()) for r in rows[1:]]
    monkeypatch.setattr(text_tokens, "TEXT_BLOCK_BYTES", int(rng.integers(7, 200)))
    g = read_graph(path)
    assert g.src.tolist() == want_src and g.dst.tolist() == want_dst
