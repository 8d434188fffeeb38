"""`gpart export-feat`: parse options, call gpart.export.features.export_feat, print a summary."""

from __future__ import annotations

from typing import Any, Optional

import click
from rich.table import Table

from gpart.cli.output.ui import force_option, human_bytes, json_option, print_json, progress_for, quiet_option, stdout
from gpart.export.features import export_feat as run_export

# kept in sync with gpart.export.features.DTYPE_CHOICES (not imported: `gpart --help` stays light)
_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64")


@click.command("export-feat", context_settings={"show_default": True})
@click.argument("input", metavar="INPUT", type=str)
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=str), required=True,
              help="Output directory (created if missing); may hold several exports, each in its own folder OUT/<name>/.")
@click.option("--name", default=None,
              help="Export name (folder OUT/<name>/ with <name>_part_<i>_of_<n> and <name>.json). Default: the .npy "
                   "stem or npz key; with --csr the prefix of <name>_row_ptr/_col_idx/_edge_perm, all three in OUT/<name>/ "
                   "(default 'csr'); for a partition directory, the one node array to export (default: all of them).")
@click.option("--files", "files", type=int, default=1,
              help="Part files per export; rows are split near-equally, never across a row. Independent of the "
                   "world size that later reads them.")
@click.option("--dtype", type=click.Choice(_DTYPES), default=None,
              help="Convert on the way: float arrays to float16/bfloat16/float32/float64 (bfloat16 stored as its "
                   "uint16 bit pattern), integer arrays to int32/int64 only when every value fits.")
@click.option("--allow-overflow", is_flag=True,
              help="Store values that overflow the target float dtype (and NaN/Inf) instead of failing.")
@click.option("--csr", is_flag=True,
              help="INPUT is a graph: export CSR row_ptr (int64, N+1), col_idx (int32, int64 for >= 2^31 nodes) "
                   "over source nodes, and edge_perm (input edge id of each col_idx position).")
@click.option("--add-reverse", is_flag=True, help="With --csr: also add v->u for every edge u->v (edge_perm E+id).")
@click.option("--dedup", is_flag=True, help="With --csr: keep one edge per (src, dst) pair (the smallest edge id).")
@click.option("--node-type", "node_type", default=None,
              help="Typed partition result: export the node arrays of this node type, rows in typed id order, "
                   "as <type>.<array> (default: every typed node array).")
@force_option
@quiet_option
@json_option
def export_feat(input: str, out_dir: str, name: Optional[str], files: int, dtype: Optional[str], allow_overflow: bool,
                csr: bool, add_reverse: bool, dedup: bool, node_type: Optional[str], force: bool, quiet: bool,
                as_json: bool) -> None:
    """Export INPUT as WholeGraph-style flat binaries under OUT.

    INPUT is FILE.npy, FILE.npz:KEY, a partition result directory (its node
    arrays in global node order), or with --csr a graph (.npz, SNAP .txt(.gz),
    METIS .graph, DIMACS .gr). For a typed partition result, --node-type T
    exports T's node arrays in typed id order:

        gpart export-feat parts/ --node-type paper --name feat -o wg/

    Each export is <name>_part_<i>_of_<n> files whose concatenation is the
    row-major little-endian array, and <name>.json written last, in the folder
    OUT/<name>/, which replaces an older one (--force) in one step (SPEC.md
    section 5).
    """
    with progress_for(quiet or as_json, bytes_mode=True) as progress:
        summary = run_export(
            input, out_dir, name=name, files=files, dtype=dtype, allow_overflow=allow_overflow,
            csr=csr, add_reverse=add_reverse, dedup=dedup, force=force, progress=progress, node_type=node_type,
        )
    if as_json:
        print_json(summary)
    elif not quiet:
        _print_summary(summary)


def _print_summary(summary: dict[str, Any]) -> None:
    table = Table(title=f"exported {summary['input']} -> {summary['out_dir']}", title_justify="left")
    for column in ("export", "dtype", "shape", "files", "size", "json"):
        table.add_column(column, justify="right" if column in ("files", "size") else "left")
    for item in summary["exports"]:
        m = item["manifest"]
        dtype = m["dtype"] if m["dtype"] == m["source_dtype"] else f"{m['source_dtype']} -> {m['dtype']}"
        table.add_row(m["name"], dtype, "x".join(str(s) for s in m["shape"]), str(m["num_files"]),
                      human_bytes(m["bytes"]), item["json"])
    stdout.print(table)
    seconds = summary["seconds"]
    stdout.print(f"{human_bytes(summary['bytes'])} in {seconds:.2f} s ({human_bytes(summary['bytes_per_second'])}/s)")
