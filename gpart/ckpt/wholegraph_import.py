"""Import WholeGraph's `WholeMemoryEmbedding.save(prefix)` files as a range-sharded gpart checkpoint (SPEC.md 6.5)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from gpart.bytes.crc import CHUNK_BYTES
from gpart.bytes.reader import bytes_view, pread_into
from gpart.ckpt.reshard import target_policy
from gpart.base.errors import InputError
from gpart.formats import checkpoint as ck
from gpart.formats.checkpoint_writer import ShardWriter, write_checkpoint_manifest
from gpart.formats.commit import staged_output
from gpart.formats.dtypes import storage_dtype
from gpart.formats.foreign_ckpt import WHOLEGRAPH_STATE_FILES
from gpart.base.progress import or_null

PathLike = Union[str, "os.PathLike[str]"]


def import_wholegraph(
    prefix: PathLike,
    out_dir: PathLike,
    *,
    num_rows: int,
    row_shape: Sequence[int],
    dtype: str,
    world_size: int,
    name: str = "embedding",
    optimizer: str = "none",
    state_dtype: str = "float32",
    state_files: Optional[Mapping[str, str]] = None,
    boundaries: Optional[Sequence[int]] = None,
    hyper_params: Optional[Mapping[str, Any]] = None,
    force: bool = False,
    progress=None,
) -> dict[str, Any]:
    """Import `WholeMemoryEmbedding.save(prefix)` files as a range-sharded gpart checkpoint.

    The files carry no header, so shape, dtype and world size come from the caller;
    every file must hold exactly its rank's rows (WholeGraph split, or `boundaries`).
    """
    prefix = Path(prefix)
    ck.check_embedding_name(name)
    storage_dtype(dtype)
    if optimizer not in WHOLEGRAPH_STATE_FILES:
        raise InputError(prefix, f"WholeGraph import supports optimizers {', '.join(WHOLEGRAPH_STATE_FILES)}, not {optimizer!r}")
    files = dict(WHOLEGRAPH_STATE_FILES[optimizer])
    for state, fname in (state_files or {}).items():
        if state not in files:
            raise InputError(prefix, f"optimizer {optimizer} has no state {state!r} (states: {', '.join(files) or 'none'})")
        files[state] = fname
    policy = target_policy("range", num_rows, world_size, boundaries)
    row_shape = tuple(int(s) for s in row_shape)
    sources: dict[str, tuple[str, str, tuple[int, ...]]] = {name: (f"{prefix.name}_embedding_tensor", dtype, row_shape)}
    for state, fname in files.items():
        spec = ck.OPTIMIZER_STATES[optimizer][state]
        sdt = "float32" if spec.row_shape == "pair" else state_dtype
        if sdt not in spec.dtypes:
            raise InputError(prefix, f"state {state} cannot be {sdt} (allowed: {', '.join(spec.dtypes)})")
        sources[ck.tensor_name(name, state)] = (f"{prefix.name}_{fname}", sdt, spec.shape_for(row_shape))
    plan = _check_files(prefix, sources, policy, num_rows)  # every file, before writing anything
    progress = or_null(progress)
    entries = []
    with staged_output(out_dir, force=force, inputs=[]) as stage:
        with progress.stage("importing", total=len(plan)) as bar:
            for tname, r, path, tdtype, tshape in plan:
                entries.append(_copy_shard(path, stage, tname, r, world_size, tdtype, tshape, policy.count(r)))
                bar.advance(1)
        opt = {"type": optimizer, **dict(hyper_params or {}), "imported_from": "wholegraph"}
        spec = ck.EmbeddingSpec(name, num_rows, row_shape, dtype, policy)
        manifest = ck.build_checkpoint_manifest([spec], entries, world_size, opt)
        write_checkpoint_manifest(stage, manifest)
    return manifest


def _check_files(prefix: Path, sources: dict[str, tuple[str, str, tuple[int, ...]]], policy: Any, num_rows: int) -> list[tuple]:
    """(tensor, rank, file, dtype, row shape) of every file to import, each checked to exist with its rank's size."""
    world_size = policy.world_size
    plan = []
    for tname, (stem, tdtype, tshape) in sources.items():
        row_bytes = ck.tensor_row_bytes(tdtype, tshape)
        for r in range(world_size):
            path = prefix.parent / ck.shard_file_name(stem, r, world_size)
            want = policy.count(r) * row_bytes
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                raise InputError(path, f"missing: rank {r} of {world_size} of tensor {tname}") from None
            except OSError as exc:
                raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
            if size != want:
                raise InputError(
                    path,
                    f"size {size} bytes, expected {want} ({policy.count(r)} rows of {tdtype} {list(tshape)}, "
                    f"rows {policy.boundaries[r]}..{policy.boundaries[r + 1]} of {num_rows}); wrong --num-rows/--dim/--dtype/--world-size?",
                )
            plan.append((tname, r, path, tdtype, tshape))
    return plan


def _copy_shard(path: Path, stage: Path, tname: str, rank: int, world: int, dtype: str, row_shape: tuple[int, ...], rows: int) -> dict[str, Any]:
    """WholeGraph's file of rank `rank` (raw rows, its size checked) copied into gpart's shard file, in bounded pieces."""
    row_bytes = ck.tensor_row_bytes(dtype, row_shape)
    step = max(1, CHUNK_BYTES // max(1, row_bytes))
    buf = np.empty((min(step, rows), *row_shape), dtype=storage_dtype(dtype))
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        with ShardWriter(stage, tname, rank, world, dtype, row_shape) as out:
            for a in range(0, rows, step):
                k = min(step, rows - a)
                pread_into(fd, bytes_view(buf[:k]), a * row_bytes, path)
                out.write(buf[:k])
    finally:
        os.close(fd)
    return out.shard_entry()
