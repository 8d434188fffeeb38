"""Import WholeGraph's `WholeMemoryEmbedding.save(prefix)` files as a range-sharded gpart checkpoint (SPEC.md 6.6).

LazyAdam's files also import as DGL-style `adam` (optimizer "adam"): m, v are the
moments and each row's beta12t pair becomes its step count (gpart.ckpt.beta_powers).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, Sequence

import numpy as np

from gpart.base.errors import InputError
from gpart.base.progress import Progress, or_null
from gpart.bytes.crc import CHUNK_BYTES
from gpart.bytes.reader import bytes_view, pread_into
from gpart.ckpt.beta_powers import BetaPowers
from gpart.ckpt.import_source import ImportOptions, ImportSource, PathLike
from gpart.ckpt.reshard import target_policy
from gpart.formats.checkpoint import entries as ck
from gpart.formats.checkpoint.foreign import WHOLEGRAPH_CONVERTED, WHOLEGRAPH_STATE_FILES
from gpart.formats.checkpoint.writer import ShardWriter, write_checkpoint_manifest
from gpart.formats.files.commit import staged_output
from gpart.formats.files.dtypes import storage_dtype

# WholeGraph's LazyAdam defaults (its beta1, beta2), what a beta12t file was most likely written with
WHOLEGRAPH_BETAS = (0.9, 0.999)


class WholegraphImport(ImportSource):
    """`--from wholegraph PREFIX`: the path given to WholeMemoryEmbedding.save, shape and world size from the options."""

    name = "wholegraph"

    def run(self, inputs: Sequence[PathLike], out_dir: PathLike, options: ImportOptions, *, force: bool = False,
            progress: Optional[Progress] = None) -> dict[str, Any]:
        if len(inputs) != 1:
            raise InputError(None, "--from wholegraph takes one PREFIX (the path given to WholeMemoryEmbedding.save)")
        return import_wholegraph(inputs[0], out_dir, options, force=force, progress=progress)


def import_wholegraph(
    prefix: PathLike, out_dir: PathLike, options: ImportOptions, *, force: bool = False, progress: Optional[Progress] = None,
) -> dict[str, Any]:
    """Import `WholeMemoryEmbedding.save(prefix)` files as a range-sharded gpart checkpoint.

    The files carry no header, so shape (options.num_rows, options.row_shape), dtype and world size
    come from the caller; every file must hold exactly its rank's rows (WholeGraph split, or
    options.boundaries).
    """
    num_rows, row_shape, world_size, name = options.num_rows, options.row_shape, options.world_size, options.name
    if num_rows is None or row_shape is None or world_size is None:
        missing = [opt for opt, v in (("--num-rows", num_rows), ("--dim", row_shape), ("--world-size", world_size)) if v is None]
        raise InputError(prefix, f"WholeGraph files carry no shape: give {', '.join(missing)}")
    prefix = Path(prefix)
    ck.check_embedding_name(name)
    storage_dtype(options.dtype)
    files = _state_files(prefix, options)
    policy = target_policy("range", num_rows, world_size, options.boundaries)
    hyper = dict(options.hyper_params or {})
    if options.optimizer == "adam":
        hyper["betas"] = [float(b) for b in hyper.get("betas", WHOLEGRAPH_BETAS)]
    sources = _sources(prefix, options, tuple(int(s) for s in row_shape), files, hyper)
    plan = _check_files(prefix, sources, policy, num_rows)  # every file, before writing anything
    progress = or_null(progress)
    entries = []
    with staged_output(out_dir, force=force, inputs=[]) as stage:
        with progress.stage("importing", total=len(plan)) as bar:
            for tname, r, path in plan:
                entries.append(_copy_shard(path, stage, tname, r, world_size, sources[tname], int(policy.first_row(r)), policy.count(r)))
                bar.advance(1)
        opt = {"type": options.optimizer, **hyper, "imported_from": "wholegraph"}
        spec = ck.EmbeddingSpec(name, num_rows, sources[name].row_shape, options.dtype, policy)
        manifest = ck.build_checkpoint_manifest([spec], entries, world_size, opt)
        write_checkpoint_manifest(stage, manifest)
    return manifest


def _state_files(prefix: Path, options: ImportOptions) -> dict[str, str]:
    """{state: the file name part of its files} of options.optimizer, with options.state_files' renames."""
    optimizer = options.optimizer
    if optimizer not in WHOLEGRAPH_STATE_FILES:
        raise InputError(prefix, f"WholeGraph import supports optimizers {', '.join(WHOLEGRAPH_STATE_FILES)}, not {optimizer!r}")
    files = dict(WHOLEGRAPH_STATE_FILES[optimizer])
    for state, fname in options.state_files.items():
        if state not in files:
            raise InputError(prefix, f"optimizer {optimizer} has no state {state!r} (states: {', '.join(files) or 'none'})")
        files[state] = fname
    return files


def _sources(prefix: Path, options: ImportOptions, row_shape: tuple[int, ...], files: dict[str, str], hyper: dict[str, Any]) -> dict[str, "_Source"]:
    """{tensor: its files} of the table and of every state in `files` (hyper: the optimizer's, adam's betas set)."""
    optimizer, dtype = options.optimizer, options.dtype
    sources = {options.name: _Source(f"{prefix.name}_embedding_tensor", dtype, row_shape, dtype, row_shape)}
    for state, fname in files.items():
        spec = ck.OPTIMIZER_STATES[optimizer][state]
        sdt = spec.dtypes[0] if spec.row_shape in ("pair", "scalar") else options.state_dtype
        if sdt not in spec.dtypes:
            raise InputError(prefix, f"state {state} cannot be {sdt} (allowed: {', '.join(spec.dtypes)})")
        file_dtype, file_shape = WHOLEGRAPH_CONVERTED.get((optimizer, state), (sdt, spec.shape_for(row_shape)))
        convert = _steps_of_beta12t(hyper["betas"]) if (optimizer, state) in WHOLEGRAPH_CONVERTED else None
        sources[ck.tensor_name(options.name, state)] = _Source(f"{prefix.name}_{fname}", file_dtype, file_shape, sdt, spec.shape_for(row_shape), convert)
    return sources


class _Source(NamedTuple):
    """One tensor's WholeGraph files: their stem, the rows' dtype and shape in the file and in gpart, and the
    conversion between them (None: the bytes are copied as they are)."""

    stem: str
    file_dtype: str
    file_shape: tuple[int, ...]
    dtype: str
    row_shape: tuple[int, ...]
    convert: Optional[Callable[[np.ndarray, int, Path], np.ndarray]] = None


def _steps_of_beta12t(betas: Sequence[float]) -> Callable[[np.ndarray, int, Path], np.ndarray]:
    """rows of a beta12t file (from global row `first`) -> int32 step counts; a one-line error for a pair of no step."""
    try:
        powers = BetaPowers(betas)
    except ValueError as exc:
        raise InputError(None, f"--betas: {exc}") from None

    def convert(pairs: np.ndarray, first: int, path: Path) -> np.ndarray:
        try:
            steps, bad = powers.steps(pairs)
        except ValueError as exc:
            raise InputError(path, str(exc)) from None
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(path, f"row {first + i}: beta12t {pairs[i].tolist()} is not (beta1^t, beta2^t) of exactly one step count t "
                                   f"for betas {list(betas)} (SPEC.md 6.8); wrong --betas?")
        return steps.astype(np.int32)

    return convert


def _check_files(prefix: Path, sources: dict[str, _Source], policy: Any, num_rows: int) -> list[tuple]:
    """(tensor, rank, file) of every file to import, each checked to exist with its rank's size."""
    world_size = policy.world_size
    plan = []
    for tname, src in sources.items():
        row_bytes = ck.tensor_row_bytes(src.file_dtype, src.file_shape)
        for r in range(world_size):
            path = prefix.parent / ck.shard_file_name(src.stem, r, world_size)
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
                    f"size {size} bytes, expected {want} ({policy.count(r)} rows of {src.file_dtype} {list(src.file_shape)}, "
                    f"rows {policy.boundaries[r]}..{policy.boundaries[r + 1]} of {num_rows}); wrong --num-rows/--dim/--dtype/--world-size?",
                )
            plan.append((tname, r, path))
    return plan


def _copy_shard(path: Path, stage: Path, tname: str, rank: int, world: int, src: _Source, first: int, rows: int) -> dict[str, Any]:
    """WholeGraph's file of rank `rank` (raw rows, its size checked; global rows from `first`) as gpart's shard file,
    in bounded pieces, converted where the source says so."""
    row_bytes = ck.tensor_row_bytes(src.file_dtype, src.file_shape)
    step = max(1, CHUNK_BYTES // max(1, row_bytes))
    buf = np.empty((min(step, rows), *src.file_shape), dtype=storage_dtype(src.file_dtype))
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        with ShardWriter(stage, tname, rank, world, src.dtype, src.row_shape) as out:
            for a in range(0, rows, step):
                k = min(step, rows - a)
                pread_into(fd, bytes_view(buf[:k]), a * row_bytes, path)
                out.write(buf[:k] if src.convert is None else src.convert(buf[:k], first + a, path))
    finally:
        os.close(fd)
    return out.shard_entry()
