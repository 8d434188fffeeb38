"""`gpart info` and `gpart verify`: call gpart.inspection.result, print JSON, the blocks the directory's
kind describes its summary in, or the verify report (the same for every kind)."""

from __future__ import annotations

from typing import Any

import click
from rich.text import Text

from gpart.cli.options.input import graph_input, input_options
from gpart.cli.options.params import parse_name_paths
from gpart.cli.output.blocks import print_blocks
from gpart.cli.output.ui import data_options, json_option, print_json, progress_for, quiet_option, stdout
from gpart.inspection.plot import plot_partition
from gpart.inspection.result import info_kind, report_failure
from gpart.inspection.result import verify as verify_dir


@click.command()
@click.argument("directory", metavar="DIR")
@click.option("--plot", "plot", metavar="FILE.png", default=None,
              help="Also draw a partition result into FILE (.png, .svg or .pdf; needs matplotlib): per partition its "
                   "owned nodes, in-edges, halo nodes and cut edges, with their means and balances.")
@json_option
def info(directory: str, plot: str | None, as_json: bool) -> None:
    """Summarise the result in DIRECTORY: per-partition owned nodes, halo nodes,
    edges and bytes; edge cut, balance, halo ratio and dtypes. Checkpoints
    (gather-ckpt / scatter-ckpt results), export-feat directories and the
    outputs of convert and export-ckpt (through their manifests) are
    summarised too.

    What is stored must match the manifest: a file of another size, a missing
    file, or (HDF5) a dataset of another dtype or shape ends info with one
    error line naming it and exit status 1. These checks read no data;
    `gpart verify` also checks every byte (CRC-32)."""
    kind = info_kind(directory)
    summary = kind.info(directory)
    if plot is not None:
        summary["plot"] = plot_partition(directory, plot)
    if as_json:
        print_json(summary)
        return
    print_blocks(kind.info_view(summary))
    if plot is not None:
        cut = summary["plot"]["cut_edges"]
        stdout.print(Text(f"wrote {plot}: owned nodes, in-edges, halo nodes and cut edges ({sum(cut):,} in all) of "
                          f"{len(cut)} partitions"), soft_wrap=True)


@click.command()
@click.argument("directory", metavar="DIR")
@click.option("--graph", "graph", metavar="INPUT", default=None,
              help="The input the result was made from: also prove that the partitions reconstruct its edges "
                   "(with edge ids) and node/edge data exactly. Default: checksums and invariants only.")
@input_options
@data_options("A node array that was added with --node-data when partitioning (default: the files the manifest records). Repeatable.",
              "An edge array that was added with --edge-data when partitioning. Repeatable.")
@click.option("--parts", "parts", metavar="LIST", default=None, callback=lambda ctx, param, value: _part_list(value),
              help="Comma-separated partitions: check only the book and these (a per-machine directory of a "
                   "distributed run holds its ranks' partitions, SPEC.md 10.4). Default: every partition.")
@quiet_option
@json_option
def verify(directory: str, graph: str | None, src_col: str | None, dst_col: str | None, header: bool | None, split: str | None,
           node_data: tuple[str, ...], edge_data: tuple[str, ...], parts: list[int] | None, quiet: bool, as_json: bool) -> None:
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
        given = None if graph is None else graph_input(graph, src_col, dst_col, header, split)  # read as partition read it
        if graph is None and (src_col, dst_col, header, split) != (None, None, None, None):
            raise click.UsageError("--src-col, --dst-col, --header and --split describe the --graph input: give --graph")
        report = verify_dir(directory, given, node_data=nodes, edge_data=edges, progress=progress, parts=parts)
    if as_json:
        print_json(report)
    elif not (quiet and report.get("ok")):
        _render_report(report)
    failure = report_failure(directory, graph, report)
    if failure is not None:  # main() prints its one `error:` line and exits with its code (1 damaged, 3 another input)
        raise failure


def _part_list(value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(v) for v in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated partition numbers such as 0,1; got {value!r}", param_hint="--parts") from None


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
