"""gpart's errors in a training script as one line per failing rank, under torchrun as without it.

    import gpart.runtime as gr

    @gr.record
    def main() -> None:
        ...

A GpartError that leaves the decorated function becomes one line,
`error: rank R: <the error's one line>`, and the process exits with the
error's exit code (2 for bad input, as gpart's commands). Under torchrun the
line goes to the error file torchrun summarises (TORCHELASTIC_ERROR_FILE, in
the layout of torch.distributed.elastic's own `record`): torchrun's failure
summary then shows it where it would show a traceback, once per failing
rank. Without torchrun it goes to stderr. Any other exception
is a bug, not a message: it goes to torch's own error recording, traceback
included, and propagates.

Scripts that do not decorate their entry point still get the one line under
torchrun: importing gpart.runtime there installs the same handling as
`sys.excepthook` for GpartError (the interpreter's exit code is then 1); the
hook of a script that set its own is left alone.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from typing import Any, Callable, TypeVar

from gpart.base.errors import GpartError

F = TypeVar("F", bound=Callable[..., Any])


def one_line(exc: GpartError) -> str:
    """`error: rank R: ...` (the rank torchrun gave this process; no rank outside a job)."""
    rank, message = os.environ.get("RANK"), exc.one_line()
    named = rank is None or message.startswith(f"rank {rank} ")  # the distributed commands name the rank (and host)
    return f"error: {'' if named else f'rank {rank}: '}{message}"


def report(exc: GpartError) -> None:
    """The error's one line: into torchrun's error file when torchrun gave one (its failure summary then shows
    the line once per failing rank), else on stderr."""
    line = one_line(exc)
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path:
        data = {"message": {"message": line, "extraInfo": {"py_callstack": line, "timestamp": str(int(time.time()))}}}
        try:
            with open(path, "w") as fh:
                json.dump(data, fh)
            return
        except OSError:  # no summary line then: stderr below
            pass
    print(line, file=sys.stderr, flush=True)


def record(fn: F) -> F:
    """Decorate a training script's entry point: a GpartError is one line and its exit code (see above)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except GpartError as exc:
            report(exc)
            raise SystemExit(exc.exit_code) from None
        except Exception as exc:
            _torch_record(exc)
            raise

    return wrapper  # type: ignore[return-value]


def _torch_record(exc: BaseException) -> None:
    """torch's own error file for an exception that is not gpart's (its traceback, as torch's @record writes)."""
    if not os.environ.get("TORCHELASTIC_ERROR_FILE"):
        return
    from torch.distributed.elastic.multiprocessing.errors import get_error_handler

    get_error_handler().record_exception(exc)


def _excepthook(kind: type, value: BaseException, tb: Any) -> None:
    if isinstance(value, GpartError):
        report(value)
        return
    _previous[0](kind, value, tb)


_previous: list[Callable[..., Any]] = [sys.__excepthook__]


def install_under_torchrun() -> None:
    """Under torchrun (TORCHELASTIC_RUN_ID set) and unless the script set its own hook: GpartError as one line."""
    if os.environ.get("TORCHELASTIC_RUN_ID") is None or sys.excepthook is _excepthook:
        return
    if sys.excepthook is sys.__excepthook__:
        _previous[0] = sys.excepthook
        sys.excepthook = _excepthook
