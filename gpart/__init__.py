"""gpart: graph partitions, feature exports and embedding checkpoints for multi-GPU GNN training.

The library does all the work; `gpart.cli` only parses, calls and prints.
`gpart.runtime` is what a training script imports. The repository's top-level
cli/ and formats/ folders are the packages gpart.cli and gpart.formats through
setuptools' `package-dir` (pyproject.toml): a checkout runs through
`pip install -e .`.
"""

from gpart.base.errors import GpartError, InputError
from gpart.base.version import __version__

__all__ = ["GpartError", "InputError", "__version__"]
