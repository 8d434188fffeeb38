"""The shared pieces every writer and reader builds on: flat arrays, manifests, staged commit, sharding."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpart.base.errors import InputError, IntegrityError, OutputError
from gpart.formats.files.arrays import ArrayEntry, open_array, write_array
from gpart.formats.files.commit import staged_output
from gpart.formats.files.manifest import read_manifest, write_manifest
from gpart.formats.partition.book import ArrayBook, range_book, remainder_book
from gpart.formats.sharding.policies import RangePolicy, RemainderPolicy, even_boundaries, make_policy, policy_from_json, wholegraph_boundaries


def test_write_array_is_raw_little_endian_with_crc(tmp_path):
    arr = np.arange(12, dtype=np.float32).reshape(4, 3)
    entry = write_array(tmp_path, "a/x.bin", arr, chunk_bytes=16)  # several chunks
    raw = (tmp_path / "a/x.bin").read_bytes()
    assert raw == arr.astype("<f4").tobytes()
    assert entry.crc32 == zlib.crc32(raw)
    assert entry.to_json() == {"file": "a/x.bin", "dtype": "float32", "shape": [4, 3], "bytes": 48, "crc32": f"{zlib.crc32(raw):08x}"}
    back = open_array(tmp_path, ArrayEntry.from_json(entry.to_json()), verify=True)
    np.testing.assert_array_equal(back, arr)


def test_open_array_rejects_wrong_size_and_checksum(tmp_path):
    entry = write_array(tmp_path, "x.bin", np.arange(10, dtype=np.int64))
    with open(tmp_path / "x.bin", "r+b") as fh:
        fh.seek(3)
        fh.write(b"\xff")
    with pytest.raises(IntegrityError, match="checksum mismatch"):
        open_array(tmp_path, entry, verify=True)
    with open(tmp_path / "x.bin", "ab") as fh:
        fh.write(b"\0")
    with pytest.raises(IntegrityError, match="size 81 bytes, manifest says 80"):
        open_array(tmp_path, entry)
    (tmp_path / "x.bin").unlink()
    with pytest.raises(IntegrityError, match="missing"):
        open_array(tmp_path, entry)


def test_empty_array_roundtrip(tmp_path):
    entry = write_array(tmp_path, "e.bin", np.zeros((0, 5), dtype=np.float16))
    assert (tmp_path / "e.bin").stat().st_size == 0
    assert open_array(tmp_path, entry, verify=True).shape == (0, 5)


@pytest.mark.parametrize(
    "bad",
    [
        {"file": "../x", "dtype": "int64", "shape": [1]},
        {"file": "/etc/passwd", "dtype": "int64", "shape": [1]},
        {"file": "x", "dtype": "complex64", "shape": [1]},
        {"file": "x", "dtype": "int64", "shape": [-1]},
        {"file": "x", "dtype": "int64"},
        {"file": "x", "dtype": "int64", "shape": [2], "bytes": 8},
    ],
)
def test_malformed_entries_are_input_errors(bad):
    with pytest.raises(InputError):
        ArrayEntry.from_json(bad, "m.json")


def test_manifest_format_and_version_checked(tmp_path):
    write_manifest(tmp_path, {"format": "gpart.partition", "version": 1})
    assert read_manifest(tmp_path, "gpart.partition")["version"] == 1
    assert not (tmp_path / "manifest.json.tmp").exists()
    with pytest.raises(InputError, match="expected 'gpart.checkpoint'"):
        read_manifest(tmp_path, "gpart.checkpoint")
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "gpart.partition", "version": 9}))
    with pytest.raises(InputError, match="version 9 is not supported"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        read_manifest(tmp_path)
    (tmp_path / "sub").mkdir()
    with pytest.raises(InputError, match="no manifest.json"):
        read_manifest(tmp_path / "sub")
    with pytest.raises(InputError, match="no such directory"):
        read_manifest(tmp_path / "missing")


def _make_result(out, value, force=False, fail=False):
    with staged_output(out, force=force) as stage:
        (stage / "data.bin").write_bytes(value)
        if fail:
            raise RuntimeError("disk on fire")
        write_manifest(stage, {"format": "t", "version": 1})


def test_staged_output_commits_only_complete_results(tmp_path):
    out = tmp_path / "res"
    with pytest.raises(RuntimeError):
        _make_result(out, b"1", fail=True)
    assert list(tmp_path.iterdir()) == []  # neither the result nor the staging directory
    _make_result(out, b"1")
    assert (out / "data.bin").read_bytes() == b"1"
    with pytest.raises(OutputError, match="use --force"):
        _make_result(out, b"2")
    with pytest.raises(RuntimeError):
        _make_result(out, b"2", force=True, fail=True)
    assert (out / "data.bin").read_bytes() == b"1"  # old result intact after a failed replace
    _make_result(out, b"2", force=True)
    assert (out / "data.bin").read_bytes() == b"2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res"]


def test_staged_output_never_replaces_user_data(tmp_path):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "thesis.tex").write_text("precious")
    with pytest.raises(OutputError, match="not a gpart result"):
        _make_result(user, b"x", force=True)
    assert (user / "thesis.tex").read_text() == "precious"
    with pytest.raises(OutputError, match="would contain or replace the input"):
        with staged_output(tmp_path, inputs=[user / "thesis.tex"]):
            pass
    _make_result(tmp_path / "empty_ok", b"x")  # a new or empty directory is fine


def test_boundary_rules_hand_worked():
    assert even_boundaries(10, 4).tolist() == [0, 3, 6, 8, 10]
    assert wholegraph_boundaries(10, 4).tolist() == [0, 3, 6, 9, 10]
    assert wholegraph_boundaries(9, 4).tolist() == [0, 3, 6, 9, 9]
    assert even_boundaries(0, 3).tolist() == [0, 0, 0, 0]
    with pytest.raises(ValueError):
        RangePolicy(10, 2, (0, 6, 5))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 200), w=st.integers(1, 9), policy=st.sampled_from(["remainder", "range", "even"]))
def test_policies_place_every_row_exactly_once(n, w, policy):
    pol = RangePolicy.even(n, w) if policy == "even" else make_policy(policy, n, w)
    assert policy_from_json(json.loads(json.dumps(pol.to_json()))) == pol
    seen = np.zeros(n, dtype=np.int64)
    for r in range(w):
        ids = pol.global_ids(r)
        assert len(ids) == pol.count(r)
        np.testing.assert_array_equal(np.arange(n)[pol.global_slice(r)], ids)
        np.testing.assert_array_equal(pol.owner(ids), np.full(len(ids), r))
        np.testing.assert_array_equal(pol.local(ids), np.arange(len(ids)))
        seen[ids] += 1
    assert (seen == 1).all()
    assert pol.counts().sum() == n


def test_books_agree_with_their_rules():
    rng = np.random.default_rng(0)
    owner = rng.integers(0, 3, size=50)
    book = ArrayBook(owner, 3)
    for p in range(3):
        owned = book.owned(p)
        np.testing.assert_array_equal(owned, np.flatnonzero(owner == p))
        np.testing.assert_array_equal(book.local(owned), np.arange(len(owned)))
    rb = remainder_book(10, 3)
    assert rb.owner(np.array([0, 4, 8])).tolist() == [0, 1, 2] and rb.local(np.array([7])).tolist() == [2]
    gb = range_book(10, 4)
    assert gb.owned(3).tolist() == [8, 9] and gb.to_json()["boundaries"] == [0, 3, 6, 8, 10]
    assert isinstance(RemainderPolicy(5, 2).to_json(), dict)


def test_every_package_folder_is_installed():
    """A package folder missing from pyproject's list works from a checkout but not from `pip install .`."""
    from pathlib import Path

    import tomllib

    repo = Path(__file__).resolve().parents[1]
    setup = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots = setup["package-dir"]  # a package's folder: its nearest mapped ancestor's folder + the rest of its name

    def folder_of(name: str) -> str:
        head, rest = name, []
        while head not in roots:
            head, _, leaf = head.rpartition(".")
            rest.insert(0, leaf)
        return "/".join([roots[head], *rest])

    folders = {folder_of(name): name for name in setup["packages"]}
    for init in [*repo.glob("gpart/**/__init__.py"), *repo.glob("cli/**/__init__.py"), *repo.glob("formats/**/__init__.py")]:
        folder = init.parent.relative_to(repo).as_posix()
        assert folder in folders, f"{folder}/ is a package but pyproject.toml does not install it"
