"""Where a distributed run's output lives: one shared directory, one per machine, or one per rank (SPEC.md 10.4).

The ranks first find out which of them share a directory
(gpart.distributed.sharing: token files beside each rank's output path,
looked for by every rank, the answers all-gathered, so all ranks take the
same decision). The lowest rank of each group, its leader, creates the
group's staging directory (formats.commit.staged_output, a fresh hidden
name); the other ranks of the group write into it. Then:

- one group (a shared file system, or one machine): rank 0 commits it
  (finish_on_root), as for a single process;
- several groups (per-machine directories, any number of ranks on each):
  every leader writes the same manifest into its group's directory, and
  each swaps its directory into place only after all of them wrote theirs;
- an inconsistent view (a rank sees another's directory, not the reverse)
  is refused on every rank.

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

from gpart.base.errors import GpartError, InputError
from gpart.collectives.comm import Comm
from gpart.distributed.sharing import as_output_path, sharing_groups
from gpart.formats.files.commit import staged_output
from gpart.formats.files.manifest import write_manifest


@dataclass
class Output:
    """This rank's staging directory and the ranks grouped by the output directory they share."""

    stage: Path
    groups: list[list[int]]
    root_only: bool = False  # per machine, but only rank 0's group writes an output (gather-ckpt's FULL)

    @property
    def per_machine(self) -> bool:
        """Whether there is more than one output directory."""
        return len(self.groups) > 1

    def group_of(self, rank: int) -> list[int]:
        return next(g for g in self.groups if rank in g)

    def writes_shared(self, rank: int) -> bool:
        """Whether this rank writes the files every output directory holds (the book, a full table):
        the lowest rank of each directory's group."""
        return self.group_of(rank)[0] == rank


def stage_output(comm: Comm, stack: Any, out_dir: Any, force: bool, inputs: Sequence[Any], every_rank: bool = True) -> Output:
    """Stage the output directory of every group of ranks (entered on the leaders' `stack`: removed if the run
    fails, swapped into place when the stack closes after the manifest is written); every rank returns the
    same groups and its group's staging directory, or raises. `every_rank` False: with several directories
    only rank 0's group writes a result (the others none; their `stage` is then not a directory)."""
    groups = [[0]] if comm.world == 1 else sharing_groups(comm, out_dir)
    out = Output(Path(), groups, root_only=not every_rank and len(groups) > 1)
    writing = not out.root_only or 0 in out.group_of(comm.rank)
    error, stage = None, None
    if writing and out.writes_shared(comm.rank):
        try:
            stage = stack.enter_context(staged_output(out_dir, force=force, inputs=inputs))
        except GpartError as exc:
            error = exc
    comm.agree(error, "creating the output directory" if len(groups) == 1 else "creating the per-machine output directories")
    names = [n.decode() for n in comm.all_gather_bytes(stage.name.encode() if stage is not None else b"")]
    # the members of a group see the leader's staging directory beside their own output path
    out.stage = as_output_path(out_dir).parent / names[out.group_of(comm.rank)[0] if writing else 0]
    return out


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
    Per machine: rank 0's manifest travels to every rank, each group's leader writes it into
    its staging directory, and only when all of them did does each leader swap
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
    leader = out.writes_shared(comm.rank)
    for what, step in (("writing the manifest", lambda: write_manifest(out.stage, manifest)),
                       ("moving the result into place", stack.close)):
        error = None
        try:
            if leader:
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
