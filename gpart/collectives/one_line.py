"""The one-line text of an exception, for gpart's one-line errors."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text (whitespace folded, at most 300 characters), for one-line errors."""
    text = str(exc).strip()
    return " ".join(text.splitlines()[0].split())[:300] if text else type(exc).__name__
