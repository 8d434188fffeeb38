"""Entry point of the `gpart` console script.

Subcommands live one module each and are imported only when invoked, so
`gpart --help` stays fast. Library errors (gpart.base.errors.GpartError) become one
line on stderr, `error: <path>: <problem>`, and their exit code (2 for bad
input or output, 1 for damaged artifacts).
"""

from __future__ import annotations

import importlib
import signal
import sys
import threading
from contextlib import contextmanager

import click

from gpart.base.errors import GpartError, Interrupted, raise_interrupted
from gpart.base.version import __version__
from gpart.base.work_paths import abandoned_removed
from gpart.cli.output.exit_codes import REPORTED, exit_code

# command name -> "module:attribute" inside gpart.cli
COMMANDS = {
    "partition": "gpart.cli.commands.partition:partition",
    "chunk": "gpart.cli.commands.chunk:chunk",
    "info": "gpart.cli.commands.inspect:info",
    "verify": "gpart.cli.commands.inspect:verify",
    "export-feat": "gpart.cli.commands.export:export_feat",
    "gather-ckpt": "gpart.cli.commands.ckpt:gather_ckpt",
    "scatter-ckpt": "gpart.cli.commands.ckpt:scatter_ckpt",
    "import-ckpt": "gpart.cli.commands.ckpt:import_ckpt",
    "export-ckpt": "gpart.cli.commands.ckpt:export_ckpt",
    "convert": "gpart.cli.commands.convert:convert",
}


class LazyGroup(click.Group):
    def invoke(self, ctx: click.Context):
        # One place turns library errors into `error: <path>: <problem>` and an exit
        # code, for the console script and for click's CliRunner alike.
        try:
            return super().invoke(ctx)
        except GpartError as exc:
            raise click.exceptions.Exit(exit_code(exc)) from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str):
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(__version__, prog_name="gpart")
def cli() -> None:
    """Prepare graphs, features and embedding checkpoints for multi-GPU GNN training.

    \b
    gpart partition graph.npz --parts 4 -o parts/    split a graph into partitions
    gpart chunk graph.npz --chunks 8 -o chunks/       cut a graph into chunks for distributed runs
    gpart info parts/                                 sizes, edge cut, balance
    gpart verify parts/ --graph graph.npz             checksums and invariants
    gpart export-feat feat.npy -o wg/ --files 8       WholeGraph-style flat binaries
    gpart gather-ckpt run/ -o full/                   sharded checkpoint -> global order
    gpart scatter-ckpt full/ -o run8/ --world-size 8  re-shard for a new world size
    gpart import-ckpt --from torch 'opt_{rank}.pt' -w 4 -o run/   import DistDGL / WholeGraph files
    gpart export-ckpt run/ --to wholegraph -w 4 -o wg/    back to WholeGraph / DistDGL files
    gpart convert parts/ --to pyg -o pyg_parts/           PyG / GraphLearn partition layouts
    """


@contextmanager
def _termination_unwinds():
    """SIGTERM / SIGHUP raise Interrupted in the main thread while a command runs, so staging
    directories and scratch files are removed on the way out (the default action would kill
    the process on the spot). Previous handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, raise_interrupted) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    with _termination_unwinds(), abandoned_removed():  # what an interruption (a signal, Ctrl-C) left ownerless
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    try:
        rc = cli.main(args=argv, prog_name="gpart", standalone_mode=False)
    except REPORTED as exc:  # a GpartError here was raised while parsing, before a command runs
        return exit_code(exc)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, Interrupted):  # click turns KeyboardInterrupt into Abort
            return _interrupted(exc.__cause__)
        click.echo("aborted", err=True)
        return 130
    except Interrupted as exc:
        return _interrupted(exc)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    # without standalone mode click returns the code of a ctx.exit() / Exit, else the command's None
    return rc if isinstance(rc, int) else 0


def _interrupted(exc: Interrupted) -> int:
    click.echo(f"interrupted by {signal.Signals(exc.signum).name}", err=True)
    return 128 + exc.signum


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
