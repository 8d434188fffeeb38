"""Headerless CSV matrices of numbers (SPEC.md 3.10: OGB's node features, labels, counts and split indices).

numpy's C `loadtxt` parses the (decompressing) stream in one call: it reads the text in its own small
chunks and rounds decimal text to binary floats exactly, so memory is the result plus a few MB. A file
whose text holds only integers becomes int64, any other float32 (as OGB's own reader casts them): the
first MiB of text decides, and a file that turns out to hold a decimal value further on is read again
as float32.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np

from gpart.base.errors import InputError
from gpart.formats.input.text_tokens import DECOMPRESS_ERRORS, open_text, read_error

SNIFF_BYTES = 1 << 20
# bytes that only a non-integer value holds: a decimal point, an exponent, nan, inf
FLOAT_BYTES = np.frombuffer(b".eEnNiI", dtype=np.uint8)
CONVERT_RE = re.compile(r"could not convert string '(.*)' to \w+ at row (\d+), column (\d+)")
CHANGED_RE = re.compile(r"(the number of columns changed from \d+ to \d+) at row (\d+)")


class _FloatLater(Exception):
    """An integer-looking file holds a decimal value past its first MiB."""


def read_numeric_csv(path: Path) -> np.ndarray:
    """The file's values as a 2-D array [rows, columns]: int64 when every value is an integer, else float32."""
    try:
        with open_text(path) as fh:
            head = np.frombuffer(fh.read(SNIFF_BYTES), dtype=np.uint8)
    except DECOMPRESS_ERRORS as exc:
        raise read_error(path, exc) from None
    if bool(np.isin(head, FLOAT_BYTES).any()):
        return _loadtxt(path, np.float32)
    try:
        return _loadtxt(path, np.int64)
    except _FloatLater:
        return _loadtxt(path, np.float32)


def _loadtxt(path: Path, dtype: type) -> np.ndarray:
    try:
        with open_text(path) as fh, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an empty file: loadtxt warns, the caller decides
            return np.loadtxt(fh, delimiter=",", dtype=dtype, ndmin=2, comments=None, quotechar=None)
    except ValueError as exc:
        raise _problem(path, str(exc), dtype) from None
    except DECOMPRESS_ERRORS as exc:
        raise read_error(path, exc) from None


def _problem(path: Path, message: str, dtype: type) -> Exception:
    """loadtxt's message with its row turned into the file's 1-based line (a value's row counts from 0,
    a changed column count's from 1)."""
    found = CONVERT_RE.search(message)
    if found:
        value = found.group(1)
        if dtype is np.int64 and _is_number(value):
            return _FloatLater()
        return InputError(path, f"line {int(found.group(2)) + 1}, column {found.group(3)}: {value!r} is not a number")
    found = CHANGED_RE.search(message)
    if found:
        return InputError(path, f"line {found.group(2)}: {found.group(1)}")
    return InputError(path, message.split(";")[0].rstrip("."))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
