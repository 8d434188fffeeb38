"""`gpart partition`: parse options, call gpart.pipeline.partition.partition_graph, print a summary."""

from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource
from rich.table import Table

from gpart.cli.options.input import graph_input, input_options
from gpart.cli.options.method import DescribedOption, MethodChoice, given_method_options, imbalance_option, method_help, preset_option
from gpart.cli.options.params import parse_name_paths
from gpart.cli.output.ui import (
    data_options,
    force_option,
    human_bytes,
    json_option,
    print_json,
    progress_for,
    quiet_option,
    scratch_dir_option,
    stderr,
    stdout,
    train_balance_text,
)
from gpart.partition_methods.registry import DEFAULT_METHOD
from gpart.pipeline.partition import partition_graph


@click.command(context_settings={"show_default": True})
@click.argument("input", metavar="INPUT")
@input_options
@click.option("-p", "--parts", "num_parts", type=int, required=True, help="Number of partitions P (1 <= P <= number of nodes).")
@click.option("-o", "--out", "out_dir", metavar="DIR", required=True,
              help="Output directory: new, empty, or (with --force) a gpart result to replace.")
@click.option("--method", type=MethodChoice(), default=DEFAULT_METHOD, cls=DescribedOption, describe=method_help)
@click.option("--assignment", metavar="FILE", default=None,
              help="Owner of every node from a file computed elsewhere (ParMETIS, KaHIP): .npy with N integers "
                   "in 0..P-1, or text with one per line. Replaces --method.")
@click.option("--format", "storage", type=click.Choice(["binary", "hdf5"]), default="binary",
              help="binary: flat little-endian files numpy and WholeGraph read as they are; hdf5: one partitions.h5.")
@click.option("--add-reverse", is_flag=True,
              help="Store every edge in both directions: a reverse copy v->u of each input edge u->v unless v->u is "
                   "an edge already (duplicates collapse, as DGL's to_bidirected and PyG's ToUndirected). Edge ids below "
                   "the input's edge count are input edges; the others are copies, mapped back to their input edge "
                   "by reverse/input_edge (SPEC.md 4.7). Typed graphs get each relation (s,r,d) between two node types "
                   "reversed as (d,rev_r,s).")
@click.option("--halo", type=click.IntRange(0, 1), default=0,
              help="1: also store node data rows of halo nodes (non-owned sources of owned in-edges); 0: owned rows only.")
@click.option("--seed", type=int, default=0, help="Seed of METIS, KaMinPar and --method random.")
@imbalance_option
@click.option("--threads", type=int, default=1,
              help="KaMinPar threads (balanced, kaminpar). More is faster, but only 1 gives the same result for a seed every run.")
@preset_option
@click.option("--max-memory", "max_memory", metavar="SIZE", default=None,
              help="Memory the run may use, e.g. 2GB or 512MiB (default: 3/4 of the available RAM, or of the cgroup memory limit where lower). Past it, edges are "
                   "bucketed by owner into scratch files instead of sorted in memory, and the default and kaminpar build "
                   "the adjacency compressed on disk (coarsened there until KaMinPar fits); metis, which holds the "
                   "whole adjacency, stops with an error up front.")
@scratch_dir_option("the run's", "default beside OUT; put it on a disk with room, about 35-80 bytes per input edge at the "
                                 "peak on the compressed path")
@click.option("--passes", type=click.IntRange(min=1), default=None,
              help="Streaming passes of --method stream: the first places every node, the next restream (up to 8), "
                   "the rest refine (default 20 in all). More passes: better cut, one more read of the spilled edges each.")
@click.option("--objective", type=click.Choice(["cut", "volume"]), default="cut",
              help="METIS objective: minimise edge cut or total communication volume (volume needs k-way).")
@click.option("--algorithm", type=click.Choice(["auto", "recursive", "kway"]), default="auto",
              help="METIS algorithm: recursive bisection, k-way, or auto (the better one for the part count); "
                   "the manifest records which one ran.")
@click.option("--trials", type=int, default=1, help="METIS partitionings tried (ncuts); the best cut is kept. More trials: better cut, more time.")
@click.option("--iterations", type=int, default=None, help="METIS refinement iterations (niter); default: METIS's own (10).")
@click.option("--balance", "balance", multiple=True, metavar="NAME",
              help="Balance the count of True entries of this boolean node array (e.g. train_mask) across parts, "
                   "as DGL's balance_ntypes. Repeatable.")
@click.option("--balance-edges", is_flag=True, help="Also balance the in-degree sum across parts (DGL's balance_edges).")
@data_options("Add a node array from a .npy file (first dimension N). Repeatable.",
              "Add an edge array from a .npy file (first dimension E, edge-id order). Repeatable.")
@force_option
@quiet_option
@click.option("-v", "--verbose", is_flag=True, help="Print each stage's wall time and the peak RSS so far.")
@json_option
def partition(input: str, src_col: str | None, dst_col: str | None, header: bool | None, split: str | None, num_parts: int, out_dir: str, method: str, assignment: str | None, storage: str, add_reverse: bool, halo: int,
              seed: int, imbalance: float | None, threads: int | None, preset: str | None, max_memory: str | None, scratch_dir: str | None, passes: int | None, objective: str, algorithm: str, trials: int, iterations: int | None,
              balance: tuple[str, ...], balance_edges: bool, node_data: tuple[str, ...], edge_data: tuple[str, ...],
              force: bool, quiet: bool, verbose: bool, as_json: bool) -> None:
    """Split the graph INPUT into P partitions under OUT.

    INPUT is an .npz (COO src/dst or CSR indptr/indices, with node arrays such
    as feat, label, train_mask and edge_* arrays), a SNAP edge list
    (.txt/.txt.gz), a CSV/TSV edge table (.csv/.tsv, gzip too) or a Parquet one,
    a METIS .graph, a DIMACS .gr file, an OGB dataset folder (raw/edge.csv.gz,
    features, labels, splits as masks) or a chunked directory. Each partition gets
    its owned nodes, their in-edges as CSC over local ids, the halo nodes, and
    its node/edge data rows; the manifest is written last (SPEC.md section 4).
    A typed .npz (keys <ntype>/num_nodes, <ntype>/feat, <src>:<rel>:<dst>/src
    and /dst) is partitioned with every node type balanced (SPEC.md section 8).

    \b
    Examples:
      gpart partition sample_data/cora.npz --parts 4 -o parts/
      gpart partition sample_data/cora.npz --parts 4 --method kaminpar --balance-edges -o parts/
      gpart partition sample_data/cora.npz --parts 4 --method stream --max-memory 1GB -o parts/
      gpart partition sample_data/cora.npz --parts 4 --max-memory 1GB --scratch-dir /tmp -o parts/
      gpart partition sample_data/cora.npz --parts 4 --method stream --passes 4 -o parts/
      gpart partition sample_data/cora_hetero.npz --parts 4 -o hparts/
      gpart partition sample_data/cora.npz --parts 4 --add-reverse -o parts/
      gpart partition edges.csv.gz --src-col from_id --dst-col to_id --parts 4 -o parts/
      gpart partition dataset/ogbn_arxiv --parts 4 -o parts/
      gpart partition sample_data/cora.npz --parts 4 --preset default -o parts/   # KaMinPar's default context (the default uses fast)
    """
    ctx = click.get_current_context()
    named = None if ctx.get_parameter_source("method") is ParameterSource.DEFAULT else method  # None: the library's choice
    node_specs = parse_name_paths(node_data, "--node-data")
    edge_specs = parse_name_paths(edge_data, "--edge-data")
    log = _verbose_printer() if verbose else None
    with progress_for(quiet or as_json) as progress:
        manifest = partition_graph(
            graph_input(input, src_col, dst_col, header, split), out_dir, num_parts, named,
            storage=storage, halo=halo, force=force, node_data=node_specs or None, edge_data=edge_specs or None, add_reverse=add_reverse,
            progress=progress, verbose_log=log, max_memory=max_memory, scratch_dir=scratch_dir, **given_method_options(ctx),
        )
    if as_json:
        print_json(_summary(manifest, out_dir))
    elif not quiet:
        _print_summary(manifest, out_dir)


def _verbose_printer():
    def log(stage: str, seconds: float, peak_rss_mb: float) -> None:
        stderr.print(f"gpart: {stage:<18} {seconds:8.2f} s   peak RSS {peak_rss_mb:8.1f} MiB", markup=False, highlight=False)

    return log


def _summary(manifest: dict[str, Any], out_dir: str) -> dict[str, Any]:
    parts = [{k: p[k] for k in ("part", "num_owned", "num_halo", "num_edges")} | {"bytes": _part_bytes(p)}
             for p in manifest["partitions"]]
    return {
        "directory": out_dir,
        "storage": manifest["storage"],
        "method": manifest["method"],
        "params": manifest["params"],
        "num_nodes": manifest["graph"]["num_nodes"],
        "num_edges": manifest["graph"]["num_edges"],
        "num_parts": manifest["num_parts"],
        "halo": manifest["halo"],
        "partitions": parts,
        "stats": manifest["stats"],
    } | ({"reverse": {k: v for k, v in manifest["reverse"].items() if k != "input_edge"}} if "reverse" in manifest else {})


def _part_bytes(part: dict[str, Any]) -> int:
    return sum(int(e["bytes"]) for e in part["arrays"].values())


def _print_summary(manifest: dict[str, Any], out_dir: str) -> None:
    g, stats = manifest["graph"], manifest["stats"]
    algorithm = manifest["params"].get("algorithm")
    backend = manifest["params"].get("backend")
    how = manifest["method"] + (f" ({algorithm})" if algorithm and manifest["method"] == "metis" else "") \
        + (f" ({backend})" if backend else "")
    table = Table(title=f"{out_dir}: {g['num_nodes']:,} nodes, {g['num_edges']:,} edges -> "
                        f"{manifest['num_parts']} parts by {how}, {manifest['storage']}")
    for col in ("part", "owned", "halo", "edges", "bytes"):
        table.add_column(col, justify="right")
    for p in manifest["partitions"]:
        table.add_row(str(p["part"]), f"{p['num_owned']:,}", f"{p['num_halo']:,}", f"{p['num_edges']:,}",
                      human_bytes(_part_bytes(p)))
    stdout.print(table)
    stdout.print(
        f"edge cut {stats['edge_cut']:,} ({stats['edge_cut_ratio']:.2%})   node balance {stats['node_balance']:.3f}   "
        f"edge balance {stats['edge_balance']:.3f}   {train_balance_text(stats)}halo ratio {stats['halo_ratio']:.3f}",
        soft_wrap=True,
    )
    if "reverse" in manifest:
        rev = manifest["reverse"]
        stdout.print(f"reverse edges: {rev['num_reverse_edges']:,} copies stored after the input's {rev['num_input_edges']:,} edges",
                     soft_wrap=True)
