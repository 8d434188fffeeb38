"""`gpart convert`: a partition result in PyG's, GraphLearn-for-PyTorch's or DGL's partition layout."""

from __future__ import annotations

from typing import Optional

import click

from gpart.cli.output.ui import human_bytes, key_value_pairs, print_json, progress_for, result_options, stdout


class TargetChoice(click.Choice):
    """--to's choices: the registered conversion targets (gpart.convert.registry), read when the option is
    parsed or its help is shown, so that a target registered after this module was imported is offered too."""

    def __init__(self) -> None:  # no fixed choices: the registry is the list
        self.case_sensitive = True

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        # here, not at the top: `gpart --help` imports every command module, and the converters load only for convert (start-up time)
        from gpart.convert.registry import target_names

        return tuple(target_names())


@click.command("convert")
@click.argument("parts_dir", type=click.Path(file_okay=False))
@click.option("--to", "target", required=True, type=TargetChoice(), help="Whose partition layout to write.")
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="Output directory.")
@click.option("--rename", multiple=True, help="pyg, dgl: NAME=KEY, the key of a data array (pyg default feat=x, label=y, edge_feat=edge_attr; others keep their names).")
@click.option("--node-feat", default=None, help="glt: the node array written as node features (default: feat).")
@click.option("--edge-feat", default=None, help="glt: the edge array written as edge features (default: edge_feat).")
@click.option("--label", default=None, help="glt: the node array written as whole-graph labels label.pt (default: label).")
@click.option("--graph-name", default="graph", help="dgl: the graph name (part config <graph-name>.json, DistGraph's name).")
@result_options
def convert(
    parts_dir: str, target: str, out: str, rename: tuple[str, ...], node_feat: Optional[str], edge_feat: Optional[str], label: Optional[str],
    graph_name: str, force: bool, quiet: bool, as_json: bool,
) -> None:
    """Write the partition result PARTS_DIR in another system's partition layout.

    \b
    gpart convert parts/ --to pyg -o pyg_parts/   # LocalGraphStore/LocalFeatureStore.from_partition("pyg_parts", p); typed results too
    gpart convert parts/ --to glt -o glt_parts/   # DistDataset(edge_dir="in").load("glt_parts", p, whole_node_label_file="glt_parts/label.pt")
    gpart convert parts/ --to dgl -o dgl_parts/   # dgl.distributed.load_partition("dgl_parts/graph.json", p); needs dgl importable
    """
    from gpart.convert import convert_partitions  # start-up time, as TargetChoice.choices

    with progress_for(quiet or as_json) as progress:
        summary = convert_partitions(
            parts_dir, out, to=target, rename=key_value_pairs(rename, "--rename", "NAME=KEY"), node_feat=node_feat, edge_feat=edge_feat, label=label, graph_name=graph_name,
            force=force, progress=progress
        )
    if as_json:
        print_json(summary)
        return
    if quiet:
        return
    total = sum(f["bytes"] for f in summary["files"])
    stdout.print(f"converted {summary['num_parts']} partitions to {target} ({len(summary['files'])} files, {human_bytes(total)}) -> {out}")
    if summary["not_converted"]:
        stdout.print(f"not converted ({target} has no place for them): {', '.join(summary['not_converted'])}")
