"""Rooms for what changes on the checkpoint side: a new export target or import source is one class and one
registration line (gpart.ckpt.export_registry, gpart.ckpt.import_registry), and sharding policies answer
for themselves (gpart.formats.sharding.policies) in the manifest forms they always had."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_ckpt import _expect_error, make_run, run

from gpart.formats.checkpoint import entries as ck
from gpart.formats.checkpoint.reader import read_checkpoint
from gpart.formats.partition.book import RuleBook
from gpart.formats.sharding.policies import POLICY_CLASSES, RangePolicy, RemainderPolicy, policy_from_json


def _help(command: str) -> str:
    from click.testing import CliRunner

    from gpart.cli.main import cli

    return CliRunner().invoke(cli, [command, "--help"]).output


def test_a_new_export_target_is_one_class_and_one_registration(tmp_path, monkeypatch, capsys):
    """A target defined and registered here (each rank's table rows and their ids, one .npz per rank) is
    offered by `gpart export-ckpt --to`, cut by the user's --policy, refused for optimizers it has no states
    for, and described by the export manifest, with no other change."""
    from gpart.ckpt import export_registry
    from gpart.ckpt.export_target import ExportTarget
    from gpart.ckpt.reshard import target_policy
    from gpart.formats.foreign.torch_files import file_entry

    class RowsAndIds(ExportTarget):
        name = "rows-and-ids"
        optimizers = ("none",)

        def default_prefix(self, src, options, where):
            return "rows"

        def policies(self, src, options, where):
            return {e.name: target_policy(options.policy, e.num_rows, options.world_size, options.boundaries) for e in src.embeddings.values()}

        def write(self, src, prefix, policies, stage, options, progress):
            files = []
            for emb, policy in policies.items():
                for r in range(policy.world_size):
                    ids = policy.global_ids(r)
                    path = stage / f"{prefix}_{emb}_{r}.npz"
                    np.savez(path, ids=ids, rows=src.read_owned(ck.tensor_name(emb), policy, r))
                    files.append({**file_entry(path), "rank": r})
            return files

    monkeypatch.setattr(export_registry.REGISTRY, "entries", dict(export_registry.REGISTRY.entries))  # the registration below ends with this test
    export_registry.register(RowsAndIds())
    assert "--to [wholegraph|distdgl|rows-and-ids]" in _help("export-ckpt")
    arrays = make_run(tmp_path / "run", 101, 4, (3,), "float32", "none", policy=RemainderPolicy(101, 4), name="paper")
    out = tmp_path / "out"
    assert run("export-ckpt", tmp_path / "run", "--to", "rows-and-ids", "-w", 3, "--policy", "range", "-o", out, "-q") == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"] == "rows-and-ids" and manifest["prefix"] == "rows" and manifest["optimizer"]["type"] == "none"
    assert manifest["embeddings"][0]["policy"] == RangePolicy.wholegraph(101, 3).to_json()
    assert [f["file"] for f in manifest["files"]] == [f"rows_paper_{r}.npz" for r in range(3)]
    table = np.empty_like(arrays["paper"])
    for r in range(3):
        with np.load(out / f"rows_paper_{r}.npz") as part:
            np.testing.assert_array_equal(part["ids"], RangePolicy.wholegraph(101, 3).global_ids(r))
            table[part["ids"]] = part["rows"]
    assert table.tobytes() == arrays["paper"].tobytes()
    # the export refuses what the target declares it cannot hold, in the words every target gets
    make_run(tmp_path / "adam", 20, 2, (3,), "float32", "adam")
    _expect_error(capsys, tmp_path / "x", "export-ckpt", tmp_path / "adam", "--to", "rows-and-ids", "-w", 2, "-o", tmp_path / "x",
                  match="optimizer adam has no rows-and-ids counterpart (rows-and-ids saves states of: ); use --table-only")


def test_a_new_import_source_is_one_class_and_one_registration(tmp_path, monkeypatch):
    """A source defined and registered here (one .npy file holding a whole table) is offered by
    `gpart import-ckpt --from` and writes a checkpoint under the user's --world-size and --policy."""
    from gpart.ckpt import import_registry
    from gpart.ckpt.import_source import ImportSource
    from gpart.ckpt.reshard import target_policy
    from gpart.formats.checkpoint.writer import write_checkpoint_manifest, write_shard
    from gpart.formats.files.commit import staged_output

    class WholeTable(ImportSource):
        name = "whole-table"

        def run(self, inputs, out_dir, options, *, force=False, progress=None):
            table = np.load(inputs[0], mmap_mode="r")
            policy = target_policy(options.policy, table.shape[0], options.world_size or 1, options.boundaries)
            with staged_output(out_dir, force=force, inputs=[inputs[0]]) as stage:
                entries = [write_shard(stage, options.name, r, policy.world_size, np.asarray(table[policy.global_slice(r)]))
                           for r in range(policy.world_size)]
                spec = ck.EmbeddingSpec(options.name, table.shape[0], table.shape[1:], str(table.dtype), policy)
                manifest = ck.build_checkpoint_manifest([spec], entries, policy.world_size)
                write_checkpoint_manifest(stage, manifest)
            return manifest

    monkeypatch.setattr(import_registry.REGISTRY, "entries", dict(import_registry.REGISTRY.entries))  # the registration below ends with this test
    import_registry.register(WholeTable())
    assert "--from [wholegraph|torch|whole-table]" in _help("import-ckpt")
    table = np.random.default_rng(3).random((77, 5), dtype=np.float32)
    np.save(tmp_path / "table.npy", table)
    for policy, world in (("remainder", 4), ("range", 3)):
        out = tmp_path / f"ck_{policy}"
        assert run("import-ckpt", "--from", "whole-table", tmp_path / "table.npy", "-w", world, "--policy", policy, "--name", "ent", "-o", out, "-q") == 0
        c = read_checkpoint(out, verify=True)
        assert c.world_size == world and c.policy("ent").name == policy
        assert c.read_rows("ent", np.arange(77)).tobytes() == table.tobytes()


def test_registering_a_name_twice_is_refused():
    from gpart.ckpt import export_registry, import_registry

    with pytest.raises(ValueError, match="registered twice"):
        export_registry.register(export_registry.get_target("wholegraph"))
    with pytest.raises(ValueError, match="registered twice"):
        import_registry.register(import_registry.get_source("torch"))


def _policies(n: int, w: int) -> list:
    cuts = np.sort(np.random.default_rng(n * 31 + w).integers(0, n + 1, w - 1))
    return [RemainderPolicy(n, w), RangePolicy.wholegraph(n, w), RangePolicy.even(n, w), RangePolicy(n, w, tuple(int(x) for x in [0, *cuts, n]))]


@pytest.mark.parametrize("n", [0, 1, 7, 64, 101])
@pytest.mark.parametrize("w", [1, 2, 3, 8])
def test_policies_describe_their_ranks_rows_consistently(n, w):
    """first_row/stride, global_rows, global_ids, global_slice, owner/local and row_bounds agree with each other."""
    table = np.arange(n)
    for policy in _policies(n, w):
        assert policy.is_contiguous == (policy.stride == 1) == (policy.name == "range" or w == 1)
        seen = np.zeros(n, dtype=int)
        for r in range(w):
            ids = policy.global_ids(r)
            assert len(ids) == policy.count(r) and ids.dtype == np.int64
            np.testing.assert_array_equal(policy.global_rows(r, np.arange(len(ids))), ids)
            np.testing.assert_array_equal(table[policy.global_slice(r)], ids)
            if len(ids):
                assert ids[0] == policy.first_row(r) and (np.diff(ids) == policy.stride).all()
                np.testing.assert_array_equal(policy.owner(ids), r)
                np.testing.assert_array_equal(policy.local(ids), np.arange(len(ids)))
            seen[ids] += 1
        assert (seen == 1).all()
        np.testing.assert_array_equal(policy.counts(), [policy.count(r) for r in range(w)])
        if policy.is_contiguous:
            bounds = policy.row_bounds()
            assert [list(policy.global_ids(r)) for r in range(w)] == [list(range(bounds[r], bounds[r + 1])) for r in range(w)]
        else:
            with pytest.raises(ValueError, match="interleaves rows"):
                policy.row_bounds()
        assert policy_from_json(json.loads(json.dumps(policy.to_json()))) == policy


def test_policy_and_book_manifest_forms_are_the_ones_they_always_were():
    """The JSON the policies and rule books write, key for key and in order (checkpoint and partition
    manifests must stay byte-identical)."""
    assert json.dumps(RemainderPolicy(10, 3).to_json()) == '{"name": "remainder", "num_rows": 10, "world_size": 3}'
    assert json.dumps(RangePolicy(10, 2, (0, 6, 10)).to_json()) == '{"name": "range", "num_rows": 10, "world_size": 2, "boundaries": [0, 6, 10]}'
    assert json.dumps(RuleBook(RemainderPolicy(10, 3)).to_json()) == '{"kind": "remainder", "num_nodes": 10, "num_parts": 3}'
    assert json.dumps(RuleBook(RangePolicy(10, 2, (0, 6, 10))).to_json()) == '{"kind": "range", "num_nodes": 10, "num_parts": 2, "boundaries": [0, 6, 10]}'
    assert list(POLICY_CLASSES) == ["remainder", "range"]


def test_export_and_import_library_calls_take_options(tmp_path):
    """export_checkpoint and import_wholegraph take their options as dataclasses; the library refuses missing
    shapes with the line the CLI gives."""
    from gpart.base.errors import InputError
    from gpart.ckpt import ExportOptions, ImportOptions, export_checkpoint, import_wholegraph

    arrays = make_run(tmp_path / "run", 50, 2, (4,), "float32", "lazyadam", name="emb")
    manifest = export_checkpoint(tmp_path / "run", tmp_path / "wg", to="wholegraph", options=ExportOptions(world_size=3))
    assert manifest["prefix"] == "emb" and len(manifest["files"]) == 4 * 3
    options = ImportOptions(world_size=3, name="emb", num_rows=50, row_shape=(4,), optimizer="lazyadam")
    imported = import_wholegraph(tmp_path / "wg" / "emb", tmp_path / "back", options)
    assert imported["optimizer"]["type"] == "lazyadam"
    back = read_checkpoint(tmp_path / "back")
    for name, array in arrays.items():
        assert back.read_rows(name, np.arange(50)).tobytes() == array.tobytes()
    with pytest.raises(InputError, match="WholeGraph files carry no shape: give --num-rows, --dim"):
        import_wholegraph(tmp_path / "wg" / "emb", tmp_path / "x", ImportOptions(world_size=3))
    assert not Path(tmp_path / "x").exists()
