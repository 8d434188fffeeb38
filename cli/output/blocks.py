"""Draw the blocks a kind of `gpart info` returns (gpart.inspection.view) with rich, in order."""

from __future__ import annotations

from typing import Union

from rich.table import Table as RichTable
from rich.text import Text

from gpart.cli.output.ui import human_bytes, stdout
from gpart.inspection.view import Block, Cell, Grid, Line, Size, Table


def cell_text(cell: Cell) -> str:
    """A cell's text, its sizes written in human units."""
    pieces = cell if isinstance(cell, tuple) else (cell,)
    return "".join(human_bytes(p.nbytes) if isinstance(p, Size) else p for p in pieces)


def _rich_table(table: Table) -> RichTable:
    out = RichTable(title=table.title, title_justify=table.title_align)
    for c in table.columns:
        out.add_column(c.name, justify=c.align, overflow="fold" if c.fold else "ellipsis", no_wrap=c.no_wrap)
    for row in table.rows:
        out.add_row(*map(cell_text, row))
    if table.totals:
        out.add_section()
    for row in table.totals:
        out.add_row(*map(cell_text, row))
    return out


def _rich_grid(grid: Grid) -> RichTable:
    out = RichTable.grid(padding=(0, 2))
    for label, value in grid.rows:
        out.add_row(label, cell_text(value))
    return out


def print_blocks(blocks: list[Block]) -> None:
    """Print `blocks` to stdout. A line without a style is printed as the commands print their text lines
    (console markup and highlighting apply); one with a style as plain text in that style."""
    for block in blocks:
        if isinstance(block, Line):
            text: Union[str, Text] = cell_text(block.text) if block.style is None else Text(cell_text(block.text), style=block.style)
            if block.unbroken:
                stdout.print(text, soft_wrap=True)
            else:
                stdout.print(text)
        else:
            stdout.print(_rich_table(block) if isinstance(block, Table) else _rich_grid(block))
