"""What `gpart info` prints, as data: the blocks a kind's info_view returns and the CLI draws.

A kind describes its summary in tables, label/value grids and lines of text; it
knows nothing of the terminal, and the CLI knows nothing of the kinds (it draws
these blocks with rich, in order). Byte counts stay numbers (Size) until the CLI
writes them in its human units, as every other command does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional, Union


@dataclass(frozen=True)
class Size:
    """A byte count, written by the CLI as it writes sizes everywhere (`1.5 MiB`)."""

    nbytes: int


# one table cell or line: text, a size, or pieces of both written one after the other
Piece = Union[str, Size]
Cell = Union[str, Size, tuple[Piece, ...]]


@dataclass(frozen=True)
class Column:
    name: str
    align: Literal["left", "right"] = "left"
    fold: bool = False  # a value too wide for the terminal is folded onto more lines, not cut with an ellipsis
    no_wrap: bool = False  # never broken between words (names a user types into other tools)


@dataclass(frozen=True)
class Table:
    """A bordered table; `totals` come below a rule under `rows`."""

    columns: list[Column]
    rows: list[list[Cell]]
    title: Optional[str] = None
    title_align: Literal["left", "center"] = "center"
    totals: list[list[Cell]] = field(default_factory=list)


@dataclass(frozen=True)
class Grid:
    """Label / value pairs without borders (the head of a summary)."""

    rows: list[tuple[str, Cell]]


@dataclass(frozen=True)
class Line:
    """One line of text; `unbroken` keeps it on one line however narrow the terminal is."""

    text: Cell
    style: Optional[str] = None  # "bold", ...: the line is printed as plain text in that style
    unbroken: bool = False


Block = Union[Table, Grid, Line]
