"""`gpart partition`, `gpart info`, `gpart verify` through the CLI: output, exit codes, bad input."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from support.cli_run import run
from support.public_data import FACEBOOK

from gpart.cli.commands.distributed import cli as distributed_cli
from gpart.cli.main import cli
from gpart.formats.partition.book import ArrayBook
from gpart.partition_methods.method import PartitionMethod
from gpart.partition_methods.options import MethodOptions, OptionError
from gpart.partition_methods.registry import REGISTRY, method_names, register
from gpart.pipeline.partition import partition_graph

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if ".gpart-" in p.name]


@pytest.fixture
def cora() -> Path:
    if not CORA.exists():
        pytest.skip("sample_data/cora.npz not built yet")
    return CORA


# --------------------------------------------------------------------------- happy paths


@pytest.mark.parametrize("method", ["metis", "remainder", "range", "random"])
def test_partition_info_verify_every_method(tmp_path, capsys, cora, method):
    out = tmp_path / "parts"
    rc, stdout, err = run(capsys, "partition", cora, "--parts", 4, "-o", out, "--method", method, "--json")
    assert rc == 0, err
    summary = json.loads(stdout)
    assert summary["method"] == method and summary["num_parts"] == 4 and summary["num_nodes"] == 2708
    rc, stdout, _ = run(capsys, "info", out, "--json")
    info = json.loads(stdout)
    assert rc == 0 and info["num_parts"] == 4
    assert [p["num_owned"] for p in info["partitions"]] == [p["num_owned"] for p in summary["partitions"]]
    assert info["stats"] == summary["stats"]
    rc, stdout, err = run(capsys, "verify", out, "--graph", cora)
    assert rc == 0, stdout + err
    assert "OK" in stdout and "reconstruction" in stdout


def test_hdf5_halo_tables_and_verbose(tmp_path, capsys, cora):
    out = tmp_path / "parts"
    rc, stdout, err = run(capsys, "partition", cora, "-p", 3, "-o", out, "--format", "hdf5", "--halo", 1,
                          "--method", "random", "--seed", 7, "--verbose")
    assert rc == 0, err
    assert "edge cut" in stdout and "owned" in stdout and "halo" in stdout
    for stage in ("read graph", "assign", "order edges", "write topology", "write node data", "manifest"):
        assert stage in err and "peak RSS" in err
    assert (out / "partitions.h5").exists() and not list(out.glob("part_*"))
    rc, stdout, _ = run(capsys, "info", out)
    assert rc == 0 and "edge cut" in stdout and "feat: float32" in stdout and "hdf5" in stdout
    rc, stdout, _ = run(capsys, "verify", out, "--graph", cora, "--json")
    report = json.loads(stdout)
    assert rc == 0 and report["ok"] and report["checked"]["reconstruction"]


def test_metis_options_are_recorded(tmp_path, capsys):
    out = tmp_path / "parts"
    rc, stdout, err = run(capsys, "partition", FACEBOOK, "--parts", 4, "-o", out, "--algorithm", "kway",
                          "--objective", "volume", "--trials", 2, "--imbalance", 0.05, "--seed", 3, "--json", "--quiet")
    assert rc == 0, err
    params = json.loads((out / "manifest.json").read_text())["params"]
    assert params["algorithm"] == "kway" and params["objective"] == "volume" and params["trials"] == 2
    assert params["seed"] == 3 and params["imbalance"] == pytest.approx(0.05)


def test_assignment_and_extra_data_files(tmp_path, capsys, cora):
    n = 2708
    owner = tmp_path / "owner.npy"
    np.save(owner, (np.arange(n) % 3).astype(np.int64))
    extra = tmp_path / "emb.npy"
    np.save(extra, np.arange(n * 2, dtype=np.float32).reshape(n, 2))
    out = tmp_path / "parts"
    rc, _, err = run(capsys, "partition", cora, "--parts", 3, "--assignment", owner, "--node-data", f"emb={extra}",
                     "-o", out, "--quiet")
    assert rc == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["method"] == "assignment" and "emb" in manifest["node_data"]
    assert manifest["graph"]["node_data_files"] == {"emb": str(extra)}
    owned = [p["num_owned"] for p in manifest["partitions"]]
    assert owned == np.bincount(np.arange(n) % 3).tolist()
    rc, stdout, _ = run(capsys, "verify", out, "--graph", cora, "--json")
    report = json.loads(stdout)
    assert rc == 0 and report["ok"] and not report["notes"]  # emb reloaded from the recorded file


def test_help_explains_every_option_with_defaults(capsys):
    rc, stdout, _ = run(capsys, "partition", "--help")
    assert rc == 0
    for option in ("--parts", "--method", "--assignment", "--format", "--halo", "--seed", "--imbalance", "--objective",
                   "--algorithm", "--trials", "--iterations", "--balance", "--balance-edges", "--node-data",
                   "--edge-data", "--force", "--quiet", "--verbose", "--json"):
        assert option in stdout
    words = " ".join(stdout.split())  # as read, whatever the terminal's width wrapped
    assert "default: balanced" in words and "default: binary" in words
    assert "[default: metis 0.03, kaminpar 0.03, stream 0.09]" in words  # each method's own tolerance
    for command in ("info", "verify"):
        rc, stdout, _ = run(capsys, command, "--help")
        assert rc == 0 and "--json" in stdout
    assert "--graph" in stdout


# --------------------------------------------------------------------------- bad input: message, exit 2, no output


def npz(tmp_path: Path, name: str = "g.npz", **arrays) -> Path:
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def bad_inputs(tmp_path: Path) -> dict[str, tuple[Path, list, str]]:
    """case -> (file the message must name, extra arguments, expected words)."""
    s, d = np.array([0, 1, 2]), np.array([1, 2, 0])
    truncated = npz(tmp_path, "truncated.npz", src=np.arange(5000), dst=np.arange(5000))
    truncated.write_bytes(truncated.read_bytes()[:3000])
    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_bytes(os.urandom(256))
    text = tmp_path / "bad.txt"
    text.write_text("0 1\n1 x\n")
    wrong_owner = tmp_path / "owner.npy"
    np.save(wrong_owner, np.array([0, 1]))
    return {
        "missing keys": (npz(tmp_path, "nodst.npz", src=s), [], "dst"),
        "out of range": (npz(tmp_path, "range.npz", src=np.array([0, 5]), dst=np.array([1, 2]), num_nodes=3), [], "5"),
        "negative ids": (npz(tmp_path, "neg.npz", src=np.array([-1, 0]), dst=np.array([1, 2])), [], "negative"),
        "mismatched lengths": (npz(tmp_path, "len.npz", src=s, dst=d[:2]), [], "entries"),
        "wrong dtype": (npz(tmp_path, "float.npz", src=s.astype(float), dst=d), [], "integer"),
        "node array length": (npz(tmp_path, "feat.npz", src=s, dst=d, feat=np.zeros((4, 2))), [], "feat"),
        "truncated": (truncated, [], ""),
        "corrupt": (corrupt, [], ""),
        "missing file": (tmp_path / "nothere.npz", [], "no such file"),
        "text token": (text, [], "x"),
        "parts 0": (npz(tmp_path, "ok0.npz", src=s, dst=d), ["--parts", "0"], "at least 1"),
        "parts > nodes": (npz(tmp_path, "ok1.npz", src=s, dst=d), ["--parts", "4"], "4"),
        "bad assignment": (wrong_owner, ["--assignment", wrong_owner], ""),
    }


CASES = ["missing keys", "out of range", "negative ids", "mismatched lengths", "wrong dtype", "node array length",
         "truncated", "corrupt", "missing file", "text token", "parts 0", "parts > nodes", "bad assignment"]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_one_line_exit_2_no_output(tmp_path, capsys, case):
    named, extra, words = bad_inputs(tmp_path)[case]
    graph = named if case != "bad assignment" else npz(tmp_path, "ok2.npz", src=np.array([0, 1, 2]), dst=np.array([1, 2, 0]))
    args = ["partition", graph, "-o", tmp_path / "out", "--method", "range"]
    if "--parts" not in extra:
        args += ["--parts", 2]
    if case == "bad assignment":
        args.remove("--method"), args.remove("range")
    rc, stdout, err = run(capsys, *args, *extra)
    assert rc == 2, (stdout, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert named.name in lines[0] and words in lines[0], lines[0]
    assert not (tmp_path / "out").exists()
    assert leftovers(tmp_path) == []


def test_unreadable_input(tmp_path, capsys):
    if os.geteuid() == 0:
        pytest.skip("root reads everything")
    path = npz(tmp_path, src=np.array([0, 1]), dst=np.array([1, 0]))
    path.chmod(0)
    rc, _, err = run(capsys, "partition", path, "--parts", 2, "-o", tmp_path / "out")
    assert rc == 2 and "g.npz" in err and not (tmp_path / "out").exists()


def test_directory_as_input(tmp_path, capsys):
    rc, _, err = run(capsys, "partition", tmp_path, "--parts", 2, "-o", tmp_path / "out")
    assert rc == 2 and err.startswith("error:")
    assert not (tmp_path / "out").exists()


def test_existing_output_needs_force_and_output_may_not_be_the_input(tmp_path, capsys):
    graph = npz(tmp_path, src=np.array([0, 1, 2, 3]), dst=np.array([1, 2, 3, 0]))
    out = tmp_path / "out"
    assert run(capsys, "partition", graph, "--parts", 2, "-o", out, "--method", "range", "-q")[0] == 0
    before = (out / "manifest.json").read_bytes()
    rc, _, err = run(capsys, "partition", graph, "--parts", 3, "-o", out, "--method", "range")
    assert rc == 2 and "already exists" in err and "--force" in err and str(out) in err
    assert (out / "manifest.json").read_bytes() == before
    rc, _, err = run(capsys, "partition", graph, "--parts", 3, "-o", out, "--method", "range", "--force", "-q")
    assert rc == 0 and json.loads((out / "manifest.json").read_text())["num_parts"] == 3
    rc, _, err = run(capsys, "partition", graph, "--parts", 2, "-o", graph)
    assert rc == 2 and "input" in err and graph.name in err
    rc, _, err = run(capsys, "partition", graph, "--parts", 2, "-o", tmp_path, "--force")
    assert rc == 2 and "input" in err
    assert graph.is_file() and leftovers(tmp_path) == []


def test_bad_option_values_exit_2(tmp_path, capsys):
    graph = npz(tmp_path, src=np.array([0, 1]), dst=np.array([1, 0]))
    for extra in (["--halo", "2"], ["--format", "zarr"], ["--method", "magic"], ["--node-data", "feat"]):
        rc, _, err = run(capsys, "partition", graph, "--parts", 2, "-o", tmp_path / "out", *extra)
        assert rc == 2, extra
        assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


# --------------------------------------------------------------------------- damage: verify exits 1


@pytest.fixture
def parts(tmp_path, capsys, cora) -> Path:
    out = tmp_path / "parts"
    assert run(capsys, "partition", cora, "--parts", 2, "-o", out, "--method", "remainder", "-q")[0] == 0
    return out


def test_verify_flipped_byte(parts, capsys, cora):
    path = parts / "part_1" / "node_data" / "feat.bin"
    data = bytearray(path.read_bytes())
    data[12345] ^= 1
    path.write_bytes(bytes(data))
    rc, stdout, _ = run(capsys, "verify", parts)
    assert rc == 1 and "feat.bin" in stdout and "checksum" in stdout
    assert run(capsys, "verify", parts, "--graph", cora)[0] == 1


def test_verify_truncated_file(parts, capsys):
    path = parts / "part_0" / "indices.bin"
    path.write_bytes(path.read_bytes()[:-1])
    rc, stdout, _ = run(capsys, "verify", parts, "--json")
    report = json.loads(stdout)
    assert rc == 1 and any("indices.bin" in p and "size" in p for p in report["problems"])


def test_verify_missing_manifest_or_file(parts, capsys):
    (parts / "part_0" / "edge_ids.bin").unlink()
    rc, stdout, _ = run(capsys, "verify", parts)
    assert rc == 1 and "missing" in stdout
    (parts / "manifest.json").unlink()
    rc, _, err = run(capsys, "verify", parts)
    assert rc == 1 and "manifest.json" in err
    rc, _, err = run(capsys, "info", parts)
    assert rc == 2 and "manifest.json" in err


def test_verify_hdf5_damage(tmp_path, capsys, cora):
    import h5py

    out = tmp_path / "parts"
    assert run(capsys, "partition", cora, "--parts", 2, "-o", out, "--method", "range", "--format", "hdf5", "-q")[0] == 0
    with h5py.File(out / "partitions.h5", "r") as f:
        offset = f["part_0/node_data/label"].id.get_offset()
    data = bytearray((out / "partitions.h5").read_bytes())
    data[offset + 8] ^= 1
    (out / "partitions.h5").write_bytes(bytes(data))
    rc, stdout, _ = run(capsys, "verify", out)
    assert rc == 1 and "part_0/node_data/label" in stdout
    (out / "partitions.h5").write_bytes(bytes(data[:4096]))
    assert run(capsys, "verify", out)[0] == 1


def test_verify_against_another_graph_fails(parts, capsys, tmp_path):
    other = npz(tmp_path, src=np.array([0, 1]), dst=np.array([1, 0]))
    rc, stdout, err = run(capsys, "verify", parts, "--graph", other)
    # other node and edge counts: the graph is named as the wrong side, before the result is read (exit 3)
    assert rc == 3 and stdout == "" and err.count("\n") == 1
    assert f"{other}: is not the graph {parts} was made from: it has 2 nodes and 2 edges" in err


def test_balance_options_reach_metis(tmp_path, capsys, cora):
    out = tmp_path / "parts"
    rc, _, err = run(capsys, "partition", cora, "--parts", 4, "-o", out, "--balance", "train_mask", "--balance-edges",
                     "--iterations", 5, "--quiet")
    assert rc == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    params = manifest["params"]
    assert params["balance"] == ["train_mask"] and params["balance_edges"] is True and params["iterations"] == 5
    assert run(capsys, "verify", out, "--graph", cora)[0] == 0
    rc, _, err = run(capsys, "partition", cora, "--parts", 4, "-o", tmp_path / "x", "--balance", "nosuch")
    assert rc == 2 and "nosuch" in err and not (tmp_path / "x").exists() and leftovers(tmp_path) == []


# --------------------------------------------------------------------------- the method registry


@dataclass
class ModuloOptions(MethodOptions):
    """The seed is an offset into the modulus: owner = (id + seed) % 3 % P."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.seed >= 3:
            raise OptionError(f"modulo-3 takes a seed below 3, got {self.seed}")


class ModuloMethod(PartitionMethod):
    """A method defined here, in one class and one register() call, and nowhere else."""

    name = "modulo-3"
    summary = "owner = (id + seed) % 3 % P."
    options_type = ModuloOptions
    needs_adjacency = True  # a made-up memory model, for the planner to read
    bytes_per_edge = 10**6
    needs_edges = False

    def run(self, graph, num_parts, options, context):
        owner = ((np.arange(graph.num_nodes) + options.seed) % 3 % num_parts).astype(np.int32)
        return ArrayBook(owner, num_parts), {"seed": int(options.seed), "modulus": 3}


@pytest.fixture
def modulo():
    register(ModuloMethod())
    yield "modulo-3"
    REGISTRY.entries.pop("modulo-3")


def method_choices(command, args) -> list[str]:
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 0, result.output
    return re.search(r"--method \[([^\]]+)\]", result.output).group(1).split("|")


def test_every_listed_method_comes_from_the_registry(modulo):
    listed = method_names()
    assert listed == [name for name, method in REGISTRY.entries.items() if method.listed] and listed[-1] == "modulo-3"
    assert method_choices(cli, ["partition", "--help"]) == listed
    assert method_choices(distributed_cli, ["partition", "--help"]) == listed
    assert "modulo-3: owner = (id + seed) % 3 % P." in " ".join(CliRunner().invoke(cli, ["partition", "--help"]).output.split())


def test_a_method_registered_in_a_test_runs_from_the_cli(tmp_path, cora, modulo):
    runner = CliRunner()
    out = tmp_path / "cli"
    result = runner.invoke(cli, ["partition", str(cora), "-p", "2", "--method", "modulo-3", "--seed", "1", "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["method"] == "modulo-3"
    assert manifest["params"] == {"num_parts": 2, "seed": 1, "modulus": 3, "empty_parts": []}
    assert [p["num_owned"] for p in manifest["partitions"]] == np.bincount((np.arange(2708) + 1) % 3 % 2).tolist()
    assert runner.invoke(cli, ["verify", str(out), "--graph", str(cora)]).exit_code == 0
    # the library, given the same arguments, writes the same bytes
    partition_graph(cora, tmp_path / "library", 2, "modulo-3", seed=1)
    files = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "library") for p in (tmp_path / "library").rglob("*") if p.is_file())
    assert all((out / f).read_bytes() == (tmp_path / "library" / f).read_bytes() for f in files)


@pytest.mark.parametrize("extra,message", [
    (["--seed", "5"], "modulo-3 takes a seed below 3, got 5"),  # its options dataclass validates
    (["--seed", "-1"], "seed must be an integer in [0, 2**31 - 1), got -1"),  # the common options too
    (["--passes", "2"], "--passes applies to --method stream only; it conflicts with method 'modulo-3'"),
    (["--max-memory", "100MB"], "method 'modulo-3' needs about 5.3 GiB for 5,429 edges (1000000 bytes per edge)"),
])
def test_a_registered_method_is_checked_as_the_others(tmp_path, cora, modulo, extra, message):
    result = CliRunner().invoke(cli, ["partition", str(cora), "-p", "2", "--method", "modulo-3", *extra, "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and message in result.output, result.output
    assert result.output.count("\n") == 1 and not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_a_stage_of_unknown_length_shows_its_name_and_elapsed_time_not_a_count():
    """KaMinPar and METIS report no progress of their own: their row shows the stage name, a pulse and the
    elapsed time while they run (once `0/?` and 0:00:00 for the whole run), a counted stage its done/total."""
    import io
    import time

    from rich.console import Console

    from gpart.cli.output.ui import RichProgress

    shown = Console(file=io.StringIO(), force_terminal=True, width=160, color_system=None)
    progress = RichProgress()
    with progress.stage("stream: restream", total=8.0) as counted, progress.stage("kaminpar"):
        counted.advance(3)
        time.sleep(1.1)
        shown.print(progress.bar.make_tasks_table(progress.bar.tasks))
    rows = shown.file.getvalue().splitlines()
    kaminpar = next(row for row in rows if "kaminpar" in row)
    assert "0/?" not in kaminpar and re.search(r"0:00:0[1-9]", kaminpar), kaminpar
    assert "3/8" in next(row for row in rows if "restream" in row), rows
