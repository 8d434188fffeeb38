"""The options of partition methods: one dataclass per method, validated when made.

Every method takes `seed` (MethodOptions); the partitioners that balance
chosen node arrays (metis, kaminpar, stream) share BalanceOptions. A bad value
raises OptionError with a one-line message; the registry
(gpart.partition_methods.registry.method_options) names the input in front of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Optional, TypeVar

import numpy as np

from gpart.base.errors import InputError
from gpart.engines.balance import TRAIN_MASK
from gpart.engines.kaminpar import PRESETS as KAMINPAR_PRESETS

DEFAULT_TOLERANCE = 0.03  # parts may be 3% above the average
Options = TypeVar("Options", bound="MethodOptions")


class OptionError(ValueError):
    """A method option with a value the method cannot run with (the message is one line)."""


def is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_count(name: str, value: Any, optional: bool = False) -> None:
    """An integer >= 1 (or None where `optional`)."""
    if optional and value is None:
        return
    if not is_int(value) or value < 1:
        raise OptionError(f"{name} must be an integer >= 1, got {value!r}")


def threads_of(threads: Any) -> int:
    """KaMinPar's thread count; None is 1: only then is a seed's result reproducible (measured: 2 threads vary run to run)."""
    if threads is None:
        return 1
    check_count("threads", threads)
    return int(threads)


@dataclass
class MethodOptions:
    """What every method takes: the seed (used by the methods that draw at random)."""

    seed: int = 0

    def __post_init__(self) -> None:
        if not is_int(self.seed) or not 0 <= self.seed < 2**31 - 1:
            raise OptionError(f"seed must be an integer in [0, 2**31 - 1), got {self.seed!r}")

    def node_arrays(self) -> set[str]:
        """Names of the node arrays the method may read besides the edges (a distributed run gathers them)."""
        return {TRAIN_MASK}


@dataclass
class KaminparRunOptions(MethodOptions):
    """How KaMinPar runs (the methods that call it take these): its thread count and its preset.

    `fast` took 0.55-0.65x `default`'s time on 1M-node power-law graphs with a cut within 1% of
    `default`'s, but up to 23% higher (relative) on road and grid graphs and 14% on email-Enron at 4
    parts (docs/partitioning.md); `strong` 8-9x the CPU. One thread reproduces a seed's result with
    every preset. `preset` None is the method's own: DEFAULT_PRESET, and on the compressed path where that
    would not fit --max-memory, LEAN_PRESET (`terapart`, memory-lean coarsening: R-MAT 1M/10M, 8 parts,
    KaMinPar's process peaked at 399 MiB against 581 for `fast`, cut 72.46% against 72.40%); see
    preset_for. terapart is kept for where it is needed because its partition moves with the process it runs
    in (gpart.engines.kaminpar_process); fast's in the forked child has not.
    """

    DEFAULT_PRESET: ClassVar[str] = "default"
    LEAN_PRESET: ClassVar[str] = "terapart"
    threads: int = 1  # None is 1 too (threads_of)
    preset: Optional[str] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.threads = threads_of(self.threads)
        if self.preset is not None and self.preset not in KAMINPAR_PRESETS:
            raise OptionError(f"KaMinPar preset must be one of {', '.join(KAMINPAR_PRESETS)}, got {self.preset!r}")

    def preset_for(self, lean: bool) -> str:
        """The preset a run takes: the one asked for, else LEAN_PRESET where only it fits the memory (`lean`:
        gpart.partition_methods.memory.needs_lean_preset), else the method's own."""
        if self.preset is not None:
            return self.preset
        return self.LEAN_PRESET if lean else self.DEFAULT_PRESET


@dataclass
class BalanceOptions(MethodOptions):
    """A tolerance and the quantities balanced besides the node count: 0/1 node arrays (DGL's
    balance_ntypes) and the in-degree (DGL's balance_edges). `imbalance` None is the method's own
    (DEFAULT_IMBALANCE)."""

    DEFAULT_IMBALANCE: ClassVar[float] = DEFAULT_TOLERANCE
    imbalance: Optional[float] = None
    balance: list[str] = field(default_factory=list)
    balance_edges: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.imbalance is None:
            self.imbalance = self.DEFAULT_IMBALANCE
        imbalance = self.imbalance
        if isinstance(imbalance, bool) or not isinstance(imbalance, (int, float, np.floating, np.integer)) \
                or not math.isfinite(imbalance) or imbalance <= 0:
            raise OptionError(f"imbalance tolerance must be a positive number (0.03 = 3%), got {imbalance!r}")
        self.balance = [self.balance] if isinstance(self.balance, str) else list(self.balance)

    def names(self) -> list[str]:
        """The balanced node arrays' names."""
        return [str(name) for name in self.balance]

    def node_arrays(self) -> set[str]:
        return super().node_arrays() | set(self.names())


def made(options_type: type[Options], where: Optional[str], values: dict[str, Any]) -> Options:
    """`options_type(**values)`; a bad value is an InputError naming `where` (the input)."""
    try:
        return options_type(**values)
    except OptionError as exc:
        raise InputError(where, str(exc)) from None


def replaced(options: Options, where: Optional[str], **changes: Any) -> Options:
    """`options` with `changes`, validated as when made (a bad value is an InputError naming `where`)."""
    try:
        return replace(options, **changes)
    except OptionError as exc:
        raise InputError(where, str(exc)) from None
