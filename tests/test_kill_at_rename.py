"""Issue 26: every writer, killed at each of its renames, leaves the old result whole or the new one whole.

Each writer first writes an old result, then replaces it with `--force` by a
different new one, while the run is SIGKILLed just before and just after its
k-th rename, for every k (os.rename, os.replace and the rename-exchange of
gpart.formats.files.commit, counted inside the process as benchmarks/kill_trials.py
does). Right after each kill, the files under the result's name, read by name
(every file, byte for byte, as WholeGraph or PyG open them), are exactly the
old result or exactly the new one (both whole through their manifests); where
the file system cannot exchange two names atomically, the name may also be
absent with the old result whole under its hidden `old` name, which the next
run restores. The next run then completes the new result and leaves no work
entry behind.

The runs are forked from one server process that has gpart and torch imported
(interpreter start-up and the torch import would otherwise dominate, at about
a second a run), so the hundred or so kills, each followed by a complete run,
take about 20 s of CPU. Inputs are small: Cora without its feature matrix, a
typed Cora without features, small checkpoints. strace shows the same number of
rename/renameat2 system calls as counted here (partition 2, export-feat --csr 4,
convert --to pyg 3), so no rename escapes the count.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pytest
from test_ckpt import make_run, write_wholegraph

from gpart.base.errors import InputError
from gpart.convert.registry import get_target, target_names, typed_target_names
from gpart.formats.files import commit
from gpart.inspection.result import verify

SAMPLES = Path(__file__).resolve().parents[1] / "sample_data"

# One request per line on stdin: {"args", "k", "mode", "no_exchange", "stderr"}; one answer per line on
# stdout: {"signal", "rc", "renames"}. The child SIGKILLs itself just before / after its k-th rename
# (k = 0: never) and reports how many renames it made; with no_exchange it swaps as on a system
# without rename-exchange (two renames).
SERVER = r"""
import importlib, json, os, pkgutil, signal, sys
import gpart, gpart.cli, gpart.formats
import gpart.formats.files.commit as commit
from gpart.cli.main import main

# every module loaded once here (commands import theirs when they run): the children fork with them
for package in (gpart, gpart.cli, gpart.formats):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if module.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(module.name)
        except Exception:  # an optional dependency that is not installed
            pass

def child(req, report):
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
    calls = [0]
    if req["no_exchange"]:
        commit.exchange_names = lambda a, b: False
    def wrap(fn):
        def counted(*a, **kw):
            calls[0] += 1
            if calls[0] == req["k"] and req["mode"] == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            out = fn(*a, **kw)
            if calls[0] == req["k"] and req["mode"] == "after":
                os.kill(os.getpid(), signal.SIGKILL)
            return out
        return counted
    os.rename, os.replace = wrap(os.rename), wrap(os.replace)
    commit.exchange_names = wrap(commit.exchange_names)
    # A SIGKILL loses nothing the kernel has accepted: flushing to the disk is what a power cut
    # needs, not what these trials check, and it would make them ten times slower
    os.fsync = lambda fd: None
    try:
        rc = main(req["args"])
    except BaseException as exc:
        print(f"child raised {exc!r}", file=sys.stderr)
        rc = 99
    os.write(report, str(calls[0]).encode())
    sys.stderr.flush()
    os._exit(rc)

for line in sys.stdin:
    req = json.loads(line)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        child(req, w)
    os.close(w)
    status = os.waitpid(pid, 0)[1]
    count = os.read(r, 64)
    os.close(r)
    print(json.dumps({"signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0,
                      "rc": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                      "renames": int(count) if count else None}), flush=True)
"""


class ForkServer:
    """Runs `gpart ARGS` in processes forked from one interpreter that has everything imported."""

    def __init__(self, log: Path):
        self.log = log
        self.no_exchange = False
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, args: list, k: int = 0, mode: str = "before") -> dict:
        request = {"args": [str(a) for a in args], "k": k, "mode": mode, "no_exchange": self.no_exchange, "stderr": str(self.log)}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the fork server died"
        return json.loads(line)

    def finish(self, args: list) -> int:
        """Run to completion; the number of renames it made (a failure shows its stderr)."""
        answer = self.run(args)
        assert answer["rc"] == 0, (args, answer, self.log.read_text())
        return answer["renames"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = ForkServer(tmp_path_factory.mktemp("server") / "child.err")
    yield s
    s.close()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Small inputs of every writer, built once."""
    base = tmp_path_factory.mktemp("inputs")
    with np.load(SAMPLES / "cora.npz", allow_pickle=False) as z:  # Cora without its 15 MB feature matrix
        np.savez(base / "cora.npz", **{k: z[k] for k in z.files if k != "feat"})
    with np.load(SAMPLES / "cora_hetero.npz", allow_pickle=False) as z:
        np.savez(base / "typed.npz", **{k: z[k] for k in z.files if k != "paper/feat"})
    from gpart.cli.main import main

    for p in (2, 3):
        assert main(["partition", str(base / "cora.npz"), "-p", str(p), "--method", "range", "-o", str(base / f"parts{p}"), "-q"]) == 0
        assert main(["partition", str(base / "typed.npz"), "-p", str(p), "--method", "range", "-o", str(base / f"typed{p}"), "-q"]) == 0
    make_run(base / "run", 3000, 2, (8,), optimizer="adagrad")
    assert main(["gather-ckpt", str(base / "run"), "-o", str(base / "full"), "-q"]) == 0
    for w in (2, 3):
        (base / f"wg{w}").mkdir()
        write_wholegraph(base / f"wg{w}" / "emb", 3000, 8, w, np.random.default_rng(w))
    return base


def _writers() -> dict[str, Callable[[Path, Path], list[list]]]:
    """Each writer's old and new command (the new one replaces the old with --force), given (inputs, OUT)."""
    def convert(target: str, kind: str) -> Callable:
        return lambda i, o: [["convert", i / f"{kind}{p}", "--to", target, "-o", o, "--force", "-q"] for p in (2, 3)]

    writers = {
        "partition-binary": lambda i, o: [["partition", i / "cora.npz", "-p", p, "--method", "range", "-o", o, "--force", "-q"] for p in (2, 3)],
        "partition-hdf5": lambda i, o: [["partition", i / "cora.npz", "-p", p, "--method", "range", "--format", "hdf5", "-o", o, "--force", "-q"]
                                        for p in (2, 3)],
        "chunk": lambda i, o: [["chunk", i / "cora.npz", "-k", k, "-o", o, "--force", "-q"] for k in (2, 3)],
        "export-feat": lambda i, o: [["export-feat", f"{i / 'cora.npz'}:label", "--name", "label", "--files", f, "-o", o, "--force", "-q"]
                                     for f in (2, 3)],
        "export-feat-csr": lambda i, o: [["export-feat", i / "cora.npz", "--csr", "--files", f, "-o", o, "--force", "-q"] for f in (1, 2)],
        "export-feat-partitions": lambda i, o: [["export-feat", i / f"parts{p}", "--files", p, "-o", o, "--force", "-q"] for p in (2, 3)],
        "gather-ckpt": lambda i, o: [["gather-ckpt", i / "run", "-o", o, "--force", "-q", *npy] for npy in ([], ["--npy"])],
        "scatter-ckpt": lambda i, o: [["scatter-ckpt", i / "full", "-w", w, "-o", o, "--force", "-q"] for w in (2, 3)],
        "import-ckpt": lambda i, o: [["import-ckpt", "--from", "wholegraph", i / f"wg{w}" / "emb", "--num-rows", 3000, "--dim", 8, "-w", w,
                                      "--optimizer", "lazyadam", "-o", o, "--force", "-q"] for w in (2, 3)],
        "export-ckpt-wholegraph": lambda i, o: [["export-ckpt", i / "run", "--to", "wholegraph", "-w", w, "-o", o, "--force", "-q"] for w in (2, 3)],
        "export-ckpt-distdgl": lambda i, o: [["export-ckpt", i / "run", "--to", "distdgl", "-w", w, "-o", o, "--force", "-q"] for w in (2, 3)],
    }
    writers.update({f"convert-{t}": convert(t, "parts") for t in target_names()})
    writers.update({f"convert-{t}-typed": convert(t, "typed") for t in typed_target_names()})
    return writers


WRITERS = _writers()
EXPORT_DIRS = {"export-feat", "export-feat-csr", "export-feat-partitions"}  # OUT holds export sets, swapped one by one


def tree(out: Path, export_dir: bool) -> Optional[dict[str, dict[str, str]]]:
    """What a reader that opens files by name finds under `out`: {unit: {path: sha256}}, the unit being an
    export set's folder (export-feat swaps each set on its own) or the whole result; None when `out` is absent.
    Hidden work entries beside the export sets are not part of any result."""
    if not out.exists():
        return None
    units = [p for p in out.iterdir() if ".gpart-" not in p.name] if export_dir else [out]
    return {u.name: {os.fspath(f.relative_to(u)): hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(u.rglob("*")) if f.is_file()}
            for u in units}


def work_entries(*directories: Path) -> list[str]:
    return sorted(f"{d.name}/{n}" for d in directories if d.is_dir() for n in os.listdir(d) if ".gpart-" in n)


def whole_through_manifest(out: Path) -> None:
    """The result is whole for gpart's own readers: `gpart verify` where it understands the result, the
    chunked-graph reader for chunks, otherwise every file the manifest lists has its size and CRC-32."""
    manifest = json.loads((out / "manifest.json").read_text()) if (out / "manifest.json").exists() else {}
    if manifest.get("format") == "gpart.chunked":
        from gpart.formats.input.chunked import read_chunked_graph

        assert read_chunked_graph(out).num_edges == sum(map(sum, manifest["num_edges_per_chunk"]))
        return
    if manifest.get("format") not in ("gpart.convert", "gpart.ckpt-export"):
        assert verify(out)["ok"], out
        return
    from gpart.bytes.crc import file_crc32

    def entries(obj):
        if isinstance(obj, dict):
            if isinstance(obj.get("file"), str) and "crc32" in obj:
                yield obj
            for value in obj.values():
                yield from entries(value)
        elif isinstance(obj, list):
            for value in obj:
                yield from entries(value)

    listed = list(entries(manifest))
    assert listed, f"{out}/manifest.json lists no file with a crc32"
    for e in listed:
        path = out / e["file"]
        assert f"{file_crc32(path):08x}" == e["crc32"] and path.stat().st_size == e["bytes"], path


def exchange_supported(directory: Path) -> bool:
    a, b = directory / "probe-a", directory / "probe-b"
    a.mkdir(), b.mkdir()
    try:
        return commit.exchange_names(a, b)
    finally:
        a.rmdir(), b.rmdir()


def outcome(state, old, new, out: Path, export_dir: bool, can_exchange: bool) -> str:
    """'old' or 'new' (for export directories: per export set, each one old or new), or, where names
    cannot be exchanged, 'absent' with the old result whole under its hidden name; anything else fails."""
    if state == old:
        return "old"
    if state == new:
        return "new"
    if export_dir:
        parent, expected = out, set(old) | set(new)
        for unit in expected & set(state):
            assert state[unit] in (old.get(unit), new.get(unit)), f"export set {unit} is neither the old one nor the new one"
        missing = expected - set(state)
        if not missing:
            return "each set old or new"
    else:
        parent, missing = out.parent, {out.name}
        assert state is None, f"{out} is neither the old result nor the new one"
    assert not can_exchange, f"{sorted(missing)} absent although names can be exchanged here"
    for unit in missing:
        aside = [p for p in parent.iterdir() if p.name.startswith(f".{unit}.gpart-old-")]
        assert len(aside) == 1 and tree(aside[0], False)[aside[0].name] == old[unit], f"old {unit} is not whole under its old name"
    return "absent, old aside"


# the two-rename swap of systems without rename-exchange, for a result and for export sets
FALLBACK = ["partition-binary", "export-feat-csr"]


@pytest.mark.parametrize("writer,exchange", [(w, True) for w in sorted(WRITERS)] + [(w, False) for w in FALLBACK])
def test_kill_at_every_rename(server, inputs, tmp_path, writer, exchange):
    server.no_exchange = not exchange
    if writer.startswith("convert-"):
        try:
            get_target(writer.split("-")[1]).require()
        except InputError as exc:
            pytest.skip(f"{writer} cannot run here: {exc.problem}")
    export_dir = writer in EXPORT_DIRS
    out, pristine = tmp_path / "out", tmp_path / "pristine" / "out"
    old_args, new_args = WRITERS[writer](inputs, out)
    server.finish(old_args)
    old = tree(out, export_dir)
    whole_through_manifest(out)
    shutil.copytree(out, pristine)
    renames = server.finish(new_args)  # replacing the old result: the renames every killed run makes
    new = tree(out, export_dir)
    whole_through_manifest(out)
    assert old != new and renames >= 1
    can_exchange = exchange and exchange_supported(tmp_path)
    counts = Counter()
    for k in range(1, renames + 1):
        for mode in ("before", "after"):
            shutil.rmtree(out)
            shutil.copytree(pristine, out)
            answer = server.run(new_args, k, mode)
            assert answer["signal"] == signal.SIGKILL, (k, mode, answer, server.log.read_text())
            counts[outcome(tree(out, export_dir), old, new, out, export_dir, can_exchange)] += 1
            counts["trials"] += 1
            server.finish(new_args)  # the next run: completes the new result and sweeps the work entries
            assert tree(out, export_dir) == new, (k, mode)
            assert work_entries(tmp_path, out) == [], (k, mode, work_entries(tmp_path, out))
    print(f"\n{writer}{'' if exchange else ' (no rename-exchange)'}: {renames} renames per run, {dict(counts)}")
