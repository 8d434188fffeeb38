"""Edge lists as tables of text (SPEC.md 3.8): CSV, TSV, and whitespace-separated text with a header.

One edge per line; the source and destination columns are found by name in the header (src/dst,
source/target, ... or the options' names) or by number. The text is streamed in blocks
(gpart.formats.input.text_tokens) and split and parsed with numpy: a block of text and the parsed ids
are what the reader holds, never the whole text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.formats.input.delimited import split_fields
from gpart.formats.input.options import ReadOptions, resolve_columns
from gpart.formats.input.text_tokens import Tokens, fail_negative, growing_ids, parse_ints, parse_or_fail, text_blocks, tokenize

# the delimiter of each kind of table; None: runs of whitespace, as in SNAP text (3.3)
DELIMITERS: dict[str, Optional[bytes]] = {"csv": b",", "tsv": b"\t", "text": None}
COMMENT_BYTES = (ord("#"), ord("%"))
UTF8_BOM = b"\xef\xbb\xbf"


class EdgeTable:
    """The state of one table read: its columns, once its first line has been seen."""

    def __init__(self, path: Path, delimiter: Optional[bytes], options: ReadOptions):
        self.path, self.delimiter, self.options = path, delimiter, options
        self.columns: Optional[tuple[int, int]] = None
        self.width = 0
        self.header: Optional[list[str]] = None

    def fields(self, block: bytes, line0: int) -> Tokens:
        return tokenize(block) if self.delimiter is None else split_fields(self.path, block, self.delimiter, line0)

    def data_groups(self, tok: Tokens) -> np.ndarray:
        """Line groups holding data: not blank (one empty field) and not a comment (# or %)."""
        first_start, first_end = tok.starts[tok.first], tok.ends[tok.first]
        blank = (tok.count == 1) & (first_start == first_end)
        lead = tok.buf[np.minimum(first_start, tok.buf.shape[0] - 1)]
        comment = ~blank & np.isin(lead, COMMENT_BYTES)
        return np.flatnonzero(~blank & ~comment)

    def first_line(self, tok: Tokens, g: int, line0: int) -> bool:
        """Settle the columns from the first data line; True when that line is a header (not data)."""
        which = np.arange(tok.first[g], tok.first[g] + tok.count[g])
        is_header = self.options.header
        if is_header is None:  # a header holds no integer, a line of data at least its two ids
            is_header = bool(parse_ints(tok, which)[1].all())
        names = [bytes(tok.buf[tok.starts[t] : tok.ends[t]]).decode("utf-8", "replace") for t in which] if is_header else None
        self.width = int(tok.count[g])
        self.header = names
        self.columns = resolve_columns(self.path, names, self.width, self.options)
        return is_header

    def edges(self, tok: Tokens, groups: np.ndarray, line0: int) -> tuple[np.ndarray, np.ndarray]:
        assert self.columns is not None
        wrong = tok.count[groups] != self.width
        if wrong.any():
            g = int(groups[int(np.argmax(wrong))])
            what = "the header has" if self.header is not None else "the first line has"
            raise InputError(self.path, f"line {line0 + int(tok.line[tok.first[g]]) + 1}: {int(tok.count[g])} fields, {what} {self.width}")
        out = []
        for column, what in zip(self.columns, ("source id", "target id")):
            which = tok.first[groups] + column
            ids = parse_or_fail(self.path, tok, which, line0, f"{what} (column {self._name(column)})")
            fail_negative(self.path, tok, which, ids, line0)
            out.append(ids)
        return out[0], out[1]

    def _name(self, column: int) -> str:
        return repr(self.header[column]) if self.header is not None else str(column)


def read_edge_table(path: Path, kind: str, options: ReadOptions) -> Graph:
    """Read a CSV (`kind` 'csv'), TSV ('tsv') or whitespace-separated ('text') edge table; its ids parsed into memory,
    or where the options carry a scratch directory (`spill`) into files there (mapped)."""
    table = EdgeTable(path, DELIMITERS[kind], options)
    srcs, dsts = growing_ids(options.spill, "src"), growing_ids(options.spill, "dst")
    highest = -1
    line0 = 0
    for block in text_blocks(path):
        if line0 == 0 and block.startswith(UTF8_BOM):  # spreadsheets write one before the header
            block = block[len(UTF8_BOM):]
        tok = table.fields(block, line0)
        groups = table.data_groups(tok)
        if table.columns is None and groups.size and table.first_line(tok, int(groups[0]), line0):
            groups = groups[1:]
        if groups.size:
            src, dst = table.edges(tok, groups, line0)
            highest = max(highest, int(src.max()), int(dst.max()))
            srcs.append(src)
            dsts.append(dst)
        line0 += tok.num_lines
        del tok
    return Graph(highest + 1, srcs.finish(), dsts.finish())
