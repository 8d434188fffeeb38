"""The checkpoint export targets: `gpart export-ckpt --to NAME` offers exactly these, in this order.

Adding a target: one module with an ExportTarget subclass (gpart.ckpt.export_target)
and one `register(...)` line below.
"""

from __future__ import annotations

from gpart.base.registry import NamedRegistry
from gpart.ckpt.distdgl_export import DistdglExport
from gpart.ckpt.export_target import ExportTarget
from gpart.ckpt.wholegraph_export import WholegraphExport

REGISTRY: NamedRegistry[ExportTarget] = NamedRegistry("export target")


def register(target: ExportTarget) -> None:
    """Offer `target` as `--to target.name`, after the targets registered before it."""
    REGISTRY.register(target)


def target_names() -> list[str]:
    """The --to choices, in registration order."""
    return REGISTRY.names()


def get_target(name: str) -> ExportTarget:
    """The target registered as `name`; a one-line InputError for any other name."""
    return REGISTRY.get(name)


register(WholegraphExport())
register(DistdglExport())
