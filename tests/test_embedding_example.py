"""examples/train_embedding.py in one process (the README block runs it on 2 ranks): it trains, saves a
checkpoint the gpart commands read, and reports a bad --parts in one line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from support.cli_run import run

from gpart.pipeline.partition import partition_graph

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "examples" / "train_embedding.py"


def train(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=600)


def test_one_process_trains_and_saves_a_checkpoint(tmp_path, capsys):
    partition_graph(REPO / "sample_data" / "cora.npz", tmp_path / "whole", 1, "random", add_reverse=True)
    proc = train("--parts", tmp_path / "whole", "--save", tmp_path / "run", "--epochs", 2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    accuracy = re.search(r"test acc ([0-9.]+); saved node_emb \(2708 x 16, SparseAdam states\) from 1 rank to ", proc.stdout)
    assert accuracy and float(accuracy[1]) > 0.5, proc.stdout
    rc, out, err = run(capsys, "verify", tmp_path / "run")
    assert rc == 0, err
    assert run(capsys, "gather-ckpt", tmp_path / "run", "-o", tmp_path / "full", "-q")[0] == 0
    assert sorted(p.name for p in (tmp_path / "full").glob("*.json")) == [
        "manifest.json", "node_emb.exp_avg.json", "node_emb.exp_avg_sq.json", "node_emb.json", "node_emb.step.json"]


def test_a_missing_partition_is_one_line(tmp_path):
    proc = train("--parts", tmp_path / "absent", "--save", tmp_path / "run")
    assert proc.returncode == 2 and proc.stderr.splitlines() == [f"error: {tmp_path / 'absent'}: no such directory"], proc.stderr
    assert not (tmp_path / "run").exists()
