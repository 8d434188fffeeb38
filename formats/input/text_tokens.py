"""Text decompressed in blocks of whole lines and tokenised with numpy (SPEC.md 3.3-3.5, 3.8).

Every text reader (SNAP, METIS, DIMACS, delimited tables, OGB's CSV files)
streams its input through `text_blocks` and splits and parses each block with
vectorised numpy (`tokenize`, `parse_ints`), never line by line in Python, so a
reader holds one block of text at a time whatever the file's size.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Union

import numpy as np

from gpart.base.errors import InputError
from gpart.formats.files.scratch import AppendedArray, ScratchDir
from gpart.formats.input.checks import split_compression

# Bytes of text per block: bounds the readers' work arrays (several int64 per token, about 30 bytes of
# work per byte of text). 4 MiB against 16 MiB, 5M edges on 2 loaded cores: SNAP 3.7 s / 278 MB against
# 5.1 s / 407 MB, CSV 5.7 s / 225 MB against 6.9 s / 309 MB (the blocks' arrays stay in cache).
TEXT_BLOCK_BYTES = 4 << 20


def open_text(path: Path) -> io.BufferedIOBase:
    _, compression = split_compression(path.name.lower())
    if compression == "gzip":
        return gzip.open(path, "rb")
    if compression == "xz":
        return lzma.open(path, "rb")
    if compression == "bzip2":
        return bz2.open(path, "rb")
    return open(path, "rb")


def text_blocks(path: Path) -> Iterator[bytes]:
    """Decompressed text in blocks of whole lines, each ending with a newline."""
    block_bytes = TEXT_BLOCK_BYTES
    carry = b""
    try:
        with open_text(path) as fh:
            while True:
                data = fh.read(block_bytes)
                if not data:
                    break
                data = carry + data
                cut = data.rfind(b"\n") + 1
                if cut == 0:
                    carry = data
                    continue
                carry = data[cut:]
                yield data[:cut]
    except (*DECOMPRESS_ERRORS, ValueError) as exc:
        raise read_error(path, exc) from None
    if carry:
        yield carry + b"\n"


DECOMPRESS_ERRORS = (EOFError, gzip.BadGzipFile, lzma.LZMAError, zlib.error, OSError)


def read_error(path: Path, exc: Exception) -> InputError:
    """The one-line error of a failed read of (compressed) text: an OS error, or damaged compressed data."""
    if isinstance(exc, OSError) and not isinstance(exc, gzip.BadGzipFile) and exc.errno is not None:
        return InputError(path, f"cannot read: {exc.strerror or exc}")
    return InputError(path, f"corrupt or truncated compressed text: {exc}")


@dataclass
class Tokens:
    """Tokens of a block of whole lines, grouped by line: separated by whitespace (`tokenize`) or the
    fields of delimited text (gpart.formats.input.delimited, where blank lines are groups too).

    `line[t]` is the 0-based line (within the block) of token `t`; lines
    without tokens (blank lines) have no entry. `first[g]` is the token index
    of line group `g`'s first token, `count[g]` its number of tokens.
    """

    buf: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    line: np.ndarray
    group: np.ndarray
    first: np.ndarray
    count: np.ndarray
    num_lines: int

    @property
    def rank(self) -> np.ndarray:
        """Position of each token within its line."""
        return np.arange(self.starts.shape[0]) - self.first[self.group]

    def group_first_byte(self) -> np.ndarray:
        return self.buf[self.starts[self.first]] if self.first.size else np.zeros(0, np.uint8)

    def text(self, t: int) -> str:
        return bytes(self.buf[self.starts[t] : self.ends[t]]).decode("utf-8", "replace")[:40]


def tokenize(block: bytes) -> Tokens:
    """Split a block of whole lines at whitespace (any byte <= 32: space, tab, CR, LF, ...)."""
    buf = np.frombuffer(block, dtype=np.uint8)
    in_token = buf > 32
    # token boundaries are where in_token flips; the block ends with a newline, so they pair up
    flips = np.flatnonzero(in_token[1:] != in_token[:-1]) + 1
    if in_token.shape[0] and in_token[0]:
        flips = np.concatenate(([0], flips))
    del in_token
    starts, ends = flips[0::2], flips[1::2]
    newlines = np.flatnonzero(buf == 10)
    line = np.searchsorted(newlines, starts)
    is_first = np.ones(line.shape[0], dtype=bool)
    is_first[1:] = line[1:] != line[:-1]
    first = np.flatnonzero(is_first)
    group = np.cumsum(is_first) - 1
    count = np.diff(np.append(first, line.shape[0]))
    return Tokens(buf, starts, ends, line, group, first, count, int(newlines.shape[0]))


def parse_ints(tokens: Tokens, which: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parse tokens `which` as decimal integers (optional sign); return (values, bad mask).

    Vectorised over tokens: one pass per digit position (at most 18 digits).
    """
    starts = tokens.starts[which]
    lengths = tokens.ends[which] - starts
    buf = tokens.buf
    values = np.zeros(starts.shape[0], dtype=np.int64)
    if not starts.size:
        return values, np.zeros(0, dtype=bool)
    first = buf[starts]
    signed = (first == ord("-")) | (first == ord("+"))
    negative = first == ord("-")
    digits_start = starts + signed
    ndigits = lengths - signed
    bad = (ndigits < 1) | (ndigits > 18)
    last = buf.shape[0] - 1
    for k in range(int(ndigits.max(initial=0)) if not bad.all() else 0):
        inside = ndigits > k
        digit = buf[np.minimum(digits_start + k, last)].astype(np.int64) - 48
        bad |= inside & ((digit < 0) | (digit > 9))
        values = np.where(inside, values * 10 + digit, values)
    values = np.where(negative, -values, values)
    return values, bad


def parse_or_fail(path: Path, tokens: Tokens, which: np.ndarray, line0: int, what: str) -> np.ndarray:
    values, bad = parse_ints(tokens, which)
    if bad.any():
        t = int(which[int(np.argmax(bad))])
        raise InputError(path, f"line {line0 + int(tokens.line[t]) + 1}: {what} {tokens.text(t)!r} is not an integer")
    return values


def fail_negative(path: Path, tokens: Tokens, which: np.ndarray, values: np.ndarray, line0: int, lowest: int = 0) -> None:
    below = values < lowest
    if below.any():
        i = int(np.argmax(below))
        t = int(which[i])
        kind = "negative id" if lowest == 0 else f"id below {lowest}"
        raise InputError(path, f"line {line0 + int(tokens.line[t]) + 1}: {kind} {int(values[i])}")


# Rows a GrowingArray reserves first: 64 MiB of int64, above glibc's largest mmap threshold (32 MiB), so
# the array is its own mapping from the start and grows by mremap; pages count only once written.
INITIAL_ROWS = 1 << 23


class GrowingArray:
    """Values parsed block by block, appended into one array grown in place.

    `ndarray.resize` reallocates, which for a mapping of its own moves pages (mremap) instead of copying
    them, so the peak is the result plus a quarter (each growth is by a quarter, which resize zero-fills)
    plus one block; a list of blocks concatenated at the end holds the blocks and the result at once,
    and freed blocks stay in the heap. 10M CSV edges: 356 MB peak with doubling, 424 MB with a list.
    """

    def __init__(self, dtype: np.dtype, capacity: Optional[int] = None):
        """`capacity`: the rows the caller knows will come (a Parquet footer's count): reserved exactly."""
        self.array = np.empty(INITIAL_ROWS if capacity is None else capacity, dtype=dtype)
        self.size = 0

    def append(self, part: np.ndarray) -> None:
        need = self.size + part.shape[0]
        if need > self.array.shape[0]:
            self.array.resize(max(need, self.array.shape[0] + self.array.shape[0] // 4), refcheck=False)
        self.array[self.size : need] = part
        self.size = need

    def finish(self) -> np.ndarray:
        """The values appended, as an array of exactly their length (the reserve is given back)."""
        self.array.resize(self.size, refcheck=False)
        return self.array


def growing_ids(spill: Optional[ScratchDir], name: str, capacity: Optional[int] = None) -> Union[GrowingArray, AppendedArray]:
    """Where a reader appends the int64 ids it parses: memory (GrowingArray, `capacity` rows reserved where known),
    or with `spill` a scratch file mapped at the end (an edge list larger than memory then costs disk and page
    cache, not anonymous memory)."""
    if spill is None:
        return GrowingArray(np.dtype(np.int64), capacity)
    return spill.appended(name, np.dtype(np.int64))
