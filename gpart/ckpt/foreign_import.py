"""`gpart import-ckpt`: another system's checkpoint files as a sharded gpart checkpoint (SPEC.md 6.6).

Each source is one module implementing ImportSource (gpart.ckpt.import_source),
registered in gpart.ckpt.import_registry: `wholegraph` (wholegraph_import,
`WholeMemoryEmbedding.save(prefix)`'s files) and `torch` (torch_import, per-rank
torch.save files: gpart's own and DistDGL's sparse-optimizer states).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from gpart.base.progress import Progress
from gpart.ckpt.import_registry import get_source
from gpart.ckpt.import_source import ImportOptions, PathLike


def import_checkpoint(
    inputs: Sequence[PathLike], out_dir: PathLike, *, source: str, options: ImportOptions, force: bool = False,
    progress: Optional[Progress] = None,
) -> dict[str, Any]:
    """Import the files `inputs` written by `source` as a sharded gpart checkpoint in `out_dir`; return its manifest."""
    return get_source(source).run(inputs, out_dir, options, force=force, progress=progress)
