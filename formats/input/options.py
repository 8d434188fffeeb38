"""Reading options of the inputs whose file name does not say everything (SPEC.md 3.8-3.10): which columns
of an edge table are the source and the destination, whether it has a header, which split of an OGB folder.

`GraphInput` is a path that carries them: it is an `os.PathLike`, so everything that only needs the path
(output checks, messages) takes it as one, and `read_graph` reads it with its options.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

from gpart.base.errors import InputError

PathLike = Union[str, "os.PathLike[str]"]

# Column names taken as (source, destination) when no column is named, in this order (case-insensitive).
DEFAULT_COLUMN_PAIRS = (
    ("src", "dst"), ("source", "target"), ("src_id", "dst_id"), ("source_id", "target_id"),
    ("from", "to"), ("u", "v"), ("head", "tail"), ("fromnodeid", "tonodeid"),  # the last: SNAP's column names
)


@dataclass(frozen=True)
class ReadOptions:
    """`src_col` / `dst_col`: a column name, or a 0-based column number given as digits (None: SPEC.md 3.8's
    defaults); `header`: True, False, or None to detect it; `split`: the OGB split folder to read as masks
    (None: the only one there; "none": no masks). `spill`: not a user option but where the run lets a reader
    that concatenates pieces (chunked directories) or parses text put the graph's arrays, mapped read-only (a ScratchDir; None:
    memory)."""

    src_col: Optional[str] = None
    dst_col: Optional[str] = None
    header: Optional[bool] = None
    split: Optional[str] = None
    spill: Any = field(default=None, compare=False, repr=False)

    @property
    def table_options(self) -> bool:
        """Whether any option of an edge table (columns, header) was given."""
        return self.src_col is not None or self.dst_col is not None or self.header is not None


class GraphInput(os.PathLike):
    """An input path with the options its reader takes; `os.fspath` gives the path."""

    def __init__(self, path: PathLike, options: ReadOptions):
        self.path = os.fspath(path)
        self.options = options

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"GraphInput({self.path!r}, {self.options!r})"


def split_input(path: Union[PathLike, GraphInput]) -> tuple[PathLike, ReadOptions]:
    """(the path, its options): a plain path has the default options."""
    if isinstance(path, GraphInput):
        return path.path, path.options
    return path, ReadOptions()


def resolve_columns(path: PathLike, names: Optional[Sequence[str]], num_columns: int,
                    options: ReadOptions) -> tuple[int, int]:
    """Column numbers of the source and the destination; `names` is the header (None: the file has none)."""
    if options.src_col is None and options.dst_col is None:
        return _default_columns(path, names, num_columns)
    if options.src_col is None or options.dst_col is None:
        raise InputError(path, "name both columns: --src-col and --dst-col go together")
    src = _column(path, names, num_columns, options.src_col, "--src-col")
    dst = _column(path, names, num_columns, options.dst_col, "--dst-col")
    if src == dst:
        raise InputError(path, f"--src-col and --dst-col name the same column ({src})")
    return src, dst


def _default_columns(path: PathLike, names: Optional[Sequence[str]], num_columns: int) -> tuple[int, int]:
    if names is not None:
        lowered = [n.lower() for n in names]
        for a, b in DEFAULT_COLUMN_PAIRS:
            if a in lowered and b in lowered:
                return lowered.index(a), lowered.index(b)
        # a header of other names, even two, is refused: guessing their order could reverse every edge
        shown = ", ".join(repr(n) for n in names[:8]) + (", ..." if len(names) > 8 else "")
        raise InputError(path, f"no source/destination columns among {shown} (looked for src/dst, source/target, "
                               "from/to, u/v, ...): name them with --src-col and --dst-col")
    if num_columns < 2:
        raise InputError(path, f"{num_columns} column{'s' if num_columns != 1 else ''}, an edge list needs two (source and destination)")
    return 0, 1


def _column(path: PathLike, names: Optional[Sequence[str]], num_columns: int, spec: str, option: str) -> int:
    if names is not None and spec in names:
        return list(names).index(spec)
    if spec.isdigit():
        if int(spec) >= num_columns:
            raise InputError(path, f"{option} {spec}: column number out of range, the file has {num_columns} columns (0-based)")
        return int(spec)
    if names is None:
        raise InputError(path, f"{option} {spec!r} names a column, but the file has no header: give a 0-based column number")
    lowered = [n.lower() for n in names]
    if spec.lower() in lowered:
        return lowered.index(spec.lower())
    shown = ", ".join(repr(n) for n in names[:8]) + (", ..." if len(names) > 8 else "")
    raise InputError(path, f"{option} {spec!r}: no such column (the columns are {shown})")
