"""Progress reporting without a UI dependency.

Library functions take an optional `progress` object; the CLI passes one that
draws rich progress bars, tests and library callers pass nothing.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Optional, Protocol


class Progress(Protocol):
    def stage(self, name: str, total: Optional[float] = None, unit: str = "") -> "StageHandle": ...


class StageHandle(Protocol):
    def advance(self, amount: float = 1) -> None: ...

    def __enter__(self) -> "StageHandle": ...

    def __exit__(self, *exc: object) -> None: ...


class _NullStage:
    def advance(self, amount: float = 1) -> None:
        pass

    def __enter__(self) -> "_NullStage":
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class NullProgress:
    """Reports nothing. The default for every library call."""

    def stage(self, name: str, total: Optional[float] = None, unit: str = "") -> _NullStage:
        return _NullStage()


def or_null(progress: Optional[Progress]) -> Progress:
    return NullProgress() if progress is None else progress


def peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MiB (0 where the OS does not say)."""
    try:
        import resource
        import sys
    except ImportError:  # not on this platform
        return 0.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


class StageTimer:
    """Times named stages and reports (name, seconds, peak RSS MiB) to an optional callable.

    `with timer("sort edges"): ...` records one stage; `timer.records` keeps
    them all, so a caller can print per-stage times as DGL logs them.
    """

    def __init__(self, log: Optional[Callable[[str, float, float], None]] = None):
        self.log = log
        self.records: list[tuple[str, float, float]] = []

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        import time

        start = time.perf_counter()
        yield
        self.record(name, time.perf_counter() - start)

    def record(self, name: str, seconds: float) -> None:
        """Report a stage timed elsewhere (e.g. on another thread)."""
        record = (name, seconds, peak_rss_mb())
        self.records.append(record)
        if self.log is not None:
            self.log(*record)
