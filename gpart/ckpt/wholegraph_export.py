"""`gpart export-ckpt --to wholegraph`: the files `WholeMemoryEmbedding.load(prefix)` reads (SPEC.md 6.7).

The table and each optimizer state of one embedding, split over W ranks by
WholeGraph's range rule (or given boundaries). The shards are cut by the same
streaming code as scatter-ckpt (gpart.ckpt.reshard.shard_tensor), only under
WholeGraph's file names: contiguous to contiguous is a kernel copy, anything
else streams in ~32 MiB pieces. Adam's step counts become LazyAdam's beta12t
pairs (gpart.ckpt.beta_powers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from gpart.base.errors import InputError
from gpart.base.progress import Progress
from gpart.ckpt.beta_powers import adam_betas, write_beta12t
from gpart.ckpt.export_target import ExportOptions, ExportTarget, PathLike, check_embedding
from gpart.ckpt.reshard import shard_tensor, target_policy
from gpart.formats.checkpoint import entries as ck
from gpart.formats.checkpoint import foreign as fc
from gpart.formats.checkpoint.reader import Checkpoint
from gpart.formats.sharding.policies import ShardPolicy


class WholegraphExport(ExportTarget):
    """One embedding per prefix, range-sharded as WholeGraph splits its tables."""

    name = "wholegraph"
    optimizers = tuple(fc.WHOLEGRAPH_STATE_FILES)

    def default_prefix(self, src: Checkpoint, options: ExportOptions, where: PathLike) -> str:
        return _one_embedding(src, options.embedding, where)

    def policies(self, src: Checkpoint, options: ExportOptions, where: PathLike) -> dict[str, ShardPolicy]:
        name = _one_embedding(src, options.embedding, where)
        return {name: target_policy("range", src.embeddings[name].num_rows, options.world_size, options.boundaries)}

    def write(self, src: Checkpoint, prefix: str, policies: dict[str, ShardPolicy], stage: Path, options: ExportOptions,
              progress: Progress) -> list[dict[str, Any]]:
        """Each tensor cut into WholeGraph's range shards under its names; Adam's step counts become beta12t pairs."""
        (emb, target), = policies.items()
        opt_type = "none" if options.table_only else src.optimizer["type"]
        tensors = [(ck.tensor_name(emb), None)] + [(ck.tensor_name(emb, s), s) for s in fc.WHOLEGRAPH_STATE_FILES[opt_type]]
        betas = adam_betas(src.optimizer, src.directory) if (opt_type, "step") in fc.WHOLEGRAPH_CONVERTED else None
        total = sum(src.tensor(t).nbytes for t, _ in tensors)
        files = []
        with progress.stage("exporting", total=total, unit="B") as bar:
            for tname, state in tensors:
                stem = fc.wholegraph_stem(prefix, opt_type, state)
                if betas is not None and (opt_type, state) in fc.WHOLEGRAPH_CONVERTED:
                    entries = write_beta12t(src, tname, target, stage, stem, betas, options.chunk_rows, bar)
                else:
                    entries = shard_tensor(src, tname, target, stage, options.chunk_rows, bar, stem=stem)
                files += [{**entry, "state": state} for entry in entries]
        return files

    def exported_optimizer(self, optimizer: dict[str, Any], table_only: bool) -> dict[str, Any]:
        """The source's optimizer entry, with the optimizer whose states WholeGraph holds (adam: lazyadam)."""
        if table_only:
            return {"type": "none"}
        if fc.WHOLEGRAPH_OPTIMIZER[optimizer["type"]] != optimizer["type"]:
            return {**optimizer, "wholegraph_optimizer": fc.WHOLEGRAPH_OPTIMIZER[optimizer["type"]]}
        return optimizer


def _one_embedding(src: Checkpoint, embedding: Optional[str], where: PathLike) -> str:
    """The embedding asked for, or the checkpoint's only one: WholeGraph saves one embedding per prefix."""
    if embedding is not None:
        return check_embedding(src, embedding, where)
    if len(src.embeddings) != 1:
        raise InputError(where, f"holds {len(src.embeddings)} embeddings ({', '.join(src.embeddings)}); WholeGraph saves one per prefix: choose one with --embedding")
    return next(iter(src.embeddings))
