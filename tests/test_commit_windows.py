"""Issue 15, findings 3, 4, 5 and part of 9: --force keeps a complete result at every moment,
swaps never leave OUT absent, leftovers of dead processes are swept, signals clean up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from support.public_data import ROAD_NY

from gpart.base import work_paths
from gpart.base.errors import Interrupted
from gpart.cli.main import main
from gpart.formats.files import commit
from gpart.formats.files.scratch import ScratchDir
from gpart.inspection.result import verify

ROOT = Path(__file__).resolve().parents[1]
CORA = ROOT / "sample_data" / "cora.npz"
sys.path.insert(0, str(ROOT / "benchmarks"))
import kill_trials  # noqa: E402


def run(*args) -> int:
    return main([str(a) for a in args])


def hidden(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if ".gpart-" in n)


def test_swap_exchanges_names_and_leaves_nothing(tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert run("partition", CORA, "-p", "2", "--method", "range", "-o", out, "-q") == 0
    calls = []
    real = commit.exchange_names
    monkeypatch.setattr(commit, "exchange_names", lambda a, b: calls.append((a, b)) or real(a, b))
    assert run("partition", CORA, "-p", "3", "--method", "range", "-o", out, "--force", "-q") == 0
    assert len(calls) == 1 and json.loads((out / "manifest.json").read_text())["num_parts"] == 3
    assert hidden(tmp_path) == []


def test_swap_fallback_when_exchange_is_unsupported(tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert run("partition", CORA, "-p", "2", "--method", "range", "-o", out, "-q") == 0
    monkeypatch.setattr(commit, "exchange_names", lambda a, b: False)
    assert run("partition", CORA, "-p", "3", "--method", "range", "-o", out, "--force", "-q") == 0
    assert verify(out)["ok"] and json.loads((out / "manifest.json").read_text())["num_parts"] == 3
    assert hidden(tmp_path) == []


def test_interrupted_fallback_swap_is_named_then_restored(tmp_path, capsys, dead_pid):
    out = tmp_path / "out"
    assert run("partition", CORA, "-p", "2", "--method", "range", "-o", out, "-q") == 0
    # what a kill between the fallback's two renames leaves: OUT absent, the old result hidden
    old = tmp_path / f".out.gpart-old-{dead_pid}-0123abcd"
    os.rename(out, old)
    (tmp_path / f".out.gpart-staging-{dead_pid}-4567abcd").mkdir()
    capsys.readouterr()
    for command in ("info", "verify"):
        assert run(command, out) == 2
        err = capsys.readouterr().err
        assert "interrupted" in err and str(old) in err
    assert run("partition", CORA, "-p", "3", "--method", "range", "-o", out, "-q") == 2  # restored, so it exists
    assert "already exists" in capsys.readouterr().err
    assert verify(out)["ok"] and json.loads((out / "manifest.json").read_text())["num_parts"] == 2
    assert hidden(tmp_path) == []


def test_stale_work_of_dead_processes_is_swept_live_work_kept(tmp_path, dead_pid):
    out = tmp_path / "out"
    assert run("partition", CORA, "-p", "2", "--method", "range", "-o", out, "-q") == 0
    stale = [tmp_path / f".out.gpart-staging-{dead_pid}-aaaaaaaa", tmp_path / f".out.gpart-old-{dead_pid}-bbbbbbbb"]
    live = tmp_path / f".out.gpart-staging-{os.getppid()}-cccccccc"
    for d in [*stale, live]:
        d.mkdir()
        (d / "x.bin").write_bytes(b"x" * 100)
    (tmp_path / f".manifest.json.gpart-tmp-{dead_pid}-dddddddd").write_text("{}")  # another target: not ours to sweep
    assert run("partition", CORA, "-p", "3", "--method", "range", "-o", out, "--force", "-q") == 0
    assert hidden(tmp_path) == sorted([live.name, f".manifest.json.gpart-tmp-{dead_pid}-dddddddd"])


def test_export_force_keeps_the_old_export_until_the_new_one_is_committed(tmp_path):
    """Kill export-feat --force at every rename: the export is intact (old or new) or its commit
    record completes it; the old JSON is never removed before the record exists (finding 3)."""
    wg = tmp_path / "wg"
    command = lambda files: ["export-feat", f"{CORA}:label", "--name", "feat", "-o", str(wg), "--files", str(files), "--force", "-q"]  # noqa: E731
    assert kill_trials.run_child(command(2)).returncode == 0
    renames = int(kill_trials.run_child(command(3)).stderr.rsplit("renames=", 1)[1])
    s = kill_trials.Scenario("export-feat", wg, [], export_dir=True)
    for k in range(1, renames + 1):
        for mode in ("before", "after"):
            files = 2 + (k % 2)
            assert kill_trials.run_child(command(files), k, mode).returncode == -signal.SIGKILL
            if not s.intact():
                assert not s.looks_complete()
                s.recover()
            assert s.intact(), (k, mode)
            shape = json.loads((wg / "feat" / "feat.json").read_text())["num_files"]
            assert shape in (2, 3)
            assert kill_trials.run_child(command(files)).returncode == 0
            assert s.leftovers() == [] and os.listdir(wg) == ["feat"]
            assert sorted(os.listdir(wg / "feat")) == sorted(["feat.json", *[f"feat_part_{i}_of_{files}" for i in range(files)]])


def test_sigterm_cleans_up_and_exits_143(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "gpart.cli.main", "export-feat", f"{CORA}:feat", "-o", str(out), "--files", "64"],
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not (out.exists() and hidden(out)) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the export finished before the signal arrived")
    assert proc.returncode == 143 and err.strip().splitlines()[-1] == "interrupted by SIGTERM"
    # the signal unwinds the run (nothing left), or, arriving during the commit, waits for it to finish
    export = kill_trials.Scenario("export-feat", out, [], export_dir=True)
    assert not out.exists() or os.listdir(out) == [] or (export.intact() and export.leftovers() == [])


@pytest.mark.parametrize("interruption, code", [(lambda: Interrupted(signal.SIGTERM), 143), (KeyboardInterrupt, 130)])
def test_interruption_as_a_stage_is_handed_over_leaves_nothing(tmp_path, monkeypatch, interruption, code):
    """The window CI met: a signal (or Ctrl-C) lands after staged_output() made its folder and before the
    caller's ExitStack took charge of it. The suspended writer is kept alive here (as the
    interrupted run's exception chains keep it until exit); the command line still removes it."""
    from gpart.formats.filelist import sets as filelist_sets

    real, suspended = filelist_sets.staged_output, []

    class SignalOnEnter:
        def __init__(self, *args):
            self.inner = real(*args)
            suspended.append(self.inner)

        def __enter__(self):
            self.inner.__enter__()
            raise interruption()

        def __exit__(self, *exc):
            return self.inner.__exit__(*exc)

    monkeypatch.setattr(filelist_sets, "staged_output", SignalOnEnter)
    out = tmp_path / "out"
    assert run("export-feat", f"{CORA}:feat", "-o", out, "--files", "4", "-q") == code
    assert len(suspended) == 1
    assert not out.exists() or os.listdir(out) == []
    assert work_paths._held == {}


def test_scratch_dir_made_before_its_with_block_is_removed_after_an_interruption(tmp_path):
    """ScratchDir records its directory as it makes it: entered but never left (the signal landed before
    the `with` took charge), remove_abandoned() finds and removes it; left normally, nothing stays recorded."""
    scratch = ScratchDir(tmp_path).__enter__()
    assert scratch.path.is_dir() and work_paths.remove_abandoned() == [scratch.path]
    assert os.listdir(tmp_path) == [] and work_paths._held == {}
    with ScratchDir(tmp_path) as scratch:
        assert scratch.path in work_paths._held
    assert work_paths._held == {} and work_paths.remove_abandoned() == []
    with ScratchDir(tmp_path) as outer:  # a caller's own directory survives a command run meanwhile
        assert run("info", tmp_path / "missing") == 2
        assert outer.path.is_dir()


def test_sigterm_during_metis_is_an_interruption(tmp_path):
    road = ROAD_NY
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "gpart.cli.main", "partition", str(road), "-p", "64", "--trials", "40", "-o", str(out)],
                            stderr=subprocess.PIPE, text=True)
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    started: list = []
    while not started and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)  # METIS runs in a forked child (gpart.engines.isolate): wait until it does
        started = parent.children()
    # recorded, not asked again: one trial's child may end before the next starts (seen under load)
    assert started, "METIS never started"
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "METIS failed" not in err and err.strip().splitlines()[-1] == "interrupted by SIGTERM"
    assert os.listdir(tmp_path) == []


def test_output_symlink_with_force_replaces_the_target_and_keeps_the_link(tmp_path):
    real = tmp_path / "real"
    assert run("partition", CORA, "-p", "2", "--method", "range", "-o", real, "-q") == 0
    link = tmp_path / "link"
    link.symlink_to(real)
    assert run("partition", CORA, "-p", "3", "--method", "range", "-o", link, "--force", "-q") == 0
    assert link.is_symlink() and json.loads((link / "manifest.json").read_text())["num_parts"] == 3
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]


def test_fifo_input_is_refused_not_waited_on(tmp_path, capsys):
    fifo = tmp_path / "g.npz"
    os.mkfifo(fifo)
    assert run("partition", fifo, "-p", "2", "-o", tmp_path / "out") == 2
    assert "not a regular file" in capsys.readouterr().err
    os.mkfifo(tmp_path / "f.npy")
    assert run("export-feat", tmp_path / "f.npy", "-o", tmp_path / "wg") == 2
    assert "not a regular file" in capsys.readouterr().err
    os.mkfifo(tmp_path / "r_0.pt")
    assert run("import-ckpt", "--from", "torch", tmp_path / "r_0.pt", "-o", tmp_path / "ck") == 2
    assert "not a regular file" in capsys.readouterr().err


def test_hdf5_result_reading_outside_itself_is_refused(tmp_path, capsys):
    import h5py
    import numpy as np

    out = tmp_path / "h5"
    assert run("partition", CORA, "-p", "2", "--method", "range", "--format", "hdf5", "-o", out, "-q") == 0
    (tmp_path / "secret.bin").write_bytes(np.arange(2708, dtype=np.int64).tobytes())
    with h5py.File(out / "partitions.h5", "a") as h5:
        entry = json.loads(h5.attrs["manifest"])  # unchanged; only the datasets are redirected
        del h5["part_0/node_data/label"]
        h5.create_dataset("part_0/node_data/label", shape=(1354,), dtype="<i8", external=[(str(tmp_path / "secret.bin"), 0, 1354 * 8)])
        del h5["part_1/node_data/label"]
        h5["part_1/node_data/label"] = h5py.SoftLink("/part_0/node_data/label")
    assert entry["format"] == "gpart.partition"
    capsys.readouterr()
    assert run("verify", out) == 1
    report = capsys.readouterr().out
    assert "external or virtual" in report or "SoftLink" in report
    assert run("export-feat", out, "--name", "label", "-o", tmp_path / "wg", "-q") == 1
    assert not (tmp_path / "wg").exists()


def test_binary_result_with_a_symlinked_file_is_refused(tmp_path, capsys):
    out = tmp_path / "p"
    assert run("partition", CORA, "-p", "2", "--method", "range", "-o", out, "-q") == 0
    target = out / "part_0" / "node_data" / "label.bin"
    (tmp_path / "elsewhere.bin").write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(tmp_path / "elsewhere.bin")
    capsys.readouterr()
    assert run("verify", out) == 1
    assert "symbolic link" in capsys.readouterr().out


def test_a_signal_during_a_commit_takes_effect_after_it():
    from gpart.base.errors import Interrupted, raise_interrupted, uninterrupted

    done = []
    with pytest.raises(Interrupted) as caught:
        with uninterrupted():
            raise_interrupted(signal.SIGTERM)  # what the handler does when SIGTERM arrives here
            done.append("commit finished")
    assert done == ["commit finished"] and caught.value.signum == signal.SIGTERM
    with pytest.raises(Interrupted):
        raise_interrupted(signal.SIGTERM)  # outside a commit: at once
