"""The training scripts of examples/ as modules, for the tests that run them (in this process or in gloo workers)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    """examples/<name>.py, imported under a private module name."""
    spec = importlib.util.spec_from_file_location(f"gpart_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
