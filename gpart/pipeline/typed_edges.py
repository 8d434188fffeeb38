"""A typed partition's edge arrays on the bounded path (SPEC.md 8.4 under 4.6): streamed block by block.

On the bounded path (gpart.pipeline.csc_order.OwnerBucketOrder) a partition's edges
come from scratch files in blocks, in CSC order, with their erased sources.
`write_typed_edges` writes the partition's `edge_type` array and each edge
type's edge data rows from those blocks and counts, per edge type, the
stored edges and the cut, and per node type the halo, without any array of
the partition's size: one pass over the blocks for the edge types and
counts, then one pass per typed edge data array (the row count of each
comes from the first pass). The arrays and their order are those of the
in-memory path (gpart.pipeline.typed.TypedArrays.edges), so the bytes are the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from gpart.formats.files.dtypes import dtype_name
from gpart.formats.partition.typed import EDGE_TYPE_DTYPE, EDGE_TYPE_KEY, EdgeType, edge_data_key
from gpart.formats.partition.writer import part_dir
from gpart.pipeline.write_arrays import gather_chunks

EdgeChunks = Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]


def edge_types_of(ids: np.ndarray, edge_offsets: np.ndarray) -> np.ndarray:
    """The edge type index of erased edge ids (edge type r holds ids edge_offsets[r]..edge_offsets[r+1]-1)."""
    return (np.searchsorted(edge_offsets, ids, side="right") - 1).astype(EDGE_TYPE_DTYPE)


@dataclass(frozen=True)
class ErasedTypes:
    """Where each type's ids lie among the erased ids, and the typed edge data rows: node type t holds erased
    node ids node_offsets[t]..node_offsets[t+1]-1, edge type r (edge_types[r]) erased edge ids
    edge_offsets[r]..edge_offsets[r+1]-1."""

    node_offsets: np.ndarray
    edge_offsets: np.ndarray
    edge_types: Sequence[EdgeType]
    edge_data: Mapping[EdgeType, Mapping[str, np.ndarray]]


def write_typed_edges(writer: Any, p: int, part: dict[str, Any], chunks: EdgeChunks, types: ErasedTypes, owner: np.ndarray,
                      mark: np.ndarray) -> dict[str, np.ndarray]:
    """Partition p's `edge_type` and typed edge data arrays from `chunks()` ((edge ids, sources) per block,
    callable again); adds their entries to `part["arrays"]` and returns the per-type counts
    {num_edges, num_cut} (per edge type) and num_halo (per node type).

    `owner`: the part of every erased node id. `mark` is an all-False bool array over erased node ids,
    left all False again: the halo (the distinct remote sources) is marked in it rather than sorted out
    of the blocks."""
    node_offsets, edge_offsets, edge_types, edge_data = types.node_offsets, types.edge_offsets, types.edge_types, types.edge_data
    num_types = len(edge_types)
    num_edges = np.zeros(num_types, dtype=np.int64)
    num_cut = np.zeros(num_types, dtype=np.int64)
    types = writer.array(f"{part_dir(p)}/{EDGE_TYPE_KEY}", EDGE_TYPE_DTYPE, (), int(part["num_edges"]))
    for ids, sources in chunks():
        etype = edge_types_of(ids, edge_offsets)
        types.write(etype)
        remote = owner[sources] != p
        num_edges += np.bincount(etype, minlength=num_types)
        num_cut += np.bincount(etype[remote], minlength=num_types)
        mark[sources[remote]] = True
    part["arrays"][EDGE_TYPE_KEY] = types.finish().to_json()
    halo = np.flatnonzero(mark)
    mark[halo] = False
    for r, et in enumerate(edge_types):
        for name, arr in edge_data.get(et, {}).items():
            key = edge_data_key(et, name)
            # one array at a time, as in memory: HDF5 places a dataset at its first write, so
            # interleaving the arrays' writes would change the file's bytes
            rows = writer.array(f"{part_dir(p)}/{key}", dtype_name(arr.dtype), arr.shape[1:], int(num_edges[r]))
            for ids, _ in chunks():
                typed_ids = ids[edge_types_of(ids, edge_offsets) == r] - edge_offsets[r]
                for piece in gather_chunks(arr, typed_ids, writer.after_writes):  # input pages released once written
                    rows.write(piece)
            part["arrays"][key] = rows.finish().to_json()
    return {"num_edges": num_edges, "num_halo": np.diff(np.searchsorted(halo, node_offsets)), "num_cut": num_cut}
