"""`gpart export-ckpt`: a gpart checkpoint back into the files another system resumes from (SPEC.md 6.7).

Each target is one module implementing ExportTarget (gpart.ckpt.export_target),
registered in gpart.ckpt.export_registry: `wholegraph` (wholegraph_export,
`WholeMemoryEmbedding.load(prefix)`'s files) and `distdgl` (distdgl_export,
DistDGL's sparse-optimizer state and table files). The result is built in a
staging directory and committed with a small `manifest.json` (format
`gpart.ckpt-export`) last, like every gpart result.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from gpart.base.errors import InputError
from gpart.base.progress import Progress, or_null
from gpart.base.version import __version__
from gpart.ckpt.export_registry import get_target
from gpart.ckpt.export_target import ExportOptions, PathLike
from gpart.formats.checkpoint.reader import Checkpoint, read_checkpoint
from gpart.formats.filelist.layout import check_export_name
from gpart.formats.files.commit import staged_output
from gpart.formats.files.manifest import write_manifest
from gpart.formats.sharding.policies import ShardPolicy

EXPORT_FORMAT = "gpart.ckpt-export"


def export_checkpoint(
    run_dir: PathLike, out_dir: PathLike, *, to: str, options: ExportOptions, force: bool = False, progress: Optional[Progress] = None,
) -> dict[str, Any]:
    """Write the checkpoint `run_dir` (any layout) as `to`'s files for `options.world_size` ranks; return the export manifest."""
    target = get_target(to)
    if options.world_size < 1:
        raise InputError(None, f"world size must be at least 1, got {options.world_size}")
    src = read_checkpoint(run_dir, verify=options.verify)
    opt_type = src.optimizer["type"]
    if opt_type not in target.optimizers and not options.table_only:
        have = ", ".join(k for k in target.optimizers if k != "none")
        raise InputError(
            run_dir, f"optimizer {opt_type} has no {to} counterpart ({to} saves states of: {have}); use --table-only to export the tables alone"
        )
    prefix = check_export_name(options.prefix or target.default_prefix(src, options, run_dir))
    if not options.ntype or "~" in options.ntype:
        raise InputError(None, f"node type {options.ntype!r} must be non-empty and without '~' (DGL's name separator)")
    policies = target.policies(src, options, run_dir)
    with staged_output(out_dir, force=force, inputs=[run_dir]) as stage:
        files = target.write(src, prefix, policies, stage, options, or_null(progress))
        manifest = _export_manifest(src, run_dir, to, options.world_size, prefix, target.exported_optimizer(src.optimizer, options.table_only),
                                    policies, files)
        write_manifest(stage, manifest)
    return manifest


def _export_manifest(src: Checkpoint, run_dir: PathLike, to: str, world_size: int, prefix: str, optimizer: dict[str, Any],
                     policies: dict[str, ShardPolicy], files: list[dict[str, Any]]) -> dict[str, Any]:
    """The `manifest.json` of an export (SPEC.md 6.7): what was written, for whom, from what."""
    return {
        "format": EXPORT_FORMAT,
        "version": 1,
        "created_by": f"gpart {__version__}",
        "target": to,
        "source": os.fspath(run_dir),
        "world_size": world_size,
        "prefix": prefix,
        "optimizer": optimizer,
        "embeddings": [
            {"name": e, "num_rows": src.embeddings[e].num_rows, "row_shape": list(src.embeddings[e].row_shape), "dtype": src.embeddings[e].dtype,
             "policy": p.to_json()}
            for e, p in policies.items()
        ],
        "files": files,
    }
