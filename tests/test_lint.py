"""The lint and the type check that .ci/run runs before the tests, run here too, so that a developer
running pytest sees their findings (skipped, with the reason, where ruff or mypy is not installed:
both come with the test extra, `pip install -e ".[test]"`)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TYPECHECK = REPO / ".ci" / "typecheck.py"


def needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (the test extra brings it: pip install -e '.[test]')")


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    needs("ruff")
    result = run(sys.executable, "-m", "ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_lower_layers_type_check():
    needs("mypy")
    result = run(sys.executable, str(TYPECHECK))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout


def test_the_type_check_sees_formats_as_gpart_formats_and_reports_a_mistake():
    """A program importing gpart.formats resolves (formats/ is checked under its installed name) and
    a wrong use of it is an error, not a silent Any: the check has teeth."""
    needs("mypy")
    program = "from gpart.formats.files.arrays import MapMode\nmode: MapMode = 'w+'\n"
    result = run(sys.executable, str(TYPECHECK), "-c", program)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "import-not-found" not in result.stdout and "import-untyped" not in result.stdout, result.stdout
    assert 'Incompatible types in assignment (expression has type "Literal[\'w+\']"' in result.stdout, result.stdout


def test_reported_paths_are_repository_paths():
    spec = importlib.util.spec_from_file_location("typecheck_script", TYPECHECK)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.repository_path("gpart/formats/files/arrays.py:3: error: x") == "formats/files/arrays.py:3: error: x"
    assert script.repository_path("gpart/cli/main.py:1: note: y") == "cli/main.py:1: note: y"
    assert script.repository_path("gpart/bytes/sink.py:9: error: z") == "gpart/bytes/sink.py:9: error: z"
    links = script.package_links()
    assert links["formats"] == REPO / "formats" and links["cli"] == REPO / "cli" and links["base"] == REPO / "gpart" / "base"
