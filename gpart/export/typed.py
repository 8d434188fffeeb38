"""`gpart export-feat PARTS --node-type T` for typed results (SPEC.md 8.5): typed node arrays in typed id order.

Row `i` of an export is node `i` of type `T`: partition p owns the typed ids
`node_ids[S:S+n] - offset` (one ascending block, SPEC.md 8.2) and stores their
rows as `node_data/<T>/<name>`, so a window of typed ids is filled from every
partition with one binary search each, as for homogeneous results. The
CRC-32 of every array read is checked before the export starts.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from gpart.base.errors import InputError, IntegrityError
from gpart.bytes.buffers import BufferRing
from gpart.formats.files.dtypes import storage_dtype
from gpart.formats.partition.typed import HETERO_KEY, node_data_key


class TypedOrderRows:
    """Node array `name` of node type `ntype` of a typed result, read back in typed id order (a RowSource)."""

    def __init__(self, reader: Any, ntype: str, name: str):
        meta = reader.hetero
        t = meta.ntype_index(ntype, reader.directory)
        dtype, row = meta.node_data[ntype][name]
        self.reader, self.name = reader, name
        self.dtype = storage_dtype(dtype)
        self.shape = (meta.num_nodes[t], *row)
        offset = int(meta.node_offsets[t])
        self._parts = []
        for p in range(reader.num_parts):
            counts = reader.part_info(p)[HETERO_KEY]["num_owned"]
            start = sum(counts[:t])
            for key in ("node_ids", node_data_key(ntype, name)):
                reader.check_checksum(reader.entry(p, key))  # damaged input is refused, never exported as intact
            ids = reader.array(p, "node_ids")[start:start + counts[t]]
            self._parts.append((np.asarray(ids, dtype=np.int64) - offset, reader.array(p, node_data_key(ntype, name))))
        self._ring = BufferRing()

    def read(self, start: int, stop: int) -> np.ndarray:
        rows = stop - start
        out = self._ring.get((rows, *self.shape[1:]), self.dtype)
        seen = np.zeros(rows, dtype=bool)
        for p, (ids, data) in enumerate(self._parts):
            lo, hi = (int(x) for x in np.searchsorted(ids, [start, stop]))
            if hi <= lo:
                continue
            local = ids[lo:hi] - start
            if seen[local].any():
                raise IntegrityError(self.reader.directory, f"partition {p}: typed ids {start}..{stop - 1} owned twice")
            out[local] = data[lo:hi]
            seen[local] = True
        if not seen.all():
            raise IntegrityError(self.reader.directory, f"owned {self.name!r} rows do not cover typed ids {start}..{stop - 1}")
        return out


def typed_exports(reader: Any, name: Optional[str], node_type: Optional[str]) -> list[tuple[str, TypedOrderRows]]:
    """(export name `<type>.<array>`, rows) for the typed node arrays chosen by `node_type` and `name`."""
    meta = reader.hetero
    types = meta.node_types if node_type is None else [meta.node_types[meta.ntype_index(node_type, reader.directory)]]
    out = []
    for ntype in types:
        names = list(meta.node_data[ntype])
        if name is not None:
            if name not in names:
                if node_type is None:
                    continue
                raise InputError(reader.directory, f"node type {ntype!r} has no node array {name!r} (has: {', '.join(names) or 'none'})")
            names = [name]
        out += [(f"{ntype}.{n}", TypedOrderRows(reader, ntype, n)) for n in names]
    if not out:
        what = f"named {name!r} " if name else ""
        raise InputError(reader.directory, f"the typed result has no node arrays {what}to export")
    return out
