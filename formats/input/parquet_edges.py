"""Parquet edge lists (SPEC.md 3.9): two integer columns of one Parquet file, read a row group batch at a time.

pyarrow is optional: it is imported when a .parquet file is read, and its absence is a one-line error.
The ids go straight into two int64 arrays of the file's row count (known from its footer), so the reader
holds the result and the row group pyarrow is decoding, never the whole table as Arrow data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.formats.input.options import ReadOptions, resolve_columns
from gpart.formats.input.text_tokens import growing_ids

BATCH_ROWS = 1 << 20


def _parquet_module(path: Path) -> Any:
    try:
        import pyarrow.parquet as pq  # optional: only Parquet inputs need it
    except ImportError:
        raise InputError(path, "reading Parquet needs pyarrow, which is not installed (pip install pyarrow)") from None
    return pq


def _damaged(path: Path, exc: Exception) -> InputError:
    return InputError(path, f"not a readable Parquet file: {' '.join(str(exc).split())[:200]}")


def read_parquet_edges(path: Path, options: ReadOptions) -> Graph:
    """Read the source and destination columns (3.8's names, or the options') of a Parquet file: into memory, or where
    the options carry a scratch directory (`spill`) into files there, mapped."""
    pq = _parquet_module(path)
    if options.header is False:
        raise InputError(path, "a Parquet file always names its columns: --no-header applies to text tables only")
    try:
        pf = pq.ParquetFile(path)
        schema, num_rows = pf.schema_arrow, int(pf.metadata.num_rows)
    except Exception as exc:  # pyarrow raises assorted errors on damaged files
        raise _damaged(path, exc) from None
    names = list(schema.names)
    columns = resolve_columns(path, names, len(names), options)
    import pyarrow.types as pat

    for c in columns:
        if not pat.is_integer(schema.field(c).type):
            raise InputError(path, f"column {names[c]!r} has type {schema.field(c).type}; node ids must be integers")
    # into memory, exactly the footer's rows; where the options carry a scratch directory (`spill`), into files there
    out = (growing_ids(options.spill, "src", num_rows), growing_ids(options.spill, "dst", num_rows))
    at, highest = 0, -1
    try:
        for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=[names[c] for c in columns]):
            if at + batch.num_rows > num_rows:
                raise InputError(path, f"the row groups hold more rows than the footer's {num_rows} (damaged?)")
            for target, column, name in zip(out, batch.columns, (names[c] for c in columns)):
                ids = _ids(path, column, name, at)
                highest = max(highest, int(ids.max(initial=-1)))
                target.append(ids)
            at += batch.num_rows
    except InputError:
        raise
    except Exception as exc:
        raise _damaged(path, exc) from None
    if at != num_rows:
        raise InputError(path, f"the footer counts {num_rows} rows but the row groups hold {at} (truncated?)")
    return Graph(highest + 1, out[0].finish(), out[1].finish())


def _ids(path: Path, column: Any, name: str, row0: int) -> np.ndarray:
    """One batch of a column as int64, refusing nulls, negative ids and ids past int64."""
    if column.null_count:
        row = row0 + int(np.argmax(np.asarray(column.is_null())))
        raise InputError(path, f"column {name!r}: row {row} is null (every edge needs both ids)")
    values = column.to_numpy(zero_copy_only=False)
    if values.dtype == np.uint64 and values.size and int(values.max()) > np.iinfo(np.int64).max:
        row = row0 + int(np.argmax(values > np.iinfo(np.int64).max))
        raise InputError(path, f"column {name!r}: row {row} holds id {int(values[row - row0])}, past int64")
    values = values.astype(np.int64, copy=False)
    negative = values < 0
    if negative.any():
        row = int(np.argmax(negative))
        raise InputError(path, f"column {name!r}: row {row0 + row} holds a negative id {int(values[row])}")
    return values
