"""Save and load ShardedEmbedding tables and sparse optimizer states as gpart checkpoints.

The files are exactly SPEC.md section 6 (gpart.formats.checkpoint), so
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

load_checkpoint is rank-local: each rank reads only the rows it owns, of the
table and of every optimizer state, and the optimizer's hyper-parameters.
"""

from __future__ import annotations

import math
import os
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch

from gpart.bytes.torch_bridge import numpy_to_tensor, tensor_dtype_name
from gpart.errors import GpartError, InputError, IntegrityError, OutputError
from gpart.formats.checkpoint import (
    EmbeddingSpec,
    build_checkpoint_manifest,
    tensor_name,
    write_checkpoint_manifest,
    write_shard,
)
from gpart.formats.checkpoint_reader import read_checkpoint
from gpart.formats.commit import interrupted_swap_of, staged_output
from gpart.formats.manifest import MANIFEST_NAME, read_manifest
from gpart.runtime import dist
from gpart.runtime.embedding import RANK_SYNC_TIMEOUT_S, ShardedEmbedding
from gpart.runtime.optim import SparseOptimizer
from gpart.shard import ShardPolicy

PathLike = Union[str, "os.PathLike[str]"]

# Rows per host read when loading: bounds host memory independently of the table size.
LOAD_CHUNK_BYTES = 64 << 20
STAGING_CHUNK_BYTES = 4 << 20
# Beyond this distance between consecutive wanted rows of a shard, gather them instead of reading the span.
STRIDED_READ_LIMIT = 64 << 10


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
    embeddings = _check_embeddings(embeddings, optimizer)
    rank, world = embeddings[0].rank, embeddings[0].world_size
    out = Path(path).absolute()
    dist.check_same_across_ranks(
        _save_plan(out, embeddings, optimizer), "checkpoint save (path, embeddings, optimizer)", timeout_s=RANK_SYNC_TIMEOUT_S, path=out
    )

    stack = ExitStack()
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
    stage = Path(announced["stage"])

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


def _check_embeddings(embeddings: Sequence[ShardedEmbedding], optimizer: Optional[SparseOptimizer]) -> list[ShardedEmbedding]:
    embeddings = list(embeddings)
    if not embeddings:
        raise ValueError("no embeddings given")
    for emb in embeddings:
        if not isinstance(emb, ShardedEmbedding):
            raise TypeError(f"expected ShardedEmbedding objects, got {type(emb).__name__}")
    names = [emb.name for emb in embeddings]
    if len(set(names)) != len(names):
        raise ValueError(f"embedding names must be unique, got {names}")
    if len({(emb.rank, emb.world_size) for emb in embeddings}) != 1:
        raise ValueError("all embeddings must belong to the same process group")
    if optimizer is not None:
        owned = {id(p) for p in optimizer.params}
        strangers = [emb.name for emb in embeddings if id(emb) not in owned]
        if strangers:
            raise ValueError(f"the optimizer does not hold embeddings {strangers}; save them without it or with their own optimizer")
    return embeddings


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


# ---------------------------------------------------------------------------------- loading


def load_checkpoint(
    path: PathLike,
    embeddings: Sequence[ShardedEmbedding],
    optimizer: Optional[SparseOptimizer] = None,
    *,
    verify: bool = False,
) -> dict[str, Any]:
    """Fill `embeddings` (and `optimizer`'s states and hyper-parameters) from the checkpoint at `path`.

    The checkpoint may come from any world size and policy, or be a gathered
    (global) one; each rank reads only the rows it owns. Table dtypes are
    converted when they differ (float16 <-> float32). `verify` checks every
    file's CRC-32 first. Returns the manifest's `extra` dict (what
    save_checkpoint was given). Recorded gradients are cleared. Everything is
    checked before the first row is copied; only an I/O error while copying
    can leave the tables partly loaded.
    """
    embeddings = _check_embeddings(embeddings, optimizer)
    _point_to_interrupted_swap(Path(path))
    ckpt = read_checkpoint(path, verify=verify)
    where = ckpt.directory
    for emb in embeddings:
        info = ckpt.embeddings.get(emb.name)
        if info is None:
            raise InputError(where, f"checkpoint has no embedding {emb.name!r} (has {', '.join(ckpt.embeddings) or 'none'})")
        if info.num_rows != emb.num_embeddings or tuple(info.row_shape) != (emb.dim,):
            raise InputError(
                where,
                f"embedding {emb.name} is {info.num_rows} x {list(info.row_shape)} in the checkpoint, {emb.num_embeddings} x [{emb.dim}] here",
            )
    if optimizer is not None:
        kind = ckpt.optimizer.get("type")
        if kind == "none":
            raise InputError(where, f"checkpoint holds no optimizer states; load it without the {optimizer.kind!r} optimizer")
        if kind != optimizer.kind:
            raise InputError(where, f"checkpoint holds optimizer {kind!r} states, the optimizer given is {optimizer.kind!r}")
        # before any row is touched, so a bad manifest value leaves the job as it was
        try:
            optimizer.load_hyperparameters(ckpt.optimizer)
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(where / MANIFEST_NAME, f"optimizer hyper-parameters {ckpt.optimizer}: {exc}") from None
    for emb in embeddings:
        _read_owned(ckpt, tensor_name(emb.name), emb, emb.weight)
        if optimizer is not None:
            for state, tensor in optimizer.state_tensors(emb).items():
                _read_owned(ckpt, tensor_name(emb.name, state), emb, tensor)
        emb.reset_trace()
    extra = ckpt.manifest.get("extra", {})
    return dict(extra) if isinstance(extra, dict) else {}


def _point_to_interrupted_swap(path: Path) -> None:
    """A save killed between its two renames leaves the previous checkpoint under a hidden name: say where."""
    old = interrupted_swap_of(path)
    if old is not None:
        raise InputError(path, f"no such directory; a save was interrupted while replacing it, the previous checkpoint is complete at {old}")


def _read_owned(ckpt, name: str, emb: ShardedEmbedding, dest: torch.Tensor) -> None:
    """Copy the rows `emb`'s rank owns of checkpoint tensor `name` into `dest` (its local order).

    Under any pair of policies those rows are a few arithmetic progressions of
    the saved shards' local rows (see _read_plan). Each is read with plain
    sequential file reads in bounded chunks, straight into `dest` when the
    layouts match; no whole-table buffer and no memory map.
    """
    info = ckpt.tensor(name)
    if tuple(info.row_shape) != tuple(dest.shape[1:]):
        raise InputError(ckpt.directory, f"tensor {name} has rows {list(info.row_shape)}, expected {list(dest.shape[1:])}")
    for prog in _read_plan(ckpt.policy(name), emb.policy, emb.rank):
        if prog.local_step * info.row_bytes > STRIDED_READ_LIMIT:
            # rows far apart in the file: reading the span would mostly read rows of other ranks
            _gather_progression(ckpt, name, info, prog, emb, dest)
        else:
            _read_progression(ckpt, info, prog, dest)


@dataclass(frozen=True)
class _Progression:
    """Destination rows dest_start + i*dest_step are saved shard `shard`'s rows local_start + i*local_step, i < count."""

    shard: int
    local_start: int
    local_step: int
    dest_start: int
    dest_step: int
    count: int


def _read_plan(saved: ShardPolicy, mine: ShardPolicy, rank: int) -> list[_Progression]:
    """How `rank`'s rows under `mine` lie in the shards of a checkpoint saved under `saved`."""
    n = mine.count(rank)
    if n == 0:
        return []
    # my local row k is global row first + k * step
    first, step = (rank, mine.world_size) if mine.name == "remainder" else (mine.boundaries[rank], 1)
    plan = []
    if saved.name == "range":
        bounds = saved.boundaries
        for shard in range(saved.world_size):
            k0 = max(0, _ceil_div(bounds[shard] - first, step))
            k1 = min(n, _ceil_div(bounds[shard + 1] - first, step))
            if k0 < k1:
                plan.append(_Progression(shard, first + k0 * step - bounds[shard], step, k0, 1, k1 - k0))
        return plan
    saved_world = saved.world_size
    period = saved_world // math.gcd(step, saved_world)  # my rows k and k + period share a saved shard
    for k in range(min(period, n)):
        g = first + k * step
        plan.append(_Progression(g % saved_world, g // saved_world, step * period // saved_world, k, period, _ceil_div(n - k, period)))
    return plan


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _read_progression(ckpt, info, prog: _Progression, dest: torch.Tensor) -> None:
    """Sequential reads of the span of saved rows the progression covers, in bounded chunks."""
    shard = info.shards[prog.shard]
    path = ckpt.directory / shard.file
    row_bytes = info.row_bytes
    if row_bytes == 0:
        return
    # straight into dest's memory when rows are consecutive on both sides and the dtypes agree
    direct = (
        prog.local_step == 1
        and prog.dest_step == 1
        and dest.device.type == "cpu"
        and dest.is_contiguous()
        and _np_dtype(dest.dtype) == info.np_dtype
    )
    # reads straight into dest go in large pieces; staged ones in cache-sized pieces (read, then scatter)
    chunk_bytes = LOAD_CHUNK_BYTES if direct else STAGING_CHUNK_BYTES
    per_chunk = min(prog.count, max(1, (chunk_bytes // row_bytes - 1) // prog.local_step + 1))
    # one staging buffer for all chunks (fresh buffers would page-fault on every chunk)
    staging = None if direct else np.empty(((per_chunk - 1) * prog.local_step + 1, *info.row_shape), dtype=info.np_dtype)
    try:
        with open(path, "rb", buffering=0) as fh:
            for i in range(0, prog.count, per_chunk):
                m = min(per_chunk, prog.count - i)
                span = (m - 1) * prog.local_step + 1
                fh.seek(shard.offset + (prog.local_start + i * prog.local_step) * row_bytes)
                d0 = prog.dest_start + i * prog.dest_step
                target = dest[d0 : d0 + (m - 1) * prog.dest_step + 1 : prog.dest_step]
                buf = target.numpy() if direct else staging[:span]
                _read_exactly(fh, memoryview(buf.reshape(-1).view(np.uint8)), path)
                if not direct:
                    target.copy_(numpy_to_tensor(np.ascontiguousarray(buf[:: prog.local_step]), info.dtype).to(dtype=dest.dtype))
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


def _gather_progression(ckpt, name: str, info, prog: _Progression, emb: ShardedEmbedding, dest: torch.Tensor) -> None:
    """Rows too far apart for span reads: gather them through the checkpoint reader, in chunks."""
    per_chunk = max(1, LOAD_CHUNK_BYTES // max(1, info.row_bytes))
    for i in range(0, prog.count, per_chunk):
        local = prog.dest_start + prog.dest_step * np.arange(i, min(prog.count, i + per_chunk), dtype=np.int64)
        rows = ckpt.read_rows(name, _global_ids_of(emb.policy, emb.rank, local))
        dest[torch.from_numpy(local).to(dest.device)] = numpy_to_tensor(np.ascontiguousarray(rows), info.dtype).to(device=dest.device, dtype=dest.dtype)


def _global_ids_of(policy: ShardPolicy, rank: int, local: np.ndarray) -> np.ndarray:
    """Global ids of `rank`'s local rows `local` (without building the rank's whole id list)."""
    if policy.name == "remainder":
        return rank + local * policy.world_size
    return policy.boundaries[rank] + local


def _read_exactly(fh, view: memoryview, path: Path) -> None:
    got = 0
    while got < len(view):
        n = fh.readinto(view[got:])
        if not n:
            raise IntegrityError(path, "file ended early (truncated after the checkpoint was opened?)")
        got += n


def _np_dtype(dtype: torch.dtype) -> Optional[np.dtype]:
    return {torch.float32: np.dtype("<f4"), torch.float16: np.dtype("<f2"), torch.int32: np.dtype("<i4"), torch.int64: np.dtype("<i8")}.get(dtype)


__all__ = ["save_checkpoint", "load_checkpoint"]
