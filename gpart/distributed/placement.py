"""Where a distributed run's output lives: one shared directory, or one directory per machine (SPEC.md 10.4).

Rank 0 creates its staging directory first (formats.commit.staged_output,
a fresh hidden name with a random suffix). Every rank then looks for that
name beside its own output path and the answers are all-gathered, so all
ranks take the same decision from the same votes:

- every rank sees it: the output is shared; rank 0 owns the staging
  directory and commits it (finish_on_root);
- only rank 0 sees it: per-machine directories; every other rank stages its
  own output, and every rank commits its own copy of the manifest only after
  all ranks wrote theirs;
- some ranks see it, others not: refused (ranks sharing a directory would
  commit over each other), on every rank.

Detection rather than a flag: torchrun gives every rank the same arguments,
the same command then works on a shared file system and on local disks, and
a wrong flag could not make ranks overwrite each other's result.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from gpart.base.errors import GpartError, InputError, OutputError
from gpart.collectives.comm import Comm
from gpart.formats.files.commit import staged_output
from gpart.formats.files.manifest import write_manifest


@dataclass
class Output:
    """This rank's staging directory and whether each rank has its own output directory."""

    stage: Path
    per_machine: bool
    root_only: bool = False  # per machine, but only rank 0 writes an output (gather-ckpt's FULL)

    def writes_shared(self, rank: int) -> bool:
        """Whether this rank writes the files every output directory holds (the book, a full table):
        rank 0 alone on a shared directory, every rank with per-machine directories."""
        return self.per_machine or rank == 0


def _as_output_path(out_dir: Any) -> Path:
    out = Path(out_dir).absolute()  # as formats.commit.check_output_dir names it
    if out.is_symlink() and out.is_dir():
        out = out.resolve()
    return out


def staged_on_root(comm: Comm, stack: Any, out_dir: Any, force: bool, inputs: Sequence[Any]) -> Path:
    """Rank 0 creates the staging directory of `out_dir` (formats.commit.staged_output, entered on
    `stack`: removed if the run fails, swapped into place when the stack closes after the manifest
    is written); every rank returns its path, or every rank raises rank 0's error."""
    error, stage = None, None
    if comm.rank == 0:
        try:
            stage = stack.enter_context(staged_output(out_dir, force=force, inputs=inputs))
        except GpartError as exc:
            error = exc
    comm.agree(error, "creating the output directory")
    return Path(comm.broadcast_bytes(os.fsencode(stage) if stage is not None else None).decode())


def stage_output(comm: Comm, stack: Any, out_dir: Any, force: bool, inputs: Sequence[Any], every_rank: bool = True) -> Output:
    """Stage the output of every rank (entered on `stack`); every rank returns the same decision or raises.
    `every_rank` False: with per-machine directories only rank 0 writes a result (the others none)."""
    stage = staged_on_root(comm, stack, out_dir, force, inputs)
    if comm.world == 1:
        return Output(stage, False)
    sees = comm.rank == 0 or (_as_output_path(out_dir).parent / stage.name).is_dir()
    votes = [v == b"1" for v in comm.all_gather_bytes(b"1" if sees else b"0")]
    if all(votes):
        return Output(stage, False)
    if any(votes[1:]):
        shared = [r for r, v in enumerate(votes) if v]
        raise OutputError(out_dir, f"ranks {shared} share rank 0's output directory and ranks "
                                   f"{[r for r, v in enumerate(votes) if not v]} do not; give every rank the same "
                                   f"shared directory, or each rank a directory of its own (one rank per machine)")
    if not every_rank:
        return Output(stage, True, root_only=True)
    error = None
    if comm.rank != 0:
        try:
            stage = stack.enter_context(staged_output(out_dir, force=force, inputs=inputs))
        except GpartError as exc:
            error = exc
    comm.agree(error, "creating the per-machine output directories")
    return Output(stage, True)


def finish_on_root(comm: Comm, commit: Callable[[], Any]) -> Any:
    """Rank 0 runs `commit()` (returns a JSON-able result) and tells every rank its result or error."""
    if comm.rank == 0:
        try:
            result = commit()
        except BaseException as exc:
            comm.broadcast_bytes(json.dumps({"error": exc.one_line() if isinstance(exc, GpartError) else repr(exc)}).encode())
            raise
        comm.broadcast_bytes(json.dumps({"result": result}).encode())
        return result
    answer = json.loads(comm.broadcast_bytes(None))
    if "error" in answer:
        raise GpartError(None, f"rank {comm.rank}: rank 0 could not commit the result: {answer['error']}")
    return answer["result"]


def commit_output(comm: Comm, out: Output, stack: Any, manifest_on_root: Callable[[], dict],
                  write_shared: Callable[[Path, dict], Any] = write_manifest) -> dict:
    """Write the manifest rank 0 builds and move the result(s) into place; the manifest on every rank.

    Shared: rank 0 writes and commits, then tells the others (finish_on_root).
    Per machine: rank 0's manifest travels to every rank, each writes it into
    its staging directory, and only when all of them did does each rank swap
    its directory into place; a rank whose swap fails makes every rank raise
    (directories already swapped on other machines then stay: rerun with --force).
    `write_shared` writes the shared manifest (a writer that checks every file
    it names); per machine it is written as is, each directory holding a part.
    """
    if not out.per_machine or out.root_only:
        def commit() -> dict:
            manifest = manifest_on_root()
            write_shared(out.stage, manifest)
            stack.close()  # swaps the result into place (rank 0's staged_output)
            return manifest

        return finish_on_root(comm, commit)
    error, text = None, None
    if comm.rank == 0:
        try:
            text = json.dumps(manifest_on_root()).encode()
        except GpartError as exc:
            error = exc
    comm.agree(error, "building the manifest on rank 0")
    manifest = json.loads(comm.broadcast_bytes(text))
    for what, step in (("writing the manifest", lambda: write_manifest(out.stage, manifest)),
                       ("moving the result into place", stack.close)):
        error = None
        try:
            step()
        except (GpartError, OSError) as exc:
            error = exc
        comm.agree(error, what)
    return manifest


def check_my_files(paths: Sequence[Path], rank: int, world: int, what: str) -> None:
    """One-line error naming the first of this rank's chunk files that is absent on its machine."""
    for path in paths:
        if not os.path.isfile(path):
            raise InputError(path, f"no such file: rank {rank} of {world} reads this {what} (chunks i % {world} == {rank}); "
                                   f"with per-machine directories each machine must hold the chunks its ranks read")


def layouts_json(layout: dict[str, tuple[Any, tuple[int, ...]]]) -> dict[str, list]:
    """Arrays' (dtype, row shape) as JSON: the .npy header's dtype description, so it travels exactly."""
    return {name: [np.lib.format.dtype_to_descr(np.dtype(dtype)), list(shape)] for name, (dtype, shape) in layout.items()}


def layouts_from_json(data: dict[str, list]) -> dict[str, tuple[Any, tuple[int, ...]]]:
    def descr(d: Any) -> Any:  # JSON turned the structured descriptions' tuples into lists
        if not isinstance(d, list):
            return d
        return [(f[0], descr(f[1])) + ((tuple(f[2]),) if len(f) > 2 else ()) for f in d]

    return {name: (np.lib.format.descr_to_dtype(descr(d)), tuple(int(s) for s in shape)) for name, (d, shape) in data.items()}
