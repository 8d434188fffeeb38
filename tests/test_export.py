"""export-feat and the file-list format (SPEC.md section 5): writer, reader, CSR, partition input, CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.public_data import CORA_RAW, ENRON

from gpart.base.errors import InputError, IntegrityError, OutputError
from gpart.base.graph import Graph
from gpart.cli.main import main
from gpart.export.csr import build_csr
from gpart.export.features import export_feat
from gpart.formats.filelist.layout import part_file_name
from gpart.formats.filelist.reader import export_json_path, open_filelist
from gpart.formats.filelist.sets import ExportSetWriter, FileListOptions, write_filelist

REPO = Path(__file__).resolve().parents[1]

ALL_DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64"]


def run(*args: str) -> int:
    return main([str(a) for a in args])


def concat_parts(out: Path, name: str) -> bytes:
    """The export's part files read by name from its folder (SPEC.md 5: OUT/<set>/), concatenated."""
    json_path = export_json_path(out / f"{name}.json")
    meta = json.loads(json_path.read_text())
    return b"".join((json_path.parent / f["file"]).read_bytes() for f in meta["files"])


def sample_array(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return (rng.standard_normal(shape) * 100).astype(dtype)


def listing(path: Path) -> list[str]:
    return sorted(os.listdir(path)) if path.exists() else []


# --------------------------------------------------------------------------- writer / reader round trips


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(37,), (37, 5)], ids=["1d", "2d"])
def test_round_trip_every_dtype_and_file_count(tmp_path, monkeypatch, dtype, shape):
    # ~1500 tiny files: skip the disk flushes (durability is not what this test checks; the
    # commit tests below run with real fsync) so that the suite's time does not hang on a busy disk
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    arr = sample_array(dtype, shape)
    for files in (1, 3, 8, 50):  # 50 > 37 rows: trailing files are empty
        out = tmp_path / f"n{files}"
        manifest = write_filelist(out, "x", arr, files)
        assert concat_parts(out, "x") == arr.tobytes()
        assert manifest["format"] == "gpart.filelist" and manifest["version"] == 1
        assert manifest["dtype"] == dtype == manifest["source_dtype"]
        assert manifest["shape"] == list(shape) and manifest["byteorder"] == "little"
        rows = [f["rows"] for f in manifest["files"]]
        assert [f["file"] for f in manifest["files"]] == [part_file_name("x", i, files) for i in range(files)]
        assert sum(rows) == 37 and max(rows) - min(rows) <= 1 and rows == sorted(rows, reverse=True)
        assert os.listdir(out) == ["x"]  # one export set, in its own folder
        assert sorted(os.listdir(out / "x")) == sorted(["x.json", *(f"x_part_{i}_of_{files}" for i in range(files))])
        fl = open_filelist(out / "x" / "x.json", verify=True)
        np.testing.assert_array_equal(fl.read_rows(0, 37), arr)
        np.testing.assert_array_equal(fl.read_rows(5, 30), arr[5:30])
        assert fl.shape == shape and fl.dtype == dtype and len(fl.files) == files


def test_concatenation_equals_tofile_bytes(tmp_path):
    arr = sample_array("float32", (1001, 7), seed=3)
    np.save(tmp_path / "feat.npy", arr)
    arr.tofile(tmp_path / "expected.bin")
    assert run("export-feat", tmp_path / "feat.npy", "-o", tmp_path / "wg", "--files", "4", "-q") == 0
    assert concat_parts(tmp_path / "wg", "feat") == (tmp_path / "expected.bin").read_bytes()


def test_small_chunks_and_memmap_slices(tmp_path):
    """Chunked views of a memmap whose pages are released after writing, also for a sliced memmap."""
    arr = sample_array("int32", (513, 3), seed=4)
    np.save(tmp_path / "a.npy", arr)
    mm = np.load(tmp_path / "a.npy", mmap_mode="r")
    write_filelist(tmp_path / "o1", "a", mm, 5, options=FileListOptions(chunk_bytes=100))
    assert concat_parts(tmp_path / "o1", "a") == arr.tobytes()
    write_filelist(tmp_path / "o2", "a", mm[17:400], 2, options=FileListOptions(chunk_bytes=1000))
    assert concat_parts(tmp_path / "o2", "a") == arr[17:400].tobytes()


def _file_rss_kb() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("RssFile:"))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_memmap_input_pages_are_released(tmp_path):
    """Exporting a 48 MiB memory-mapped .npy maps only a few chunks at a time (RSS stays bounded)."""
    from gpart.formats.input.npz import open_array_input

    rows = (48 << 20) // 256
    with open(tmp_path / "big.npy", "wb") as fh:  # written in pieces, never mapped by this process
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": (rows, 64)})
        for _ in range(48):
            fh.write(np.ones((rows // 48, 64), np.float32).tobytes())
    arr, _ = open_array_input(str(tmp_path / "big.npy"))
    before = _file_rss_kb()
    write_filelist(tmp_path / "o", "big", arr, 2, options=FileListOptions(chunk_bytes=1 << 20))
    assert _file_rss_kb() - before < 8 << 10  # far below the 48 MiB the mapping would otherwise pin
    assert (tmp_path / "o" / "big" / "big_part_0_of_2").stat().st_size == 24 << 20


def test_zero_dimensional_input_is_refused(tmp_path):
    np.save(tmp_path / "s.npy", np.float32(3))
    with pytest.raises(InputError, match="0-d"):
        write_filelist(tmp_path / "o", "s", np.load(tmp_path / "s.npy"), 1)
    assert run("export-feat", tmp_path / "s.npy", "-o", tmp_path / "o", "-q") == 2
    assert not (tmp_path / "o").exists()


def test_big_endian_input_is_stored_little_endian(tmp_path):
    arr = np.arange(20, dtype=">f4").reshape(10, 2)
    np.save(tmp_path / "be.npy", arr)
    assert run("export-feat", tmp_path / "be.npy", "-o", tmp_path / "wg", "-q") == 0
    assert concat_parts(tmp_path / "wg", "be") == arr.astype("<f4").tobytes()


@pytest.mark.parametrize("shape", [(0,), (0, 4)])
def test_empty_array(tmp_path, shape):
    arr = np.zeros(shape, dtype=np.float32)
    manifest = write_filelist(tmp_path, "e", arr, 3, dtype="float16")
    assert manifest["shape"] == list(shape) and manifest["bytes"] == 0
    assert all((tmp_path / "e" / f["file"]).stat().st_size == 0 for f in manifest["files"])
    fl = open_filelist(tmp_path / "e.json")
    assert fl.read_rows(0, 0).shape == shape
    assert fl.rank_range(1, 4) == (0, 0) and fl.rank_slice(1, 4).shape == shape


def test_one_row_array(tmp_path):
    arr = np.array([[1.5, -2.0, 3.25]], dtype=np.float64)
    manifest = write_filelist(tmp_path, "one", arr, 3)
    assert [f["rows"] for f in manifest["files"]] == [1, 0, 0]
    assert concat_parts(tmp_path, "one") == arr.tobytes()
    fl = open_filelist(tmp_path / "one.json")
    np.testing.assert_array_equal(fl.rank_slice(0, 2), arr)
    assert fl.rank_slice(1, 2).shape == (0, 3)


# --------------------------------------------------------------------------- conversions


def _special_float32(n: int = 4000) -> np.ndarray:
    rng = np.random.default_rng(7)
    values = np.concatenate([
        rng.standard_normal(n).astype(np.float32) * np.float32(1000),
        np.array([0.0, -0.0, 1e-8, -1e-8, 6e-5, 65504.0, -65504.0, 65519.0, 1 / 3, 2.0**-24, 2.0**-25], dtype=np.float32),
        # halfway cases of bfloat16 and float16 rounding (ties to even)
        (np.arange(64, dtype=np.uint32) << 15 | np.uint32(0x3F800000)).view(np.float32),
        (np.arange(64, dtype=np.uint32) << 12 | np.uint32(0x3F800000)).view(np.float32),
    ])
    return values.reshape(-1, 1).repeat(2, axis=1)


@pytest.mark.parametrize("target", ["float16", "bfloat16"])
def test_half_precision_matches_torch(tmp_path, target):
    arr = _special_float32()
    manifest = write_filelist(tmp_path, "h", arr, 3, dtype=target, options=FileListOptions(chunk_bytes=4096))
    assert manifest["dtype"] == target and manifest["source_dtype"] == "float32"
    expected = torch.tensor(arr).to(getattr(torch, target))
    raw = np.frombuffer(concat_parts(tmp_path, "h"), dtype=np.int16).reshape(arr.shape)
    got = torch.from_numpy(raw.copy()).view(getattr(torch, target))
    assert torch.equal(got.view(torch.int16), expected.view(torch.int16))
    if target == "bfloat16":
        assert manifest["storage_dtype"] == "uint16" and "16-bit pattern" in manifest["note"]
        fl = open_filelist(tmp_path / "h.json")
        bits = fl.read_rows(0, fl.num_rows)
        assert bits.dtype == np.uint16
        np.testing.assert_array_equal((bits.astype(np.uint32) << 16).view(np.float32), expected.float().numpy())
    else:
        assert "note" not in manifest


@pytest.mark.parametrize("target", ["float16", "bfloat16"])
@pytest.mark.parametrize("source", ["float32", "float64"])
def test_every_bit_pattern_matches_torch(tmp_path, source, target):
    """Random bit patterns (subnormals, huge values, Inf, NaN of both signs) with --allow-overflow."""
    rng = np.random.default_rng(11)
    width = np.uint32 if source == "float32" else np.uint64
    arr = rng.integers(0, np.iinfo(width).max, 200_000, dtype=width, endpoint=True).view(source)
    if source == "float64":  # mostly values in the 16-bit formats' range, near their rounding points
        arr = np.concatenate([arr, rng.standard_normal(200_000) * 3e4, rng.standard_normal(200_000) * 1e-6])
    write_filelist(tmp_path, "p", arr, 3, dtype=target, options=FileListOptions(allow_overflow=True, chunk_bytes=1 << 16))
    got = torch.from_numpy(np.frombuffer(concat_parts(tmp_path, "p"), dtype=np.int16).copy()).view(getattr(torch, target))
    expected = torch.from_numpy(arr).to(getattr(torch, target))
    nan = torch.isnan(expected)
    assert torch.equal(torch.isnan(got), nan)  # NaN stays NaN (payload unspecified, as in torch itself)
    assert torch.equal(got[~nan].view(torch.int16), expected[~nan].view(torch.int16))
    with pytest.raises(InputError, match="NaN/Inf|overflow"):
        write_filelist(tmp_path, "q", arr, 1, dtype=target)


def test_float64_to_float32_and_widening(tmp_path):
    arr = np.random.default_rng(1).standard_normal((50, 3))
    write_filelist(tmp_path, "d", arr, 2, dtype="float32")
    assert concat_parts(tmp_path, "d") == torch.tensor(arr).to(torch.float32).numpy().tobytes()
    half = arr.astype(np.float16)
    write_filelist(tmp_path, "w", half, 2, dtype="float32")
    assert concat_parts(tmp_path, "w") == half.astype(np.float32).tobytes()


def test_integer_narrowing_when_values_fit(tmp_path):
    arr = np.array([0, -5, 2**31 - 1, -(2**31)], dtype=np.int64)
    manifest = write_filelist(tmp_path, "i", arr, 2, dtype="int32")
    assert manifest["dtype"] == "int32" and manifest["source_dtype"] == "int64"
    assert concat_parts(tmp_path, "i") == arr.astype("<i4").tobytes()


def test_overflow_and_nan_are_refused_unless_allowed(tmp_path):
    arr = np.ones((100, 4), dtype=np.float32)
    arr[90, 1] = 1e6  # finite, overflows float16; lies in the last chunk written
    with pytest.raises(InputError, match="overflow float16"):
        write_filelist(tmp_path / "o", "x", arr, 2, dtype="float16", options=FileListOptions(source="in.npy", chunk_bytes=256))
    assert listing(tmp_path / "o") == []  # temporaries removed, created directory removed
    arr[90, 1] = np.nan
    with pytest.raises(InputError, match="NaN/Inf"):
        write_filelist(tmp_path / "o", "x", arr, 2, dtype="bfloat16")
    arr[90, 1] = 1e6
    write_filelist(tmp_path / "o", "x", arr, 2, dtype="float16", options=FileListOptions(allow_overflow=True))
    stored = np.frombuffer(concat_parts(tmp_path / "o", "x"), dtype=np.float16).reshape(arr.shape)
    assert np.isposinf(stored[90, 1]) and np.isfinite(np.delete(stored.reshape(-1), 90 * 4 + 1)).all()


def test_refused_conversions(tmp_path):
    with pytest.raises(InputError, match="value 4294967296 is outside"):
        write_filelist(tmp_path, "i", np.array([1, 2**32], dtype=np.int64), 1, dtype="int32")
    with pytest.raises(InputError, match="cannot convert float32 to int32"):
        write_filelist(tmp_path, "f", np.ones(3, np.float32), 1, dtype="int32")
    with pytest.raises(InputError, match="cannot convert bool"):
        write_filelist(tmp_path, "b", np.ones(3, bool), 1, dtype="float16")
    with pytest.raises(InputError, match="not supported"):
        write_filelist(tmp_path, "c", np.ones(3, np.complex64), 1)
    assert listing(tmp_path) == []


# --------------------------------------------------------------------------- rank slicing


def test_rank_slicing_hand_worked(tmp_path):
    arr = np.arange(10 * 2, dtype=np.int64).reshape(10, 2)
    write_filelist(tmp_path, "r", arr, 3)  # files hold rows [0,4) [4,7) [7,10)
    fl = open_filelist(tmp_path / "r.json")
    assert fl.file_rows == [4, 3, 3]
    # WholeGraph: ceil(10/4) = 3 rows per rank
    assert [fl.rank_range(r, 4) for r in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert [fl.rank_range(r, 3) for r in range(3)] == [(0, 4), (4, 8), (8, 10)]
    assert [fl.rank_range(r, 6) for r in range(6)] == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10), (10, 10)]
    s0 = fl.rank_slice(0, 4)  # inside file 0: a memory map, not a copy
    assert isinstance(s0, np.memmap)
    np.testing.assert_array_equal(s0, arr[0:3])
    np.testing.assert_array_equal(fl.rank_slice(1, 4), arr[3:6])  # spans files 0 and 1
    np.testing.assert_array_equal(fl.rank_slice(3, 4), arr[9:10])
    with pytest.raises(ValueError):
        fl.rank_range(4, 4)
    with pytest.raises(InputError, match="3 files"):
        fl.as_memmap()


@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 60), d=st.integers(1, 3), files=st.integers(1, 9), world=st.integers(1, 9))
def test_rank_slices_cover_the_array(tmp_path_factory, n, d, files, world):
    out = tmp_path_factory.mktemp("h")
    arr = np.arange(n * d, dtype=np.float32).reshape(n, d)
    write_filelist(out, "a", arr, files)
    fl = open_filelist(out / "a.json")
    per_rank = -(-n // world)
    pieces = []
    for r in range(world):
        start, stop = fl.rank_range(r, world)
        assert (start, stop) == (min(r * per_rank, n), min((r + 1) * per_rank, n))
        pieces.append(np.asarray(fl.rank_slice(r, world)))
    np.testing.assert_array_equal(np.concatenate(pieces), arr)


def test_single_file_as_memmap(tmp_path):
    arr = sample_array("float32", (20, 4))
    write_filelist(tmp_path, "m", arr, 1)
    mm = open_filelist(tmp_path / "m.json").as_memmap()
    assert isinstance(mm, np.memmap) and mm.shape == (20, 4)
    np.testing.assert_array_equal(mm, arr)


# --------------------------------------------------------------------------- reader validation


def test_reader_validates_json_and_sizes(tmp_path):
    arr = sample_array("float32", (30, 2))
    write_filelist(tmp_path, "v", arr, 3)
    meta = json.loads((tmp_path / "v" / "v.json").read_text())

    def broken(**changes) -> Path:
        path = tmp_path / "v" / "broken.json"
        path.write_text(json.dumps({**meta, **changes}))
        return path

    with pytest.raises(InputError, match="format"):
        open_filelist(broken(format="gpart.partition"))
    with pytest.raises(InputError, match="version"):
        open_filelist(broken(version=2))
    with pytest.raises(InputError, match="add up to"):
        open_filelist(broken(shape=[31, 2]))
    with pytest.raises(InputError, match="byteorder"):
        open_filelist(broken(byteorder="big"))
    with pytest.raises(InputError, match="not a plain file name"):
        open_filelist(broken(files=[{**meta["files"][0], "file": "sub/v_part_0_of_3"}, *meta["files"][1:]]))
    with pytest.raises(InputError, match="not valid JSON"):
        (tmp_path / "bad.json").write_text("{")
        open_filelist(tmp_path / "bad.json")
    part = tmp_path / "v" / "v_part_1_of_3"
    data = part.read_bytes()
    part.write_bytes(data[:-4])
    with pytest.raises(IntegrityError, match="size"):
        open_filelist(tmp_path / "v.json")
    part.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    open_filelist(tmp_path / "v.json")  # sizes fine; checksums only on request
    with pytest.raises(IntegrityError, match="checksum"):
        open_filelist(tmp_path / "v.json", verify=True)
    part.unlink()
    with pytest.raises(IntegrityError, match="missing"):
        open_filelist(tmp_path / "v.json")


# --------------------------------------------------------------------------- commit


def test_force_replaces_an_export_and_removes_its_stale_parts(tmp_path):
    other = sample_array("int64", (12,))
    write_filelist(tmp_path, "other", other, 2)
    write_filelist(tmp_path, "x", sample_array("float32", (40, 2)), 8)
    with pytest.raises(OutputError, match="already exists"):
        write_filelist(tmp_path, "x", np.zeros((5, 2), np.float32), 3)
    assert len(json.loads((tmp_path / "x" / "x.json").read_text())["files"]) == 8  # untouched
    new = sample_array("float32", (40, 2), seed=9)
    write_filelist(tmp_path, "x", new, 3, options=FileListOptions(force=True))
    assert listing(tmp_path) == ["other", "x"]
    assert listing(tmp_path / "other") == ["other.json", "other_part_0_of_2", "other_part_1_of_2"]
    assert listing(tmp_path / "x") == ["x.json", "x_part_0_of_3", "x_part_1_of_3", "x_part_2_of_3"]
    assert concat_parts(tmp_path, "x") == new.tobytes() and concat_parts(tmp_path, "other") == other.tobytes()


def test_batch_commits_nothing_when_a_later_export_fails(tmp_path):
    (tmp_path / "keep.txt").write_text("user data")
    with pytest.raises(InputError):
        with ExportSetWriter(tmp_path) as writer:
            writer.add("a", np.ones(10, np.float32), 2)
            writer.add("b", np.full(10, 1e9, np.float32), 2, dtype="float16")
            writer.commit()
    assert listing(tmp_path) == ["keep.txt"]


def test_refuses_a_partition_result_directory_and_foreign_part_files(tmp_path):
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(OutputError, match="gpart result"):
        write_filelist(tmp_path, "x", np.ones(3), 1)
    other = tmp_path / "o"
    other.mkdir()
    (other / "x_part_0_of_1").write_text("not mine")
    with pytest.raises(OutputError, match="already exists"):
        write_filelist(other, "x", np.ones(3), 1)
    assert (other / "x_part_0_of_1").read_text() == "not mine"


# --------------------------------------------------------------------------- CSR


def check_csr(out: Path, name: str, src: np.ndarray, dst: np.ndarray, num_nodes: int) -> np.ndarray:
    """Check a CSR export against the COO input with plain numpy; return edge_perm."""
    row_ptr = open_filelist(out / f"{name}_row_ptr.json", verify=True).read_rows(0, num_nodes + 1)
    col_fl = open_filelist(out / f"{name}_col_idx.json", verify=True)
    col_idx = col_fl.read_rows(0, col_fl.num_rows)
    perm_fl = open_filelist(out / f"{name}_edge_perm.json", verify=True)
    edge_perm = perm_fl.read_rows(0, perm_fl.num_rows)
    assert row_ptr.dtype == np.int64 and col_idx.dtype == np.int32 and edge_perm.dtype == np.int64
    assert row_ptr[0] == 0 and row_ptr[-1] == col_idx.size == edge_perm.size
    assert np.all(np.diff(row_ptr) >= 0)
    rows = np.repeat(np.arange(num_nodes), np.diff(row_ptr))
    np.testing.assert_array_equal(src[edge_perm], rows)  # every edge sits in its source's row
    np.testing.assert_array_equal(dst[edge_perm], col_idx)  # with its destination
    return edge_perm


def _cora_coo(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray, int]:
    sample = REPO / "sample_data" / "cora.npz"
    if sample.exists():
        with np.load(sample, allow_pickle=False) as z:
            return sample, z["src"], z["dst"], int(z["num_nodes"])
    raw = CORA_RAW
    with np.load(raw, allow_pickle=False) as z:
        indptr, indices = z["adj_indptr"].astype(np.int64), z["adj_indices"].astype(np.int64)
    n = indptr.size - 1
    src = np.repeat(np.arange(n), np.diff(indptr))
    path = tmp_path / "cora_coo.npz"
    np.savez(path, src=src, dst=indices, num_nodes=n)
    return path, src, indices, n


def test_csr_export_on_cora(tmp_path):
    path, src, dst, n = _cora_coo(tmp_path)
    assert run("export-feat", path, "-o", tmp_path / "wg", "--csr", "--name", "cora", "--files", "2", "-q") == 0
    perm = check_csr(tmp_path / "wg", "cora", src, dst, n)
    np.testing.assert_array_equal(np.sort(perm), np.arange(src.size))  # a permutation of the input edges
    # independent reconstruction: per row, input order (ascending edge id)
    expected_perm = np.concatenate([np.flatnonzero(src == u) for u in np.unique(src)])
    np.testing.assert_array_equal(perm, expected_perm)
    meta = json.loads((tmp_path / "wg" / "cora" / "cora_col_idx.json").read_text())
    assert meta["csr"] == {"part": "col_idx", "num_nodes": n, "num_edges": src.size, "input_edges": src.size,
                           "add_reverse": False, "dedup": False}


def test_csr_export_on_enron_with_reverse_and_dedup(tmp_path):
    from gpart.formats.input.readers import read_graph

    g = read_graph(ENRON)
    src, dst, n, e = np.asarray(g.src), np.asarray(g.dst), g.num_nodes, g.num_edges
    assert (n, e) == (36692, 367662)
    assert run("export-feat", ENRON, "-o", tmp_path / "wg", "--csr", "--name", "plain", "-q") == 0
    perm = check_csr(tmp_path / "wg", "plain", src, dst, n)
    np.testing.assert_array_equal(np.sort(perm), np.arange(e))
    # within each row, ascending edge id
    row_of = np.repeat(np.arange(n), np.bincount(src, minlength=n))
    assert np.all((np.diff(perm) > 0) | (np.diff(row_of) > 0))

    assert run("export-feat", ENRON, "-o", tmp_path / "wg", "--csr", "--name", "sym", "--add-reverse", "--dedup", "-q") == 0
    both_src, both_dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    perm = check_csr(tmp_path / "wg", "sym", both_src, both_dst, n)
    keys = both_src.astype(np.int64) * n + both_dst
    unique_keys, first_index = np.unique(keys, return_index=True)  # first occurrence = smallest edge id
    np.testing.assert_array_equal(keys[perm], unique_keys)  # one edge per pair, rows sorted by destination
    np.testing.assert_array_equal(perm, first_index)
    assert unique_keys.size == 2 * 183831  # SOURCE.md: 183,831 undirected edges, no self-loops
    assert perm.max() < e  # Enron lists both directions, so every kept edge is a forward one


def test_build_csr_reverse_ids_and_empty_graph():
    g = Graph.from_arrays([2, 0, 2, 1], [0, 1, 1, 1], num_nodes=4)
    csr = build_csr(g, add_reverse=True)
    np.testing.assert_array_equal(csr.row_ptr, [0, 2, 6, 8, 8])
    np.testing.assert_array_equal(csr.edge_perm, [1, 4, 3, 5, 6, 7, 0, 2])
    np.testing.assert_array_equal(csr.col_idx, [1, 2, 1, 0, 2, 1, 0, 1])
    empty = build_csr(Graph.from_arrays(np.zeros(0, np.int64), np.zeros(0, np.int64), num_nodes=3), dedup=True)
    np.testing.assert_array_equal(empty.row_ptr, [0, 0, 0, 0])
    assert empty.col_idx.size == 0 and empty.col_idx.dtype == np.int32


def reference_csr(src, dst, num_nodes: int, add_reverse: bool, dedup: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SPEC 5.4 by plain Python sorting: (row_ptr, col_idx, edge_perm)."""
    edges = [(int(s), int(d), j) for j, (s, d) in enumerate(zip(src, dst))]
    if add_reverse:
        edges += [(d, s, len(src) + j) for s, d, j in edges]
    if dedup:
        first: dict[tuple[int, int], int] = {}
        for s, d, j in edges:
            first.setdefault((s, d), j)  # edges are in id order: the first seen has the smallest id
        edges = sorted((s, d, j) for (s, d), j in first.items())
    else:
        edges = sorted(edges, key=lambda e: (e[0], e[2]))
    degree = np.bincount(np.array([e[0] for e in edges], dtype=np.int64), minlength=num_nodes)
    row_ptr = np.concatenate([[0], np.cumsum(degree)]).astype(np.int64)
    return row_ptr, np.array([e[1] for e in edges], dtype=np.int32), np.array([e[2] for e in edges], dtype=np.int64)


def read_csr_export(out: Path, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    parts = []
    for part in ("row_ptr", "col_idx", "edge_perm"):
        fl = open_filelist(out / f"{name}_{part}.json", verify=True)
        parts.append(fl.read_rows(0, fl.num_rows))
    return tuple(parts)


def _graph_npz(path: Path, src, dst, num_nodes: int) -> Path:
    np.savez(path, src=np.asarray(src, dtype=np.int64), dst=np.asarray(dst, dtype=np.int64), num_nodes=num_nodes)
    return path


@pytest.mark.parametrize("add_reverse,dedup", [(False, False), (True, False), (False, True), (True, True)])
def test_streaming_csr_with_tiny_chunks_on_cora(tmp_path, monkeypatch, add_reverse, dedup):
    import gpart.export.csr as export_module

    monkeypatch.setattr(export_module, "SCATTER_SLICE", 5)  # many page releases per chunk
    path, src, dst, n = _cora_coo(tmp_path)
    export_feat(path, tmp_path / "wg", csr=True, name="c", files=3, add_reverse=add_reverse, dedup=dedup, csr_chunk_edges=97)
    assert os.listdir(tmp_path / "wg") == ["c"]  # the three arrays are one export set
    assert sorted(os.listdir(tmp_path / "wg" / "c")) == sorted(  # no scratch file left
        [f"c_{p}.json" for p in ("row_ptr", "col_idx", "edge_perm")]
        + [part_file_name(f"c_{p}", i, 3) for p in ("row_ptr", "col_idx", "edge_perm") for i in range(3)])
    row_ptr, col_idx, edge_perm = read_csr_export(tmp_path / "wg", "c")
    # independent reconstruction with numpy: sort (src, [dst,] id) over the edge list
    all_src, all_dst = (np.concatenate([src, dst]), np.concatenate([dst, src])) if add_reverse else (src, dst)
    ids = np.arange(all_src.size)
    if dedup:
        order = np.lexsort((ids, all_dst, all_src))
        keys = all_src[order] * n + all_dst[order]
        order = order[np.concatenate([[True], keys[1:] != keys[:-1]])]
    else:
        order = np.lexsort((ids, all_src))
    np.testing.assert_array_equal(edge_perm, order)
    np.testing.assert_array_equal(col_idx, all_dst[order])
    np.testing.assert_array_equal(row_ptr, np.concatenate([[0], np.cumsum(np.bincount(all_src[order], minlength=n))]))
    assert build_csr(Graph.from_arrays(src, dst, num_nodes=n), add_reverse, dedup).edge_perm.tolist() == edge_perm.tolist()


graphs = st.integers(1, 12).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=40),  # loops, duplicates, isolated nodes
))


@settings(max_examples=40, deadline=None)
@given(graph=graphs, add_reverse=st.booleans(), dedup=st.booleans(), chunk=st.integers(1, 9), files=st.integers(1, 3))
def test_streaming_csr_matches_reference(graph, add_reverse, dedup, chunk, files):
    import tempfile

    n, edges = graph
    src = np.array([e[0] for e in edges], dtype=np.int64)
    dst = np.array([e[1] for e in edges], dtype=np.int64)
    expected = reference_csr(src, dst, n, add_reverse, dedup)
    in_memory = build_csr(Graph.from_arrays(src, dst, num_nodes=n), add_reverse, dedup, chunk_edges=chunk)
    with tempfile.TemporaryDirectory() as tmp:
        path = _graph_npz(Path(tmp) / "g.npz", src, dst, n)
        export_feat(path, Path(tmp) / "wg", csr=True, files=files, add_reverse=add_reverse, dedup=dedup, csr_chunk_edges=chunk)
        exported = read_csr_export(Path(tmp) / "wg", "csr")
    for got in (exported, (in_memory.row_ptr, in_memory.col_idx, in_memory.edge_perm)):
        for have, want in zip(got, expected):
            assert have.dtype == want.dtype
            np.testing.assert_array_equal(have, want)


def test_streaming_csr_failure_leaves_nothing(tmp_path, monkeypatch):
    path = _graph_npz(tmp_path / "g.npz", [0, 1, 2, 2], [1, 2, 0, 0], 4)

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ExportSetWriter, "commit", fail)
    with pytest.raises(OSError):
        export_feat(path, tmp_path / "wg", csr=True, dedup=True, csr_chunk_edges=2)
    assert not (tmp_path / "wg").exists()  # scratch files and part temporaries removed, then the directory


# --------------------------------------------------------------------------- partition results


@pytest.mark.parametrize("storage,halo", [("binary", 0), ("hdf5", 1)])
def test_partition_directory_in_global_order(tmp_path, storage, halo):
    from gpart.pipeline.partition import partition_graph

    path = REPO / "sample_data" / "cora.npz"
    if not path.exists():
        pytest.skip("sample_data/cora.npz not built")
    parts = tmp_path / "parts"
    partition_graph(path, parts, 4, "random", storage=storage, halo=halo, seed=1)
    summary = export_feat(parts, tmp_path / "wg", files=3, dtype="float16")
    names = {item["manifest"]["name"] for item in summary["exports"]}
    with np.load(path, allow_pickle=False) as z:
        assert names == {"feat", "label", "train_mask", "val_mask", "test_mask"}
        assert concat_parts(tmp_path / "wg", "feat") == z["feat"].astype(np.float16).tobytes()  # dtype applies to floats
        for name in ("label", "train_mask", "val_mask", "test_mask"):
            assert concat_parts(tmp_path / "wg", name) == z[name].tobytes()
        export_feat(parts, tmp_path / "one", name="label", dtype="int32")
        assert listing(tmp_path / "one") == ["label"] and listing(tmp_path / "one" / "label") == ["label.json", "label_part_0_of_1"]
        assert concat_parts(tmp_path / "one", "label") == z["label"].astype(np.int32).tobytes()
    with pytest.raises(InputError, match="no node data array 'nope'"):
        export_feat(parts, tmp_path / "none", name="nope")
    with pytest.raises(OutputError, match="inside the input"):
        export_feat(parts, parts / "wg")
    assert not (parts / "wg").exists()


# --------------------------------------------------------------------------- CLI


def test_cli_json_summary(tmp_path, capsys):
    arr = sample_array("float32", (100, 8))
    np.savez(tmp_path / "g.npz", feat=arr)
    assert run("export-feat", f"{tmp_path / 'g.npz'}:feat", "-o", tmp_path / "wg", "--name", "node_feat",
               "--files", "3", "--dtype", "bfloat16", "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    (item,) = summary["exports"]
    assert item["manifest"]["name"] == "node_feat" and item["manifest"]["dtype"] == "bfloat16"
    assert Path(item["json"]) == tmp_path / "wg" / "node_feat" / "node_feat.json"
    assert summary["bytes"] == 100 * 8 * 2
    assert run("export-feat", f"{tmp_path / 'g.npz'}:feat", "-o", tmp_path / "wg2", "--name", "node_feat") == 0
    out = capsys.readouterr().out
    assert "node_feat" in out and "float32" in out


def _bad_inputs(tmp: Path) -> list[tuple[list[str], str]]:
    np.save(tmp / "feat.npy", np.ones((10, 2), np.float32))
    np.save(tmp / "obj.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    np.save(tmp / "big.npy", np.full((10, 2), 1e6, np.float32))
    np.save(tmp / "ids.npy", np.array([0, 2**40], np.int64))
    np.savez(tmp / "g.npz", feat=np.ones(3, np.float32))
    feat = str(tmp / "feat.npy")
    return [
        ([str(tmp / "missing.npy")], "missing.npy"),
        ([f"{tmp / 'g.npz'}:nope"], "g.npz"),
        ([str(tmp / "obj.npy")], "obj.npy"),
        ([str(tmp / "big.npy"), "--dtype", "float16"], "big.npy"),
        ([str(tmp / "ids.npy"), "--dtype", "int32"], "ids.npy"),
        ([feat, "--dtype", "int32"], "feat.npy"),
        ([feat, "--files", "0"], "--files"),
        ([feat, "--dtype", "float8"], "float8"),
        ([feat, "--add-reverse"], "--csr"),
        ([feat, "--csr"], "feat.npy"),
    ]


def test_cli_bad_inputs_exit_2_and_leave_nothing(tmp_path, capsys):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for args, mention in _bad_inputs(inputs):
        out = tmp_path / "out"
        rc = run("export-feat", *args, "-o", out, "-q")
        err = capsys.readouterr().err
        assert rc == 2, (args, err)
        # one line names the problem (click's usage errors add a usage header above it)
        assert any(mention in line and "error" in line.lower() for line in err.splitlines()), (args, err)
        assert not out.exists() or listing(out) == [], (args, listing(out))


def test_cli_existing_export_needs_force(tmp_path, capsys):
    np.save(tmp_path / "feat.npy", np.ones((10, 2), np.float32))
    out = tmp_path / "wg"
    assert run("export-feat", tmp_path / "feat.npy", "-o", out, "--files", "2", "-q") == 0
    before = {p: (out / "feat" / p).read_bytes() for p in listing(out / "feat")}
    np.save(tmp_path / "feat.npy", np.zeros((10, 2), np.float32))
    assert run("export-feat", tmp_path / "feat.npy", "-o", out, "--files", "2", "-q") == 2
    assert "use --force" in capsys.readouterr().err
    assert listing(out) == ["feat"] and {p: (out / "feat" / p).read_bytes() for p in listing(out / "feat")} == before
    assert run("export-feat", tmp_path / "feat.npy", "-o", out, "--files", "2", "-q", "--force") == 0
    assert concat_parts(out, "feat") == np.zeros((10, 2), np.float32).tobytes()


@pytest.mark.skipif(not hasattr(os, "copy_file_range"), reason="needs os.copy_file_range")
def test_unconverted_npy_memmap_is_a_kernel_copy(tmp_path, monkeypatch, kernel_copies):
    """An .npy exported with no dtype change is copied inside the kernel from its data offset."""
    arr = sample_array("float32", (1001, 7), seed=9)
    np.save(tmp_path / "a.npy", arr)
    mm = np.load(tmp_path / "a.npy", mmap_mode="r")
    calls = kernel_copies
    write_filelist(tmp_path / "o1", "a", mm, 3)
    assert calls and concat_parts(tmp_path / "o1", "a") == arr.tobytes()
    assert open_filelist(tmp_path / "o1" / "a.json", verify=True).verify() == []
    calls.clear()
    write_filelist(tmp_path / "o2", "a", mm[13:900], 2)  # a slice starts past the header and row 13
    assert calls and concat_parts(tmp_path / "o2", "a") == arr[13:900].tobytes()
    assert open_filelist(tmp_path / "o2" / "a.json", verify=True).verify() == []
    calls.clear()
    write_filelist(tmp_path / "o3", "a", mm, 2, dtype="float16")  # a conversion streams
    assert not calls
    assert concat_parts(tmp_path / "o3", "a") == torch.from_numpy(arr).half().numpy().tobytes()


def test_unconverted_npy_without_kernel_copy_streams(tmp_path, monkeypatch):
    import errno

    arr = sample_array("int64", (300, 2), seed=3)
    np.save(tmp_path / "a.npy", arr)

    def unsupported(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", unsupported)
    write_filelist(tmp_path / "o", "a", np.load(tmp_path / "a.npy", mmap_mode="r"), 2, options=FileListOptions(chunk_bytes=64))
    assert concat_parts(tmp_path / "o", "a") == arr.tobytes()
    assert open_filelist(tmp_path / "o" / "a.json", verify=True).verify() == []
