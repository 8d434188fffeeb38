"""gpart: graph partitions, feature exports and embedding checkpoints for multi-GPU GNN training.

The library does all the work; `gpart.cli` only parses, calls and prints.
`gpart.runtime` is what a training script imports.
"""

import sys as _sys
from importlib.util import spec_from_file_location as _spec_from_file_location
from pathlib import Path as _Path

from gpart.base.errors import GpartError, InputError
from gpart.base.version import __version__
__all__ = ["GpartError", "InputError", "__version__"]


class _SourceCheckoutFinder:
    """Finds exactly `gpart.cli` and `gpart.formats` in a source checkout's top-level cli/ and formats/."""

    def __init__(self, root: _Path):
        self.root = root

    def find_spec(self, fullname: str, path=None, target=None):
        sub = {"gpart.cli": "cli", "gpart.formats": "formats"}.get(fullname)
        if sub is None:
            return None
        folder = self.root / sub
        return _spec_from_file_location(fullname, folder / "__init__.py", submodule_search_locations=[str(folder)])


def _map_source_checkout() -> None:
    # An installed gpart has gpart/cli and gpart/formats (pyproject's package-dir
    # maps the repository's top-level cli/ and formats/ there). When Python
    # imports gpart straight from a source checkout instead (scripts or
    # `python -m pytest` run in the repository root), let the package find those
    # two folders beside it, and nothing else of the repository root (no
    # `gpart.tests`, no `gpart.benchmarks`), so both ways of running behave the same.
    here = _Path(__file__).resolve().parent
    root = here.parent
    if (here / "formats").is_dir() or not (root / "pyproject.toml").is_file():
        return
    if (root / "formats" / "__init__.py").is_file() and (root / "cli" / "__init__.py").is_file():
        if not any(isinstance(f, _SourceCheckoutFinder) for f in _sys.meta_path):
            _sys.meta_path.insert(0, _SourceCheckoutFinder(root))


_map_source_checkout()
