"""gr.load_partition refuses a damaged partition by default (issue 42): one byte flipped in any kind of file it
reads (topology, node ids, features, labels, the book; typed arrays; an HDF5 dataset) is one IntegrityError line
naming the file, raised before anything trains; verify=False loads it unchecked. The checksum behind it
(gpart.bytes.crc.mapped_file_crc32) is zlib's CRC-32 whatever the threads and pieces, in bounded memory.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

import gpart.runtime as gr
from gpart.base.errors import IntegrityError
from gpart.bytes.crc import mapped_file_crc32

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"
HETERO = REPO / "sample_data" / "cora_hetero.npz"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, Path]:
    """Intact results to copy and damage: Cora in 2 parts (binary, array book; HDF5) and the typed Cora graph."""
    from gpart.pipeline.partition import partition_graph

    root = tmp_path_factory.mktemp("verify_parts")
    partition_graph(CORA, root / "binary", 2, "random")
    partition_graph(CORA, root / "hdf5", 2, "random", storage="hdf5")
    partition_graph(HETERO, root / "typed", 2, "random")
    return {name: root / name for name in ("binary", "hdf5", "typed")}


def _flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0x01]))


def _damaged(results: dict[str, Path], kind: str, tmp_path: Path) -> Path:
    d = tmp_path / kind
    shutil.copytree(results[kind], d)
    return d


def _refused(d: Path, victim: Path, rank: int = 0) -> None:
    with pytest.raises(IntegrityError) as exc:
        gr.load_partition(d, rank, device="cpu")
    line = str(exc.value)
    assert "\n" not in line and line.startswith(f"{victim}: checksum mismatch: crc32 "), line
    assert f"gpart verify {d}" in line, line


# every kind of file a load reads, a byte in its middle flipped (the last byte of a file of one)
VICTIMS = ["part_0/indptr.bin", "part_0/indices.bin", "part_0/edge_ids.bin", "part_0/node_ids.bin",
           "part_0/node_data/feat.bin", "part_0/node_data/label.bin", "part_0/node_data/train_mask.bin",
           "book/owner.bin", "book/local.bin"]


@pytest.mark.parametrize("victim", VICTIMS)
def test_a_flipped_byte_is_refused_by_default_and_loads_with_verify_off(results, tmp_path, victim):
    d = _damaged(results, "binary", tmp_path)
    path = d / victim
    _flip(path, path.stat().st_size // 2)
    _refused(d, path)
    part = gr.load_partition(d, 0, device="cpu", verify=False)  # the opt-out: sizes checked, checksums not
    assert part.rank == 0 and part.num_owned > 0


def test_only_the_files_loaded_are_checked(results, tmp_path):
    """Another partition's damage, or a node array not asked for, does not stop this partition's load."""
    d = _damaged(results, "binary", tmp_path)
    _flip(d / "part_1" / "node_data" / "feat.bin", 100)
    _flip(d / "part_0" / "node_data" / "val_mask.bin", 3)
    part = gr.load_partition(d, 0, device="cpu", node_data=["feat", "label"])
    assert sorted(part.node_data) == ["feat", "label"]
    _refused(d, d / "part_1" / "node_data" / "feat.bin", rank=1)


def test_an_intact_result_loads_the_same_with_and_without_checks(results):
    checked = gr.load_partition(results["binary"], 1, device="cpu")
    unchecked = gr.load_partition(results["binary"], 1, device="cpu", verify=False)
    for key in ("indptr", "indices", "node_ids"):
        assert np.array_equal(getattr(checked, key).numpy(), getattr(unchecked, key).numpy())
    assert np.array_equal(checked.node_data["feat"].numpy(), unchecked.node_data["feat"].numpy())


def test_typed_result_refuses_a_flipped_typed_array(results, tmp_path):
    d = _damaged(results, "typed", tmp_path)
    typed = sorted(p for p in (d / "part_0" / "node_data").rglob("*.bin") if p.parent != d / "part_0" / "node_data")
    assert typed, "the typed result has typed node arrays"
    victim = max(typed, key=lambda p: p.stat().st_size)  # the largest: a feature table
    _flip(victim, victim.stat().st_size // 3)
    _refused(d, victim)
    gr.load_partition(d, 0, device="cpu", verify=False)


def test_hdf5_result_refuses_a_flipped_dataset_byte(results, tmp_path):
    import h5py

    d = _damaged(results, "hdf5", tmp_path)
    for dataset in ("part_0/indices", "book/owner"):
        with h5py.File(d / "partitions.h5", "r+") as h5:
            h5[dataset][3] ^= 1
        with pytest.raises(IntegrityError, match=rf"partitions.h5:/{dataset}: checksum mismatch.*gpart verify"):
            gr.load_partition(d, 0, device="cpu")
        with h5py.File(d / "partitions.h5", "r+") as h5:
            h5[dataset][3] ^= 1
    gr.load_partition(d, 0, device="cpu")


def test_a_manifest_without_checksums_is_refused_unless_verify_is_off(results, tmp_path):
    import json

    d = _damaged(results, "binary", tmp_path)
    manifest = json.loads((d / "manifest.json").read_text())
    del manifest["partitions"][0]["arrays"]["indices"]["crc32"]
    (d / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IntegrityError, match=r"part_0/indices.bin: manifest gives no crc32"):
        gr.load_partition(d, 0, device="cpu")
    gr.load_partition(d, 0, device="cpu", verify=False)


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 3 * 4096 + 5, (1 << 20) + 17])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_mapped_crc_is_zlibs_crc(tmp_path, size, threads):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    path = tmp_path / "f.bin"
    path.write_bytes(data + b"tail not summed")
    assert mapped_file_crc32(path, size, piece_bytes=4096, threads=threads) == zlib.crc32(data)


def test_mapped_crc_memory_stays_bounded(tmp_path):
    """128 MiB summed in 4 MiB pieces on 2 threads: the peak RSS grows by far less than the file."""
    path = tmp_path / "big.bin"
    with open(path, "wb") as fh:
        for i in range(32):
            fh.write(np.full(1 << 20, i, dtype=np.float32).tobytes())
    code = f"""
import resource, zlib
from gpart.bytes.crc import mapped_file_crc32
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
crc = mapped_file_crc32({str(path)!r}, {path.stat().st_size}, piece_bytes=4 << 20, threads=2)
print(crc, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""
    crc, grown_mib = map(int, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    expected = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(16 << 20):
            expected = zlib.crc32(chunk, expected)
    assert crc == expected
    assert grown_mib < 40, f"peak RSS grew by {grown_mib} MiB summing a 128 MiB file"
