"""`gpart info` and `gpart verify` of a partition result (SPEC.md 4): sizes, cut, balance and halo per
partition; every checksum and invariant, and with the input, its reconstruction
(gpart.inspection.verify's PartitionVerifier). Typed results extend it (gpart.inspection.typed_kind).
"""

from __future__ import annotations

from typing import Any, Optional

from gpart.base.errors import GpartError, IntegrityError
from gpart.base.progress import or_null
from gpart.formats.partition.reader import PartitionReader
from gpart.formats.partition.reverse import REVERSE_KEY
from gpart.formats.partition.writer import FORMAT as PARTITION_FORMAT
from gpart.inspection.kind import InspectedKind, PathLike, VerifyRequest
from gpart.inspection.verify import PartitionVerifier
from gpart.inspection.view import Block, Column, Line, Size, Table


class PartitionResultKind(InspectedKind):
    """A homogeneous partition result."""

    formats = (PARTITION_FORMAT,)

    def info(self, directory: PathLike) -> dict[str, Any]:
        # what is stored must match the manifest (IntegrityError naming the first file that differs, exit 1):
        # file sizes (binary, checked on opening), datasets' dtypes and shapes (HDF5); no data is read
        with PartitionReader(directory) as reader:
            reader.check_stored_layout()
            return self.describe(reader)

    def describe(self, reader: PartitionReader) -> dict[str, Any]:
        """The summary of the open result `reader`."""
        return partition_info(reader)

    def info_view(self, summary: dict[str, Any]) -> list[Block]:
        return [_parts_table(summary), *_figure_lines(summary)]

    def verify(self, directory: PathLike, request: VerifyRequest) -> dict[str, Any]:
        try:
            reader = PartitionReader(directory, check_files=False)
        except GpartError as exc:
            raise IntegrityError(exc.path, f"manifest is invalid: {exc.problem}") from None
        with reader:
            report = self.check(directory, reader, request)
            source = reader.manifest["graph"].get("source")
            return report | {"made_from": source if isinstance(source, str) else None}

    def check(self, directory: PathLike, reader: PartitionReader, request: VerifyRequest) -> dict[str, Any]:
        """The verify report of the result in `directory`, open as `reader` (without `made_from`)."""
        return PartitionVerifier(reader, or_null(request.progress), request.parts).run(request.graph, request.node_data, request.edge_data)


def _numbers(obj: Any) -> dict[str, Optional[float]]:
    # None is kept: a figure the result does not have (train_balance without a training mask)
    if not isinstance(obj, dict):
        return {}
    return {k: v for k, v in obj.items() if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))}


def _is_count(value: Any) -> bool:
    # descriptive: a training-node count of the wrong type is dropped, as the stats are (verify reports it)
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _text_or_none(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


def _part_figures(reader: PartitionReader, p: int) -> dict[str, Any]:
    pi = reader.part_info(p)
    return {
        "part": p,
        "num_owned": pi["num_owned"],
        "num_halo": pi["num_halo"],
        "num_edges": pi["num_edges"],
        "bytes": sum(reader.entry(p, k).nbytes for k in reader.keys(p)),
        "halo_ratio": pi["num_halo"] / pi["num_owned"] if pi["num_owned"] else 0.0,
    } | ({"num_train": pi["num_train"]} if _is_count(pi.get("num_train")) else {})


def partition_info(reader: PartitionReader) -> dict[str, Any]:
    """Sizes, edge cut, balance, halo ratio and dtypes of the open result `reader`."""
    m = reader.manifest
    parts = [_part_figures(reader, p) for p in range(reader.num_parts)]
    outside_parts = sum(e.nbytes for label, e in reader.all_entries() if not label.startswith("part_"))  # book, reverse edges
    total_halo = sum(p["num_halo"] for p in parts)
    # descriptive fields are not needed to read the data: keep what has the right type, drop the rest
    stats = _numbers(m.get("stats"))
    if stats.get("halo_ratio") is None:  # absent, or null in a hand-edited manifest: the figure is derivable
        stats["halo_ratio"] = total_halo / reader.num_nodes if reader.num_nodes else 0.0
    params = m.get("params") if isinstance(m.get("params"), dict) else {}
    return {
        "format": PARTITION_FORMAT,
        "version": m["version"],
        "directory": str(reader.directory),
        "storage": reader.storage,
        "source": _text_or_none(m["graph"].get("source")),
        "num_nodes": reader.num_nodes,
        "num_edges": reader.num_edges,
        "num_parts": reader.num_parts,
        "method": _text_or_none(m.get("method")),
        "params": params,
        "halo": reader.halo,
        "book": m["book"]["kind"],
        "node_data": m["node_data"],
        "edge_data": m["edge_data"],
        "topology_dtype": "int64",
        "partitions": parts,
        "bytes": outside_parts + sum(p["bytes"] for p in parts),
        "stats": stats,
    } | ({} if reader.reverse is None else {"reverse": {k: v for k, v in m[REVERSE_KEY].items() if k != "input_edge"}})


def _method_text(summary: dict[str, Any]) -> str:
    how = summary["method"] or "?"
    algorithm = summary.get("params", {}).get("algorithm")
    if isinstance(algorithm, str) and how == "metis":
        how += f" ({algorithm})"
    backend = summary.get("params", {}).get("backend")
    if backend:
        how += f" ({backend})"
    return how


def _parts_table(summary: dict[str, Any]) -> Table:
    stats, parts = summary["stats"], summary["partitions"]
    # a count dropped from one partition (hand-edited manifest) drops the column: a partial sum would mislead
    has_train = bool(parts) and all("num_train" in p for p in parts)
    columns = ("part", "owned", "halo", "edges", "halo/owned", "bytes") + (("train",) if has_train else ())
    rows: list[list[Any]] = [
        [str(p["part"]), f"{p['num_owned']:,}", f"{p['num_halo']:,}", f"{p['num_edges']:,}", f"{p['halo_ratio']:.3f}", Size(p["bytes"])]
        + ([f"{p['num_train']:,}"] if has_train else [])
        for p in parts
    ]
    total = ["all", f"{sum(p['num_owned'] for p in parts):,}", f"{sum(p['num_halo'] for p in parts):,}",
             f"{sum(p['num_edges'] for p in parts):,}", f"{stats.get('halo_ratio', 0.0):.3f}", Size(summary["bytes"])]
    total += [f"{sum(p['num_train'] for p in parts):,}"] if has_train else []
    title = (f"{summary['directory']}: {summary['num_nodes']:,} nodes, {summary['num_edges']:,} edges, "
             f"{summary['num_parts']} parts by {_method_text(summary)}, {summary['storage']}, {_halo_rows_text(summary)}")
    return Table([Column(c, "right") for c in columns], rows, title=title, totals=[total])


def _halo_rows_text(summary: dict[str, Any]) -> str:
    # the manifest's `halo` says whether node data rows of halo nodes are stored (--halo 1), not how many halo
    # nodes there are: the halo column counts those (the non-owned sources of in-edges), and a result has them either way
    return "node data of owned and halo nodes (--halo 1)" if summary["halo"] else "node data of owned nodes only (--halo 0)"


def _figure_lines(summary: dict[str, Any]) -> list[Line]:
    """Cut, balances, book and dtype on one line; then the data arrays and the reverse edges."""
    stats = summary["stats"]
    figures = []
    if stats.get("edge_cut") is not None and stats.get("edge_cut_ratio") is not None:
        figures.append(f"edge cut {stats['edge_cut']:,} ({stats['edge_cut_ratio']:.2%})")
    figures += [f"{label} {stats[key]:.3f}" for key, label in (("node_balance", "node balance"), ("edge_balance", "edge balance"),
                                                               ("train_balance", "train balance")) if stats.get(key) is not None]
    lines = [Line("   ".join(figures + [f"book {summary['book']}", f"topology {summary['topology_dtype']}"]), unbroken=True)]
    for kind in ("node_data", "edge_data"):
        lines += [Line(f"{kind.replace('_', ' ')} {name}: {spec['dtype']} rows of {spec['row_shape']}") for name, spec in summary[kind].items()]
    if "reverse" in summary:
        rev = summary["reverse"]
        lines.append(Line(f"reverse edges (--add-reverse): {rev['num_reverse_edges']:,} copies stored after the input's "
                          f"{rev['num_input_edges']:,} edges", unbroken=True))
    return lines
