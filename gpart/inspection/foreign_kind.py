"""`gpart info` and `gpart verify` of a `gpart convert` or `gpart export-ckpt` output: what it is, from
where, and its files by group (gpart.inspection.foreign reads and checks them through the manifest)."""

from __future__ import annotations

from typing import Any

from gpart.inspection.foreign import FOREIGN_FORMATS, foreign_info, verify_foreign
from gpart.inspection.kind import InspectedKind, PathLike, VerifyRequest
from gpart.inspection.view import Block, Column, Grid, Line, Size, Table


class ForeignOutputKind(InspectedKind):
    """The output of one gpart command that writes for other systems (`format`: its manifest format)."""

    def __init__(self, format: str):
        self.formats = (format,)
        self.command = FOREIGN_FORMATS[format]

    def info(self, directory: PathLike) -> dict[str, Any]:
        return foreign_info(directory)

    def info_view(self, summary: dict[str, Any]) -> list[Block]:
        return [Line(str(summary["directory"]), style="bold"), Grid(_head(summary)), _groups_table(summary)]

    def verify(self, directory: PathLike, request: VerifyRequest) -> dict[str, Any]:
        request.refuse_input(directory, f"is a `gpart {self.command}` output")
        return verify_foreign(directory)


def _head(summary: dict[str, Any]) -> list[tuple[str, Any]]:
    """What, from where, the manifest's figures and renames, and the size."""
    head: list[tuple[str, Any]] = [("output of", f"gpart {summary['command']} --to {summary['target']}"), ("source", str(summary["source"] or "?"))]
    if "num_nodes" in summary and "num_edges" in summary:
        head.append(("graph", f"{summary['num_nodes']:,} nodes, {summary['num_edges']:,} edges" + (", typed" if summary.get("hetero") else "")))
    if "num_parts" in summary:
        head.append(("partitions", str(summary["num_parts"])))
    if "world_size" in summary:
        head.append(("world size", str(summary["world_size"]) + (f", prefix {summary['prefix']}" if "prefix" in summary else "")))
    if isinstance(summary.get("optimizer"), dict):
        head.append(("optimizer", str(summary["optimizer"].get("type", "?"))))
    for kind in ("node_data", "edge_data", "labels"):
        renamed = _renames(summary.get(kind) or {})
        if renamed:
            head.append((kind.replace("_", " "), ", ".join(renamed)))
    if summary.get("not_converted"):
        head.append(("not converted", ", ".join(map(str, summary["not_converted"]))))
    for e in summary.get("embeddings", []):
        if isinstance(e, dict):
            head.append(("embedding", f"{e.get('name')}: {e.get('num_rows', 0):,} rows of {e.get('row_shape')} {e.get('dtype')}"))
    head.append(("size", (Size(summary["bytes"]), f" in {summary['num_files']} files")))
    if summary.get("created_by"):
        head.append(("created by", summary["created_by"]))
    return head


def _groups_table(summary: dict[str, Any]) -> Table:
    columns = [Column(c, "left" if c == "files of" else "right") for c in ("files of", "files", "size")]
    return Table(columns, [[g["group"], str(g["files"]), Size(g["bytes"])] for g in summary["groups"]])


def _renames(mapping: dict[str, Any], prefix: str = "") -> list[str]:
    """`name -> key` of a convert manifest's node_data / edge_data; typed ones are nested per type (`type/name -> key`)."""
    lines = []
    for name, key in mapping.items():
        lines += _renames(key, f"{prefix}{name}/") if isinstance(key, dict) else [f"{prefix}{name} -> {key}"]
    return lines
