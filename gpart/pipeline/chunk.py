"""`gpart chunk`: any single-machine input graph -> a chunked graph directory (SPEC.md 10.1)."""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Union

from gpart.formats.files.commit import check_output_dir
from gpart.formats.files.names import work_name
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.input.chunked import write_chunked
from gpart.formats.input.readers import read_graph

PathLike = Union[str, "os.PathLike[str]"]


def chunk_graph(input: PathLike, out_dir: PathLike, num_chunks: int, *, force: bool = False,
                node_data: Optional[Mapping[str, PathLike]] = None,
                edge_data: Optional[Mapping[str, PathLike]] = None) -> dict[str, Any]:
    """Write the graph `input` (any format of SPEC.md 3, plus extra arrays) as `num_chunks` chunks; return the manifest.

    The output is checked before the input is read (a refusal costs nothing). A text input's parsed ids go to a
    scratch directory beside the output, mapped, not to memory: a text edge list larger than memory is chunked in
    bounded memory, and its chunks then partition on one machine or across ranks."""
    inputs = [input, *[str(p).split(".npz:")[0] for p in (*(node_data or {}).values(), *(edge_data or {}).values())]]
    out = check_output_dir(out_dir, force, inputs)
    with ScratchDir(out.parent, prefix=f"{work_name(out, 'staging').name}-scratch-") as spill:
        graph = read_graph(input, node_data=node_data, edge_data=edge_data, spill=spill)
        return write_chunked(graph, out_dir, num_chunks, force=force, inputs=inputs)
