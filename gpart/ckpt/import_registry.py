"""The checkpoint import sources: `gpart import-ckpt --from NAME` offers exactly these, in this order.

Adding a source: one module with an ImportSource subclass (gpart.ckpt.import_source)
and one `register(...)` line below.
"""

from __future__ import annotations

from gpart.base.errors import InputError
from gpart.ckpt.import_source import ImportSource
from gpart.ckpt.torch_import import TorchImport
from gpart.ckpt.wholegraph_import import WholegraphImport

SOURCES: dict[str, ImportSource] = {}


def register(source: ImportSource) -> None:
    """Offer `source` as `--from source.name`, after the sources registered before it."""
    if source.name in SOURCES:
        raise ValueError(f"import source {source.name!r} is registered twice")
    SOURCES[source.name] = source


def source_names() -> list[str]:
    """The --from choices, in registration order."""
    return list(SOURCES)


def get_source(name: str) -> ImportSource:
    """The source registered as `name`; a one-line InputError for any other name."""
    if name not in SOURCES:
        raise InputError(None, f"unknown import source {name!r} (expected one of {', '.join(SOURCES)})")
    return SOURCES[name]


register(WholegraphImport())
register(TorchImport())
