"""Input graph readers (SPEC.md section 3): `.npz`, extra `.npy`, SNAP text, METIS, DIMACS, CSV/TSV and
Parquet edge tables, chunked directories and OGB dataset folders.

Everything is validated before a Graph is returned, and every problem is one
`InputError(path, problem)`. Arrays stored uncompressed are memory-mapped (a
`.npy` file, or a ZIP_STORED member of an `.npz` mapped at its data offset),
so reading a large graph costs page cache, not a copy. Nothing is unpickled.
Text formats are decompressed and tokenised in large blocks with numpy
(see `text_tokens`), never parsed line by line in Python.

A format is one reader module and one entry of `READERS` (its name -> the function that reads a path
with its ReadOptions) and, for files, of `SUFFIXES`; directories are told apart by `DIRECTORY_FORMATS`.
"""

from __future__ import annotations

import os
from dataclasses import replace
from itertools import islice
from pathlib import Path
from typing import Callable, Mapping, Optional, Union

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.input.checks import check_data_array, check_input_file, check_name, split_compression
from gpart.formats.input.chunked import is_chunked_dir, read_chunked_graph
from gpart.formats.input.edge_table import read_edge_table
from gpart.formats.input.npz import open_npy, read_npz_graph
from gpart.formats.input.ogb import is_ogb_dir, read_ogb
from gpart.formats.input.options import GraphInput, ReadOptions, split_input
from gpart.formats.input.parquet_edges import read_parquet_edges
from gpart.formats.input.text_graphs import read_dimacs, read_metis, read_snap

PathLike = Union[str, "os.PathLike[str]"]
Reader = Callable[[Path, ReadOptions], Graph]

# a file name's ending (before .gz/.xz/.bz2, which text formats may add) -> its format
SUFFIXES = {
    ".npz": "npz", ".txt": "snap", ".edges": "snap", ".el": "snap", ".graph": "metis", ".gr": "dimacs",
    ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet",
}
BINARY_FORMATS = {"npz", "parquet"}  # read as they are: never compressed
TABLE_FORMATS = {"csv", "tsv", "parquet", "snap"}  # the formats that take --src-col/--dst-col/--header


def _snap(path: Path, options: ReadOptions) -> Graph:
    # a SNAP file with table options (a header, named columns) is a whitespace-separated table
    return read_edge_table(path, "text", options) if options.table_options else read_snap(path, options.spill)


READERS: dict[str, Reader] = {
    "npz": lambda path, options: read_npz_graph(path, options.spill),
    "snap": _snap,
    "metis": lambda path, options: read_metis(path, options.spill),
    "dimacs": lambda path, options: read_dimacs(path, options.spill),
    "csv": lambda path, options: read_edge_table(path, "csv", options),
    "tsv": lambda path, options: read_edge_table(path, "tsv", options),
    "parquet": read_parquet_edges,
    "chunked": lambda path, options: read_chunked_graph(path, options.spill),
    "ogb": read_ogb,
}
# directory formats: how each is recognised, in order
DIRECTORY_FORMATS: tuple[tuple[str, Callable[[Path], bool]], ...] = (("chunked", is_chunked_dir), ("ogb", is_ogb_dir))


def read_graph(
    path: Union[PathLike, GraphInput],
    node_data: Optional[Mapping[str, PathLike]] = None,
    edge_data: Optional[Mapping[str, PathLike]] = None,
    spill: Optional[ScratchDir] = None,
) -> Graph:
    """Read and validate an input graph; arrays are memory-mapped where the format allows.

    `path` is a file or directory, or a GraphInput carrying reading options (columns, header, OGB split).
    `node_data` / `edge_data` map array names to extra `.npy` files (SPEC.md 3.2). `spill`: a scratch directory
    where a reader that concatenates pieces (a chunked directory) or parses text (edge lists and tables, METIS, DIMACS,
    an OGB folder's CSV files) puts the arrays, mapped, instead of memory.
    The format is chosen by the file name (`input_format(path)`) or the directory's contents.
    """
    raw, options = split_input(path)
    options = replace(options, spill=spill)
    path = Path(raw)
    fmt = input_format(path)
    if options.table_options and fmt not in TABLE_FORMATS:
        raise InputError(path, f"--src-col, --dst-col and --header apply to edge tables (.csv, .tsv, .parquet, "
                               f"text edge lists), not to this {fmt} input")
    if options.split is not None and fmt != "ogb":
        raise InputError(path, f"--split applies to OGB dataset folders, not to this {fmt} input")
    graph = READERS[fmt](path, options)
    graph.source = os.fspath(raw)
    graph.input_format = fmt
    add_extra_arrays(graph, path, node_data or {}, edge_data or {})
    return graph


def input_format(path: PathLike) -> str:
    """The input format a path selects: a directory by its contents, a file by its name (SUFFIXES)."""
    path = Path(path)
    if path.is_dir():
        for fmt, recognises in DIRECTORY_FORMATS:
            if recognises(path):
                return fmt
        inside = sorted(p.name for p in islice(path.iterdir(), 1000) if p.is_dir() and is_ogb_dir(p))
        hint = f": it holds the OGB dataset folder{'s' if len(inside) > 1 else ''} {', '.join(inside)}, give one" if inside else ""
        raise InputError(path, "is a directory, expected a file, a chunked graph (with manifest.json) "
                               f"or an OGB dataset folder (with raw/edge.csv.gz){hint}")
    check_input_file(path)
    base, compression = split_compression(path.name.lower())
    known = SUFFIXES.get(Path(base).suffix)
    if known is not None and not (compression and known in BINARY_FORMATS):
        return known
    raise InputError(
        path,
        "unknown input format (expected .npz, .parquet, a CSV/TSV edge table .csv/.tsv, a SNAP edge list "
        ".txt/.edges/.el, a METIS .graph or a DIMACS .gr, text optionally .gz/.xz/.bz2)",
    )


def add_extra_arrays(graph: Graph, path: Path, node_data: Mapping[str, PathLike], edge_data: Mapping[str, PathLike]) -> None:
    seen: dict[str, str] = {name: "node array" for name in graph.node_data}
    seen.update({name: "edge array" for name in graph.edge_data})
    for what, mapping, target, expected, counted in (
        ("node array", node_data, graph.node_data, graph.num_nodes, "num_nodes"),
        ("edge array", edge_data, graph.edge_data, graph.num_edges, "num_edges"),
    ):
        for name, extra in mapping.items():
            extra = Path(extra)
            check_name(extra, name, f"--{what.split()[0]}-data")
            if name in seen:
                raise InputError(extra, f"data array name {name!r} given twice (already a {seen[name]} of {path.name})")
            check_input_file(extra)
            if not extra.name.lower().endswith(".npy"):
                raise InputError(extra, f"{what} {name!r}: expected a .npy file")
            arr = open_npy(extra)
            check_data_array(extra, name, arr, what)
            if arr.shape[0] != expected:
                raise InputError(extra, f"{what} {name!r} has {arr.shape[0]} rows, expected {counted} = {expected} of {path.name}")
            target[name] = arr
            seen[name] = what

