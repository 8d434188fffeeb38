"""Rich rendering shared by the commands: progress bars, tables, JSON output."""

from __future__ import annotations

import json
import sys
from typing import Any, Optional

import click
import numpy as np
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.progress import (
    Progress as RichBar,
)
from rich.text import Text

from gpart.base.errors import InputError
from gpart.base.progress import NullProgress

stdout = Console()
stderr = Console(stderr=True)


class _Stage:
    def __init__(self, bar: RichBar, name: str, total: Optional[float], unit: str):
        self.bar = bar
        self.task = bar.add_task(name, total=total)

    def advance(self, amount: float = 1) -> None:
        self.bar.advance(self.task, amount)

    def __enter__(self) -> "_Stage":
        return self

    def __exit__(self, *exc) -> None:
        t = self.bar.tasks[self.task]
        if t.total is None:
            self.bar.update(self.task, total=1, completed=1)
        else:
            self.bar.update(self.task, completed=t.total)


class _CountColumn(MofNCompleteColumn):
    """done/total, or nothing for a stage of unknown length (KaMinPar, METIS): `0/?` for the whole run said nothing."""

    def render(self, task: Task) -> Text:
        return Text("") if task.total is None else super().render(task)


class RichProgress:
    """One progress bar per library stage, drawn on stderr: its name, the bar (a pulse when the length is
    unknown), done/total, and the elapsed and remaining time."""

    def __init__(self, bytes_mode: bool = False):
        columns = [TextColumn("{task.description:<28}"), BarColumn(), TaskProgressColumn()]
        columns += [TransferSpeedColumn()] if bytes_mode else [_CountColumn()]
        columns += [TimeElapsedColumn(), TimeRemainingColumn()]
        self.bar = RichBar(*columns, console=stderr, transient=False)

    def stage(self, name: str, total: Optional[float] = None, unit: str = "") -> _Stage:
        return _Stage(self.bar, name, total, unit)

    def __enter__(self) -> "RichProgress":
        self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.stop()


class _QuietContext(NullProgress):
    def __enter__(self) -> "_QuietContext":
        return self

    def __exit__(self, *exc) -> None:
        pass


def progress_for(quiet: bool, bytes_mode: bool = False):
    """Progress bars on a terminal; nothing when quiet or when stderr is not a TTY."""
    if quiet or not sys.stderr.isatty():
        return _QuietContext()
    return RichProgress(bytes_mode=bytes_mode)


def print_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=1, default=_jsonable))


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


quiet_option = click.option("-q", "--quiet", is_flag=True, help="No progress bars and no summary: only errors are printed.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of tables.")
force_option = click.option("--force", is_flag=True, help="Replace what gpart wrote at the output (a result of any kind); never other data.")


def scratch_dir_option(whose: str, holds: str):
    """--scratch-dir DIR: where a partition run's scratch files go (`whose` directory, beside what by default; what
    it `holds`)."""
    return click.option("--scratch-dir", "scratch_dir", metavar="DIR", default=None,
                        help=f"Existing directory for {whose} scratch files: {holds}. Its files are removed when the run ends.")


def data_options(node_help: str, edge_help: str):
    """--node-data and --edge-data NAME=PATH, repeatable (partition and verify name extra arrays so)."""
    def wrap(command):
        command = click.option("--edge-data", "edge_data", multiple=True, metavar="NAME=PATH", help=edge_help)(command)
        return click.option("--node-data", "node_data", multiple=True, metavar="NAME=PATH", help=node_help)(command)

    return wrap


def key_value_pairs(pairs: tuple[str, ...], option: str, form: str = "NAME=VALUE") -> dict[str, str]:
    """Repeated `--option A=B` values as a dict; a malformed one is a one-line input error."""
    out = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key or not value:
            raise InputError(None, f"{option} expects {form}, got {p!r}")
        out[key] = value
    return out


def result_options(command):
    """--force, --quiet and --json, the options of every command that writes a result."""
    return force_option(quiet_option(json_option(command)))


def train_balance_text(stats: dict) -> str:
    """'train balance 1.034   ' when the result has a training mask, else ''."""
    value = stats.get("train_balance")
    return "" if value is None else f"train balance {value:.3f}   "


def parse_boundaries(text: Optional[str]) -> Optional[list[int]]:
    """--boundaries '0,10,20' as a list of ints (None when not given)."""
    if text is None:
        return None
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x != ""]
    except ValueError:
        raise InputError(None, f"--boundaries must be comma-separated integers, got {text!r}") from None
