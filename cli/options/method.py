"""`--method` of the commands that partition: choices, help and the options passed on, read from the
partition-method registry (gpart.partition_methods.registry) when they are needed.

The registry is imported inside these functions, not at the top: `python -m
gpart.distributed --help` and the other commands start without loading the
partitioners (start-up time); a method registered after this module was
imported is offered too.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import click
from click.core import ParameterSource

from gpart.engines.kaminpar import PRESETS as KAMINPAR_PRESETS  # names only: kaminpar itself is imported when it runs

preset_option = click.option(
    "--preset", type=click.Choice(KAMINPAR_PRESETS), default=None,
    help="KaMinPar's context (balanced, kaminpar) [default: fast for balanced, default for kaminpar; terapart, "
         "memory-lean, on the compressed path where only it fits --max-memory]. default: about "
         "1.5x fast's time on large power-law graphs for a cut within 1% there, up to 20% lower on road and grid "
         "graphs; strong: 8-9x the CPU. Each gives the same result for a seed every run on one thread.")


def imbalance_help() -> str:
    """--imbalance: what it bounds and each method's own default (the methods' DEFAULT_IMBALANCE)."""
    from gpart.partition_methods.registry import REGISTRY  # start-up time (module docstring)

    defaults = [f"{m.name} {m.options_type.DEFAULT_IMBALANCE:g}" for m in REGISTRY.entries.values()
                if m.listed and hasattr(m.options_type, "DEFAULT_IMBALANCE")]
    return ("Load-imbalance tolerance: parts may hold this fraction more than the average of each balanced share "
            f"(0.03 = 3%) [default: {', '.join(defaults)}].")


class MethodChoice(click.Choice):
    """--method's choices: the registry's listed methods, in registration order."""

    def __init__(self) -> None:  # no fixed choices: the registry is the list
        self.case_sensitive = True

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        from gpart.partition_methods.registry import method_names  # start-up time (module docstring)

        return tuple(method_names())


class DescribedOption(click.Option):
    """An option whose help text is written when it is shown, by `describe()`."""

    def __init__(self, *args: Any, describe: Callable[[], str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.describe = describe

    def get_help_record(self, ctx: click.Context) -> Optional[tuple[str, str]]:
        self.help = self.describe()
        return super().get_help_record(ctx)


imbalance_option = click.option("--imbalance", type=float, default=None, cls=DescribedOption, describe=imbalance_help)


def method_help() -> str:
    """`gpart partition --method`: each listed method's summary, then the options that replace the method."""
    from gpart.partition_methods.registry import REGISTRY  # start-up time (module docstring)

    listed = [f"{m.name}: {m.summary}" for m in REGISTRY.entries.values() if m.listed]
    replacing = [f"--{option.replace('_', '-')} replaces the method." for m in REGISTRY.entries.values() if not m.listed for option in m.selected_by]
    return " ".join(listed + replacing)


def distributed_method_help() -> str:
    """`python -m gpart.distributed partition --method`: where each listed method runs, and the default."""
    from gpart.partition_methods.registry import DEFAULT_METHOD, REGISTRY  # start-up time (module docstring)

    local = [m.name for m in REGISTRY.entries.values() if m.listed and not m.needs_edges]
    gathered = [m.name for m in REGISTRY.entries.values() if m.listed and m.needs_edges]
    return (f"{'/'.join(local)}: computed on every rank; {'/'.join(gathered)}: the graph is gathered on rank 0 "
            f"(it must fit there). Default: {DEFAULT_METHOD}, as gpart partition.")


def given_method_options(ctx: click.Context) -> dict[str, Any]:
    """The method options given on the command line (not left at their defaults), as the library takes them."""
    from gpart.partition_methods.registry import option_defaults  # start-up time (module docstring)

    names = option_defaults()
    return {name: value for name, value in ctx.params.items()
            if name in names and ctx.get_parameter_source(name) is not ParameterSource.DEFAULT}
