"""`gpart export-ckpt`: a gpart checkpoint back into the files another system resumes from (SPEC.md 6.7).

- `wholegraph`: `WholeMemoryEmbedding.load(prefix)`'s files, the table and each
  optimizer state split over W ranks by WholeGraph's range rule (or given
  boundaries). The shards are cut by the same streaming code as scatter-ckpt
  (gpart.ckpt.reshard.shard_tensor), only under WholeGraph's file names: contiguous to
  contiguous is a kernel copy, anything else streams in ~32 MiB pieces.
- `distdgl`: per rank, DistDGL's sparse-optimizer state file (`<prefix>_<r>`,
  what its optimizer's `save(prefix)` writes and `load(prefix)` reads) and
  the rank's table rows with their ids (`<prefix>_emb_<r>.pt`). Every tensor is
  first cut into per-rank scratch shards (the same streaming code), then each
  rank's torch.save file is written from memory maps of its shards, so memory
  holds at most one rank's step counts at a time, besides mapped pages.

The result is built in a staging directory and committed with a small
`manifest.json` (format `gpart.ckpt-export`) last, like every gpart result.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from gpart.base.errors import InputError
from gpart.base.progress import or_null
from gpart.base.version import __version__
from gpart.ckpt.beta_powers import adam_betas, write_beta12t
from gpart.ckpt.reshard import shard_tensor, target_policy
from gpart.formats.checkpoint import entries as ck
from gpart.formats.checkpoint import foreign as fc
from gpart.formats.checkpoint.reader import Checkpoint, read_checkpoint
from gpart.formats.filelist.layout import check_export_name
from gpart.formats.files.commit import staged_output
from gpart.formats.files.dtypes import storage_dtype
from gpart.formats.files.manifest import write_manifest
from gpart.formats.foreign.torch_files import as_torch, save_torch_file

PathLike = Union[str, "os.PathLike[str]"]

TARGETS = ("wholegraph", "distdgl")
EXPORT_FORMAT = "gpart.ckpt-export"
# float32 holds every whole number up to 2^24 exactly; DistDGL keeps step counts as float32
FLOAT32_EXACT_INT = 1 << 24


def export_checkpoint(
    run_dir: PathLike,
    out_dir: PathLike,
    *,
    to: str,
    world_size: int,
    prefix: Optional[str] = None,
    embedding: Optional[str] = None,
    policy: str = "remainder",
    boundaries: Optional[Sequence[int]] = None,
    table_only: bool = False,
    ntype: str = "_N",
    force: bool = False,
    verify: bool = False,
    progress=None,
    chunk_rows: Optional[int] = None,
) -> dict[str, Any]:
    """Write the checkpoint `run_dir` (any layout) as `to`'s files for `world_size` ranks; return the export manifest."""
    if to not in TARGETS:
        raise InputError(None, f"unknown export target {to!r} (expected one of {', '.join(TARGETS)})")
    if world_size < 1:
        raise InputError(None, f"world size must be at least 1, got {world_size}")
    src = read_checkpoint(run_dir, verify=verify)
    opt_type = src.optimizer["type"]
    states_of = fc.WHOLEGRAPH_STATE_FILES if to == "wholegraph" else fc.DISTDGL_STATES
    if opt_type not in states_of and not table_only:
        have = ", ".join(k for k in states_of if k != "none")
        raise InputError(
            run_dir, f"optimizer {opt_type} has no {to} counterpart ({to} saves states of: {have}); use --table-only to export the tables alone"
        )
    prefix = check_export_name(prefix or (_one_embedding(src, embedding, run_dir) if to == "wholegraph" else "sparse_opt"))
    if not ntype or "~" in ntype:
        raise InputError(None, f"node type {ntype!r} must be non-empty and without '~' (DGL's name separator)")
    if to == "wholegraph":
        names = [_one_embedding(src, embedding, run_dir)]
        policies = {names[0]: target_policy("range", src.embeddings[names[0]].num_rows, world_size, boundaries)}
    else:
        names = [_check_embedding(src, embedding, run_dir)] if embedding else list(src.embeddings)
        policies = {e: target_policy(policy, src.embeddings[e].num_rows, world_size, boundaries) for e in names}
    progress = or_null(progress)
    with staged_output(out_dir, force=force, inputs=[run_dir]) as stage:
        if to == "wholegraph":
            files = _export_wholegraph(src, names[0], prefix, policies[names[0]], stage, table_only, chunk_rows, progress)
        else:
            files = _export_distdgl(src, names, prefix, policies, stage, table_only, ntype, chunk_rows, progress)
        manifest = _export_manifest(src, run_dir, to, world_size, prefix, table_only, policies, files)
        write_manifest(stage, manifest)
    return manifest


def _export_manifest(src: Checkpoint, run_dir: PathLike, to: str, world_size: int, prefix: str, table_only: bool, policies, files) -> dict[str, Any]:
    """The `manifest.json` of an export (SPEC.md 6.7): what was written, for whom, from what."""
    return {
        "format": EXPORT_FORMAT,
        "version": 1,
        "created_by": f"gpart {__version__}",
        "target": to,
        "source": os.fspath(run_dir),
        "world_size": world_size,
        "prefix": prefix,
        "optimizer": _exported_optimizer(src.optimizer, to, table_only),
        "embeddings": [
            {"name": e, "num_rows": src.embeddings[e].num_rows, "row_shape": list(src.embeddings[e].row_shape), "dtype": src.embeddings[e].dtype,
             "policy": p.to_json()}
            for e, p in policies.items()
        ],
        "files": files,
    }


def _exported_optimizer(optimizer: dict[str, Any], to: str, table_only: bool) -> dict[str, Any]:
    """The source's optimizer entry; for WholeGraph with the optimizer whose states WholeGraph holds (adam: lazyadam)."""
    if table_only:
        return {"type": "none"}
    if to == "wholegraph" and fc.WHOLEGRAPH_OPTIMIZER[optimizer["type"]] != optimizer["type"]:
        return {**optimizer, "wholegraph_optimizer": fc.WHOLEGRAPH_OPTIMIZER[optimizer["type"]]}
    return optimizer


def _check_embedding(src: Checkpoint, name: str, where: PathLike) -> str:
    if name not in src.embeddings:
        raise InputError(where, f"has no embedding {name!r} (embeddings: {', '.join(src.embeddings)})")
    return name


def _one_embedding(src: Checkpoint, embedding: Optional[str], where: PathLike) -> str:
    if embedding is not None:
        return _check_embedding(src, embedding, where)
    if len(src.embeddings) != 1:
        raise InputError(where, f"holds {len(src.embeddings)} embeddings ({', '.join(src.embeddings)}); WholeGraph saves one per prefix: choose one with --embedding")
    return next(iter(src.embeddings))


def _export_wholegraph(src, emb: str, prefix: str, target, stage: Path, table_only: bool, chunk_rows, progress) -> list[dict[str, Any]]:
    """Each tensor cut into WholeGraph's range shards under its names; Adam's step counts become beta12t pairs."""
    opt_type = "none" if table_only else src.optimizer["type"]
    tensors = [(ck.tensor_name(emb), None)] + [(ck.tensor_name(emb, s), s) for s in fc.WHOLEGRAPH_STATE_FILES[opt_type]]
    betas = adam_betas(src.optimizer, src.directory) if (opt_type, "step") in fc.WHOLEGRAPH_CONVERTED else None
    total = sum(src.tensor(t).nbytes for t, _ in tensors)
    files = []
    with progress.stage("exporting", total=total, unit="B") as bar:
        for tname, state in tensors:
            stem = fc.wholegraph_stem(prefix, opt_type, state)
            if (opt_type, state) in fc.WHOLEGRAPH_CONVERTED:
                entries = write_beta12t(src, tname, target, stage, stem, betas, chunk_rows, bar)
            else:
                entries = shard_tensor(src, tname, target, stage, chunk_rows, bar, stem=stem)
            files += [{**entry, "state": state} for entry in entries]
    return files


def _export_distdgl(src, names: list[str], prefix: str, policies, stage: Path, table_only: bool, ntype: str, chunk_rows, progress) -> list[dict[str, Any]]:
    opt_type = "none" if table_only else src.optimizer["type"]
    world = next(iter(policies.values())).world_size
    scratch = stage / ".scratch"
    scratch.mkdir()
    tensors = [(e, s) for e in names for s in [None, *fc.DISTDGL_STATES[opt_type]]]
    files: list[dict[str, Any]] = []
    with progress.stage("exporting", total=2 * sum(src.tensor(ck.tensor_name(e, s)).nbytes for e, s in tensors), unit="B") as bar:
        for e, s in tensors:
            shard_tensor(src, ck.tensor_name(e, s), policies[e], scratch, chunk_rows, bar)
        for r in range(world):
            tables, emb_states = {}, {}
            for e in names:
                ids = as_torch(np.ascontiguousarray(policies[e].global_ids(r), dtype=np.int64), "int64")
                tables[e] = _scratch_rows(src, scratch, ck.tensor_name(e), r, world)
                tables[f"{e}.ids"] = ids
                states = {fc.distdgl_state_key(e, opt_type, s, ntype): _distdgl_state(src, scratch, e, s, r, world) for s in fc.DISTDGL_STATES[opt_type]}
                emb_states[e] = (ids, states)
            files.append({**save_torch_file(tables, stage / f"{prefix}_emb_{r}.pt"), "rank": r, "content": "tables"})
            if opt_type != "none":
                body = fc.distdgl_optimizer_dict(emb_states, fc.distdgl_params(src.optimizer, world))
                files.append({**save_torch_file(body, stage / f"{prefix}_{r}"), "rank": r, "content": "optimizer"})
            for e, s in tensors:
                name = ck.tensor_name(e, s)
                path = scratch / ck.shard_file_name(name, r, world)
                bar.advance(path.stat().st_size)
                path.unlink()
    shutil.rmtree(scratch)
    return files


def _scratch_rows(src: Checkpoint, scratch: Path, name: str, rank: int, world: int) -> Any:
    """A tensor over rank `rank`'s scratch shard of `name`, memory-mapped copy-on-write (no copy made)."""
    t = src.tensor(name)
    path = scratch / ck.shard_file_name(name, rank, world)
    sdt = storage_dtype(t.dtype)
    rows = path.stat().st_size // t.row_bytes if t.row_bytes else 0
    if rows == 0:
        arr = np.empty((0, *t.row_shape), dtype=sdt)
    else:
        arr = np.memmap(path, dtype=sdt, mode="c", shape=(rows, *t.row_shape))
    return as_torch(arr, t.dtype)


def _distdgl_state(src: Checkpoint, scratch: Path, emb: str, state: str, rank: int, world: int) -> Any:
    """Rank `rank`'s rows of a state as DistDGL keeps it: float32 (step counts too, which must stay exact)."""
    import torch  # not at the top: `gpart.ckpt` (and so the CLI) imports without torch

    name = ck.tensor_name(emb, state)
    rows = _scratch_rows(src, scratch, name, rank, world)
    if state == "step" and rows.numel():
        low, high = int(rows.min()), int(rows.max())
        if low < 0 or high > FLOAT32_EXACT_INT:
            bad = low if low < 0 else high
            raise InputError(src.directory, f"{name}: step count {bad} cannot be stored exactly as DistDGL's float32 step (0..{FLOAT32_EXACT_INT})")
    return rows if rows.dtype == torch.float32 else rows.to(torch.float32)
