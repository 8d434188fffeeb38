"""A gpart error inside a training script under torchrun: one line per failing rank (in torchrun's failure
summary, through the error file it reads), no traceback from any rank (issue 42). Cases: 3 ranks on 2
partitions, a bad fanout, batch_size=0, a wrong data key; with gr.record and with the hook alone."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.gloo_processes import free_port

import gpart.runtime as gr
from gpart.base.errors import InputError
from gpart.pipeline.partition import partition_graph

HERE = Path(__file__).resolve().parent
CORA = HERE.parent / "sample_data" / "cora.npz"


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rank_errors") / "parts"
    partition_graph(CORA, out, 2, "remainder")
    return out


def _torchrun(nproc: int, *argv: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
           "--master-port", str(free_port()), *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.parametrize("nproc, case, entry, says", [
    (3, "ranks", "record", "has 2 partitions but the job has 3 ranks"),
    (2, "fanout", "hook", "fanouts must be a non-empty list of positive integers or -1, got [5, 0]"),
    (2, "batch", "record", "batch_size must be >= 1, got 0"),
    (2, "key", "hook", "no node data 'features' loaded"),
])
def test_a_gpart_error_under_torchrun_is_one_line_per_failing_rank(parts, nproc, case, entry, says):
    done = _torchrun(nproc, str(HERE / "support" / "torchrun_errors.py"), str(parts), case, entry)
    err = done.stderr
    assert done.returncode != 0
    codes = {int(r): int(c) for r, c in re.findall(r"rank\s+: (\d+) \(local_rank: \d+\)\n\s+exitcode\s+: (-?\d+)", err)}
    assert any(c > 0 for c in codes.values()), err
    for rank in range(nproc):  # a failing rank's line once (torchrun's summary); a rank torchrun stopped at most once
        assert err.count(f"error: rank {rank}: ") == 1 if codes.get(rank, 0) > 0 else err.count(f"error: rank {rank}: ") <= 1, err
    assert all(says in line for line in err.splitlines() if "error: rank" in line), err
    # no traceback from any rank: the one traceback left is torchrun's own (its ChildFailedError), in torch's files
    assert err.count("Traceback (most recent call last)") <= 1, err
    frames = re.findall(r'File "([^"]+)"', err)
    assert not [f for f in frames if "torch" not in f and "runpy" not in f], frames
    assert len(err.splitlines()) < 35 + 7 * nproc, err


def test_a_distributed_command_under_torchrun_is_one_line_per_failing_rank(tmp_path):
    done = _torchrun(2, "-m", "gpart.distributed", "partition", str(tmp_path / "absent"), "--parts", "2", "-o", str(tmp_path / "out"),
                     "--timeout", "30")
    err = done.stderr
    assert done.returncode != 0 and not (tmp_path / "out").exists()
    assert err.count("error: rank 0: ") + err.count("error: rank 1: ") >= 1, err
    # the rank's own line and torchrun's summary of it (a distributed command keeps the first: see _reported)
    assert all(err.count(f"error: rank {r}: ") <= 2 for r in (0, 1)), err
    assert "To enable traceback" not in err.split("Root Cause")[-1], err  # the root cause shows gpart's line
    assert not [f for f in re.findall(r'File "([^"]+)"', err) if "torch" not in f and "runpy" not in f], err


def test_record_without_torchrun_prints_one_line_and_exits_with_the_code(monkeypatch, capsys, tmp_path):
    @gr.record
    def bad() -> None:
        raise InputError("parts/", "something is wrong")

    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(SystemExit) as info:
        bad()
    assert info.value.code == 2 and capsys.readouterr().err == "error: rank 3: parts/: something is wrong\n"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "error.json"))
    with pytest.raises(SystemExit):
        bad()
    assert capsys.readouterr().err == ""  # torchrun's summary shows it, from the file
    data = json.loads((tmp_path / "error.json").read_text())
    assert data["message"]["extraInfo"]["py_callstack"] == "error: rank 3: parts/: something is wrong"

    @gr.record
    def bug() -> None:
        raise ZeroDivisionError("not gpart's")

    with pytest.raises(ZeroDivisionError):  # a bug keeps its traceback (and torch's error file)
        bug()
    assert "ZeroDivisionError" in json.loads((tmp_path / "error.json").read_text())["message"]["message"]
