"""Fields of delimited text (CSV, TSV; SPEC.md 3.8), split with numpy a block of whole lines at a time.

The result is a `Tokens` (gpart.formats.input.text_tokens) in which every line is a group, blank lines
included (one empty field), so the integer parser and its line-numbered errors serve CSV as they serve
whitespace-separated text. Fields are trimmed of spaces and of one pair of enclosing double quotes; a
delimiter inside double quotes is part of its field (RFC 4180), a line break inside them is refused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpart.base.errors import InputError
from gpart.formats.input.text_tokens import Tokens

QUOTE = ord('"')
NEWLINE = 10


def split_fields(path: Path, block: bytes, delimiter: bytes, line0: int) -> Tokens:
    """Fields of `block` (whole lines, ending with a newline) separated by the one-byte `delimiter`."""
    buf = np.frombuffer(block, dtype=np.uint8)
    newline = buf == NEWLINE
    separator = buf == delimiter[0]
    quotes = buf == QUOTE
    has_quotes = bool(quotes.any())
    if has_quotes:
        # a byte is inside quotes when an odd number of quotes precede it (an escaped "" pair counts twice)
        inside = (np.cumsum(quotes) - quotes) % 2 == 1
        broken = newline & inside
        if broken.any():
            line = int(np.count_nonzero(newline[: int(np.argmax(broken))]))
            raise InputError(path, f"line {line0 + line + 1}: a double quote opens a field that the line does not close")
        separator &= ~inside
        del inside, broken
    bounds = np.flatnonzero(separator | newline)
    ends_line = newline[bounds]
    del separator, quotes
    starts = np.empty_like(bounds)
    starts[0:1] = 0
    starts[1:] = bounds[:-1] + 1
    is_first = np.ones(bounds.shape[0], dtype=bool)
    is_first[1:] = ends_line[:-1]
    group = np.cumsum(is_first) - 1  # every line has at least one field: group g is line g of the block
    first = np.flatnonzero(is_first)
    count = np.diff(np.append(first, bounds.shape[0]))
    ends = bounds
    padded = int(np.count_nonzero(buf <= 32)) > first.shape[0]  # any space, tab or CR besides the newlines
    if padded or has_quotes:
        starts, ends = _trim(buf, starts, bounds.copy())
    return Tokens(buf, starts, ends, group, group, first, count, int(first.shape[0]))


def _trim(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop leading and trailing bytes <= 32 (spaces, tabs, CR), then one pair of enclosing quotes."""
    while True:  # each round drops one byte from every padded field; padding runs are short
        lead = (starts < ends) & (buf[np.minimum(starts, buf.shape[0] - 1)] <= 32)
        tail = (starts < ends) & (buf[np.maximum(ends - 1, 0)] <= 32)
        if not (lead.any() or tail.any()):
            break
        starts = starts + lead
        ends = ends - ((starts < ends) & tail)
    quoted = (ends - starts >= 2) & (buf[np.minimum(starts, buf.shape[0] - 1)] == QUOTE) \
        & (buf[np.maximum(ends - 1, 0)] == QUOTE)
    return starts + quoted, ends - quoted
