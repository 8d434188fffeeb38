"""`gpart info` and `gpart verify` for typed partition results (SPEC.md 8.4-8.5).

The result is a partition of the type-erased graph, so gpart.inspection.result's
checks (checksums, the invariants of 4.4 and, with the input, the
reconstruction of every erased edge) run first, on the erased graph of the
typed input; `verify_typed` then checks what makes it typed: the edge type
of every stored edge, the per-type counts and cut, and every typed node and
edge data row against the typed input, byte for byte.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

import numpy as np

from gpart.base.errors import GpartError
from gpart.base.graph import Graph
from gpart.bytes.crc import CHUNK_BYTES
from gpart.engines.balance import share_balance
from gpart.formats.files.dtypes import storage_dtype
from gpart.formats.input.typed import HeteroGraph, read_hetero_graph
from gpart.formats.partition.reader import PartitionReader
from gpart.formats.partition.typed import EDGE_TYPE_KEY, HETERO_KEY, edge_data_key, etype_key, node_data_key
from gpart.formats.partition.writer import part_dir

PathLike = Union[str, "os.PathLike[str]"]


def hetero_info(reader: PartitionReader) -> dict[str, Any]:
    """Per node type: nodes, owned per partition, balance; per edge type: edges, cut, per partition, balance."""
    meta = reader.hetero
    parts = [reader.part_info(p)[HETERO_KEY] for p in range(reader.num_parts)]
    owned = np.array([h["num_owned"] for h in parts], dtype=np.int64).reshape(len(parts), -1)
    edges = np.array([h["num_edges"] for h in parts], dtype=np.int64).reshape(len(parts), -1)
    cut = np.array([h["num_cut"] for h in parts], dtype=np.int64).reshape(len(parts), -1)
    halo = np.array([h["num_halo"] for h in parts], dtype=np.int64).reshape(len(parts), -1)
    return {
        "halo_rows": bool(reader.halo),  # whether typed node arrays hold the halo rows too (SPEC.md 8.4)
        "node_types": [{"name": t, "num_nodes": int(meta.num_nodes[i]), "owned": owned[:, i].tolist(), "halo": halo[:, i].tolist(),
                        "node_balance": share_balance(owned[:, i]), "node_data": sorted(meta.node_data[t])}
                       for i, t in enumerate(meta.node_types)],
        "edge_types": [{"edge_type": list(e), "num_edges": int(meta.num_edges[r]), "stored": edges[:, r].tolist(),
                        "edge_cut": int(cut[:, r].sum()),
                        "edge_cut_ratio": float(cut[:, r].sum() / meta.num_edges[r]) if meta.num_edges[r] else 0.0,
                        "edge_balance": share_balance(edges[:, r]), "edge_data": sorted(meta.edge_data[e])}
                       for r, e in enumerate(meta.edge_types)],
    }


def typed_input(graph: Union[PathLike, HeteroGraph, None]) -> tuple[Optional[HeteroGraph], Optional[Graph]]:
    """(the typed input, its erased graph) for `verify --graph`, or (None, None) without one."""
    if graph is None:
        return None, None
    hg = graph if isinstance(graph, HeteroGraph) else read_hetero_graph(graph)
    return hg, hg.erased()


def verify_typed(reader: PartitionReader, report: dict[str, Any], hg: Optional[HeteroGraph]) -> dict[str, Any]:
    """Add the typed checks to the report of the erased result's verification."""
    problems: list[str] = []
    if report["checked"]["invariants"]:
        _TypedChecks(reader, problems, hg).run()
    elif hg is not None:
        report["notes"].append("typed arrays not checked against the input: the result is damaged")
    report["problems"] = list(dict.fromkeys(report["problems"] + problems))
    report["ok"] = not report["problems"]
    report["checked"]["typed"] = report["checked"]["invariants"]
    if hg is not None:
        report["checked"]["graph"] = hg.source
    return report


class _TypedChecks:
    def __init__(self, reader: PartitionReader, problems: list[str], hg: Optional[HeteroGraph]):
        self.reader, self.problems, self.hg = reader, problems, hg
        self.meta = reader.hetero

    def problem(self, where: str, text: str) -> None:
        self.problems.append(f"{self.reader.directory / where}: {text}")

    def run(self) -> None:
        meta = self.meta
        if self.hg is not None and not self._same_types():
            return
        owned_total = np.zeros(len(meta.node_types), dtype=np.int64)
        edges_total = np.zeros(len(meta.edge_types), dtype=np.int64)
        for p in range(self.reader.num_parts):
            try:
                counts = self._check_part(p)
            except GpartError as exc:
                self.problems.append(exc.one_line())
                continue
            owned_total += counts[0]
            edges_total += counts[1]
        if not np.array_equal(owned_total, meta.num_nodes) or not np.array_equal(edges_total, meta.num_edges):
            self.problem("manifest.json", f"partitions own {owned_total.tolist()} nodes and store {edges_total.tolist()} edges "
                                          f"per type; the types have {meta.num_nodes} and {meta.num_edges}")

    def _same_types(self) -> bool:
        meta, hg = self.meta, self.hg
        mine = (hg.node_types, [hg.num_nodes[t] for t in hg.node_types], hg.edge_types, [hg.num_edges(e) for e in hg.edge_types])
        if mine != (meta.node_types, meta.num_nodes, meta.edge_types, meta.num_edges):
            self.problem("manifest.json", f"types differ from the input's: result {meta.node_types} {meta.num_nodes} "
                                          f"{[etype_key(e) for e in meta.edge_types]} {meta.num_edges}, input {mine[0]} {mine[1]} "
                                          f"{[etype_key(e) for e in mine[2]]} {mine[3]}")
            return False
        for t in meta.node_types:
            for name in set(hg.node_data.get(t, {})) ^ set(meta.node_data[t]):
                self.problem("manifest.json", f"node array '{t}/{name}' is in only one of the input and the result")
        for e in meta.edge_types:
            for name in set(hg.edge_data.get(e, {})) ^ set(meta.edge_data[e]):
                self.problem("manifest.json", f"edge array '{etype_key(e)}/{name}' is in only one of the input and the result")
        return True

    def _check_part(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        meta, reader, here = self.meta, self.reader, part_dir(p)
        info = reader.part_info(p)
        counts = info[HETERO_KEY]
        node_ids = np.asarray(reader.array(p, "node_ids"))
        indices = np.asarray(reader.array(p, "indices"))
        edge_ids = np.asarray(reader.array(p, "edge_ids"))
        etype = np.asarray(reader.array(p, EDGE_TYPE_KEY))
        noff, eoff = meta.node_offsets, meta.edge_offsets
        num_owned = info["num_owned"]
        owned = np.diff(np.searchsorted(node_ids[:num_owned], noff))
        halo = np.diff(np.searchsorted(node_ids[num_owned:], noff))
        per_edge = np.bincount(etype.astype(np.int64), minlength=len(meta.edge_types)) if etype.size else np.zeros(len(meta.edge_types), np.int64)
        if not np.array_equal(etype, np.searchsorted(eoff, edge_ids, side="right") - 1):
            self.problem(f"{here}/{EDGE_TYPE_KEY}", "edge types disagree with the edge ids and the edge type offsets")
        if owned.tolist() != counts["num_owned"] or halo.tolist() != counts["num_halo"]:
            self.problem(here, f"hetero counts of owned/halo nodes {counts['num_owned']}/{counts['num_halo']}, "
                               f"the node ids give {owned.tolist()}/{halo.tolist()}")
        cut = np.bincount(etype[indices >= num_owned].astype(np.int64), minlength=len(meta.edge_types))
        if per_edge.tolist() != counts["num_edges"] or cut.tolist() != counts["num_cut"]:
            self.problem(here, f"hetero counts of edges/cut {counts['num_edges']}/{counts['num_cut']}, "
                               f"the edge types give {per_edge.tolist()}/{cut.tolist()}")
        if self.hg is not None:
            self._compare_data(p, node_ids[:num_owned], node_ids[num_owned:] if self.reader.halo else node_ids[:0], edge_ids, etype)
        return owned, per_edge

    def _compare_data(self, p: int, owned: np.ndarray, halo: np.ndarray, edge_ids: np.ndarray, etype: np.ndarray) -> None:
        """Typed node rows (owned, then halo rows of the type with halo 1) and edge rows against the input."""
        meta, noff, eoff = self.meta, self.meta.node_offsets, self.meta.edge_offsets
        bounds, hb = np.searchsorted(owned, noff), np.searchsorted(halo, noff)
        for t, ntype in enumerate(meta.node_types):
            typed = np.concatenate([owned[bounds[t]:bounds[t + 1]], halo[hb[t]:hb[t + 1]]]) - noff[t]
            for name in meta.node_data[ntype]:
                if name in self.hg.node_data.get(ntype, {}):
                    self._compare_rows(p, node_data_key(ntype, name), self.hg.node_data[ntype][name], typed)
        for r, et in enumerate(meta.edge_types):
            typed = edge_ids[etype == r] - eoff[r]
            for name in meta.edge_data[et]:
                if name in self.hg.edge_data.get(et, {}):
                    self._compare_rows(p, edge_data_key(et, name), self.hg.edge_data[et][name], typed)

    def _compare_rows(self, p: int, key: str, source: np.ndarray, ids: np.ndarray) -> None:
        stored = self.reader.array(p, key)
        dtype = storage_dtype(self.reader.entry(p, key).dtype)
        row_bytes = max(1, int(np.prod(source.shape[1:], dtype=np.int64)) * dtype.itemsize)
        step = max(1, CHUNK_BYTES // row_bytes)
        for start in range(0, ids.shape[0], step):
            want = np.ascontiguousarray(source[ids[start:start + step]], dtype=dtype)
            have = np.ascontiguousarray(stored[start:start + step])
            # bytes, not values: NaN payloads and -0.0 must survive exactly
            differ = want.reshape(want.shape[0], -1).view(np.uint8) != have.reshape(have.shape[0], -1).view(np.uint8)
            bad = np.flatnonzero(differ.any(axis=1)) if differ.size else np.empty(0, np.int64)
            if bad.size:
                row = start + int(bad[0])
                self.problem(f"{part_dir(p)}/{key}", f"{bad.size} rows differ from the input's (first: row {row}, typed id {int(ids[row])})")
                return
