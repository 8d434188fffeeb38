"""What a command's failure prints and the exit code it gives, for the `gpart` console script and
`python -m gpart.distributed` alike.

A library error (gpart.base.errors.GpartError) is one line on stderr,
`error: <path>: <problem>`, and the exit code its class carries (2 for bad
input or output, 1 for damaged artifacts); click's own errors and exits keep
click's message and code. Interrupts and unexpected exceptions are left to
each entry point.
"""

from __future__ import annotations

import click

from gpart.base.errors import GpartError

# The failures exit_code reports: an entry point catches these around a command and hands them over.
REPORTED = (GpartError, click.ClickException, click.exceptions.Exit)


def exit_code(exc: BaseException) -> int:
    """Print the line a REPORTED failure gets (none for an Exit) and return its exit code."""
    if isinstance(exc, GpartError):
        click.echo(f"error: {exc.one_line()}", err=True)
        return exc.exit_code
    if isinstance(exc, click.exceptions.Exit):
        return exc.exit_code
    if not isinstance(exc, click.ClickException):
        raise TypeError(f"not a failure the command line reports: {exc!r}")
    exc.show()
    return exc.exit_code
