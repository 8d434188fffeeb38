"""`gpart gather-ckpt`, `gpart scatter-ckpt`, `gpart import-ckpt`, `gpart export-ckpt`, and the checkpoint view of `gpart info`.

Each command imports gpart.ckpt when it runs, not at the top: `gpart` starts (and
`--help` answers) without loading every command's library.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import click

from gpart.base.errors import InputError
from gpart.cli.output.ui import (
    force_option,
    human_bytes,
    json_option,
    key_value_pairs,
    parse_boundaries,
    print_json,
    progress_for,
    quiet_option,
    result_options,
    stdout,
)


class RegisteredChoice(click.Choice):
    """Choices read from a registry when the option is parsed or its help is shown, so that a name registered
    after this module was imported is offered too."""

    def __init__(self, names: Callable[[], Sequence[str]]) -> None:  # no fixed choices: the registry is the list
        self.case_sensitive = True
        self._names = names

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(self._names())


# the registries are imported when read, not at the top: `gpart --help` imports every command module (start-up time)
def _export_targets() -> list[str]:
    from gpart.ckpt.export_registry import target_names

    return target_names()


def _import_sources() -> list[str]:
    from gpart.ckpt.import_registry import source_names

    return source_names()


def _policies() -> tuple[str, ...]:
    from gpart.formats.sharding.policies import POLICIES

    return POLICIES


verify_option = click.option("--verify", is_flag=True, help="Check the CRC-32 of every input file first.")
chunk_rows_option = click.option("--chunk-rows", type=click.IntRange(min=1), default=None, help="Rows per streaming step (default: about 32 MiB).")


def _report(manifest: dict[str, Any], out: str, verb: str, as_json: bool, quiet: bool = False) -> None:
    if as_json:
        print_json(manifest)
    elif not quiet:
        _summary(manifest, out, verb)


def _summary(manifest: dict[str, Any], out: str, verb: str) -> None:
    total = sum(
        (t["file"]["bytes"] if "file" in t else sum(s["bytes"] for s in t["shards"])) for t in manifest["tensors"]
    )
    stdout.print(
        f"{verb} {len(manifest['tensors'])} tensors of {len(manifest['embeddings'])} embedding(s) "
        f"(optimizer {manifest['optimizer']['type']}, {human_bytes(total)}) -> {out}"
        + (f" [{manifest['world_size']} ranks]" if manifest.get("layout") == "sharded" else "")
    )


@click.command("gather-ckpt")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="Output directory (global layout).")
@click.option("--npy", is_flag=True, help="Write <tensor>.npy files instead of flat <tensor>_part_0_of_1 + <tensor>.json.")
@click.option("--verify", is_flag=True, help="Check the CRC-32 of every input shard first.")
@click.option("--chunk-rows", type=click.IntRange(min=1), default=None, help="Rows per streaming step (default: about 32 MiB).")
@force_option
@quiet_option
@json_option
def gather_ckpt(run_dir: str, out: str, npy: bool, verify: bool, chunk_rows: Optional[int], force: bool, quiet: bool, as_json: bool) -> None:
    """Gather a sharded checkpoint RUN_DIR into one global-row-order file per tensor."""
    from gpart.ckpt import gather_checkpoint

    with progress_for(quiet or as_json, bytes_mode=True) as progress:
        manifest = gather_checkpoint(run_dir, out, npy=npy, force=force, verify=verify, progress=progress, chunk_rows=chunk_rows)
    _report(manifest, out, "gathered", as_json, quiet)


@click.command("scatter-ckpt")
@click.argument("full_dir", type=click.Path(file_okay=False))
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="Output directory (sharded layout).")
@click.option("-w", "--world-size", required=True, type=click.IntRange(min=1), help="Number of ranks of the new job.")
@click.option("--policy", type=RegisteredChoice(_policies), default="remainder", help="Sharding policy.")
@click.option("--boundaries", default=None, help="range only: W+1 comma-separated row boundaries (default: WholeGraph's split).")
@verify_option
@chunk_rows_option
@force_option
@quiet_option
@json_option
def scatter_ckpt(
    full_dir: str, out: str, world_size: int, policy: str, boundaries: Optional[str], verify: bool, chunk_rows: Optional[int], force: bool, quiet: bool, as_json: bool
) -> None:
    """Shard a checkpoint FULL_DIR (global, or sharded for another world size) over --world-size ranks."""
    from gpart.ckpt import scatter_checkpoint

    with progress_for(quiet or as_json, bytes_mode=True) as progress:
        manifest = scatter_checkpoint(
            full_dir, out, world_size, policy, boundaries=parse_boundaries(boundaries), force=force, verify=verify, progress=progress, chunk_rows=chunk_rows
        )
    _report(manifest, out, "scattered", as_json, quiet)


@click.command("import-ckpt")
@click.argument("inputs", nargs=-1, required=True)
@click.option("--from", "source", required=True, type=RegisteredChoice(_import_sources), help="Who wrote the files.")
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="Output directory (sharded gpart checkpoint).")
@click.option("-w", "--world-size", type=click.IntRange(min=1), default=None, help="Ranks (wholegraph: required; torch: with {rank} patterns).")
@click.option("--name", default="embedding", help="wholegraph: the embedding's name in the checkpoint.")
@click.option("--num-rows", type=click.IntRange(min=0), default=None, help="wholegraph: rows of the table.")
@click.option("--dim", type=click.IntRange(min=0), default=None, help="wholegraph: width of a row.")
@click.option("--dtype", default="float32", help="wholegraph: dtype of the table.")
@click.option("--optimizer", type=click.Choice(["none", "lazyadam", "adagrad", "adam"]), default="none",
              help="wholegraph: optimizer whose states were saved (adam: LazyAdam's files read as DGL-style Adam, beta12t -> step counts).")
@click.option("--betas", default=None, help="wholegraph --optimizer adam: B1,B2 the files were written with (default WholeGraph's 0.9,0.999).")
@click.option("--state-dtype", default="float32", help="wholegraph: dtype of the moment states.")
@click.option("--state-file", multiple=True, help="wholegraph: STATE=NAME, the file name part of a state (default m, v, beta12t, state_sum).")
@click.option("--boundaries", default=None, help="wholegraph: W+1 row boundaries if not WholeGraph's default split.")
@click.option("--layout", type=RegisteredChoice(_policies), default="remainder", help="torch without ids: how rows were sharded.")
@click.option("--policy", type=RegisteredChoice(_policies), default="remainder", help="torch with ids: policy of the output shards.")
@force_option
@quiet_option
@json_option
def import_ckpt(
    inputs: tuple[str, ...], source: str, out: str, world_size: Optional[int], name: str, num_rows: Optional[int], dim: Optional[int], dtype: str,
    optimizer: str, betas: Optional[str], state_dtype: str, state_file: tuple[str, ...], boundaries: Optional[str], layout: str, policy: str, force: bool, quiet: bool, as_json: bool,
) -> None:
    """Import another system's checkpoint as a sharded gpart checkpoint.

    \b
    gpart import-ckpt --from wholegraph run/emb --num-rows N --dim 128 --world-size 8 --optimizer lazyadam -o ck/
    gpart import-ckpt --from wholegraph wg/emb --num-rows N --dim 128 -w 8 --optimizer adam --betas 0.9,0.999 -o ck/
    gpart import-ckpt --from torch 'dgl/sparse_opt_{rank}' 'dgl/sparse_opt_emb_{rank}.pt' -w 4 -o ck/   # export-ckpt --to distdgl's files
    gpart import-ckpt --from torch rank0.pt rank1.pt -o ck/
    """
    from gpart.ckpt import ImportOptions, import_checkpoint

    options = ImportOptions(
        world_size=world_size, name=name, num_rows=num_rows, row_shape=None if dim is None else (dim,), dtype=dtype, optimizer=optimizer,
        state_dtype=state_dtype, state_files=key_value_pairs(state_file, "--state-file", "STATE=NAME"), boundaries=parse_boundaries(boundaries),
        hyper_params={"betas": _parse_betas(betas)} if betas is not None else None, layout=layout, policy=policy,
    )
    with progress_for(quiet or as_json) as progress:
        manifest = import_checkpoint(inputs, out, source=source, options=options, force=force, progress=progress)
    _report(manifest, out, "imported", as_json, quiet)


def _parse_betas(text: str) -> list[float]:
    """--betas 'B1,B2' as two floats."""
    try:
        betas = [float(x) for x in text.split(",")]
    except ValueError:
        betas = []
    if len(betas) != 2:
        raise InputError(None, f"--betas must be two comma-separated numbers B1,B2, got {text!r}")
    return betas


@click.command("export-ckpt")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--to", "target", required=True, type=RegisteredChoice(_export_targets), help="Whose files to write.")
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="Output directory.")
@click.option("-w", "--world-size", required=True, type=click.IntRange(min=1), help="Ranks of the job that resumes.")
@click.option("--prefix", default=None, help="wholegraph: the prefix given to WholeMemoryEmbedding.load (default: the embedding name); "
              "distdgl: the path stem given to the optimizer's load (default: sparse_opt).")
@click.option("--embedding", default=None, help="The embedding to export (wholegraph: required when the checkpoint holds several).")
@click.option("--policy", type=RegisteredChoice(_policies), default="remainder", help="distdgl: which rows each rank's files hold.")
@click.option("--boundaries", default=None, help="W+1 comma-separated row boundaries of a range split (default: WholeGraph's split).")
@click.option("--table-only", is_flag=True, help="Export the tables alone, without optimizer states.")
@click.option("--ntype", default="_N", help="distdgl: node type in the optimizer's state names (node~NTYPE~<embedding>_step).")
@verify_option
@chunk_rows_option
@result_options
def export_ckpt(
    run_dir: str, target: str, out: str, world_size: int, prefix: Optional[str], embedding: Optional[str], policy: str, boundaries: Optional[str],
    table_only: bool, ntype: str, verify: bool, chunk_rows: Optional[int], force: bool, quiet: bool, as_json: bool,
) -> None:
    """Write a gpart checkpoint RUN_DIR as the files WholeGraph or DistDGL resume from.

    \b
    gpart export-ckpt run/ --to wholegraph -w 4 -o wg/ --prefix emb    # then WholeMemoryEmbedding.load("wg/emb")
    gpart export-ckpt run/ --to distdgl -w 4 -o dgl/                   # then opt.load("dgl/sparse_opt") (DGL 2.1)
    """
    from gpart.ckpt import ExportOptions, export_checkpoint

    options = ExportOptions(
        world_size=world_size, prefix=prefix, embedding=embedding, policy=policy, boundaries=parse_boundaries(boundaries), table_only=table_only,
        ntype=ntype, verify=verify, chunk_rows=chunk_rows,
    )
    with progress_for(quiet or as_json, bytes_mode=True) as progress:
        manifest = export_checkpoint(run_dir, out, to=target, options=options, force=force, progress=progress)
    if as_json:
        print_json(manifest)
    elif not quiet:
        total = sum(f["bytes"] for f in manifest["files"])
        stdout.print(f"exported {len(manifest['embeddings'])} embedding(s) for {target} ({len(manifest['files'])} files, {human_bytes(total)}, "
                     f"{world_size} ranks) -> {out}")


def render_checkpoint_info(info: dict[str, Any]) -> None:
    """Print `gpart.ckpt.checkpoint_info(...)` as `gpart info` does (gpart.inspection.checkpoint_kind draws it)."""
    from gpart.cli.output.blocks import print_blocks
    from gpart.inspection.checkpoint_kind import checkpoint_view

    print_blocks(checkpoint_view(info))
