"""gather-ckpt and scatter-ckpt on torch.distributed ranks (shared or per-machine directories, SPEC.md 10.4).

scatter: target shard q (of every tensor) is written by rank q % W with the
single-process scatter's own shard_tensor, asked for those shards only (a
range target reads only their rows; a remainder target's rows are
interleaved through the table, so its rank streams the table once for all
its shards). gather: tensor i of the checkpoint is gathered by rank i % W
with the single-process gather's own gather_tensor (the output has one file
per tensor). Every rank writes into the staging directory rank 0 created;
rank 0 writes the manifest last once every rank reported success (with one
directory per machine, as gpart.distributed.placement says). The files
are the ones single-process gather-ckpt / scatter-ckpt write, byte for byte,
because each is written by the same code.
"""

from __future__ import annotations

import json
import os
from contextlib import ExitStack
from typing import Any, Optional, Sequence, Union

from gpart.base.errors import GpartError
from gpart.base.progress import NullProgress
from gpart.ckpt.per_machine_run import fetch_shards, read_run
from gpart.ckpt.reshard import gather_tensor, scatter_manifest, shard_tensor, target_policies
from gpart.collectives.comm import Comm
from gpart.distributed.placement import commit_output, stage_output
from gpart.formats.checkpoint import entries as ck
from gpart.formats.checkpoint.reader import Checkpoint, read_checkpoint
from gpart.formats.checkpoint.writer import write_checkpoint_manifest
from gpart.formats.files.manifest import fsync_dir
from gpart.formats.files.scratch import ScratchDir
from gpart.formats.sharding.policies import ShardPolicy

PathLike = Union[str, "os.PathLike[str]"]


def _read(comm: Comm, directory: PathLike) -> Checkpoint:
    error, src = None, None
    try:
        src = read_checkpoint(directory)
    except GpartError as exc:
        error = exc
    comm.agree(error, "reading the checkpoint")
    return src


def _reports(comm: Comm, error: Optional[BaseException], mine: Any, what: str) -> list[Any]:
    comm.agree(error, what)
    return [json.loads(r) for r in comm.all_gather_bytes(json.dumps(mine).encode())]


def gather_ckpt(run_dir: PathLike, out_dir: PathLike, *, npy: bool = False, force: bool = False,
                comm: Optional[Comm] = None, max_message: int = 256 << 20) -> dict[str, Any]:
    """Distributed `gpart gather-ckpt`: every tensor in global row order; returns the manifest on every rank."""
    comm = comm or Comm()
    src, spread = read_run(comm, run_dir)
    names = list(src.tensors)
    with ExitStack() as stack:
        # a shared output: tensor i written by rank i % W; per machine: the whole FULL by the ranks sharing
        # rank 0's directory (tensor i by the i % n-th of those n ranks)
        out = stage_output(comm, stack, out_dir, force, [run_dir], every_rank=False)
        stage = out.stage
        writers = out.group_of(0)

        def writer_of(i: int) -> int:
            return writers[i % len(writers)]

        views = {name: src for i, name in enumerate(names) if writer_of(i) == comm.rank}
        if spread:  # rank r holds shards s % W == r only: the others' travel to the writers
            scratch = stack.enter_context(ScratchDir(stage.parent, prefix=f"{stage.name}-shards-{comm.rank}-")) \
                if comm.rank in writers else None
            views = fetch_shards(comm, src, writer_of, scratch.path if scratch else stage.parent, max_message)
        error, mine = None, {}
        # each rank's FileListWriter works in its own subdirectory: its sweep of stale work
        # judges processes by pid, which means nothing for another host's ranks
        own = stage / f".rank-{comm.rank}"
        try:
            for name in views:
                own.mkdir(exist_ok=True)
                mine[name] = gather_tensor(views[name], name, own, npy=npy)
                for path in own.iterdir():
                    os.rename(path, stage / path.name)
            if own.exists():
                own.rmdir()
                fsync_dir(stage)
        except Exception as exc:
            error = exc
        entries = {k: v for r in _reports(comm, error, mine, "gathering tensors") for k, v in r.items()}

        def manifest() -> dict[str, Any]:
            return ck.build_global_manifest(src, [entries[name] for name in names], os.fspath(run_dir))

        return commit_output(comm, out, stack, manifest, write_checkpoint_manifest)


def scatter_ckpt(full_dir: PathLike, out_dir: PathLike, world_size: int, policy: str = "remainder", *,
                 boundaries: Optional[Sequence[int]] = None, force: bool = False,
                 comm: Optional[Comm] = None) -> dict[str, Any]:
    """Distributed `gpart scatter-ckpt`: shards for `world_size` ranks by `policy`; returns the manifest on every rank."""
    comm = comm or Comm()
    src = _read(comm, full_dir)
    error: Optional[Exception] = None
    policies: dict[str, ShardPolicy] = {}
    try:
        policies = target_policies(src, policy, world_size, boundaries)
    except GpartError as exc:
        error = exc
    comm.agree(error, "checking the target policy")
    with ExitStack() as stack:
        out = stage_output(comm, stack, out_dir, force, [full_dir])  # shared, or one directory per machine
        error, mine = None, []
        try:
            with NullProgress().stage("scattering") as bar:
                for name, t in src.tensors.items():
                    mine += shard_tensor(src, name, policies[t.embedding], out.stage, None, bar, ranks=range(comm.rank, world_size, comm.world))
        except Exception as exc:
            error = exc
        entries = _reports(comm, error, mine, "writing shards")  # per rank: its shards' entries

        def manifest() -> dict[str, Any]:
            return scatter_manifest(src, policies, entries, world_size)

        return commit_output(comm, out, stack, manifest, write_checkpoint_manifest)
