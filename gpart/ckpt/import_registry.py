"""The checkpoint import sources: `gpart import-ckpt --from NAME` offers exactly these, in this order.

Adding a source: one module with an ImportSource subclass (gpart.ckpt.import_source)
and one `register(...)` line below.
"""

from __future__ import annotations

from gpart.base.registry import NamedRegistry
from gpart.ckpt.import_source import ImportSource
from gpart.ckpt.torch_import import TorchImport
from gpart.ckpt.wholegraph_import import WholegraphImport

REGISTRY: NamedRegistry[ImportSource] = NamedRegistry("import source")


def register(source: ImportSource) -> None:
    """Offer `source` as `--from source.name`, after the sources registered before it."""
    REGISTRY.register(source)


def source_names() -> list[str]:
    """The --from choices, in registration order."""
    return REGISTRY.names()


def get_source(name: str) -> ImportSource:
    """The source registered as `name`; a one-line InputError for any other name."""
    return REGISTRY.get(name)


register(WholegraphImport())
register(TorchImport())
