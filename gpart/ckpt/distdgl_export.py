"""`gpart export-ckpt --to distdgl`: the files DistDGL's sparse optimizer resumes from (SPEC.md 6.7).

Per rank, DistDGL's sparse-optimizer state file (`<prefix>_<r>`, what its
optimizer's `save(prefix)` writes and `load(prefix)` reads) and the rank's
table rows with their ids (`<prefix>_emb_<r>.pt`). Every tensor is first cut
into per-rank scratch shards (the streaming code of scatter-ckpt), then each
rank's torch.save file is written from memory maps of its shards, so memory
holds at most one rank's step counts at a time, besides mapped pages.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from gpart.base.errors import InputError
from gpart.base.progress import Progress
from gpart.ckpt.export_target import ExportOptions, ExportTarget, PathLike, check_embedding
from gpart.ckpt.reshard import shard_tensor, target_policy
from gpart.formats.checkpoint import entries as ck
from gpart.formats.checkpoint import foreign as fc
from gpart.formats.checkpoint.reader import Checkpoint
from gpart.formats.files.dtypes import storage_dtype
from gpart.formats.foreign.torch_files import as_torch, save_torch_file
from gpart.formats.sharding.policies import ShardPolicy

# float32 holds every whole number up to 2^24 exactly; DistDGL keeps step counts as float32
FLOAT32_EXACT_INT = 1 << 24


class DistdglExport(ExportTarget):
    """Every embedding (or the one asked for), its rows split by --policy, in DistDGL's torch.save files."""

    name = "distdgl"
    optimizers = tuple(fc.DISTDGL_STATES)

    def default_prefix(self, src: Checkpoint, options: ExportOptions, where: PathLike) -> str:
        return "sparse_opt"

    def policies(self, src: Checkpoint, options: ExportOptions, where: PathLike) -> dict[str, ShardPolicy]:
        names = [check_embedding(src, options.embedding, where)] if options.embedding else list(src.embeddings)
        return {e: target_policy(options.policy, src.embeddings[e].num_rows, options.world_size, options.boundaries) for e in names}

    def write(self, src: Checkpoint, prefix: str, policies: dict[str, ShardPolicy], stage: Path, options: ExportOptions,
              progress: Progress) -> list[dict[str, Any]]:
        opt_type = "none" if options.table_only else src.optimizer["type"]
        world = options.world_size
        scratch = stage / ".scratch"
        scratch.mkdir()
        tensors = [(e, s) for e in policies for s in [None, *fc.DISTDGL_STATES[opt_type]]]
        files: list[dict[str, Any]] = []
        with progress.stage("exporting", total=2 * sum(src.tensor(ck.tensor_name(e, s)).nbytes for e, s in tensors), unit="B") as bar:
            for e, s in tensors:
                shard_tensor(src, ck.tensor_name(e, s), policies[e], scratch, options.chunk_rows, bar)
            for r in range(world):
                files += _write_rank(src, policies, scratch, stage, prefix, opt_type, options.ntype, r)
                for e, s in tensors:
                    path = scratch / ck.shard_file_name(ck.tensor_name(e, s), r, world)
                    bar.advance(path.stat().st_size)
                    path.unlink()
        shutil.rmtree(scratch)
        return files


def _write_rank(src: Checkpoint, policies: dict[str, ShardPolicy], scratch: Path, stage: Path, prefix: str, opt_type: str,
                ntype: str, rank: int) -> list[dict[str, Any]]:
    """Rank `rank`'s table file (rows and their ids) and, with an optimizer, its optimizer-state file."""
    world = next(iter(policies.values())).world_size
    tables, emb_states = {}, {}
    for e, policy in policies.items():
        ids = as_torch(np.ascontiguousarray(policy.global_ids(rank), dtype=np.int64), "int64")
        tables[e] = _scratch_rows(src, scratch, ck.tensor_name(e), rank, world)
        tables[f"{e}.ids"] = ids
        states = {fc.distdgl_state_key(e, opt_type, s, ntype): _distdgl_state(src, scratch, e, s, rank, world) for s in fc.DISTDGL_STATES[opt_type]}
        emb_states[e] = (ids, states)
    files = [{**save_torch_file(tables, stage / f"{prefix}_emb_{rank}.pt"), "rank": rank, "content": "tables"}]
    if opt_type != "none":
        body = fc.distdgl_optimizer_dict(emb_states, fc.distdgl_params(src.optimizer, world))
        files.append({**save_torch_file(body, stage / f"{prefix}_{rank}"), "rank": rank, "content": "optimizer"})
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
