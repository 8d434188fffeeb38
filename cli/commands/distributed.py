"""`python -m gpart.distributed COMMAND`: the commands that run on every rank of a torchrun job.

Each rank parses the same arguments, joins the gloo process group
(torchrun's environment; a world of one without it), calls one library
function and, on rank 0, prints the summary. Any failure is one line on
stderr naming the rank, and a non-zero exit on every rank. The library
(torch, numpy) is imported inside each command, so `--help` stays fast.
"""

from __future__ import annotations

import os
import sys

import click

from gpart.base.work_paths import abandoned_removed
from gpart.cli.options.method import DescribedOption, MethodChoice, distributed_method_help, given_method_options, imbalance_option, preset_option
from gpart.cli.output.exit_codes import REPORTED, exit_code
from gpart.cli.output.ui import json_option, parse_boundaries, print_json, quiet_option, scratch_dir_option, stdout

EPILOG = "Launch with torchrun (torchrun --nproc-per-node W -m gpart.distributed ...) or plain python for one process."


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True}, epilog=EPILOG)
def cli() -> None:
    """Partition and re-shard on torch.distributed ranks (SPEC.md 10.2).

    \b
    torchrun --nproc-per-node 4 -m gpart.distributed partition chunks/ --parts 8 -o parts/
    """


def _size(text: str) -> int:
    from gpart.base.memory import parse_memory_size

    return int(parse_memory_size(text, "--max-message"))


timeout_option = click.option("--timeout", "timeout_s", type=float, default=600.0,
                              help="Seconds any collective may wait for the other ranks before every rank gives up.")


@cli.command(context_settings={"show_default": True})
@click.argument("chunks", metavar="CHUNKS")
@click.option("-p", "--parts", "num_parts", type=int, required=True, help="Number of partitions P.")
@click.option("-o", "--out", "out_dir", metavar="DIR", required=True, help="Output directory: shared by every rank, or one per machine (detected; SPEC.md 10.4).")
@click.option("--method", type=MethodChoice(), default=None, cls=DescribedOption, describe=distributed_method_help)
@click.option("--assignment", metavar="FILE", default=None, help="Owner of every node from a file (.npy or text); replaces --method.")
@click.option("--seed", type=int, default=0, help="Seed of random, metis, kaminpar.")
@imbalance_option
@preset_option
@click.option("--halo", type=click.IntRange(0, 1), default=0,
              help="1: also store node data rows of halo nodes (fetched from the ranks that read them).")
@click.option("--max-message", "max_message", default="256MiB", help="Most bytes a rank sends in one all_to_all round.")
@click.option("--max-memory", "max_memory", metavar="SIZE", default=None,
              help="Memory rank 0 may use for the methods that gather the graph there (balanced, metis, kaminpar, "
                   "stream), e.g. 8GB (default: 3/4 of its available RAM, or of its cgroup memory limit where lower). "
                   "Past the in-memory path's need the default and kaminpar take their compressed path; past that, "
                   "one line up front.")
@scratch_dir_option("each rank's", "on its own machine, default beside DIR; the shuffled rows and, on rank 0, the "
                                   "gathered edges and the compressed adjacency")
@click.option("--add-reverse", is_flag=True, help="Not supported here yet (refused): run `gpart partition CHUNKS --add-reverse` on one machine.")
@click.option("--force", is_flag=True, help="Replace an existing result in DIR.")
@timeout_option
@click.option("-v", "--verbose", is_flag=True, help="Each rank prints its stages' wall time and peak RSS.")
@quiet_option
@json_option
def partition(chunks: str, num_parts: int, out_dir: str, method: str | None, assignment: str | None, seed: int, imbalance: float | None, preset: str | None,
              halo: int, max_message: str, max_memory: str | None, scratch_dir: str | None, add_reverse: bool, force: bool, timeout_s: float, verbose: bool,
              quiet: bool, as_json: bool) -> None:
    """Partition the chunked graph CHUNKS (gpart chunk) into P partitions under DIR, on every rank.

    Byte-identical to `gpart partition CHUNKS` with the same options (binary storage).
    CHUNKS and DIR may be per machine: each machine then needs only manifest.json and
    the chunks its rank r reads (i % W == r), and gets its partitions in its own DIR.

    \b
    Examples:
      gpart chunk sample_data/cora.npz --chunks 4 -o chunks/
      torchrun --standalone --nproc-per-node 2 -m gpart.distributed partition chunks/ --parts 4 -o parts/
      torchrun --nnodes 4 --nproc-per-node 1 --rdzv-endpoint HOST:29400 -m gpart.distributed partition chunks/ --parts 8 --method random -o parts/
      torchrun --standalone --nproc-per-node 4 -m gpart.distributed partition chunks/ --parts 16 --max-memory 8GB -o parts/
    """
    from gpart.collectives.comm import init_from_env
    from gpart.distributed.partition_chunks import partition_chunks

    if add_reverse:  # finding the copies needs every edge's reverse, which no rank holds alone (no shuffle for it yet)
        raise click.UsageError("--add-reverse is not supported by the distributed runner yet; "
                               "run `gpart partition CHUNKS --add-reverse` on one machine")
    comm = init_from_env(timeout_s)
    log = (lambda line: click.echo(line, err=True)) if verbose else None
    method_options = given_method_options(click.get_current_context())
    for name, value in (("max_memory", max_memory), ("scratch_dir", scratch_dir)):
        if value is not None:
            method_options[name] = value
    info = partition_chunks(chunks, out_dir, num_parts, method, halo=halo, force=force, max_message=_size(max_message),
                            timeout_s=timeout_s, comm=comm, log=log, **method_options)
    if comm.rank != 0 or quiet:
        return
    m = info.manifest
    summary = {"directory": out_dir, "num_parts": m["num_parts"], "method": m["method"], "world_size": info.world_size,
               "largest_message": info.largest_message, "rounds": info.rounds, "peak_rss": info.peak_rss, "stats": m["stats"]}
    if as_json:
        print_json(summary)
    else:
        stdout.print(f"{out_dir}: {m['graph']['num_nodes']:,} nodes, {m['graph']['num_edges']:,} edges -> {m['num_parts']} parts by "
                     f"{m['method']} on {info.world_size} ranks; largest message {info.largest_message:,} bytes; "
                     f"edge cut {m['stats']['edge_cut']:,}", soft_wrap=True)


@cli.command("gather-ckpt", context_settings={"show_default": True})
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="Output directory (global layout): shared, or per machine (then rank 0 writes it).")
@click.option("--npy", is_flag=True, help="Write <tensor>.npy files instead of flat <tensor>_part_0_of_1 + <tensor>.json.")
@click.option("--max-message", "max_message", default="256MiB", help="Most bytes a rank sends in one all_to_all round (per-machine RUN_DIR).")
@click.option("--force", is_flag=True, help="Replace an existing result.")
@timeout_option
@quiet_option
@json_option
def gather_ckpt(run_dir: str, out: str, npy: bool, max_message: str, force: bool, timeout_s: float, quiet: bool,
                as_json: bool) -> None:
    """Gather the sharded checkpoint RUN_DIR into global row order; tensor i is written by rank i % W.

    Byte-identical to `gpart gather-ckpt RUN_DIR -o OUT`. RUN_DIR may be per
    machine (rank r holding the shards s % W == r and the manifest): the shards
    then travel to the tensors' writers in bounded messages.

    \b
    Example:
      torchrun --standalone --nproc-per-node 4 -m gpart.distributed gather-ckpt run/ -o full/
    """
    from gpart.ckpt.distributed_reshard import gather_ckpt as gather
    from gpart.collectives.comm import init_from_env

    comm = init_from_env(timeout_s)
    manifest = gather(run_dir, out, npy=npy, force=force, comm=comm, max_message=_size(max_message))
    _report_ckpt(comm, manifest, out, "gathered", quiet, as_json)


@cli.command("scatter-ckpt", context_settings={"show_default": True})
@click.argument("full_dir", type=click.Path(file_okay=False))
@click.option("-o", "--output", "out", required=True, type=click.Path(), help="Output directory (sharded layout): shared, or one per machine holding its shards.")
@click.option("-w", "--world-size", required=True, type=click.IntRange(min=1), help="Number of ranks of the new job.")
@click.option("--policy", type=click.Choice(["remainder", "range"]), default="remainder", help="Sharding policy.")
@click.option("--boundaries", default=None, help="range only: W+1 comma-separated row boundaries (default: WholeGraph's split).")
@click.option("--force", is_flag=True, help="Replace an existing result.")
@timeout_option
@quiet_option
@json_option
def scatter_ckpt(full_dir: str, out: str, world_size: int, policy: str, boundaries: str | None, force: bool,
                 timeout_s: float, quiet: bool, as_json: bool) -> None:
    """Re-shard the checkpoint FULL_DIR for a job of W ranks; target shard q is written by rank q % (this job's size).

    Byte-identical to `gpart scatter-ckpt FULL_DIR -o OUT -w W`.

    \b
    Example:
      torchrun --standalone --nproc-per-node 4 -m gpart.distributed scatter-ckpt full/ --world-size 16 -o run16/
    """
    from gpart.ckpt.distributed_reshard import scatter_ckpt as scatter
    from gpart.collectives.comm import init_from_env

    comm = init_from_env(timeout_s)
    manifest = scatter(full_dir, out, world_size, policy, boundaries=parse_boundaries(boundaries), force=force, comm=comm)
    _report_ckpt(comm, manifest, out, f"scattered over {world_size} ranks", quiet, as_json)


def _report_ckpt(comm, manifest: dict, out: str, verb: str, quiet: bool, as_json: bool) -> None:
    if comm.rank != 0 or quiet:
        return
    if as_json:
        print_json({"directory": out, "world_size": manifest["world_size"], "ranks": comm.world,
                    "tensors": [t["name"] for t in manifest["tensors"]]})
    else:
        stdout.print(f"{out}: {len(manifest['tensors'])} tensors {verb} by {comm.world} ranks", soft_wrap=True)


def main(argv: list[str] | None = None) -> int:
    """Run one command; a failure is one line `error: ...` and exit 2 (1 for damaged artifacts)."""
    code = 0
    with abandoned_removed():  # work directories an interruption left ownerless (os._exit below runs no cleanup)
        try:
            cli.main(args=argv, prog_name="python -m gpart.distributed", standalone_mode=False)
        except REPORTED as exc:
            code = _reported(exc)
        except KeyboardInterrupt:
            code = 130
        except Exception as exc:  # a collective that broke in an unexpected way: still one line, still non-zero
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            click.echo(f"error: rank {os.environ.get('RANK', '0')}: {type(exc).__name__}: {first}", err=True)
            code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if code:
        # Leave at once: tearing the process group down would wait for peers that may be gone.
        os._exit(code)
    _leave_group()
    return 0


def _reported(exc: BaseException) -> int:
    """The failure's line (on stderr) and exit code. Under torchrun a gpart error's line also goes to the error
    file torchrun reads (gpart.runtime.rank_errors), so its failure summary shows it where a traceback would be;
    the rank's own line stays because a machine that lost its link loses its torchrun agent (its rendezvous
    store) before that summary is printed."""
    from gpart.base.errors import GpartError

    if isinstance(exc, GpartError) and os.environ.get("TORCHELASTIC_ERROR_FILE"):
        from gpart.runtime.rank_errors import report

        report(exc)
    return exit_code(exc)


def _leave_group() -> None:
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass
