"""The partition methods: `gpart partition --method NAME` offers exactly the listed ones, in this order.

Adding a method: one module with a PartitionMethod subclass (and its options
dataclass, gpart.partition_methods.options) and one `register(...)` line
below. The library (gpart.pipeline.assign.assign, gpart.pipeline.partition.partition_graph,
gpart.pipeline.typed, gpart.distributed), the CLI's --method choices and the
bounded-memory checks all read this registry.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any, Mapping, Optional

import numpy as np

from gpart.base.errors import InputError
from gpart.base.registry import NamedRegistry
from gpart.partition_methods.assignment_method import AssignmentMethod
from gpart.partition_methods.balanced_method import BalancedMethod
from gpart.partition_methods.kaminpar_method import KaminparMethod
from gpart.partition_methods.method import PartitionMethod
from gpart.partition_methods.metis_method import MetisMethod
from gpart.partition_methods.options import MethodOptions, made
from gpart.partition_methods.random_method import RandomMethod
from gpart.partition_methods.range_method import RangeMethod
from gpart.partition_methods.remainder_method import RemainderMethod
from gpart.partition_methods.stream_method import StreamMethod

REGISTRY: NamedRegistry[PartitionMethod] = NamedRegistry("partition method")
DEFAULT_METHOD = "balanced"  # what `gpart partition`, partition_graph and the distributed runner run when no method is named


def register(method: PartitionMethod) -> None:
    """Offer `method` under its name, after the methods registered before it."""
    REGISTRY.register(method)


def method_names() -> list[str]:
    """The --method choices (the listed methods), in registration order."""
    return [name for name, method in REGISTRY.entries.items() if method.listed]


def get_method(name: str, where: Optional[str] = None) -> PartitionMethod:
    """The method registered as `name`; a one-line InputError naming `where` for any other name."""
    return REGISTRY.get(name, where)


def bounded_method_names() -> list[str]:
    """The listed methods that do not hold the whole adjacency (what runs within a small --max-memory)."""
    return [name for name in method_names() if not REGISTRY.entries[name].needs_adjacency]


def option_defaults() -> dict[str, Any]:
    """Every option of the registered methods and its default (the first method declaring it decides)."""
    defaults: dict[str, Any] = {}
    for method in REGISTRY.entries.values():
        for option in fields(method.options_type):
            if option.name not in defaults:
                defaults[option.name] = option.default_factory() if option.default is MISSING else option.default  # type: ignore[misc]
    return defaults


def option_takers(option: str) -> list[str]:
    """The methods that take `option`, in registration order."""
    return [name for name, method in REGISTRY.entries.items() if option in {f.name for f in fields(method.options_type)}]


def given_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options that hold something other than their default (the ones a caller asked for)."""
    defaults = option_defaults()
    return {name: value for name, value in options.items() if name in defaults and not _at_default(value, defaults[name])}


def resolve_method(requested: Optional[str], options: Mapping[str, Any], where: Optional[str]) -> PartitionMethod:
    """The method that runs for `requested` (None: none named) and `options`.

    An option in a method's `selected_by` chooses that method when none is
    named, or in place of a method in its `replaces`; where two are chosen,
    the one that replaces the other wins (an assignment replaces METIS).
    Otherwise the named method, or DEFAULT_METHOD.
    """
    if requested is not None:
        get_method(requested, where)
    given = given_options(options)
    chosen = [m for m in REGISTRY.entries.values() if set(m.selected_by) & set(given) and (requested is None or requested in m.replaces)]
    chosen = [m for m in chosen if not any(m.name in other.replaces for other in chosen)]
    if chosen:
        return chosen[0]
    return REGISTRY.entries[DEFAULT_METHOD if requested is None else requested]


def method_options(method: PartitionMethod, options: Mapping[str, Any], where: Optional[str]) -> MethodOptions:
    """`method`'s options dataclass made from `options`, validated; options of other methods must hold their default.

    A bad value or another method's option is a one-line InputError naming `where`;
    a name no registered method takes is a TypeError (as for any unexpected keyword).
    """
    defaults = option_defaults()
    unknown = [name for name in options if name not in defaults]
    if unknown:
        raise TypeError(f"unknown partition option {unknown[0]!r} (the methods take {', '.join(defaults)})")
    own = {option.name for option in fields(method.options_type)}
    for name in given_options(options):
        if name not in own:
            flag = name.replace("_", "-")
            raise InputError(where, f"--{flag} applies to --method {', '.join(option_takers(name))} only; "
                                    f"it conflicts with method {method.name!r}")
    return made(method.options_type, where, {name: value for name, value in options.items() if name in own})


def _at_default(value: Any, default: Any) -> bool:
    """Whether an option holds its default (None always does; an empty list where the default is one)."""
    if value is None:
        return True
    if default is None or isinstance(value, np.ndarray):
        return False
    if isinstance(default, (list, tuple)):
        return isinstance(value, (list, tuple)) and len(value) == 0
    try:
        return bool(value == default)
    except (TypeError, ValueError):
        return False


register(BalancedMethod())
register(MetisMethod())
register(KaminparMethod())
register(StreamMethod())
register(RemainderMethod())
register(RangeMethod())
register(RandomMethod())
register(AssignmentMethod())
