#!/usr/bin/env python3
"""Type-check the lower layers (gpart.base, gpart.bytes, gpart.formats) with mypy.

cli/ and formats/ sit at the top of the repository but are installed as gpart.cli and
gpart.formats (setuptools package-dir, pyproject.toml). The editable install maps them through
an import hook that mypy does not run, so `mypy formats` would name the modules `formats.x`
while the code imports `gpart.formats.x`. This script lays out, in the ignored build/ folder, the
tree the installed package has (gpart/ holding links to the repository's gpart/* entries plus
gpart/cli -> cli and gpart/formats -> formats) and runs mypy over it with MYPYPATH pointing
there, with the settings of [tool.mypy] in pyproject.toml. Reported paths are turned back
into repository paths. The exit status is mypy's.

Usage: python .ci/typecheck.py               the lower layers (LOWER_LAYERS)
       python .ci/typecheck.py ARGS...       mypy ARGS instead of them, e.g. -m gpart.formats.input.npz
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# a fixed place, so that mypy's cache (which records each module's path) stays valid between runs
WORK = REPO / "build" / "typecheck"
# the installed name of each top-level folder that package-dir maps into the gpart namespace
MAPPED_FOLDERS = {"cli": "cli", "formats": "formats"}
# what CI checks: the layers below the operations (DESIGN.md, "Layers")
LOWER_LAYERS = ("gpart.base", "gpart.bytes", "gpart.formats")


def package_links() -> dict[str, Path]:
    """Each entry of the installed gpart/ and the repository path it stands for."""
    links = {entry.name: entry for entry in (REPO / "gpart").iterdir() if entry.name != "__pycache__"}
    for installed, folder in MAPPED_FOLDERS.items():
        links[installed] = REPO / folder
    return links


def build_package_tree(root: Path) -> None:
    """Lay out root/gpart as the installed package looks: links only, nothing copied.

    Idempotent (a second run, even a concurrent one, finds the links in place) and exact (a link
    whose entry left the repository goes)."""
    package = root / "gpart"
    package.mkdir(parents=True, exist_ok=True)
    links = package_links()
    for present in package.iterdir():
        if not present.is_symlink():  # only links belong here
            raise SystemExit(f"{present} is not a link: remove {WORK} and run again")
        if present.name not in links or os.readlink(present) != str(links[present.name]):
            present.unlink(missing_ok=True)  # a concurrent run may have removed it already
    for name, target in links.items():
        link = package / name
        if not link.is_symlink():
            try:
                link.symlink_to(target)
            except FileExistsError:  # a concurrent run made the same link
                pass


def repository_path(line: str) -> str:
    """gpart/formats/x.py:3: error ... -> formats/x.py:3: error ... (the file a developer opens)."""
    for installed, folder in MAPPED_FOLDERS.items():
        prefix = f"gpart/{installed}/"
        if line.startswith(prefix):
            return folder + "/" + line[len(prefix):]
    return line


def main(argv: list[str]) -> int:
    root = WORK / "tree"
    build_package_tree(root)
    env = dict(os.environ, MYPYPATH=str(root))
    command = [
        sys.executable, "-m", "mypy",
        "--config-file", str(REPO / "pyproject.toml"),
        "--cache-dir", str(WORK / "cache"),
        *(argv or [f"--package={package}" for package in LOWER_LAYERS]),
    ]
    # run inside the tree: mypy puts the working directory first on its search path, and the
    # repository root there would offer a gpart/ without cli/ and formats/
    result = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    for line in result.stdout.splitlines():
        print(repository_path(line))
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
