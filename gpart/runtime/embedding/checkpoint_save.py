"""save_checkpoint: ShardedEmbedding tables and sparse optimizer states saved as a gpart checkpoint.

The files are exactly SPEC.md section 6 (gpart.formats.checkpoint.entries), so
`gpart gather-ckpt`, `scatter-ckpt`, `info` and `verify` work on what
training saved, and a checkpoint saved by W ranks under either policy (or a
gathered global one) loads into a job of any world size and policy.

save_checkpoint is a collective: every rank writes its own shards into one
staging directory next to `path` (the ranks must share a filesystem), rank 0
gathers the shard entries (rows, bytes, CRC-32) from all ranks, writes the
manifest last and swaps the staging directory into place. Until that rename
the previous checkpoint at `path` stays complete and loadable; a job killed
during a save leaves at most a hidden `.<name>.gpart-staging-*` directory with
no manifest, which no reader accepts as a result.

Its counterpart, load_checkpoint, is gpart.runtime.embedding.checkpoint_load. Both are
`gpart.runtime.save_checkpoint` / `load_checkpoint` for a training script.
"""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import torch

from gpart.base.errors import GpartError, OutputError
from gpart.bytes.torch_bridge import tensor_dtype_name
from gpart.collectives import agreement as dist
from gpart.formats.checkpoint.entries import EmbeddingSpec, build_checkpoint_manifest, tensor_name
from gpart.formats.checkpoint.writer import write_checkpoint_manifest, write_shard
from gpart.formats.files.commit import staged_output
from gpart.formats.files.manifest import MANIFEST_NAME, read_manifest
from gpart.runtime.embedding.checkpoint_load import check_embeddings
from gpart.runtime.embedding.optim import SparseOptimizer
from gpart.runtime.embedding.table import RANK_SYNC_TIMEOUT_S, ShardedEmbedding

PathLike = Union[str, "os.PathLike[str]"]


# ---------------------------------------------------------------------------------- saving


def save_checkpoint(
    path: PathLike,
    embeddings: Sequence[ShardedEmbedding],
    optimizer: Optional[SparseOptimizer] = None,
    *,
    overwrite: bool = True,
    extra: Optional[dict[str, Any]] = None,
) -> Path:
    """Write `embeddings` (and `optimizer`'s states of them) to the checkpoint directory `path`.

    Call on every rank with the same arguments. An existing checkpoint at
    `path` is replaced only once the new one is complete (with overwrite=True,
    the default); anything else already at `path` (a non-empty directory that
    is not a gpart checkpoint) is refused. `extra` (JSON-able) is stored in
    the manifest and returned by load_checkpoint. Returns the absolute path.
    """
    embeddings = check_embeddings(embeddings, optimizer)
    rank, world = embeddings[0].rank, embeddings[0].world_size
    out = Path(path).absolute()
    dist.check_same_across_ranks(
        _save_plan(out, embeddings, optimizer), "checkpoint save (path, embeddings, optimizer)", timeout_s=RANK_SYNC_TIMEOUT_S, path=out
    )

    stack = ExitStack()
    stage = _open_stage(out, overwrite, stack, rank, world)

    write_error: Optional[BaseException] = None
    commit_error: Optional[BaseException] = None
    try:
        # every rank writes its shards; a failure is reported, not raised, until all ranks know
        entries: list[dict[str, Any]] = []
        try:
            entries = _write_rank_shards(stage, embeddings, optimizer, rank, world)
        except Exception as exc:
            write_error = exc
        gathered = _all_gather({"entries": entries, "error": _text(write_error)}, world)
        if rank == 0:
            try:
                _commit_manifest(stage, out, embeddings, optimizer, gathered, write_error, world, extra)
                stack.close()  # swap the complete staging directory into place
            except Exception as exc:
                commit_error = exc
                stack.__exit__(type(exc), exc, exc.__traceback__)  # removes the staging directory
        outcome = _from_root({"error": _text(commit_error)}, rank, world)
    except BaseException:
        # a peer died or we were interrupted mid-collective: rank 0 still removes the staging directory
        if rank == 0:
            stack.__exit__(*sys.exc_info())
        raise
    if commit_error is not None:
        raise commit_error
    if write_error is not None:
        raise write_error
    if outcome["error"] is not None:
        raise OutputError(out, outcome["error"])
    return out


def _open_stage(out: Path, overwrite: bool, stack: ExitStack, rank: int, world: int) -> Path:
    """Rank 0 opens the staging directory next to `out` (in `stack`) and announces it; every rank returns it.
    A setup failure on rank 0 is raised on every rank."""
    setup_error: Optional[BaseException] = None
    stage: Optional[Path] = None
    if rank == 0:
        try:
            _check_destination(out, overwrite)
            stage = stack.enter_context(staged_output(out, force=True))
        except GpartError as exc:
            setup_error = exc
    announced = _from_root({"stage": None if stage is None else str(stage), "error": _text(setup_error)}, rank, world)
    if announced["error"] is not None:
        if setup_error is not None:
            raise setup_error
        raise OutputError(out, announced["error"])
    return Path(announced["stage"])


def _commit_manifest(
    stage: Path,
    out: Path,
    embeddings: list[ShardedEmbedding],
    optimizer: Optional[SparseOptimizer],
    gathered: list[dict[str, Any]],
    write_error: Optional[BaseException],
    world: int,
    extra: Optional[dict[str, Any]],
) -> None:
    """Rank 0: all shards written? then build the manifest from every rank's entries and write it last."""
    if write_error is not None:
        raise write_error
    failed = [(r, g["error"]) for r, g in enumerate(gathered) if g["error"] is not None]
    if failed:
        raise OutputError(out, f"rank {failed[0][0]} failed to write its shards: {failed[0][1]}")
    manifest = build_checkpoint_manifest(
        [_spec(emb) for emb in embeddings],
        [g["entries"] for g in gathered],
        world,
        optimizer=_optimizer_json(optimizer),
        created_by=f"gpart.runtime (world size {world})",
        extra=extra,
    )
    write_checkpoint_manifest(stage, manifest)


def _save_plan(out: Path, embeddings: list[ShardedEmbedding], optimizer: Optional[SparseOptimizer]) -> str:
    """What every rank must agree on before writing: path, tables, policies, optimizer."""
    tables = ";".join(f"{e.name}:{e.num_embeddings}x{e.dim}:{e.dtype}:{e.policy.name}:{e.world_size}" for e in embeddings)
    return f"{out}|{tables}|{'none' if optimizer is None else optimizer.kind}"


def _check_destination(out: Path, overwrite: bool) -> None:
    """Refuse to replace anything but a gpart checkpoint (and that only with overwrite)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise OutputError(out, "exists and is not a directory")
    if not any(out.iterdir()):
        return
    if not (out / MANIFEST_NAME).exists():
        raise OutputError(out, "is a non-empty directory that is not a gpart checkpoint; refusing to replace it")
    read_manifest(out, expected_format="gpart.checkpoint")  # InputError for another kind of result
    if not overwrite:
        raise OutputError(out, "a checkpoint exists already (overwrite=False)")


def _write_rank_shards(
    stage: Path, embeddings: list[ShardedEmbedding], optimizer: Optional[SparseOptimizer], rank: int, world: int
) -> list[dict[str, Any]]:
    entries = []
    for emb in embeddings:
        entries.append(write_shard(stage, tensor_name(emb.name), rank, world, emb.weight))
        if optimizer is not None:
            for state, tensor in optimizer.state_tensors(emb).items():
                entries.append(write_shard(stage, tensor_name(emb.name, state), rank, world, tensor))
    return entries


def _spec(emb: ShardedEmbedding) -> EmbeddingSpec:
    return EmbeddingSpec(emb.name, emb.num_embeddings, (emb.dim,), tensor_dtype_name(emb.dtype), emb.policy)


def _optimizer_json(optimizer: Optional[SparseOptimizer]) -> dict[str, Any]:
    if optimizer is None:
        return {"type": "none"}
    return {"type": optimizer.kind, **optimizer.hyperparameters()}


def _text(exc: Optional[BaseException]) -> Optional[str]:
    if exc is None:
        return None
    return exc.one_line() if isinstance(exc, GpartError) else f"{type(exc).__name__}: {exc}"


# Control messages between the ranks of one job: small dicts of strings and JSON
# entries, exchanged with torch.distributed's object collectives (never user files).
def _all_gather(obj: dict[str, Any], world: int) -> list[dict[str, Any]]:
    if world == 1:
        return [obj]
    out: list[Any] = [None] * world
    torch.distributed.all_gather_object(out, obj)
    return out


def _from_root(obj: dict[str, Any], rank: int, world: int) -> dict[str, Any]:
    if world == 1:
        return obj
    box = [obj if rank == 0 else None]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


__all__ = ["save_checkpoint"]
