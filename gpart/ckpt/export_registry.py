"""The checkpoint export targets: `gpart export-ckpt --to NAME` offers exactly these, in this order.

Adding a target: one module with an ExportTarget subclass (gpart.ckpt.export_target)
and one `register(...)` line below.
"""

from __future__ import annotations

from gpart.base.errors import InputError
from gpart.ckpt.distdgl_export import DistdglExport
from gpart.ckpt.export_target import ExportTarget
from gpart.ckpt.wholegraph_export import WholegraphExport

TARGETS: dict[str, ExportTarget] = {}


def register(target: ExportTarget) -> None:
    """Offer `target` as `--to target.name`, after the targets registered before it."""
    if target.name in TARGETS:
        raise ValueError(f"export target {target.name!r} is registered twice")
    TARGETS[target.name] = target


def target_names() -> list[str]:
    """The --to choices, in registration order."""
    return list(TARGETS)


def get_target(name: str) -> ExportTarget:
    """The target registered as `name`; a one-line InputError for any other name."""
    if name not in TARGETS:
        raise InputError(None, f"unknown export target {name!r} (expected one of {', '.join(TARGETS)})")
    return TARGETS[name]


register(WholegraphExport())
register(DistdglExport())
