"""The conversion targets: `gpart convert --to NAME` offers exactly these, in this order.

Adding a target: one module with a ConvertTarget subclass (gpart.convert.target)
and one `register(...)` line below.
"""

from __future__ import annotations

from gpart.base.registry import NamedRegistry
from gpart.convert.dgl_target import DglTarget
from gpart.convert.glt_target import GltTarget
from gpart.convert.pyg_target import PygTarget
from gpart.convert.target import ConvertTarget

REGISTRY: NamedRegistry[ConvertTarget] = NamedRegistry("conversion target", unknown="target")


def register(target: ConvertTarget) -> None:
    """Offer `target` as `--to target.name`, after the targets registered before it."""
    REGISTRY.register(target)


def target_names() -> list[str]:
    """The --to choices, in registration order."""
    return REGISTRY.names()


def get_target(name: str) -> ConvertTarget:
    """The target registered as `name`; a one-line InputError for any other name."""
    return REGISTRY.get(name)


def typed_target_names() -> list[str]:
    """The targets that write a typed layout (accepts_typed), in registration order."""
    return [name for name, target in REGISTRY.entries.items() if target.accepts_typed]


register(PygTarget())
register(GltTarget())
register(DglTarget())
