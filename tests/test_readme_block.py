"""The README runs as written: its demo, then every line of its "Commands" block, in order, in a fresh directory.

Each line runs through bash as a user would type it (comments and quotes as
written), with `gpart`, `python` and `torchrun` bound to this interpreter. A
line must succeed, and a line that writes `-o DIR` (or `--save DIR`) must find
DIR absent first: no line collides with an earlier one or needs --force, and
every input a line reads was made by an earlier line or ships with the
repository (sample_data/, examples/).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SHIPPED = ("sample_data", "examples")  # what a fresh clone holds that the lines read
OUTPUT = re.compile(r"(?:^|\s)(?:-o|--output|--out|--save)\s+(\S+)")


def section(text: str, title: str) -> str:
    """The body of the `## title` section."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"README has no section {title!r}"
    return match[1]


def fenced_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of every fenced code block in `text`."""
    return [(m[1], m[2].splitlines()) for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M)]


def demo_commands(text: str) -> list[str]:
    """The gpart commands of the demo (its `pip install` steps are the set-up, done already)."""
    (lang, lines), *_ = fenced_blocks(section(text, "Install"))
    assert lang == "bash" and len(lines) == 1
    return [c.strip() for c in lines[0].split("&&") if not c.strip().startswith("pip ")]


def command_lines(text: str) -> list[str]:
    blocks = fenced_blocks(section(text, "Commands"))
    assert len(blocks) == 1
    return [line for line in blocks[0][1] if line.strip()]


def shims(bin_dir: Path) -> dict[str, str]:
    """PATH entries that run `gpart`, `python` and `torchrun` with this interpreter (and its installed gpart)."""
    bin_dir.mkdir()
    for name, target in {"gpart": "-m gpart.cli.main", "python": "", "torchrun": "-m torch.distributed.run"}.items():
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\nexec "{sys.executable}" {target} "$@"\n')
        path.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": "1"}


def test_readme_keeps_its_shape():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    install = fenced_blocks(section(text, "Install"))
    assert [lang for lang, _ in install] == ["bash", "bash"] and all(len(lines) == 1 for _, lines in install)  # the two set-up commands


def test_demo_and_commands_block_run_top_to_bottom(tmp_path):
    text = README.read_text()
    work = tmp_path / "clone"
    work.mkdir()
    for name in SHIPPED:
        shutil.copytree(REPO / name, work / name, ignore=shutil.ignore_patterns("__pycache__"))
    env = shims(tmp_path / "bin")
    for line in demo_commands(text) + command_lines(text):
        outputs = [work / o for o in OUTPUT.findall(line.split("#", 1)[0])]
        assert not any(o.exists() for o in outputs), f"{line!r} writes over an earlier line's output: {[str(o) for o in outputs if o.exists()]}"
        proc = subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{line!r} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        assert all(o.is_dir() for o in outputs), f"{line!r} did not write {outputs}"
        if "train_embedding.py" in line:  # the example learns, not only runs (Cora, 3 epochs: about 0.77)
            accuracy = re.search(r"test acc ([0-9.]+)", proc.stdout)
            assert accuracy and float(accuracy[1]) > 0.6, proc.stdout[-2000:]


@pytest.mark.parametrize("line", command_lines(README.read_text()), ids=lambda line: line.split("#")[0].split()[1])
def test_every_gpart_line_uses_options_its_help_lists(line):
    """Placeholders and options as `gpart COMMAND --help` names them (the block test runs them; this names a stale option)."""
    words = line.split("#", 1)[0].split()
    if words[0] != "gpart":
        return
    from click.testing import CliRunner

    from gpart.cli.main import cli

    help_text = CliRunner().invoke(cli, [words[1], "--help"]).output
    assert all(w.split("=")[0] in help_text for w in words[2:] if w.startswith("-")), (line, help_text)


def test_quick_start_train_runs_as_written(tmp_path):
    """The demo's partition, then the quick start's train.py under its torchrun line: it learns, and counts each test node once."""
    text = README.read_text()
    shutil.copytree(REPO / "sample_data", tmp_path / "sample_data", ignore=shutil.ignore_patterns("__pycache__"))
    env = shims(tmp_path / "bin")
    quick_start = section(text, "Quick start: train")
    (lang, script), (shell, launch) = fenced_blocks(quick_start)[:2]
    assert (lang, shell) == ("python", "bash") and len(launch) == 1
    (tmp_path / "train.py").write_text("\n".join(script) + "\n")
    for line in [demo_commands(text)[0], launch[0]]:
        proc = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{line!r} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    accuracy = re.search(r"test accuracy ([0-9.]+) over (\d+) test nodes", proc.stdout)
    assert accuracy, proc.stdout[-2000:]
    assert float(accuracy[1]) > 0.5 and int(accuracy[2]) == 1000, accuracy[0]  # Cora's test mask: 1,000 nodes
