"""Options of inputs whose file name does not say everything: edge-table columns and header, the OGB split
(SPEC.md 3.8-3.10). `input_options` adds them to a command; `graph_input` packs them with the path."""

from __future__ import annotations

from typing import Callable, Optional, TypeVar, Union

import click

from gpart.formats.input.options import GraphInput, ReadOptions

F = TypeVar("F", bound=Callable[..., object])


def input_options(command: F) -> F:
    """--src-col, --dst-col, --header/--no-header and --split."""
    command = click.option(
        "--split", "split", metavar="NAME", default=None,
        help="OGB dataset folder: the split/NAME folder read as train_mask, val_mask and test_mask "
             "(default: the only one there; 'none': no masks).")(command)
    command = click.option(
        "--header/--no-header", "header", default=None,
        help="Edge table (.csv, .tsv, text): whether the first line names the columns [default: detected, a "
             "first line without any integer is a header]. On a .txt, --header reads it as a table.")(command)
    command = click.option(
        "--dst-col", "dst_col", metavar="NAME|N", default=None,
        help="Edge table (.csv, .tsv, .parquet, text): the destination column, by header name or 0-based number "
             "[default: dst, target, to, v, ... in the header; column 1 without one].")(command)
    return click.option(
        "--src-col", "src_col", metavar="NAME|N", default=None,
        help="Edge table: the source column, by header name or 0-based number [default: src, source, from, u, "
             "... in the header; column 0 without one].")(command)  # type: ignore[return-value]


def graph_input(path: str, src_col: Optional[str], dst_col: Optional[str], header: Optional[bool],
                split: Optional[str]) -> Union[str, GraphInput]:
    """The path alone when no option was given, else a GraphInput carrying them."""
    options = ReadOptions(src_col=src_col, dst_col=dst_col, header=header, split=split)
    return path if options == ReadOptions() else GraphInput(path, options)
