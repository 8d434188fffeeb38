"""The partition pipeline, its two storages, the reader, info and verify, on real graphs.

Layouts are checked against an independent computation (lexsort over the
input's edges) by reading the files with numpy / h5py alone, as SPEC.md
section 4 says anyone can.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest
from support.public_data import PUBLIC_DATA

from gpart.base.errors import InputError, IntegrityError, OutputError
from gpart.base.graph import Graph
from gpart.formats.partition.book import ArrayBook, range_book, remainder_book
from gpart.formats.partition.reader import PartitionReader
from gpart.inspection.result import info, verify
from gpart.pipeline.partition import partition_graph
from gpart.pipeline.write_plan import ResultPlan
from gpart.pipeline.write_result import partition_with_book

REPO = Path(__file__).resolve().parents[1]
DATA = PUBLIC_DATA
CORA = REPO / "sample_data" / "cora.npz"
FACEBOOK = DATA / "facebook-combined" / "facebook_combined.txt.gz"
ENRON = DATA / "email-enron" / "email-Enron.txt.gz"
ROAD_NY = DATA / "road-ny" / "NY.gr.xz"
METHODS = ("metis", "remainder", "range", "random", "assignment")


def need(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"{path} is missing: the public graphs ship in tests/data/public (a broken checkout)")
    return path


def read(path: Path) -> Graph:
    from gpart.formats.input.readers import read_graph

    return read_graph(path)


def method_args(method: str, graph: Graph, parts: int, tmp: Path) -> tuple[str, dict]:
    """partition_graph arguments for a method; 'assignment' gets an owner file made here."""
    if method != "assignment":
        return method, {}
    owner = (np.arange(graph.num_nodes) * 7 + 3) % parts  # any valid owner array
    path = tmp / "owner.npy"
    np.save(path, owner.astype(np.int32))
    return "assignment", {"assignment": str(path)}


# --------------------------------------------------------------------------- independent reference


def expected_layout(graph: Graph, owner: np.ndarray, part: int) -> dict[str, np.ndarray]:
    """SPEC.md 4.1 computed the slow, obvious way: lexsort edges by (local destination, edge id)."""
    src = np.asarray(graph.src, dtype=np.int64)
    dst = np.asarray(graph.dst, dtype=np.int64)
    owned = np.flatnonzero(owner == part)
    local_of = np.full(graph.num_nodes, -1, dtype=np.int64)
    local_of[owned] = np.arange(owned.size)
    edges = np.flatnonzero(owner[dst] == part)
    edges = edges[np.lexsort((edges, local_of[dst[edges]]))]
    sources = src[edges]
    halo = np.unique(sources[owner[sources] != part])
    node_ids = np.concatenate([owned, halo])
    lookup = {int(g): i for i, g in enumerate(node_ids)}
    indices = np.array([lookup[int(s)] for s in sources], dtype=np.int64)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(local_of[dst[edges]], minlength=owned.size))])
    return {"node_ids": node_ids, "indptr": indptr, "indices": indices, "edge_ids": edges}


def owner_of(manifest: dict, out: Path, n: int) -> np.ndarray:
    book = manifest["book"]
    ids = np.arange(n)
    if book["kind"] == "remainder":
        return ids % manifest["num_parts"]
    if book["kind"] == "range":
        return np.searchsorted(np.array(book["boundaries"]), ids, side="right") - 1
    entry = book["owner"]
    if manifest["storage"] == "binary":
        return np.fromfile(out / entry["file"], dtype="<i4")
    with h5py.File(out / "partitions.h5", "r") as f:
        return f[entry["dataset"]][()]


def raw_array(out: Path, manifest: dict, entry: dict) -> np.ndarray:
    """Read an array as SPEC.md says, without gpart: np.fromfile or h5py."""
    if manifest["storage"] == "binary":
        path = out / entry["file"]
        assert path.stat().st_size == entry["bytes"]
        data = path.read_bytes()
        assert f"{zlib.crc32(data):08x}" == entry["crc32"]
        return np.frombuffer(data, dtype=np.dtype(entry["dtype"]).newbyteorder("<")).reshape(entry["shape"])
    with h5py.File(out / entry["file"], "r") as f:
        ds = f[entry["dataset"]]
        assert ds.chunks is None and ds.compression is None  # contiguous, unfiltered
        assert ds.dtype.byteorder in "<|="
        arr = ds[()]
    assert list(arr.shape) == entry["shape"]
    assert f"{zlib.crc32(np.ascontiguousarray(arr).tobytes()):08x}" == entry["crc32"]
    return arr


def check_against_spec(out: Path, graph: Graph) -> dict:
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "gpart.partition" and manifest["version"] == 1
    n, parts = graph.num_nodes, manifest["num_parts"]
    owner = owner_of(manifest, out, n)
    assert owner.shape == (n,) and owner.min() >= 0 and owner.max() < parts
    if manifest["storage"] == "hdf5":
        with h5py.File(out / "partitions.h5", "r") as f:
            assert f.attrs["format"] == "gpart.partition" and int(f.attrs["version"]) == 1
            assert json.loads(f.attrs["manifest"]) == manifest
    cut = 0
    for p in range(parts):
        part = manifest["partitions"][p]
        want = expected_layout(graph, owner, p)
        for key, arr in want.items():
            got = raw_array(out, manifest, part["arrays"][key])
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, arr, err_msg=f"part {p} {key}")
        owned_n = int(np.sum(owner == p))
        assert part["num_owned"] == owned_n and part["num_halo"] == want["node_ids"].size - owned_n
        assert part["num_edges"] == want["edge_ids"].size
        rows = want["node_ids"] if manifest["halo"] else want["node_ids"][:owned_n]
        for name, arr in graph.node_data.items():
            got = raw_array(out, manifest, part["arrays"][f"node_data/{name}"])
            np.testing.assert_array_equal(got, np.asarray(arr)[rows])
        for name, arr in graph.edge_data.items():
            got = raw_array(out, manifest, part["arrays"][f"edge_data/{name}"])
            np.testing.assert_array_equal(got, np.asarray(arr)[want["edge_ids"]])
        cut += int(np.sum(want["indices"] >= owned_n))
    src, dst = np.asarray(graph.src), np.asarray(graph.dst)
    assert cut == int(np.sum(owner[src] != owner[dst])) == manifest["stats"]["edge_cut"]
    return manifest


# --------------------------------------------------------------------------- real graphs, every method, both storages


@pytest.mark.parametrize("storage", ["binary", "hdf5"])
@pytest.mark.parametrize("method", METHODS)
def test_cora_every_method(tmp_path, method, storage):
    graph = read(need(CORA))
    name, extra = method_args(method, graph, 4, tmp_path)
    halo = 1 if method in ("metis", "random") else 0
    manifest = partition_graph(CORA, tmp_path / "out", 4, name, storage=storage, halo=halo, **extra)
    assert manifest["method"] == name and manifest["halo"] == halo
    check_against_spec(tmp_path / "out", graph)
    report = verify(tmp_path / "out", CORA)
    assert report["ok"], report["problems"]
    assert report["checked"]["reconstruction"] and not report["notes"]


@pytest.mark.parametrize("storage", ["binary", "hdf5"])
@pytest.mark.parametrize("method", METHODS)
def test_facebook_every_method(tmp_path, method, storage):
    graph = read(need(FACEBOOK))
    name, extra = method_args(method, graph, 3, tmp_path)
    partition_graph(FACEBOOK, tmp_path / "out", 3, name, storage=storage, seed=5, **extra)
    manifest = check_against_spec(tmp_path / "out", graph)
    assert verify(tmp_path / "out", FACEBOOK)["ok"]
    summary = info(tmp_path / "out")
    assert summary["num_nodes"] == 4039 and summary["num_edges"] == graph.num_edges
    assert [p["num_owned"] for p in summary["partitions"]] == [p["num_owned"] for p in manifest["partitions"]]


@pytest.mark.parametrize("method,storage", [("metis", "binary"), ("random", "hdf5")])
def test_email_enron(tmp_path, method, storage):
    path = need(ENRON)
    manifest = partition_graph(path, tmp_path / "out", 8, method, storage=storage)
    report = verify(tmp_path / "out", path)
    assert report["ok"], report["problems"]
    if method == "metis":
        # METIS must beat a random split by far on a social graph.
        assert manifest["stats"]["edge_cut_ratio"] < 0.5
        assert manifest["params"]["algorithm"] in ("recursive", "kway")
    else:
        assert manifest["stats"]["node_balance"] == pytest.approx(36692 / 8 / (36692 // 8), abs=1e-3)


@pytest.mark.parametrize("method", ["range", "metis"])
def test_road_ny(tmp_path, method):
    path = need(ROAD_NY)
    manifest = partition_graph(path, tmp_path / "out", 4, method)
    report = verify(tmp_path / "out", path)
    assert report["ok"], report["problems"]
    # road networks are near-planar: METIS cuts a tiny fraction
    if method == "metis":
        assert manifest["stats"]["edge_cut_ratio"] < 0.01


# --------------------------------------------------------------------------- info numbers


def test_info_numbers_match_an_independent_count(tmp_path):
    graph = read(need(FACEBOOK))
    partition_graph(FACEBOOK, tmp_path / "out", 4, "random", seed=3)
    summary = info(tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    owner = owner_of(manifest, tmp_path / "out", graph.num_nodes)
    src, dst = np.asarray(graph.src), np.asarray(graph.dst)
    owned = np.bincount(owner, minlength=4)
    edges = np.bincount(owner[dst], minlength=4)
    halo = [np.unique(src[(owner[dst] == p) & (owner[src] != p)]).size for p in range(4)]
    assert [p["num_owned"] for p in summary["partitions"]] == owned.tolist()
    assert [p["num_edges"] for p in summary["partitions"]] == edges.tolist()
    assert [p["num_halo"] for p in summary["partitions"]] == halo
    stats = summary["stats"]
    cut = int(np.sum(owner[src] != owner[dst]))
    assert stats["edge_cut"] == cut and stats["edge_cut_ratio"] == pytest.approx(cut / src.size)
    assert stats["node_balance"] == pytest.approx(owned.max() / owned.mean())
    assert stats["edge_balance"] == pytest.approx(edges.max() / edges.mean())
    assert stats["halo_ratio"] == pytest.approx(sum(halo) / graph.num_nodes)
    on_disk = sum(f.stat().st_size for f in (tmp_path / "out").rglob("*.bin"))
    assert summary["bytes"] == on_disk
    assert summary["book"] == "array" and summary["method"] == "random"


# --------------------------------------------------------------------------- in-memory graphs and rule books


def small_graph(seed: int = 0, n: int = 60, e: int = 400) -> Graph:
    rng = np.random.default_rng(seed)
    g = Graph.from_arrays(rng.integers(0, n, e), rng.integers(0, n, e), n)
    g.node_data["feat"] = rng.standard_normal((n, 4)).astype(np.float32)
    g.node_data["feat"][3, 1] = np.nan  # NaN and -0.0 must survive byte for byte
    g.node_data["feat"][4, 0] = -0.0
    g.node_data["mask"] = rng.random(n) < 0.3
    g.node_data["f16"] = rng.standard_normal((n, 2, 3)).astype(np.float16)
    g.edge_data["edge_weight"] = rng.random(e)
    g.edge_data["edge_type"] = rng.integers(0, 5, e).astype(np.uint8)
    return g


@pytest.mark.parametrize("storage", ["binary", "hdf5"])
@pytest.mark.parametrize("halo", [0, 1])
@pytest.mark.parametrize("make_book", [remainder_book, range_book, lambda n, p: ArrayBook(np.arange(n) % p, p)])
def test_rule_and_array_books_with_data(tmp_path, storage, halo, make_book):
    g = small_graph()
    book = make_book(g.num_nodes, 5)
    partition_with_book(g, book, tmp_path / "out", ResultPlan("test", storage=storage, halo=halo))
    check_against_spec(tmp_path / "out", g)
    assert verify(tmp_path / "out", g)["ok"]
    with PartitionReader(tmp_path / "out") as reader:
        assert reader.num_parts == 5 and reader.storage == storage
        assert reader.node_data_names() == ["feat", "mask", "f16"]
        assert reader.edge_data_names() == ["edge_weight", "edge_type"]
        back = reader.book()
        ids = np.arange(g.num_nodes)
        np.testing.assert_array_equal(back.owner(ids), book.owner(ids))
        np.testing.assert_array_equal(back.local(ids), book.local(ids))
        arr = reader.array(2, "node_data/f16", verify=True)
        assert arr.dtype == np.float16 and arr.shape[1:] == (2, 3)
        if storage == "binary":
            assert isinstance(reader.array(0, "indices"), np.memmap)


def test_parts_with_no_nodes_or_no_edges(tmp_path):
    # 3 isolated nodes and one self-loop; an ArrayBook leaves partition 1 empty
    g = Graph.from_arrays([2], [2], 3)
    book = ArrayBook(np.array([0, 0, 2]), 3)
    manifest = partition_with_book(g, book, tmp_path / "out", ResultPlan("test"))
    assert [p["num_owned"] for p in manifest["partitions"]] == [2, 0, 1]
    assert [p["num_edges"] for p in manifest["partitions"]] == [0, 0, 1]
    assert (tmp_path / "out" / "part_1" / "indices.bin").stat().st_size == 0
    assert verify(tmp_path / "out", g)["ok"]
    check_against_spec(tmp_path / "out", g)


def test_narrow_and_big_endian_inputs_are_stored_little_endian(tmp_path):
    rng = np.random.default_rng(1)
    src = rng.integers(0, 30, 200).astype(np.uint16)
    dst = rng.integers(0, 30, 200).astype(">i4")
    g = Graph(30, src, dst, {"x": rng.random((30, 2)).astype(">f8")}, {})
    partition_with_book(g, range_book(30, 3), tmp_path / "out", ResultPlan("range", storage="binary"))
    check_against_spec(tmp_path / "out", g)
    assert verify(tmp_path / "out", g)["ok"]


def test_parts_out_of_range_are_input_errors(tmp_path):
    g = small_graph()
    with pytest.raises(InputError, match="at least 1"):
        partition_graph(g, tmp_path / "out", 0, "remainder")
    with pytest.raises(InputError, match="exceed"):
        partition_graph(g, tmp_path / "out", 61, "remainder")
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []


def test_verbose_log_reports_each_stage(tmp_path):
    stages = []
    partition_graph(small_graph(), tmp_path / "out", 2, "range", halo=1, verbose_log=lambda *r: stages.append(r))
    assert [s[0] for s in stages] == ["read graph", "assign", "order nodes", "order edges", "write topology", "write node data", "manifest"]
    stages = []
    partition_graph(small_graph(), tmp_path / "out2", 2, "range", verbose_log=lambda *r: stages.append(r))
    names = [s[0] for s in stages]
    assert names == ["read graph", "assign", "order nodes", "write node data", "order edges (overlapped)", "write topology", "manifest"]
    assert all(sec >= 0 and rss > 0 for _, sec, rss in stages)


# --------------------------------------------------------------------------- commit: failures, force


def test_failure_mid_write_leaves_nothing(tmp_path, monkeypatch):
    import gpart.pipeline.write_arrays as mod

    real = mod.write_topology
    calls = []

    def failing(writer, part, *args):
        calls.append(part)
        if part == 1:
            raise OSError("disk on fire")
        return real(writer, part, *args)

    monkeypatch.setattr(mod, "write_topology", failing)
    with pytest.raises(OSError):
        partition_graph(small_graph(), tmp_path / "out", 3, "remainder")
    assert calls == [0, 1]
    assert list(tmp_path.iterdir()) == []  # no output, no staging leftover


@pytest.mark.parametrize("storage", ["binary", "hdf5"])
def test_force_replaces_only_after_the_new_result_is_complete(tmp_path, monkeypatch, storage):
    import gpart.pipeline.write_result as mod

    g = small_graph()
    out = tmp_path / "out"
    partition_graph(g, out, 2, "range", storage=storage)
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(OutputError, match="already exists"):
        partition_graph(g, out, 3, "range", storage=storage)

    def failing(*args, **kw):
        raise RuntimeError("killed while writing the manifest")

    monkeypatch.setattr(mod, "write_manifest", failing)
    with pytest.raises(RuntimeError):
        partition_graph(g, out, 3, "remainder", storage=storage, force=True)
    assert (out / "manifest.json").read_bytes() == before
    assert verify(out, g)["ok"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    monkeypatch.undo()
    manifest = partition_graph(g, out, 3, "remainder", storage=storage, force=True)
    assert manifest["num_parts"] == 3 and verify(out, g)["ok"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_output_may_not_replace_the_input(tmp_path):
    path = need(CORA)
    copy = tmp_path / "cora.npz"
    shutil.copy(path, copy)
    with pytest.raises(OutputError, match="input"):
        partition_graph(copy, copy, 2, "range")
    with pytest.raises(OutputError, match="input"):
        partition_graph(copy, tmp_path, 2, "range", force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cora.npz"]


# --------------------------------------------------------------------------- reader validation and damage


@pytest.fixture
def result(tmp_path):
    g = small_graph()
    out = tmp_path / "out"
    partition_with_book(g, ArrayBook(np.arange(g.num_nodes) % 3, 3), out, ResultPlan("test"))
    return g, out


def edit_manifest(out: Path, change) -> None:
    m = json.loads((out / "manifest.json").read_text())
    change(m)
    (out / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda m: m.update(format="gpart.other"), "format"),
        (lambda m: m.update(version=2), "version"),
        (lambda m: m.update(storage="zarr"), "storage"),
        (lambda m: m.update(num_parts=4), "partitions"),
        (lambda m: m["partitions"][0]["arrays"]["indices"].update(shape=[5]), "indices"),
        (lambda m: m["partitions"][1].update(num_owned=1), "int64"),
        (lambda m: m["partitions"][0]["arrays"].pop("edge_ids"), "arrays"),
        (lambda m: m["partitions"][0]["arrays"]["indptr"].update(file="../../etc/passwd"), "is not allowed"),
        (lambda m: m["book"].update(kind="hash"), "book kind"),
        (lambda m: m["node_data"]["feat"].update(dtype="complex64"), "dtype"),
    ],
)
def test_reader_refuses_bad_manifests_before_reading_data(result, change, message):
    _, out = result
    edit_manifest(out, change)
    with pytest.raises(InputError, match=message):
        PartitionReader(out)


def test_reader_checks_file_sizes_up_front(result):
    _, out = result
    path = out / "part_1" / "indices.bin"
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(IntegrityError, match="size"):
        PartitionReader(out)


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("victim", ["part_0/indices.bin", "part_2/node_data/feat.bin", "book/owner.bin", "part_1/edge_data/edge_weight.bin"])
def test_verify_finds_a_flipped_byte(result, victim):
    g, out = result
    flip_byte(out / victim, 2)
    report = verify(out)
    assert not report["ok"] and any(victim in p and "checksum" in p for p in report["problems"])
    assert not verify(out, g)["ok"]


def test_verify_finds_a_consistent_lie(result):
    """Data rewritten with a matching checksum is caught by the invariants or the input."""
    g, out = result
    path = out / "part_0" / "edge_ids.bin"
    ids = np.fromfile(path, dtype="<i8")
    ids[[0, 1]] = ids[[1, 0]]
    ids.tofile(path)
    edit_manifest(out, lambda m: m["partitions"][0]["arrays"]["edge_ids"].update(crc32=f"{zlib.crc32(ids.tobytes()):08x}"))
    assert verify(out)["ok"]  # checksums and structure alone cannot tell
    report = verify(out, g)
    assert not report["ok"]
    lines = " ".join(report["problems"] + report["mismatch"])
    assert "differ from the input" in lines or "ascending edge id" in lines


def test_verify_hdf5_damage(tmp_path):
    g = small_graph()
    out = tmp_path / "out"
    partition_with_book(g, remainder_book(g.num_nodes, 2), out, ResultPlan("remainder", storage="hdf5"))
    with h5py.File(out / "partitions.h5", "r") as f:
        offset = f["part_1/indices"].id.get_offset()
    flip_byte(out / "partitions.h5", offset + 3)
    report = verify(out)
    assert not report["ok"] and "part_1/indices" in report["problems"][0]


def test_verify_missing_manifest_is_damage_and_missing_dir_is_input_error(result, tmp_path):
    _, out = result
    (out / "manifest.json").unlink()
    with pytest.raises(IntegrityError, match="manifest"):
        verify(out)
    with pytest.raises(InputError, match="no such directory"):
        verify(tmp_path / "nowhere")


def test_verify_reports_a_different_input(result):
    g, out = result
    other = small_graph(seed=9)
    report = verify(out, other)
    # the result is intact: the differences are the input's (mismatch), not damage (problems)
    assert not report["ok"] and report["problems"] == [] and "differ" in " ".join(report["mismatch"])


def test_binary_reader_does_not_import_h5py(result):
    _, out = result
    code = (
        "import sys; from gpart.formats.partition.reader import PartitionReader; "
        f"r = PartitionReader({str(out)!r}); r.array(0, 'indices', verify=True); r.book(); "
        "assert not r.verify_checksums(); assert 'h5py' not in sys.modules, 'h5py imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_failure_in_the_node_data_pass_leaves_nothing(tmp_path, monkeypatch):
    import gpart.pipeline.write_result as mod

    def failing(writer, graph, nodes, halos, bar, *chunk_bytes):
        raise MemoryError("out of memory halfway")

    monkeypatch.setattr(mod, "write_node_data", failing)
    with pytest.raises(MemoryError):
        partition_graph(small_graph(), tmp_path / "out", 3, "random")
    assert list(tmp_path.iterdir()) == []


def test_background_write_error_surfaces_as_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    """A write failing in the background writer thread (disk full) reaches the caller."""
    from gpart.formats.files import arrays

    real = arrays.ArrayWriter.write
    calls = []

    def full_disk(self, chunk):
        calls.append(self.path.name)
        if len(calls) == 6:
            raise OutputError(self.path, "write failed: No space left on device")
        return real(self, chunk)

    monkeypatch.setattr(arrays.ArrayWriter, "write", full_disk)
    with pytest.raises(OutputError, match="No space left"):
        partition_graph(small_graph(), tmp_path / "out", 3, "remainder")
    assert list(tmp_path.iterdir()) == []


def test_synchronous_binary_writer_matches_the_background_one(tmp_path):
    from gpart.formats.partition.writer import PartitionWriter

    arr = np.arange(1000, dtype=np.int64).reshape(250, 4)
    entries = {}
    for background in (False, True):
        directory = tmp_path / str(background)
        directory.mkdir()
        writer = PartitionWriter(directory, "binary", background=background)
        entry = writer.write_array("part_0/x", arr, chunk_bytes=1000)
        writer.close({})
        entries[background] = entry.to_json()
        assert (directory / "part_0" / "x.bin").read_bytes() == arr.tobytes()
    assert entries[False] == entries[True]
    assert entries[True]["crc32"] == f"{zlib.crc32(arr.tobytes()):08x}"


def test_fsync_error_in_the_background_surfaces_and_leaves_nothing(tmp_path, monkeypatch):
    """A finished file's fsync runs in the fsync thread: its failure (EIO, a full thin disk) still
    reaches the caller as one OutputError naming the file, and no result is left."""
    import errno
    import os

    from gpart.bytes import sink

    calls = []

    def failing_fsync(fd):
        calls.append(fd)
        if len(calls) == 4:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(sink.os, "fsync", failing_fsync)
    with pytest.raises(OutputError, match=r"\.bin.*Input/output error"):
        partition_graph(small_graph(), tmp_path / "out", 3, "remainder")
    assert list(tmp_path.iterdir()) == []


def test_every_data_file_is_fsynced_before_the_manifest(tmp_path, monkeypatch):
    """The writer thread hands fsyncs to another thread; the manifest must still come after all of them."""
    import os

    from gpart.bytes import sink

    synced, at_manifest = [], []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    import gpart.pipeline.write_result as mod

    def manifest_after(stage, manifest):
        at_manifest.extend(synced)
        return real_manifest(stage, manifest)

    real_manifest = mod.write_manifest
    monkeypatch.setattr(sink.os, "fsync", recording_fsync)
    monkeypatch.setattr(mod, "write_manifest", manifest_after)
    out = tmp_path / "out"
    partition_graph(CORA, out, 3, "remainder")
    bins = sorted(p.name for p in out.rglob("*.bin"))
    synced_names = sorted(Path(p).name for p in at_manifest if p.endswith(".bin"))
    assert bins and synced_names == bins


@pytest.mark.parametrize("method,parts,halo", [("random", 5, 1), ("metis", 4, 1), ("metis", 4, 0)])
def test_layouts_computed_in_threads_are_byte_identical(tmp_path, monkeypatch, method, parts, halo):
    """gpart.pipeline.memory_plan.layout_threads picks 1, 2 or 0 (bucketed) layouts at once by memory, and
    resident_sources whether the sources are gathered from a copy in RAM; the bytes never change."""
    import gpart.pipeline.write_result as mod

    outputs = {}
    for threads, resident in ((1, False), (2, False), (3, False), (1, True), (2, True)):
        monkeypatch.setattr(mod, "layout_threads", lambda *args, n=threads: n)
        monkeypatch.setattr(mod, "resident_sources", lambda *args, r=resident: r)
        out = tmp_path / f"t{threads}{resident}"
        partition_graph(need(ENRON), out, parts, method, halo=halo)
        outputs[threads, resident] = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert all(files == outputs[1, False] for files in outputs.values())


def test_sources_are_copied_to_memory_only_where_they_fit(tmp_path, monkeypatch):
    import numpy as np

    import gpart.pipeline.write_result as mod
    from gpart.pipeline.memory_plan import MAX_LAYOUT_THREADS, RESIDENT_SOURCE_BYTES_PER_EDGE, in_memory_bytes, resident_sources

    n, e, p = 1_000_000, 10_000_000, 4
    roomy = in_memory_bytes(n, e, p, MAX_LAYOUT_THREADS + 1) + RESIDENT_SOURCE_BYTES_PER_EDGE * e
    assert resident_sources(n, e, p, MAX_LAYOUT_THREADS, roomy)
    assert not resident_sources(n, e, p, MAX_LAYOUT_THREADS, roomy - 1)
    assert resident_sources(n, e, p, 1, in_memory_bytes(n, e, p) + RESIDENT_SOURCE_BYTES_PER_EDGE * e)
    assert not resident_sources(n, e, p, 0, 10 * roomy)  # the bucketed pass holds no E-sized array
    # the layouts see the copy (an ndarray, not the input's memmap) exactly when it fits
    seen = []
    real = mod.write_all_topology
    monkeypatch.setattr(mod, "write_all_topology", lambda *args: seen.append(type(args[-1])) or real(*args))
    rng = np.random.default_rng(0)
    graph_path = tmp_path / "g.npz"  # an .npz's arrays are mapped, not read
    np.savez(graph_path, src=rng.integers(0, 500, 5000), dst=rng.integers(0, 500, 5000), num_nodes=np.int64(500))
    for limit in ("64GB", "1MB"):  # 1 MB: bucketed on disk (blocks from the mapped input), no copy
        partition_graph(graph_path, tmp_path / limit, 4, "random", max_memory=limit)
    monkeypatch.setattr(mod, "resident_sources", lambda *a: False)
    partition_graph(graph_path, tmp_path / "mapped", 4, "random", max_memory="64GB")
    assert seen == [np.ndarray, np.memmap, np.memmap]


def test_layout_threads_follow_the_memory_limit():
    from gpart.pipeline.memory_plan import MAX_LAYOUT_THREADS, in_memory_bytes, layout_threads

    n, e, p = 1_000_000, 10_000_000, 4
    roomy = in_memory_bytes(n, e, p, MAX_LAYOUT_THREADS + 1)
    assert layout_threads(n, e, p, roomy) == MAX_LAYOUT_THREADS == 2
    assert layout_threads(n, e, p, roomy - 1) == 1
    assert layout_threads(n, e, p, in_memory_bytes(n, e, p)) == 1
    assert layout_threads(n, e, p, in_memory_bytes(n, e, p) - 1) == 0


def test_files_awaiting_fsync_are_bounded(tmp_path, monkeypatch):
    """Each file waiting for its fsync holds a descriptor: with many parts and a slow disk the writer
    waits instead of opening files past the bound (ulimit -n is often 1024)."""
    import os
    import threading
    import time

    from gpart.bytes import sink
    from gpart.formats.partition import store as partition_store

    monkeypatch.setattr(partition_store, "FILES_AWAITING_FSYNC", 3)
    waiting, most = [0], [0]
    lock = threading.Lock()
    real_close = sink.ByteSink.close

    def slow_close(self):
        real_close(self)
        time.sleep(0.002)
        with lock:
            waiting[0] -= 1

    real_flush = sink.ByteSink.flush

    def counting_flush(self):
        real_flush(self)
        with lock:
            waiting[0] += 1
            most[0] = max(most[0], waiting[0])

    monkeypatch.setattr(sink.ByteSink, "close", slow_close)
    monkeypatch.setattr(sink.ByteSink, "flush", counting_flush)
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    out = tmp_path / "out"
    partition_graph(CORA, out, 16, "random")
    assert verify(out)["ok"]
    assert 1 <= most[0] <= 3 + 1  # the bound, plus the one flushed while waiting for a slot
