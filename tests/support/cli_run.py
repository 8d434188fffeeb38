"""Run the gpart CLI in-process, as a test sees it: (exit code, stdout, stderr)."""

from __future__ import annotations

from gpart.cli.main import main


def run(capsys, *args) -> tuple[int, str, str]:
    """`gpart ARGS...` through the CLI's main(), with what it printed captured by pytest's `capsys`."""
    capsys.readouterr()
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err
