"""Several ranks per machine with one directory per machine (SPEC.md 10.4): 4 gloo ranks on 127.0.0.1, ranks
0 and 1 on "host" h0, ranks 2 and 3 on h1, each host holding only the chunks its ranks read and getting only
its ranks' partitions; the union is the single-machine result. The same for gather-ckpt and scatter-ckpt."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from support.gloo_processes import run_distributed
from test_distributed_local import rank_files

from gpart.base.errors import OutputError
from gpart.distributed.sharing import groups_from_views
from gpart.formats.input.chunked import write_chunked
from gpart.formats.input.readers import read_graph
from gpart.pipeline.partition import partition_graph

REPO = Path(__file__).resolve().parents[1]
CORA = REPO / "sample_data" / "cora.npz"
WORLD, PER_HOST = 4, 2


def host_of(rank: int) -> str:
    return f"h{rank // PER_HOST}"


def hosts(tmp: Path) -> Path:
    """h0/chunks (whole, then pruned to ranks 0 and 1's files) and h1/chunks (ranks 2 and 3's files)."""
    full = tmp / "h0" / "chunks"
    write_chunked(read_graph(CORA), full, 6)
    keep: dict[str, set[Path]] = {"h0": set(), "h1": set()}
    for rank in range(WORLD):
        keep[host_of(rank)] |= set(rank_files(full, rank, WORLD)) | {full / "manifest.json"}
    for f in keep["h1"]:
        (tmp / "h1" / "chunks" / f.relative_to(full)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, tmp / "h1" / "chunks" / f.relative_to(full))
    return full


def prune(full: Path, keep: set[Path]) -> None:
    for f in [p for p in full.rglob("*") if p.is_file() and p not in keep]:
        f.unlink()


def _partition(rank: int, world_size: int, base: str, parts: int, method: str, params: dict):
    from gpart.distributed.partition_chunks import partition_chunks

    os.chdir(Path(base) / host_of(rank))  # the same relative paths name each host's directories
    return partition_chunks("chunks", "parts", parts, method, max_message=1 << 16, timeout_s=60, **params).manifest["num_parts"]


@pytest.mark.parametrize("parts, method, halo", [(4, "random", 1), (6, "remainder", 0)])
def test_two_hosts_of_two_ranks_each_write_their_ranks_partitions(tmp_path, parts, method, halo):
    import gpart.runtime as gr
    from gpart.inspection.result import verify

    full = hosts(tmp_path)
    cwd = os.getcwd()
    try:  # the manifest records the input as given: the same relative "chunks" as the ranks'
        os.chdir(tmp_path / "h0")
        partition_graph("chunks", "single", parts, method, halo=halo, seed=2)
    finally:
        os.chdir(cwd)
    single = tmp_path / "h0" / "single"
    prune(full, {f for r in (0, 1) for f in rank_files(full, r, WORLD)} | {full / "manifest.json"})
    assert run_distributed(_partition, WORLD, str(tmp_path), parts, method, {"halo": halo, "seed": 2},
                           timeout_s=180) == [parts] * WORLD
    union: set[str] = set()
    for h, ranks in (("h0", (0, 1)), ("h1", (2, 3))):
        out = tmp_path / h / "parts"
        files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
        assert {int(f.split("/")[0][5:]) for f in files if f.startswith("part_")} == {p for p in range(parts) if p % WORLD in ranks}
        for f in files:  # the book and the manifest too: the single machine's bytes
            assert (out / f).read_bytes() == (single / f).read_bytes(), f
        union |= set(files)
        for rank in ranks:
            assert gr.load_partition(out, rank).num_owned > 0
        mine = [p for p in range(parts) if p % WORLD in ranks]  # the host's own partitions verify there
        report = verify(out, parts=mine)
        assert report["ok"] and report["checked"]["invariants"], report
    assert sorted(union) == sorted(str(p.relative_to(single)) for p in single.rglob("*") if p.is_file())
    assert not [p for h in ("h0", "h1") for p in (tmp_path / h).iterdir() if ".gpart-" in p.name]


def _scatter(rank: int, world: int, base: str, target: int) -> None:
    from gpart.ckpt.distributed_reshard import scatter_ckpt

    os.chdir(Path(base) / host_of(rank))
    scatter_ckpt("full", "run", target, "remainder")


def _gather(rank: int, world: int, base: str) -> None:
    from gpart.ckpt.distributed_reshard import gather_ckpt

    os.chdir(Path(base) / host_of(rank))
    gather_ckpt("run", "full2", max_message=5000)


def test_checkpoint_scatter_and_gather_with_two_ranks_per_host(tmp_path):
    from test_ckpt import make_run

    from gpart.ckpt import gather_checkpoint, scatter_checkpoint

    make_run(tmp_path / "src", 501, 3, row_shape=(3,), optimizer="adam")
    gather_checkpoint(tmp_path / "src", tmp_path / "h0" / "full")
    shutil.copytree(tmp_path / "h0" / "full", tmp_path / "h1" / "full")  # FULL readable on every machine
    scatter_checkpoint(tmp_path / "h0" / "full", tmp_path / "single", 6, "remainder")
    run_distributed(_scatter, WORLD, str(tmp_path), 6, timeout_s=180)
    union = {}
    for h, ranks in (("h0", (0, 1)), ("h1", (2, 3))):
        out = tmp_path / h / "run"
        shards = [p.name for p in out.iterdir() if p.name != "manifest.json"]
        assert {int(n.split("_part_")[1].split("_of_")[0]) % WORLD for n in shards} == set(ranks)
        assert (out / "manifest.json").read_bytes() == (tmp_path / "single" / "manifest.json").read_bytes()
        union.update({p.name: p.read_bytes() for p in out.iterdir()})
    assert union == {p.name: p.read_bytes() for p in (tmp_path / "single").iterdir()}
    # and back: each host's run holds its ranks' shards (s % 4 in its ranks); FULL is written on h0 only
    run_distributed(_gather, WORLD, str(tmp_path), timeout_s=180)
    for p in (tmp_path / "h0" / "full").iterdir():  # the data; the JSON files name their source (src/ against run)
        if p.suffix == ".json":
            continue
        assert (tmp_path / "h0" / "full2" / p.name).read_bytes() == p.read_bytes(), p.name
    assert not (tmp_path / "h1" / "full2").exists()


def test_sharing_views_that_are_no_grouping_are_one_line_errors():
    assert groups_from_views(np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]], bool), "parts") == [[0, 1], [2, 3]]
    assert groups_from_views(np.eye(3, dtype=bool), "parts") == [[0], [1], [2]]
    assert groups_from_views(np.ones((3, 3), dtype=bool), "parts") == [[0, 1, 2]]
    bad = {
        "rank 1 sees rank 0's output directory but rank 0 does not see rank 1's": [[1, 0], [1, 1]],
        "ranks 0 and 1 share an output directory but only one of them shares it with rank 2": [[1, 1, 0], [1, 1, 1], [0, 1, 1]],
        "rank 1 does not see the file it created": [[1, 0], [0, 0]],
    }
    for message, views in bad.items():
        with pytest.raises(OutputError, match=message) as info:
            groups_from_views(np.array(views, bool), "parts")
        assert "\n" not in info.value.one_line()


def test_verify_parts_checks_a_per_machine_directory_and_refuses_what_it_cannot(tmp_path, capsys):
    from support.cli_run import run

    out = tmp_path / "parts"
    partition_graph(CORA, out, 4, "random")
    for p in (2, 3):  # as another machine holds them
        shutil.rmtree(out / f"part_{p}")
    assert run(capsys, "verify", out)[0] == 1  # the whole result: damaged
    rc, stdout, _ = run(capsys, "verify", out, "--parts", "0,1")
    assert rc == 0 and "partitions [2, 3] not checked (--parts)" in stdout, stdout
    (out / "part_1" / "indptr.bin").write_bytes(b"\0" * (out / "part_1" / "indptr.bin").stat().st_size)
    assert run(capsys, "verify", out, "--parts", "0,1")[0] == 1  # its own partitions are checked
    for args, says in ((["--parts", "0,7"], "--parts must name partitions 0..3, got [0, 7]"),
                       (["--parts", "0", "--graph", CORA], "--graph needs every partition")):
        rc, _, err = run(capsys, "verify", out, *args)
        assert rc == 2 and err.count("\n") == 1 and says in err, err


class _Slow:
    """A partition method that thinks for `seconds` before assigning (rank 0 runs it: gathered methods)."""

    def __init__(self, method, seconds: float):
        self.method, self.seconds = method, seconds

    def __getattr__(self, name: str):
        return getattr(self.method, name)

    def assign(self, *args, **kwargs):
        import time

        time.sleep(self.seconds)
        return self.method.assign(*args, **kwargs)


def _slow_book(rank: int, world_size: int, base: str) -> tuple[list[str], float]:
    """Partition with rank 0 computing the book for 4 s while the others wait (issue 42's healthy --quiet run)."""
    import logging
    import time

    from gpart.distributed.partition_chunks import partition_chunks
    from gpart.partition_methods import registry

    registry.REGISTRY.entries["metis"] = _Slow(registry.REGISTRY.entries["metis"], 4.0)
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logging.getLogger("gpart.collectives").addHandler(Keep())
    start = time.monotonic()
    partition_chunks(Path(base) / "chunks", Path(base) / f"parts{rank}", 2, "metis", timeout_s=60)
    return lines, time.monotonic() - start


def test_a_healthy_run_whose_rank_0_computes_the_book_prints_no_wait_warning(tmp_path):
    write_chunked(read_graph(CORA), tmp_path / "chunks", 2)
    results = run_distributed(_slow_book, 2, str(tmp_path), timeout_s=180)
    assert all(seconds >= 4.0 for _, seconds in results), results  # rank 1 did wait for rank 0's book
    assert [lines for lines, _ in results] == [[], []]
