"""`gpart info` and `gpart verify`: call gpart.inspection.result, render tables or JSON."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table
from rich.text import Text

from gpart.cli.options.params import parse_name_paths
from gpart.cli.output.ui import data_options, human_bytes, json_option, print_json, progress_for, quiet_option, stdout
from gpart.inspection.result import info as info_of
from gpart.inspection.result import report_failure
from gpart.inspection.result import verify as verify_dir


@click.command()
@click.argument("directory", metavar="DIR")
@json_option
def info(directory: str, as_json: bool) -> None:
    """Summarise the result in DIRECTORY: per-partition owned nodes, halo nodes,
    edges and bytes; edge cut, balance, halo ratio and dtypes. Checkpoints
    (gather-ckpt / scatter-ckpt results), export-feat directories and the
    outputs of convert and export-ckpt (through their manifests) are
    summarised too."""
    summary = info_of(directory)
    if as_json:
        print_json(summary)
    elif summary.get("format") == "gpart.partition":
        _render_partition_info(summary)
    elif summary.get("format") == "gpart.filelist":
        _render_exports_info(summary)
    elif "command" in summary:
        _render_foreign_info(summary)
    else:
        from gpart.cli.commands.ckpt import render_checkpoint_info

        render_checkpoint_info(summary)


@click.command()
@click.argument("directory", metavar="DIR")
@click.option("--graph", "graph", metavar="INPUT", default=None,
              help="The input the result was made from: also prove that the partitions reconstruct its edges "
                   "(with edge ids) and node/edge data exactly. Default: checksums and invariants only.")
@data_options("A node array that was added with --node-data when partitioning (default: the files the manifest records). Repeatable.",
              "An edge array that was added with --edge-data when partitioning. Repeatable.")
@quiet_option
@json_option
def verify(directory: str, graph: str | None, node_data: tuple[str, ...], edge_data: tuple[str, ...],
           quiet: bool, as_json: bool) -> None:
    """Check every checksum and invariant of the result in DIRECTORY.

    Also checkpoints, export-feat directories and the outputs of convert and
    export-ckpt (every file their manifest lists: size and CRC-32).

    Exit status: 0 intact, 1 damaged (a checksum, size or invariant fails, or
    the manifest is missing), 2 bad arguments or unreadable input, 3 the
    --graph given is not the input the result was made from (other node or
    edge counts, or edges and data that differ from an intact result's).
    """
    nodes = parse_name_paths(node_data, "--node-data") or None
    edges = parse_name_paths(edge_data, "--edge-data") or None
    with progress_for(quiet or as_json) as progress:
        report = verify_dir(directory, graph, node_data=nodes, edge_data=edges, progress=progress)
    if as_json:
        print_json(report)
    elif not (quiet and report.get("ok")):
        _render_report(report)
    failure = report_failure(directory, graph, report)
    if failure is not None:  # main() prints its one `error:` line and exits with its code (1 damaged, 3 another input)
        raise failure


def _render_partition_info(summary: dict[str, Any]) -> None:
    stats = summary["stats"]
    how = summary["method"] or "?"
    algorithm = summary.get("params", {}).get("algorithm")
    if isinstance(algorithm, str) and how == "metis":
        how += f" ({algorithm})"
    backend = summary.get("params", {}).get("backend")
    if backend:
        how += f" ({backend})"
    table = Table(
        title=f"{summary['directory']}: {summary['num_nodes']:,} nodes, {summary['num_edges']:,} edges, "
        f"{summary['num_parts']} parts by {how}, {summary['storage']}, halo {summary['halo']}"
    )
    parts = summary["partitions"]
    # a count dropped from one partition (hand-edited manifest) drops the column: a partial sum would mislead
    has_train = bool(parts) and all("num_train" in p for p in parts)
    train = [[f"{p['num_train']:,}"] if has_train else [] for p in parts]
    for col in ("part", "owned", "halo", "edges", "halo/owned", "bytes") + (("train",) if has_train else ()):
        table.add_column(col, justify="right")
    for p, extra in zip(parts, train):
        table.add_row(str(p["part"]), f"{p['num_owned']:,}", f"{p['num_halo']:,}", f"{p['num_edges']:,}",
                      f"{p['halo_ratio']:.3f}", human_bytes(p["bytes"]), *extra)
    table.add_section()
    table.add_row("all", f"{sum(p['num_owned'] for p in parts):,}", f"{sum(p['num_halo'] for p in parts):,}",
                  f"{sum(p['num_edges'] for p in parts):,}", f"{stats.get('halo_ratio', 0.0):.3f}",
                  human_bytes(summary["bytes"]), *([f"{sum(p['num_train'] for p in parts):,}"] if has_train else []))
    stdout.print(table)
    figures = []
    if stats.get("edge_cut") is not None and stats.get("edge_cut_ratio") is not None:
        figures.append(f"edge cut {stats['edge_cut']:,} ({stats['edge_cut_ratio']:.2%})")
    figures += [f"{label} {stats[key]:.3f}" for key, label in (("node_balance", "node balance"), ("edge_balance", "edge balance"), ("train_balance", "train balance")) if stats.get(key) is not None]
    stdout.print("   ".join(figures + [f"book {summary['book']}", f"topology {summary['topology_dtype']}"]), soft_wrap=True)
    for kind in ("node_data", "edge_data"):
        for name, spec in summary[kind].items():
            stdout.print(f"{kind.replace('_', ' ')} {name}: {spec['dtype']} rows of {spec['row_shape']}")
    if "reverse" in summary:
        rev = summary["reverse"]
        stdout.print(f"reverse edges (--add-reverse): {rev['num_reverse_edges']:,} copies stored after the input's "
                     f"{rev['num_input_edges']:,} edges", soft_wrap=True)
    if "hetero" in summary:
        _render_typed(summary["hetero"])


def _render_typed(h: dict[str, Any]) -> None:
    """Per node type and per edge type figures of a typed result (SPEC.md 8.5)."""
    nodes = Table(title="node types" + (" (data rows of halo nodes stored)" if h.get("halo_rows") else ""))
    for col in ("type", "nodes", "owned per part", "halo per part", "balance", "data"):
        nodes.add_column(col, justify="left" if col in ("type", "data") else "right")
    for t in h["node_types"]:
        nodes.add_row(t["name"], f"{t['num_nodes']:,}", " ".join(f"{c:,}" for c in t["owned"]), " ".join(f"{c:,}" for c in t["halo"]),
                      f"{t['node_balance']:.3f}", ", ".join(t["node_data"]))
    stdout.print(nodes)
    edges = Table(title="edge types")
    for col in ("edge type", "edges", "cut", "stored per part", "balance"):
        edges.add_column(col, justify="left" if col == "edge type" else "right")
    for e in h["edge_types"]:
        edges.add_row(":".join(e["edge_type"]), f"{e['num_edges']:,}", f"{e['edge_cut']:,} ({e['edge_cut_ratio']:.1%})",
                      " ".join(f"{c:,}" for c in e["stored"]), f"{e['edge_balance']:.3f}")
    stdout.print(edges)


def _render_exports_info(summary: dict[str, Any]) -> None:
    table = Table(title=f"{summary['directory']}: {len(summary['exports'])} exports")
    for col in ("export", "dtype", "shape", "files", "size"):
        table.add_column(col, justify="right" if col in ("files", "size") else "left")
    for e in summary["exports"]:
        table.add_row(e["name"], e["dtype"], "x".join(map(str, e["shape"])), str(e["files"]), human_bytes(e["bytes"]))
    stdout.print(table)


def _render_foreign_info(summary: dict[str, Any]) -> None:
    """A convert / export-ckpt output (gpart.inspection.foreign.foreign_info): what, from where, its files."""
    head = Table.grid(padding=(0, 2))
    head.add_row("output of", f"gpart {summary['command']} --to {summary['target']}")
    head.add_row("source", str(summary["source"] or "?"))
    if "num_nodes" in summary and "num_edges" in summary:
        head.add_row("graph", f"{summary['num_nodes']:,} nodes, {summary['num_edges']:,} edges" + (", typed" if summary.get("hetero") else ""))
    if "num_parts" in summary:
        head.add_row("partitions", str(summary["num_parts"]))
    if "world_size" in summary:
        head.add_row("world size", str(summary["world_size"]) + (f", prefix {summary['prefix']}" if "prefix" in summary else ""))
    if isinstance(summary.get("optimizer"), dict):
        head.add_row("optimizer", str(summary["optimizer"].get("type", "?")))
    for kind in ("node_data", "edge_data", "labels"):
        renamed = _renames(summary.get(kind) or {})
        if renamed:
            head.add_row(kind.replace("_", " "), ", ".join(renamed))
    if summary.get("not_converted"):
        head.add_row("not converted", ", ".join(map(str, summary["not_converted"])))
    for e in summary.get("embeddings", []):
        if isinstance(e, dict):
            head.add_row("embedding", f"{e.get('name')}: {e.get('num_rows', 0):,} rows of {e.get('row_shape')} {e.get('dtype')}")
    head.add_row("size", f"{human_bytes(summary['bytes'])} in {summary['num_files']} files")
    if summary.get("created_by"):
        head.add_row("created by", summary["created_by"])
    stdout.print(Text(str(summary["directory"]), style="bold"))
    stdout.print(head)
    table = Table()
    for col in ("files of", "files", "size"):
        table.add_column(col, justify="left" if col == "files of" else "right")
    for g in summary["groups"]:
        table.add_row(g["group"], str(g["files"]), human_bytes(g["bytes"]))
    stdout.print(table)


def _renames(mapping: dict[str, Any], prefix: str = "") -> list[str]:
    """`name -> key` of a convert manifest's node_data / edge_data; typed ones are nested per type (`type/name -> key`)."""
    lines = []
    for name, key in mapping.items():
        lines += _renames(key, f"{prefix}{name}/") if isinstance(key, dict) else [f"{prefix}{name} -> {key}"]
    return lines


def _render_report(report: dict[str, Any]) -> None:
    checked = report.get("checked", {})
    what = ["checksums"] + (["invariants"] if checked.get("invariants") else [])
    if checked.get("reconstruction"):
        what.append(f"reconstruction of {checked.get('graph') or 'the input'}")

    directory = report.get("directory") or report.get("path", "")
    for note in report.get("notes", []):
        stdout.print(Text(f"note: {note}"), soft_wrap=True)
    if report.get("ok"):
        count = f"{checked['files']} files" if "files" in checked else f"{checked.get('arrays', 0)} arrays"
        stdout.print(Text("OK ", style="green") + Text(f"{directory}: {', '.join(what)} ({count})"), soft_wrap=True)
        return
    for line in report.get("problems", []):
        stdout.print(Text("damaged ", style="red") + Text(str(line)), highlight=False, soft_wrap=True)
    for line in report.get("mismatch", []):
        stdout.print(Text("differs ", style="yellow") + Text(str(line)), highlight=False, soft_wrap=True)
    if report.get("problems"):
        stdout.print(Text("FAILED ", style="red") + Text(f"{directory}: {len(report['problems'])} problems"), soft_wrap=True)
    else:
        stdout.print(Text("MISMATCH ", style="yellow") + Text(f"{directory}: intact, but not made from {checked.get('graph') or 'the input given'}"
                                                              f" ({len(report.get('mismatch', []))} differences)"), soft_wrap=True)
