"""Headerless CSV matrices of numbers (SPEC.md 3.10: OGB's node features, labels, counts and split indices).

numpy's C `loadtxt` parses the (decompressing) stream in one call: it reads the text in its own small
chunks and rounds decimal text to binary floats exactly, so memory is the result plus a few MB. A file
whose text holds only integers becomes int64, any other float32 (as OGB's own reader casts them): the
first MiB of text decides, and a file that turns out to hold a decimal value further on is read again
as float32.

With a scratch directory (`spill`: gpart partition and gpart chunk of an OGB folder), the text is read a block
of whole lines at a time (text_tokens.text_blocks), each block parsed by the same loadtxt and appended to a
scratch file, mapped read-only at the end: the same array, costing one block's work arrays and page cache
rather than the whole result in memory.
"""

from __future__ import annotations

import io
import re
import warnings
from functools import partial
from pathlib import Path
from typing import Optional

import numpy as np

from gpart.base.errors import InputError
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.input.text_tokens import DECOMPRESS_ERRORS, open_text, read_error, text_blocks

SNIFF_BYTES = 1 << 20
# bytes that only a non-integer value holds: a decimal point, an exponent, nan, inf
FLOAT_BYTES = np.frombuffer(b".eEnNiI", dtype=np.uint8)
CONVERT_RE = re.compile(r"could not convert string '(.*)' to \w+ at row (\d+), column (\d+)")
CHANGED_RE = re.compile(r"(the number of columns changed from \d+ to \d+) at row (\d+)")


class _FloatLater(Exception):
    """An integer-looking file holds a decimal value past its first MiB."""


def read_numeric_csv(path: Path, spill: Optional[ScratchDir] = None, name: str = "values") -> np.ndarray:
    """The file's values as a 2-D array [rows, columns]: int64 when every value is an integer, else float32; in memory,
    or with `spill` in a scratch file there named after `name`, mapped read-only."""
    try:
        with open_text(path) as fh:
            head = np.frombuffer(fh.read(SNIFF_BYTES), dtype=np.uint8)
    except DECOMPRESS_ERRORS as exc:
        raise read_error(path, exc) from None
    read = _loadtxt if spill is None else partial(_stream, spill=spill, name=name)
    if bool(np.isin(head, FLOAT_BYTES).any()):
        return read(path, np.float32)
    try:
        return read(path, np.int64)
    except _FloatLater:
        return read(path, np.float32)


def _loadtxt(path: Path, dtype: type) -> np.ndarray:
    try:
        with open_text(path) as fh, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an empty file: loadtxt warns, the caller decides
            return np.loadtxt(fh, delimiter=",", dtype=dtype, ndmin=2, comments=None, quotechar=None)
    except ValueError as exc:
        raise _problem(path, str(exc), dtype) from None
    except DECOMPRESS_ERRORS as exc:
        raise read_error(path, exc) from None


def _stream(path: Path, dtype: type, spill: ScratchDir, name: str) -> np.ndarray:
    """loadtxt over each block of whole lines, appended to a scratch file: the array one loadtxt call over the file
    gives, with the same messages (rows counted from the file's start, a column count that changes at a block's
    first row said as loadtxt says it)."""
    out = spill.appended(name, np.dtype(dtype))
    rows = columns = 0
    for block in text_blocks(path):
        width = _first_width(block)
        if columns and width and width != columns:
            raise InputError(path, f"line {rows + 1}: the number of columns changed from {columns} to {width}")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a block of blank lines: loadtxt warns, it holds no rows
                values: np.ndarray = np.loadtxt(io.BytesIO(block), delimiter=",", dtype=dtype, ndmin=2, comments=None, quotechar=None)
        except ValueError as exc:
            out.close()  # an integer attempt that meets a decimal value is read again as float32, into a new file
            raise _problem(path, str(exc), dtype, rows) from None
        if values.shape[0]:
            columns = columns or int(values.shape[1])
            out.append(values.reshape(-1))
            rows += int(values.shape[0])
    return out.finish().reshape(-1, columns or 1)


def _first_width(block: bytes) -> int:
    """Fields on the block's first non-blank line (0 when it has none)."""
    text = block.lstrip()
    return text[: text.find(b"\n")].count(b",") + 1 if text else 0


def _problem(path: Path, message: str, dtype: type, rows: int = 0) -> Exception:
    """loadtxt's message with its row turned into the file's 1-based line (a value's row counts from 0,
    a changed column count's from 1), `rows` rows after the file's start."""
    found = CONVERT_RE.search(message)
    if found:
        value = found.group(1)
        if dtype is np.int64 and _is_number(value):
            return _FloatLater()
        return InputError(path, f"line {rows + int(found.group(2)) + 1}, column {found.group(3)}: {value!r} is not a number")
    found = CHANGED_RE.search(message)
    if found:
        return InputError(path, f"line {rows + int(found.group(2))}: {found.group(1)}")
    return InputError(path, message.split(";")[0].rstrip("."))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
