"""Input graph readers (SPEC.md section 3): `.npz`, extra `.npy`, SNAP text, METIS, DIMACS.

Everything is validated before a Graph is returned, and every problem is one
`InputError(path, problem)`. Arrays stored uncompressed are memory-mapped (a
`.npy` file, or a ZIP_STORED member of an `.npz` mapped at its data offset),
so reading a large graph costs page cache, not a copy. Nothing is unpickled.
Text formats are decompressed and tokenised in large blocks with numpy
(see `tokenize`), never parsed line by line in Python.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional, Union

from gpart.base.errors import InputError
from gpart.base.graph import Graph
from gpart.formats.input.checks import check_data_array, check_input_file, check_name, split_compression
from gpart.formats.input.chunked import read_chunked_graph
from gpart.formats.input.npz import open_npy, read_npz_graph
from gpart.formats.input.text_graphs import read_dimacs, read_metis, read_snap

PathLike = Union[str, "os.PathLike[str]"]

TEXT_SUFFIXES = (".txt", ".tsv", ".edges", ".el")


def read_graph(
    path: PathLike,
    node_data: Optional[Mapping[str, PathLike]] = None,
    edge_data: Optional[Mapping[str, PathLike]] = None,
) -> Graph:
    """Read and validate an input graph; arrays are memory-mapped where the format allows.

    `node_data` / `edge_data` map array names to extra `.npy` files (SPEC.md 3.2).
    The format is chosen by the file name (`input_format(path)`).
    """
    path = Path(path)
    if path.is_dir() and (path / "manifest.json").is_file():
        graph = read_chunked_graph(path)
        add_extra_arrays(graph, path, node_data or {}, edge_data or {})
        return graph
    check_input_file(path)
    fmt = input_format(path)
    if fmt == "npz":
        graph = read_npz_graph(path)
    elif fmt == "snap":
        graph = read_snap(path)
    elif fmt == "metis":
        graph = read_metis(path)
    else:
        graph = read_dimacs(path)
    graph.source = os.fspath(path)
    graph.input_format = fmt
    add_extra_arrays(graph, path, node_data or {}, edge_data or {})
    return graph


def input_format(path: PathLike) -> str:
    """The input format a file name selects: 'npz', 'snap', 'metis' or 'dimacs'."""
    name = Path(path).name.lower()
    base, compression = split_compression(name)
    if base.endswith(".npz") and compression is None:
        return "npz"
    if base.endswith(TEXT_SUFFIXES):
        return "snap"
    if base.endswith(".graph"):
        return "metis"
    if base.endswith(".gr"):
        return "dimacs"
    raise InputError(
        path,
        "unknown input format (expected .npz, a SNAP edge list .txt/.tsv/.edges/.el, "
        "a METIS .graph or a DIMACS .gr, text optionally .gz/.xz/.bz2)",
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

