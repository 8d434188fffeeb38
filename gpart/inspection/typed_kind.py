"""`gpart info` and `gpart verify` of a typed partition result (SPEC.md 8.4-8.5): a partition result of
the type-erased graph (gpart.inspection.partition_kind) with per-type figures and checks on top
(gpart.inspection.typed)."""

from __future__ import annotations

from typing import Any, Optional

from gpart.base.errors import InputError
from gpart.base.memory import default_max_memory
from gpart.base.progress import Progress, or_null
from gpart.formats.input.typed import HeteroGraph, read_hetero_graph
from gpart.formats.partition.reader import PartitionReader
from gpart.formats.partition.typed import HETERO_KEY
from gpart.inspection.kind import PathLike, VerifyRequest
from gpart.inspection.partition_kind import PartitionResultKind
from gpart.inspection.typed import hetero_info, typed_input, verify_typed
from gpart.inspection.verify import PartitionVerifier, check_input_counts
from gpart.inspection.view import Block, Column, Table
from gpart.pipeline.reverse_edges import hetero_with_reverse_edges, reverse_scratch_dir


class TypedPartitionKind(PartitionResultKind):
    """A partition result whose manifest describes node and edge types."""

    def recognises(self, manifest: dict[str, Any]) -> bool:
        return super().recognises(manifest) and manifest.get(HETERO_KEY) is not None

    def describe(self, reader: PartitionReader) -> dict[str, Any]:
        return super().describe(reader) | {"hetero": hetero_info(reader)}

    def info_view(self, summary: dict[str, Any]) -> list[Block]:
        return super().info_view(summary) + _type_tables(summary["hetero"])

    def check(self, directory: PathLike, reader: PartitionReader, request: VerifyRequest) -> dict[str, Any]:
        if request.parts is not None:  # the distributed runner, whose directories hold some partitions, writes plain results
            raise InputError(directory, "is a typed result: --parts applies to plain partition results")
        if request.node_data or request.edge_data:
            raise InputError(directory, "is a typed result: --node-data/--edge-data do not apply (typed arrays come from the typed .npz)")
        # the erased result is checked as any other, then the typed arrays (SPEC.md 8.4)
        return _verify_typed_result(reader, request.graph, request.progress)


def _verify_typed_result(reader: PartitionReader, graph: Any, progress: Optional[Progress]) -> dict[str, Any]:
    """The erased result as any other, then the typed arrays by themselves, then (intact, and the erased
    input matching) the typed arrays against the typed input: what they find is `mismatch`, not damage."""
    hg = None if graph is None else graph if isinstance(graph, HeteroGraph) else read_hetero_graph(graph)
    if hg is not None:  # the counts first, before any content is read (and before reverse relations are added)
        check_input_counts(reader, sum(hg.num_nodes.values()), sum(hg.num_edges(e) for e in hg.edge_types), hg.source)
    with reverse_scratch_dir(hg is not None and reader.reverse is not None) as scratch:
        if scratch is None:
            (hg, erased), reverse = typed_input(hg), None
        else:  # the typed input with its reverse relations (SPEC.md 4.7)
            hg, reverse = hetero_with_reverse_edges(hg, scratch, default_max_memory())
            erased = hg.erased(scratch)
        report = verify_typed(reader, PartitionVerifier(reader, or_null(progress)).run(erased, None, None, reverse), None)
        if hg is not None and not report["problems"] and not report["mismatch"]:
            against = verify_typed(reader, {**report, "problems": [], "notes": []}, hg)
            report["mismatch"] = against["problems"]
            report["notes"] += against["notes"]
            report["checked"]["graph"] = hg.source
    report["ok"] = not report["problems"] and not report["mismatch"]
    return report


def _type_tables(h: dict[str, Any]) -> list[Block]:
    """Per node type and per edge type figures of a typed result (SPEC.md 8.5)."""
    node_columns = [Column(c, "left" if c in ("type", "data") else "right")
                    for c in ("type", "nodes", "owned per part", "halo per part", "balance", "data")]
    node_rows = [[t["name"], f"{t['num_nodes']:,}", " ".join(f"{c:,}" for c in t["owned"]), " ".join(f"{c:,}" for c in t["halo"]),
                  f"{t['node_balance']:.3f}", ", ".join(t["node_data"])] for t in h["node_types"]]
    edge_columns = [Column(c, "left" if c == "edge type" else "right") for c in ("edge type", "edges", "cut", "stored per part", "balance")]
    edge_rows = [[":".join(e["edge_type"]), f"{e['num_edges']:,}", f"{e['edge_cut']:,} ({e['edge_cut_ratio']:.1%})",
                  " ".join(f"{c:,}" for c in e["stored"]), f"{e['edge_balance']:.3f}"] for e in h["edge_types"]]
    title = "node types" + (" (data rows of halo nodes stored)" if h.get("halo_rows") else "")
    return [Table(node_columns, node_rows, title=title), Table(edge_columns, edge_rows, title="edge types")]
