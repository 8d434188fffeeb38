"""`gpart chunk`: parse options, call gpart.pipeline.chunk.chunk_graph, print a summary."""

from __future__ import annotations

import click

from gpart.cli.options.input import graph_input, input_options
from gpart.cli.options.params import parse_name_paths
from gpart.cli.output.ui import force_option, json_option, print_json, quiet_option, stdout
from gpart.pipeline.chunk import chunk_graph


@click.command(context_settings={"show_default": True})
@click.argument("input", metavar="INPUT")
@input_options
@click.option("-k", "--chunks", "num_chunks", type=int, required=True, help="Number of edge chunks and of node chunks K.")
@click.option("-o", "--out", "out_dir", metavar="DIR", required=True, help="Output directory: new, empty, or (with --force) a gpart result to replace.")
@click.option("--node-data", "node_data", multiple=True, metavar="NAME=PATH", help="Add a node array from a .npy file. Repeatable.")
@click.option("--edge-data", "edge_data", multiple=True, metavar="NAME=PATH", help="Add an edge array from a .npy file. Repeatable.")
@force_option
@quiet_option
@json_option
def chunk(input: str, src_col: str | None, dst_col: str | None, header: bool | None, split: str | None, num_chunks: int, out_dir: str, node_data: tuple[str, ...], edge_data: tuple[str, ...],
          force: bool, quiet: bool, as_json: bool) -> None:
    """Cut the graph INPUT into K chunks under DIR, for distributed runs (SPEC.md 10.1).

    INPUT is any input `gpart partition` reads. DIR gets K edge chunks
    (edges/src-i.npy, edges/dst-i.npy), K node-data chunks per node array and
    a DGL-style manifest.json, written last.

    \b
    Examples:
      gpart chunk sample_data/cora.npz --chunks 4 -o chunks/
      torchrun --nproc-per-node 2 -m gpart.distributed partition chunks/ --parts 4 --method remainder -o parts/
    """
    meta = chunk_graph(graph_input(input, src_col, dst_col, header, split), out_dir, num_chunks, force=force,
                       node_data=parse_name_paths(node_data, "--node-data") or None,
                       edge_data=parse_name_paths(edge_data, "--edge-data") or None)
    summary = {"directory": out_dir, "num_nodes": meta["num_nodes"], "num_edges": sum(meta["num_edges_per_chunk"][0]),
               "chunks": num_chunks, "node_data": sorted(meta["node_data"]["_N"]), "edge_data": sorted(meta["edge_data"]["_N:_E:_N"])}
    if as_json:
        print_json(summary)
    elif not quiet:
        stdout.print(f"{out_dir}: {summary['num_nodes']:,} nodes, {summary['num_edges']:,} edges in {num_chunks} chunks"
                     f"{'; node data ' + ', '.join(summary['node_data']) if summary['node_data'] else ''}", soft_wrap=True)
