"""load_checkpoint: fill ShardedEmbedding tables and sparse optimizer states from a gpart checkpoint.

Rank-local: each rank reads only the rows it owns, of the table and of every
optimizer state, and the optimizer's hyper-parameters. The checkpoint may come
from any world size and policy, or be a gathered (global) one (SPEC.md section 6).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch

from gpart.base.errors import InputError, IntegrityError
from gpart.bytes.torch_bridge import numpy_to_tensor
from gpart.formats.checkpoint.entries import tensor_name
from gpart.formats.checkpoint.reader import read_checkpoint
from gpart.formats.files.manifest import MANIFEST_NAME, interrupted_swap_of
from gpart.formats.sharding.policies import ShardPolicy
from gpart.runtime.embedding.optim import SparseOptimizer
from gpart.runtime.embedding.table import ShardedEmbedding, check_embedding_group

PathLike = Union[str, "os.PathLike[str]"]

# Rows per host read when loading: bounds host memory independently of the table size.
LOAD_CHUNK_BYTES = 64 << 20
STAGING_CHUNK_BYTES = 4 << 20
# Beyond this distance between consecutive wanted rows of a shard, gather them instead of reading the span.
STRIDED_READ_LIMIT = 64 << 10


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
    embeddings = check_embeddings(embeddings, optimizer)
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
    first, step = mine.first_row(rank), mine.stride
    plan = []
    if saved.is_contiguous:  # (an interleaved saving over one rank is contiguous too: both ways give one progression)
        bounds = [int(b) for b in saved.row_bounds()]
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
        rows = ckpt.read_rows(name, emb.policy.global_rows(emb.rank, local))
        dest[torch.from_numpy(local).to(dest.device)] = numpy_to_tensor(np.ascontiguousarray(rows), info.dtype).to(device=dest.device, dtype=dest.dtype)


def _read_exactly(fh, view: memoryview, path: Path) -> None:
    got = 0
    while got < len(view):
        n = fh.readinto(view[got:])
        if not n:
            raise IntegrityError(path, "file ended early (truncated after the checkpoint was opened?)")
        got += n


def _np_dtype(dtype: torch.dtype) -> Optional[np.dtype]:
    return {torch.float32: np.dtype("<f4"), torch.float16: np.dtype("<f2"), torch.int32: np.dtype("<i4"), torch.int64: np.dtype("<i8")}.get(dtype)


def check_embeddings(embeddings: Sequence[ShardedEmbedding], optimizer: Optional[SparseOptimizer]) -> list[ShardedEmbedding]:
    """The embeddings as a list, after checking they can be saved or loaded together (with `optimizer`)."""
    embeddings = check_embedding_group(embeddings, "one checkpoint")
    if optimizer is not None:
        owned = {id(p) for p in optimizer.params}
        strangers = [emb.name for emb in embeddings if id(emb) not in owned]
        if strangers:
            raise ValueError(f"the optimizer does not hold embeddings {strangers}; save them without it or with their own optimizer")
    return embeddings
