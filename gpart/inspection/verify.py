"""`gpart verify` of a partition result: every checksum and every invariant of SPEC.md 4.4, and,
given the input graph, the proof that the partitions reconstruct it exactly.

Each stored edge `(node_ids[indices[k]], node_ids[column of k])` equals
`(src[e], dst[e])` for its edge id `e`, every edge id appears exactly once, and
node and edge data rows are byte-identical to the input's. Problems are
collected, not raised, so one run lists all the damage.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from gpart.base.errors import GpartError, InputError, InputMismatchError
from gpart.base.graph import Graph
from gpart.base.memory import default_max_memory
from gpart.base.progress import Progress
from gpart.bytes.crc import CHUNK_BYTES
from gpart.bytes.reader import release_rows
from gpart.engines.balance import train_mask
from gpart.formats.files.dtypes import storage_dtype
from gpart.formats.files.manifest import MANIFEST_NAME
from gpart.formats.input.readers import read_graph
from gpart.formats.partition.reader import PartitionReader
from gpart.formats.partition.reverse import INPUT_EDGE_KEY
from gpart.formats.partition.writer import FORMAT as PARTITION_FORMAT
from gpart.formats.partition.writer import data_key, part_dir
from gpart.pipeline.reverse_edges import ReverseEdges, reverse_scratch_dir, with_reverse_edges

PathLike = Union[str, "os.PathLike[str]"]


def check_input_counts(reader: PartitionReader, num_nodes: int, num_input_edges: int, given: Optional[str]) -> None:
    """InputMismatchError unless an input of `num_nodes` nodes and `num_input_edges` edges (before any reverse
    copies) can be the one the result was made from: its manifest records the counts (SPEC.md 4.4, 4.7)."""
    recorded = reader.manifest["graph"]
    nodes = reader.num_nodes
    edges = reader.reverse.num_input_edges if reader.reverse is not None else reader.num_edges
    if (num_nodes, num_input_edges) != (nodes, edges):
        made_from = recorded.get("source") if isinstance(recorded.get("source"), str) else "an in-memory graph"
        raise InputMismatchError(
            given, f"is not the graph {reader.directory} was made from: it has {num_nodes:,} nodes and {num_input_edges:,} edges, "
                   f"the result's input {nodes:,} and {edges:,} ({made_from}); the result itself was not checked")


class PartitionVerifier:
    """Collects the problems of one partition result (`run`); see the module docstring."""

    def __init__(self, reader: PartitionReader, progress: Progress, parts: Optional[Sequence[int]] = None):
        self.reader = reader
        self.progress = progress
        self.parts = None if parts is None else sorted(set(parts))  # None: every partition
        self.problems: list[str] = []
        self.notes: list[str] = []
        self.damaged: set[str] = set()
        # problems of the result itself found while comparing with the input (edge order within a
        # column): damage, kept apart from what the comparison finds (the report's `mismatch`)
        self.own_problems: list[str] = []

    def problem(self, where: str, text: str) -> None:
        self.problems.append(f"{self.reader.directory / where}: {text}")

    def run(self, graph: Union[PathLike, Graph, None], node_data, edge_data, reverse: Optional[ReverseEdges] = None) -> dict[str, Any]:
        """Checksums, invariants and, given the input `graph`, its reconstruction. A result with reverse
        edges is checked against the input with its reverse copies added (gpart.pipeline.reverse_edges), unless
        `graph` holds them already and `reverse` says which (typed results, gpart.inspection.result).

        A `graph` whose node or edge count differs from the result's input is refused first
        (InputMismatchError, nothing else checked); disagreements with an input of the right counts are
        the report's `mismatch` lines, apart from the `problems` of the result itself."""
        reader = self.reader
        mismatch: list[str] = []
        self._check_parts_request(graph is not None or bool(node_data) or bool(edge_data))
        with reverse_scratch_dir(graph is not None and reader.reverse is not None and reverse is None) as scratch:
            g = None if graph is None else self._load_graph(graph, node_data, edge_data)
            if g is not None and reverse is None:  # typed callers check their input's counts before adding its reverses
                check_input_counts(reader, g.num_nodes, g.num_edges, g.source)
                if reader.reverse is not None:
                    g, reverse = with_reverse_edges(g, scratch, default_max_memory())
            entries = [(label, entry) for label, entry in reader.all_entries() if self._checks(label)]
            with self.progress.stage("checksums", total=len(entries)) as bar:
                for label, entry in entries:
                    problems = self._checksum(entry)
                    if problems:
                        self.damaged.add(label)
                        self.problems += problems
                    bar.advance(1)
            structure_checked = self._invariants() and self._reverse_invariants()
            if g is not None and structure_checked:
                intact = len(self.problems)
                self._against_graph(g)
                self._against_reverse(reverse)
                mismatch, self.problems = self.problems[intact:], self.problems[:intact] + self.own_problems
            elif g is not None:
                self.notes.append("reconstruction of the input not checked: the result is damaged")
        return {
            "format": PARTITION_FORMAT,
            "directory": str(reader.directory),
            "ok": not self.problems and not mismatch,
            "problems": list(dict.fromkeys(self.problems)),  # a broken HDF5 file fails every dataset alike
            "mismatch": list(dict.fromkeys(mismatch)),
            "notes": self.notes,
            "checked": {
                "arrays": len(entries),
                "checksums": True,
                "invariants": structure_checked,
                "graph": (g.source if isinstance(g.source, str) else None) if g is not None else None,
                "reconstruction": g is not None and structure_checked,
            },
        }

    def _check_parts_request(self, compares_input: bool) -> None:
        """A one-line InputError for --parts naming no partition of the result, or given with an input to compare."""
        if self.parts is None:
            return
        where = self.reader.directory
        if not self.parts or self.parts[0] < 0 or self.parts[-1] >= self.reader.num_parts:
            raise InputError(where, f"--parts must name partitions 0..{self.reader.num_parts - 1}, got {self.parts}")
        if compares_input:
            raise InputError(where, "--graph needs every partition: verify the machines' directories copied together, "
                                    "or leave --parts out")
        missing = [p for p in range(self.reader.num_parts) if p not in self.parts]
        if missing:
            self.notes.append(f"partitions {missing} not checked (--parts): nor that every edge is stored once, nor "
                              f"stats.edge_cut, which need every partition")

    def _checks(self, label: str) -> bool:
        """Whether the array `label` (book/..., part_<p>/...) is one this run checks."""
        head = label.split("/", 1)[0]
        return self.parts is None or not head.startswith("part_") or int(head[len("part_"):]) in self.parts

    def _checksum(self, entry) -> list[str]:
        try:
            self.reader.check_checksum(entry)
        except GpartError as exc:
            return [exc.one_line()]
        return []

    # -- structure without the input

    def _array(self, part: int, key: str) -> Optional[np.ndarray]:
        if f"{part_dir(part)}/{key}" in self.damaged:
            return None
        try:
            return np.asarray(self.reader.array(part, key))
        except GpartError as exc:
            self.problems.append(exc.one_line())
            return None

    def _invariants(self) -> bool:
        """SPEC.md 4.4 invariants. Returns False when damaged arrays prevent the check."""
        reader = self.reader
        if any(label.startswith("book/") for label in self.damaged):
            return False
        try:
            book = reader.book()
        except GpartError as exc:
            self.problems.append(exc.one_line())
            return False
        n, num_edges = reader.num_nodes, reader.num_edges
        problems_before = len(self.problems)
        seen = np.zeros(num_edges, dtype=bool)
        complete = True
        edge_cut = 0
        checked = range(reader.num_parts) if self.parts is None else self.parts
        with self.progress.stage("invariants", total=len(checked)) as bar:
            for p in checked:
                arrays = {k: self._array(p, k) for k in ("node_ids", "indptr", "indices", "edge_ids")}
                if any(a is None for a in arrays.values()):
                    complete = False
                    bar.advance(1)
                    continue
                edge_cut += self._check_part(p, book, n, num_edges, seen, **arrays)
                bar.advance(1)
        if not complete:
            return False
        if self.parts is not None:  # the checks below need every partition
            return len(self.problems) == problems_before
        if not seen.all():
            missing = np.flatnonzero(~seen)
            self.problem(MANIFEST_NAME, f"{missing.shape[0]} edge ids stored in no partition (first {missing[:5].tolist()})")
        stats = reader.manifest.get("stats")
        stats = stats if isinstance(stats, dict) else {}
        if stats.get("edge_cut") != edge_cut:
            self.problem(MANIFEST_NAME, f"stats.edge_cut is {stats.get('edge_cut')}, the partitions cut {edge_cut} edges")
        return len(self.problems) == problems_before

    def _check_part(self, p, book, n, num_edges, seen, node_ids, indptr, indices, edge_ids) -> int:
        pi = self.reader.part_info(p)
        owned_n, halo_n, edges_n = pi["num_owned"], pi["num_halo"], pi["num_edges"]
        here = part_dir(p)
        owned, halo = node_ids[:owned_n], node_ids[owned_n:]
        for what, ids in (("owned", owned), ("halo", halo)):
            if ids.size and (ids.min() < 0 or ids.max() >= n):
                self.problem(here, f"{what} node ids outside 0..{n - 1}")
                return 0
            if ids.size > 1 and not np.all(np.diff(ids) > 0):
                self.problem(here, f"{what} node ids are not strictly ascending")
        if owned.size:
            if not np.all(book.owner(owned) == p):
                self.problem(here, "owned nodes disagree with the partition book's owner")
            if not np.array_equal(book.local(owned), np.arange(owned_n)):
                self.problem(here, "owned nodes disagree with the partition book's local ids")
        if halo.size and np.any(book.owner(halo) == p):
            self.problem(here, "halo lists nodes this partition owns")
        if indptr[0] != 0 or indptr[-1] != edges_n or np.any(np.diff(indptr) < 0):
            self.problem(f"{here}/indptr", f"not non-decreasing from 0 to {edges_n}")
        if indices.size and (indices.min() < 0 or indices.max() >= owned_n + halo_n):
            self.problem(f"{here}/indices", f"local ids outside 0..{owned_n + halo_n - 1}")
            return 0
        remote = indices[indices >= owned_n] - owned_n
        if halo_n and np.bincount(remote, minlength=halo_n).min() == 0:
            self.problem(here, "halo lists nodes that are the source of no stored edge")
        if edge_ids.size:
            if edge_ids.min() < 0 or edge_ids.max() >= num_edges:
                self.problem(f"{here}/edge_ids", f"edge ids outside 0..{num_edges - 1}")
                return int(remote.shape[0])
            order = np.sort(edge_ids)
            dup_here = order.size > 1 and bool(np.any(order[1:] == order[:-1]))
            if dup_here or seen[edge_ids].any():
                self.problem(f"{here}/edge_ids", "edge ids stored more than once")
            seen[edge_ids] = True
        return int(remote.shape[0])

    def _reverse_invariants(self) -> bool:
        """SPEC.md 4.7: the copies of each stored edge type name strictly ascending input edges of the relation
        they reverse. True when there is nothing to check or it holds."""
        reader = self.reader
        if reader.reverse is None:
            return True
        if INPUT_EDGE_KEY in self.damaged:
            return False
        input_edge = np.asarray(reader.reverse_input_edge())
        for name, start, stop, bound in reader.reverse.blocks(reader.hetero):
            block = input_edge[start:stop]
            if block.size and (int(block.min()) < 0 or int(block.max()) >= bound or bool(np.any(np.diff(block) <= 0))):
                self.problem(INPUT_EDGE_KEY, f"copies of {name}: input edges are not strictly ascending within 0..{bound - 1}")
                return False
        return True

    # -- against the input

    def _load_graph(self, graph, node_data, edge_data) -> Graph:
        if isinstance(graph, Graph):
            return graph

        recorded = self.reader.manifest["graph"]
        extra_nodes = {k: v for k, v in recorded.get("node_data_files", {}).items() if Path(str(v).split(".npz:")[0]).exists()}
        extra_edges = {k: v for k, v in recorded.get("edge_data_files", {}).items() if Path(str(v).split(".npz:")[0]).exists()}
        extra_nodes.update(node_data or {})
        extra_edges.update(edge_data or {})
        return read_graph(graph, node_data=extra_nodes or None, edge_data=extra_edges or None)

    def _against_graph(self, g: Graph) -> None:
        reader = self.reader
        if (g.num_nodes, g.num_edges) != (reader.num_nodes, reader.num_edges):
            self.problem(
                MANIFEST_NAME,
                f"result has {reader.num_nodes} nodes and {reader.num_edges} edges, the input {g.num_nodes} and {g.num_edges}",
            )
            return
        self._data_names("node", reader.manifest["node_data"], g.node_data)
        self._data_names("edge", reader.manifest["edge_data"], g.edge_data)
        with self.progress.stage("reconstruct input", total=reader.num_parts) as bar:
            for p in range(reader.num_parts):
                self._reconstruct_part(p, g)
                bar.advance(1)

    def _against_reverse(self, expected: Optional[ReverseEdges]) -> None:
        """The stored reverse copies are those the input gives (SPEC.md 4.7): counts, and the input edge of each."""
        stored = self.reader.reverse
        if stored is None or expected is None:
            return
        if stored != expected.meta:
            self.problem(MANIFEST_NAME, f"reverse edges recorded as {stored}, the input gives {expected.meta}")
        elif not np.array_equal(np.asarray(self.reader.reverse_input_edge()), np.asarray(expected.input_edge)):
            self.problem(INPUT_EDGE_KEY, "reverse copies name other input edges than the input gives")

    def _data_names(self, kind: str, stored: dict, given: dict) -> None:
        for name in given:
            if name not in stored:
                self.problem(MANIFEST_NAME, f"the input's {kind} array {name!r} is not in the result")
        for name in stored:
            if name not in given:
                self.notes.append(f"{kind} array {name!r} not checked against the input: the input has no such array")

    def _reconstruct_part(self, p: int, g: Graph) -> None:
        here = part_dir(p)
        node_ids = self._array(p, "node_ids")
        indptr = self._array(p, "indptr")
        indices = self._array(p, "indices")
        edge_ids = self._array(p, "edge_ids")
        columns = np.repeat(np.arange(indptr.shape[0] - 1, dtype=np.int64), np.diff(indptr))
        if edge_ids.size:
            src = np.asarray(g.src[edge_ids], dtype=np.int64)
            dst = np.asarray(g.dst[edge_ids], dtype=np.int64)
            bad_src = np.flatnonzero(src != node_ids[indices])
            bad_dst = np.flatnonzero(dst != node_ids[columns])
            if bad_src.size or bad_dst.size:
                k = int((bad_src if bad_src.size else bad_dst)[0])
                self.problem(
                    here,
                    f"{bad_src.size + bad_dst.size} stored edges differ from the input's "
                    f"(edge {int(edge_ids[k])}: stored {int(node_ids[indices[k]])}->{int(node_ids[columns[k]])}, "
                    f"input {int(src[k])}->{int(dst[k])})",
                )
        # Edges are in CSC order, ascending edge id within a column (SPEC.md 4.1).
        if edge_ids.size > 1:
            same_column = columns[1:] == columns[:-1]
            if np.any(edge_ids[1:][same_column] <= edge_ids[:-1][same_column]):
                self.own_problems.append(f"{self.reader.directory / here}/edge_ids: edges of a column are not in ascending edge id")
        info = self.reader.part_info(p)
        train = train_mask(g)
        if "num_train" in info and train is not None:  # SPEC.md 4.5
            counted = int(np.count_nonzero(train[node_ids[:info["num_owned"]]]))
            if counted != info["num_train"]:
                self.problem(here, f"num_train is {info['num_train']}, the owned nodes hold {counted} training nodes")
        rows = node_ids.shape[0] if self.reader.halo else info["num_owned"]
        for name in self.reader.node_data_names():
            if name in g.node_data:
                self._compare_rows(p, data_key("node", name), g.node_data[name], node_ids[:rows])
        for name in self.reader.edge_data_names():
            if name in g.edge_data:
                self._compare_rows(p, data_key("edge", name), g.edge_data[name], edge_ids)

    def _compare_rows(self, p: int, key: str, source: np.ndarray, ids: np.ndarray) -> None:

        if f"{part_dir(p)}/{key}" in self.damaged:
            return
        try:
            stored = self.reader.array(p, key)  # a memmap for binary results: pages released as we go
        except GpartError as exc:
            self.problems.append(exc.one_line())
            return
        entry = self.reader.entry(p, key)
        dtype = storage_dtype(entry.dtype)
        where = f"{part_dir(p)}/{key}"
        if tuple(source.shape[1:]) != tuple(stored.shape[1:]):
            self.problem(where, f"rows of shape {list(stored.shape[1:])}, the input's are {list(source.shape[1:])}")
            return
        row_bytes = max(1, int(np.prod(source.shape[1:], dtype=np.int64)) * dtype.itemsize)
        step = max(1, CHUNK_BYTES // row_bytes)
        for start in range(0, ids.shape[0], step):
            chunk = ids[start : start + step]
            want = np.ascontiguousarray(source[chunk], dtype=dtype)
            have = np.ascontiguousarray(stored[start : start + step])
            release_rows(stored, start, start + chunk.shape[0])
            release_rows(source, int(chunk.min()), int(chunk.max()) + 1)
            # byte comparison: NaN payloads and -0.0 must survive exactly
            differ = want.reshape(want.shape[0], -1).view(np.uint8) != have.reshape(have.shape[0], -1).view(np.uint8)
            bad = np.flatnonzero(differ.any(axis=1)) if differ.size else np.empty(0, dtype=np.int64)
            if bad.size:
                row = start + int(bad[0])
                self.problem(where, f"{bad.size} rows differ from the input's (first: row {row}, id {int(ids[row])})")
                return
