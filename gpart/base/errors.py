"""Errors gpart raises for problems the user can fix.

Every such error carries the path it is about, so the CLI can print one line
`error: <path>: <problem>` and exit with code 2.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Optional, Union

PathLike = Union[str, "os.PathLike[str]"]


class Interrupted(KeyboardInterrupt):
    """A termination signal (SIGTERM, SIGHUP) arrived: unwind like Ctrl-C, so every writer removes
    its staging and scratch files, and exit with 128 + the signal number."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"interrupted by signal {signum}")


_critical = 0
_pending_signal: Optional[int] = None


def raise_interrupted(signum: int, frame: object = None) -> None:
    """Signal handler (installed by the command line): raise Interrupted, or, inside an
    uninterrupted() section, remember the signal and raise when the section ends."""
    global _pending_signal
    if _critical:
        _pending_signal = signum
        return
    raise Interrupted(signum)


@contextmanager
def uninterrupted() -> Iterator[None]:
    """A few renames that must finish together (a commit): a termination signal arriving
    meanwhile takes effect right after, so it never leaves a commit half-done."""
    global _critical, _pending_signal
    _critical += 1
    try:
        yield
    finally:
        _critical -= 1
        if not _critical and _pending_signal is not None:
            signum, _pending_signal = _pending_signal, None
            raise Interrupted(signum)


class GpartError(Exception):
    """A problem with the user's input or output that gpart reports in one line."""

    exit_code = 2

    def __init__(self, path: Optional[PathLike], problem: str):
        self.path = None if path is None else os.fspath(path)
        self.problem = problem
        super().__init__(self.one_line())

    def one_line(self) -> str:
        text = " ".join(str(self.problem).split())
        return f"{self.path}: {text}" if self.path else text


class InputError(GpartError):
    """The input is malformed, inconsistent or unreadable."""


class OutputError(GpartError):
    """The output cannot be written (exists, not writable, disk full)."""


class IntegrityError(GpartError):
    """A written artifact is damaged: a checksum, size or invariant does not hold."""

    exit_code = 1


class InputMismatchError(InputError):
    """A valid input that is not the one an artifact was made from (`verify --graph` with another graph):
    the input is wrong, not the artifact, so neither 2 (unreadable input) nor 1 (damage)."""

    exit_code = 3


class RankMismatchError(GpartError):
    """Ranks of a torch.distributed job disagree (or one of them did not answer in time)."""


class BackgroundBatchError(GpartError):
    """A batch a loader prepared ahead (prefetch) failed in the background; raised when the caller asks for it."""

    exit_code = 1


class NotLocalError(GpartError, LookupError):
    """A single-process gather asked for rows this partition does not hold."""


def short_repr(value: object, limit: int = 120) -> str:
    """repr(value), cut to `limit` characters: a fragment of a hostile file must not flood the one error line."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
