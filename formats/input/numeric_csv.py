"""Headerless CSV matrices of numbers (SPEC.md 3.10: OGB's node features, labels, counts and split indices).

Each block of whole lines (gpart.formats.input.text_tokens) is parsed by numpy's C `loadtxt`, which
rounds decimal text to binary floats exactly; the reader holds the parsed rows and one block of text.
A file whose text holds only integers becomes int64, any other float32 (as OGB's own reader casts them).
"""

from __future__ import annotations

import io
import re
import warnings
from pathlib import Path

import numpy as np

from gpart.base.errors import InputError
from gpart.formats.input.text_tokens import join_parts, text_blocks

# bytes that only a non-integer value holds: a decimal point, an exponent, nan, inf
FLOAT_BYTES = np.frombuffer(b".eEnNiI", dtype=np.uint8)
ROW_RE = re.compile(r"at row (\d+), column (\d+)")
CONVERT_RE = re.compile(r"could not convert string '(.*)' to \w+ at row")


def read_numeric_csv(path: Path) -> np.ndarray:
    """The file's values as a 2-D array [rows, columns]: int64 when every value is an integer, else float32."""
    parts: list[np.ndarray] = []
    width = None
    floats = False
    line0 = 0
    for block in text_blocks(path):
        buf = np.frombuffer(block, dtype=np.uint8)
        is_float = bool(np.isin(buf, FLOAT_BYTES).any())
        if bool((buf > 32).any()):
            rows = _parse_block(path, block, np.float32 if is_float else np.int64, line0)
            if width is not None and rows.shape[1] != width:
                raise InputError(path, f"line {line0 + 1 + _first_data_line(block)}: {rows.shape[1]} columns, the lines before have {width}")
            width = rows.shape[1]
            floats |= is_float
            parts.append(rows)
        line0 += int(np.count_nonzero(buf == 10))
        del buf
    if floats:
        parts = [p.astype(np.float32) if p.dtype != np.float32 else p for p in parts]
    return join_parts(parts, np.dtype(np.float32 if floats else np.int64), (width or 0,))


def _parse_block(path: Path, block: bytes, dtype: type, line0: int) -> np.ndarray:
    try:
        text = block.decode("ascii")
    except UnicodeDecodeError as exc:
        line = block[: exc.start].count(b"\n")
        raise InputError(path, f"line {line0 + line + 1}: a byte that is not ASCII text (0x{block[exc.start]:02x}); expected numbers") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.loadtxt(io.StringIO(text), delimiter=",", dtype=dtype, ndmin=2, comments=None)
    except ValueError as exc:
        raise InputError(path, _problem(str(exc), line0)) from None


def _problem(message: str, line0: int) -> str:
    """loadtxt's message with its block row turned into the file's 1-based line (a value's row counts from 0)."""
    message = message.split(";")[0].rstrip(".")
    found = ROW_RE.search(message)
    if found:
        line = line0 + int(found.group(1)) + 1
        value = CONVERT_RE.match(message)
        what = f"{value.group(1)!r} is not a number" if value else message[: found.start()].strip()
        return f"line {line}, column {found.group(2)}: {what}"
    found = re.search(r"at row (\d+)", message)
    if found:  # "the number of columns changed ... at row R": R counts rows from 1
        return f"line {line0 + int(found.group(1))}: {message[: found.start()].strip()}"
    return message


def _first_data_line(block: bytes) -> int:
    stripped = block.lstrip()
    return block[: len(block) - len(stripped)].count(b"\n")
