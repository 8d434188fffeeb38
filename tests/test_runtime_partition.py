"""gpart.runtime: load_partition (both storages, every method), gather locally and across
gloo ranks, load_rows slices, and the errors of bad inputs and mismatched ranks.

Partitions are written from real data (the repository's Cora sample, derived from
tests/data/public/cora, and SNAP ego-Facebook from tests/data/public) with
gpart.pipeline.partition.partition_graph. Multi-process checks reuse one group per world
size for many checks, since starting processes is the slow part.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from support.gloo_processes import run_distributed
from support.public_data import FACEBOOK

import gpart.runtime as gr
from gpart.base.errors import InputError, IntegrityError, NotLocalError, RankMismatchError
from gpart.formats.partition.reader import PartitionReader

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"

# (method, storage, halo) per world size: every method, both storages, with and without halo data
LAYOUTS = [
    ("metis", "binary", 1),
    ("remainder", "hdf5", 0),
    ("range", "binary", 0),
    ("random", "hdf5", 1),
]


def _cora_arrays() -> dict[str, np.ndarray]:
    with np.load(CORA, allow_pickle=False) as z:
        return {k: z[k] for k in ("feat", "label", "train_mask")}


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> dict:
    """name -> partition directory: cora_<method>_<parts>, plus facebook_4 (metis, hdf5, halo)."""
    from gpart.pipeline.partition import partition_graph

    if not CORA.exists():
        pytest.skip("sample_data/cora.npz missing")
    root = tmp_path_factory.mktemp("runtime_parts")
    out = {}
    for num_parts in (2, 4):
        for method, storage, halo in LAYOUTS:
            d = root / f"cora_{method}_{num_parts}"
            partition_graph(CORA, d, num_parts, method, storage=storage, halo=halo)
            out[f"cora_{method}_{num_parts}"] = d
    from gpart.formats.input.readers import read_graph

    graph = read_graph(FACEBOOK)
    n = graph.num_nodes
    graph.node_data["gid"] = np.arange(n, dtype=np.int64)
    graph.node_data["emb"] = (np.arange(n * 8, dtype=np.float32).reshape(n, 8) / 7).astype(np.float16)
    d = root / "facebook_4"
    partition_graph(graph, d, 4, "metis", storage="hdf5", halo=1)
    out["facebook_4"] = d
    return out


# --------------------------------------------------------------------------- loading and the book


@pytest.mark.parametrize("num_parts", [2, 4])
@pytest.mark.parametrize("method", [m for m, _, _ in LAYOUTS])
def test_book_and_topology_agree_with_files(parts, method, num_parts):
    d = parts[f"cora_{method}_{num_parts}"]
    with PartitionReader(d) as reader:
        book = reader.book()
        all_ids = np.arange(reader.num_nodes)
        owned_seen = np.zeros(reader.num_nodes, dtype=np.int64)
        for rank in range(num_parts):
            part = gr.load_partition(d, rank, device="cpu", verify=True)
            assert part.rank == rank and part.num_parts == num_parts and part.device == torch.device("cpu")
            assert part.book.kind == reader.manifest["book"]["kind"]
            # the device book answers as the on-disk book, for every node
            assert np.array_equal(part.owner(torch.from_numpy(all_ids)).numpy(), book.owner(all_ids))
            assert np.array_equal(part.to_local(all_ids).numpy(), book.local(all_ids))
            assert part.book.counts().tolist() == book.counts().tolist()
            # topology and ids are the files' arrays
            for key in ("node_ids", "indptr", "indices", "edge_ids"):
                got = getattr(part, key)
                assert got.dtype == torch.int64 and np.array_equal(got.numpy(), reader.array(rank, key)), key
            owned, halo = part.owned_ids, part.halo_ids
            assert part.num_owned == owned.numel() and part.num_halo == halo.numel()
            assert bool((part.owner(owned) == rank).all()) and torch.equal(part.to_local(owned), torch.arange(part.num_owned))
            assert bool((part.owner(halo) != rank).all())
            owned_seen[owned.numpy()] += 1
            assert sorted(part.node_data_names) == sorted(reader.node_data_names())
    assert bool((owned_seen == 1).all())


def test_local_gather_equals_indexing(parts):
    data = _cora_arrays()
    gen = torch.Generator().manual_seed(1)
    for name, d in parts.items():
        if not name.startswith("cora_"):
            continue
        num_parts = int(name.rsplit("_", 1)[1])
        for rank in range(num_parts):
            part = gr.load_partition(d, rank, device="cpu", feature_device="cpu")
            local = part.node_ids if part.halo else part.owned_ids
            ids = local[torch.randint(0, local.numel(), (300,), generator=gen)]  # duplicates, any order
            for key in ("feat", "label", "train_mask"):
                got = part.gather(key, ids)
                assert np.array_equal(got.numpy(), data[key][ids.numpy()]), (name, rank, key)
            assert part.gather("feat", ids[:0]).shape == (0, 1433)
            grid = ids[:12].reshape(3, 4)
            assert part.gather("label", grid.numpy()).shape == (3, 4)
            assert np.array_equal(part.local_rows(local).numpy(), np.arange(local.numel()))


def test_single_process_errors(parts):
    part = gr.load_partition(parts["cora_range_4"], 1, device="cpu")
    owner = part.owner(torch.arange(part.num_nodes))
    remote = torch.nonzero(owner != 1).reshape(-1)[:5]
    with pytest.raises(NotLocalError, match=r"5 of 7 requested ids are not in partition 1 .*halo data is not stored.*torch.distributed"):
        part.gather("feat", torch.cat([part.owned_ids[:2], remote]))
    with pytest.raises(IndexError, match=r"2 global ids outside 0\.\.2707"):
        part.gather("feat", [0, -1, 2708])
    with pytest.raises(KeyError, match="no node data 'nope'"):
        part.gather("nope", [0])
    with pytest.raises(TypeError, match="integers"):
        part.gather("feat", torch.tensor([1.0]))
    with pytest.raises(InputError, match=r"has 4 partitions; rank 4 is not one of 0\.\.3"):
        gr.load_partition(parts["cora_range_4"], 4, device="cpu")
    with pytest.raises(InputError, match="no node data named 'emb'"):
        gr.load_partition(parts["cora_range_4"], 0, device="cpu", node_data=["emb"])
    only = gr.load_partition(parts["cora_range_4"], 0, device="cpu", node_data=["label"])
    assert only.node_data_names == ["label"]
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="CUDA is not available"):
            gr.load_partition(parts["cora_range_4"], 0, device="cuda")


def test_single_process_with_one_partition(tmp_path):
    from gpart.pipeline.partition import partition_graph

    partition_graph(CORA, tmp_path / "one", 1, "remainder")
    part = gr.load_partition(tmp_path / "one", device="cpu")
    ids = torch.randint(0, 2708, (1000,))
    assert np.array_equal(part.gather("feat", ids).numpy(), _cora_arrays()["feat"][ids.numpy()])


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit_manifest(d: Path, edit) -> None:
    path = d / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


def test_bad_manifests_give_clear_errors(parts, tmp_path):
    src = parts["cora_metis_2"]
    d = _copy(src, tmp_path / "version")
    _edit_manifest(d, lambda m: m.update(version=2))
    with pytest.raises(InputError, match="manifest.json: gpart.partition version 2 is not supported"):
        gr.load_partition(d, 0, device="cpu")

    d = _copy(src, tmp_path / "missing")
    (d / "part_1" / "indices.bin").unlink()
    with pytest.raises(IntegrityError, match=r"part_1/indices.bin: file named in the manifest is missing"):
        gr.load_partition(d, 1, device="cpu")
    # only the loaded partition's files (and the book) are checked: a per-machine directory (SPEC.md 10.4)
    assert gr.load_partition(d, 0, device="cpu").rank == 0

    d = _copy(src, tmp_path / "short")
    feat = d / "part_0" / "node_data" / "feat.bin"
    with open(feat, "r+b") as fh:
        fh.truncate(feat.stat().st_size - 4)
    with pytest.raises(IntegrityError, match=r"feat.bin: size \d+ bytes, manifest says \d+"):
        gr.load_partition(d, 0, device="cpu")

    d = _copy(src, tmp_path / "dtype")
    _edit_manifest(d, lambda m: m["node_data"]["label"].update(dtype="complex64"))
    with pytest.raises(InputError, match="unknown dtype 'complex64'"):
        gr.load_partition(d, 0, device="cpu")

    d = _copy(src, tmp_path / "nomanifest")
    (d / "manifest.json").unlink()
    with pytest.raises(InputError, match="no manifest.json"):
        gr.load_partition(d, 0, device="cpu")

    # damaged bytes of the right size: found by the checksums (the default), loaded unchecked with verify=False
    d = _copy(src, tmp_path / "flipped")
    ids = d / "part_0" / "node_ids.bin"
    raw = bytearray(ids.read_bytes())
    raw[3] ^= 0xFF
    ids.write_bytes(bytes(raw))
    gr.load_partition(d, 0, device="cpu", verify=False)
    with pytest.raises(IntegrityError, match="node_ids.bin: checksum mismatch"):
        gr.load_partition(d, 0, device="cpu")


def test_bad_hdf5_data_found_by_default(parts, tmp_path):
    import h5py

    d = _copy(parts["cora_remainder_2"], tmp_path / "h5")
    with h5py.File(d / "partitions.h5", "r+") as h5:
        h5["part_1/node_data/feat"][0, 0] = 7.0
    gr.load_partition(d, 1, device="cpu", verify=False)
    with pytest.raises(IntegrityError, match=r"partitions.h5:/part_1/node_data/feat: checksum mismatch"):
        gr.load_partition(d, 1, device="cpu")


# --------------------------------------------------------------------------- imports


def test_runtime_imports_without_click_rich_h5py(parts):
    code = f"""
import sys
import gpart.runtime as gr
gr.load_partition, gr.load_rows, gr.LoadedPartition
heavy = sorted(m for m in ("click", "rich", "h5py") if m in sys.modules)
assert not heavy, heavy
part = gr.load_partition({str(parts['cora_metis_2'])!r}, 0, device="cpu")
assert "h5py" not in sys.modules
part = gr.load_partition({str(parts['cora_remainder_2'])!r}, 0, device="cpu")
assert "h5py" in sys.modules
assert not any(m in sys.modules for m in ("click", "rich"))
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


# --------------------------------------------------------------------------- load_rows


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict:
    from gpart.formats.filelist.sets import write_filelist

    feat = _cora_arrays()["feat"][:, :40]  # real rows, narrow to keep the test fast
    root = tmp_path_factory.mktemp("runtime_rows")
    out = {}
    for num_files, dtype in [(1, None), (3, "bfloat16"), (7, "float16"), (4, "int8")]:
        d = root / f"f{num_files}_{dtype}"
        # Cora's features are 0/1: the int8 export comes from their integer form
        source = feat.astype(np.int64) if dtype == "int8" else feat
        write_filelist(d, "feat", source, num_files, dtype)
        out[(num_files, dtype)] = d / "feat" / "feat.json"
    return {"feat": feat, "paths": out}


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_load_rows_slices_every_world_size(exports, world_size):
    feat = exports["feat"]
    n = feat.shape[0]
    per_rank = -(-n // world_size)
    expected_dtype = {None: torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "int8": torch.int8}
    for (num_files, dtype), path in exports["paths"].items():
        full = torch.from_numpy(feat).to(expected_dtype[dtype])
        pieces = []
        for rank in range(world_size):
            rows = gr.load_rows(path, rank, world_size, device="cpu")
            start, stop = min(rank * per_rank, n), min((rank + 1) * per_rank, n)
            assert rows.dtype == expected_dtype[dtype] and rows.shape == (stop - start, 40)
            assert torch.equal(rows, full[start:stop]), (num_files, dtype, rank)
            pieces.append(rows)
        assert torch.equal(torch.cat(pieces), full)


def test_load_rows_errors(exports, tmp_path):
    path = exports["paths"][(3, "bfloat16")]
    with pytest.raises(InputError, match="rank 3 is not one of 0..2"):
        gr.load_rows(path, 3, 3, device="cpu")
    with pytest.raises(InputError, match="world size must be a positive integer"):
        gr.load_rows(path, 0, 0, device="cpu")
    with pytest.raises(InputError, match="no such file"):
        gr.load_rows(tmp_path / "none.json", 0, 1, device="cpu")
    d = _copy(path.parent, tmp_path / "short")
    part = sorted(d.glob("feat_part_*"))[1]
    with open(part, "r+b") as fh:
        fh.truncate(part.stat().st_size - 2)
    with pytest.raises(IntegrityError, match="feat_part_1_of_3"):
        gr.load_rows(d / "feat.json", 0, 2, device="cpu")
    d = _copy(path.parent, tmp_path / "flipped")
    part = sorted(d.glob("feat_part_*"))[2]
    raw = bytearray(part.read_bytes())
    raw[0] ^= 0x01
    part.write_bytes(bytes(raw))
    gr.load_rows(d / "feat.json", 0, 1, device="cpu")
    with pytest.raises(IntegrityError, match="checksum mismatch"):
        gr.load_rows(d / "feat.json", 0, 1, device="cpu", verify=True)


# --------------------------------------------------------------------------- distributed gathers


def _distributed_checks(rank: int, world_size: int, dirs: dict, cora_path: str) -> dict:
    with np.load(cora_path, allow_pickle=False) as z:
        data = {k: z[k] for k in ("feat", "label", "train_mask")}
    gen = torch.Generator().manual_seed(100 + rank)
    report: dict = {"checked": 0}
    for name, d in dirs.items():
        if not name.startswith(("cora_", "facebook_")):
            continue
        part = gr.load_partition(d, device="cpu")  # rank from torch.distributed
        assert part.rank == rank
        if name.startswith("facebook"):
            n = part.num_nodes
            ids = torch.randint(0, n, (2000,), generator=gen)
            gid = part.gather("gid", ids)
            assert torch.equal(gid, ids)
            emb = part.gather("emb", ids)
            expect = (np.arange(n * 8, dtype=np.float32).reshape(n, 8) / 7).astype(np.float16)[ids.numpy()]
            assert emb.dtype == torch.float16 and np.array_equal(emb.numpy(), expect)
            report["checked"] += 2
            continue
        owner = part.owner(torch.arange(part.num_nodes))
        remote = torch.nonzero(owner != rank).reshape(-1)
        # owned + halo + remote ids, with duplicates, shuffled
        ids = torch.cat([
            part.owned_ids[torch.randint(0, part.num_owned, (200,), generator=gen)],
            part.halo_ids[torch.randint(0, max(1, part.num_halo), (50,), generator=gen)] if part.num_halo else part.owned_ids[:0],
            remote[torch.randint(0, remote.numel(), (300,), generator=gen)],
        ])
        ids = ids[torch.randperm(ids.numel(), generator=gen)]
        for key in ("feat", "label", "train_mask"):
            assert np.array_equal(part.gather(key, ids).numpy(), data[key][ids.numpy()]), (name, key)
        # rank 0 asks for nothing while the others ask; then nobody asks
        mine = ids[:0] if rank == 0 else ids[:17]
        assert np.array_equal(part.gather("feat", mine).numpy(), data["feat"][mine.numpy()])
        assert part.gather("label", torch.zeros(0, dtype=torch.int32)).shape == (0,)
        # 2-D requests keep their shape
        grid = ids[:20].reshape(4, 5)
        assert np.array_equal(part.gather("label", grid).numpy(), data["label"][grid.numpy()])
        # a rank asking for an id out of range fails at once; the others still get their rows
        if rank == world_size - 1:
            with pytest.raises(IndexError, match="global ids outside"):
                part.gather("feat", torch.tensor([0, part.num_nodes]))
        else:
            assert np.array_equal(part.gather("feat", ids[:9]).numpy(), data["feat"][ids[:9].numpy()])
        report["checked"] += 7
    # ranks that loaded different results: a clear error on every rank, in bounded time
    names = sorted(n for n in dirs if n.startswith("cora_"))
    mixed = gr.load_partition(dirs[names[rank % 2]], device="cpu")
    start = time.monotonic()
    try:
        mixed.gather("feat", [0], timeout_s=10)
    except RankMismatchError as exc:
        report["mismatch"] = str(exc)
    report["mismatch_s"] = time.monotonic() - start
    # a result with another number of partitions than ranks: immediate error, no exchange
    other = dirs["other"]
    wrong = gr.load_partition(other, 0, device="cpu")
    try:
        wrong.gather("feat", [0])
    except InputError as exc:
        report["world"] = str(exc)
    # a rank whose load failed never joins the gather: the others fail in bounded time
    if rank == world_size - 1:
        try:
            gr.load_partition(dirs["broken"], device="cpu")
        except (InputError, IntegrityError) as exc:
            report["broken"] = str(exc)
    else:
        start = time.monotonic()
        try:
            gr.load_partition(dirs[names[0]], device="cpu").gather("feat", [1], timeout_s=2)
        except RankMismatchError as exc:
            report["missing"] = str(exc)
        report["missing_s"] = time.monotonic() - start
    return report


@pytest.mark.parametrize("world_size", [2, 4])
def test_distributed_gather_gloo(parts, world_size, tmp_path):
    dirs = {name: str(d) for name, d in parts.items() if name.endswith(f"_{world_size}")}
    dirs["other"] = str(parts[f"cora_metis_{6 - world_size}"])  # 4 parts for 2 ranks, 2 for 4
    broken = _copy(parts[f"cora_metis_{world_size}"], tmp_path / "broken")
    _edit_manifest(broken, lambda m: m.update(version=99))
    dirs["broken"] = str(broken)
    results = run_distributed(_distributed_checks, world_size, dirs, str(CORA), timeout_s=80)
    expected_checks = 7 * len(LAYOUTS) + (2 if "facebook_4" in dirs else 0)
    for rank, report in enumerate(results):
        assert report["checked"] == expected_checks
        assert "ranks disagree about the partition result (manifest.json digest)" in report["mismatch"]
        assert report["mismatch_s"] < 10
        assert f"has {6 - world_size} partitions but torch.distributed has world size {world_size}" in report["world"]
        if rank == world_size - 1:
            assert "version 99 is not supported" in report["broken"]
        else:
            assert f"not all {world_size} ranks reached the check" in report["missing"]
            assert report["missing_s"] < 10


# --------------------------------------------------------------------------- CUDA (skipped without a GPU)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_load_gather_and_rows(parts, exports):
    data = _cora_arrays()
    for feature_device in (None, "cpu"):
        part = gr.load_partition(parts["cora_metis_2"], 0, device="cuda", feature_device=feature_device)
        assert part.indptr.is_cuda and part.book.owner_table.is_cuda
        table = part.node_data["feat"]
        assert table.is_cuda if feature_device is None else table.is_pinned()
        ids = part.node_ids[torch.randint(0, part.node_ids.numel(), (500,), device="cuda")]
        got = part.gather("feat", ids)
        assert got.is_cuda and np.array_equal(got.cpu().numpy(), data["feat"][ids.cpu().numpy()])
    path = exports["paths"][(3, "bfloat16")]
    rows = gr.load_rows(path, 1, 2, device="cuda")
    assert rows.is_cuda and torch.equal(rows.cpu(), gr.load_rows(path, 1, 2, device="cpu"))
    assert gr.load_rows(path, 0, 2, device="cpu", pin=True).is_pinned()
