"""Gather, scatter, import, inspect and verify embedding checkpoints (SPEC.md section 6).

- `gather_checkpoint(run, full)`: any checkpoint -> one file per tensor in global row order.
- `scatter_checkpoint(full, run, W, policy)`: any checkpoint -> W shards under a policy.
- `import_checkpoint(inputs, out, source=..., options=ImportOptions(...))`: other systems' checkpoint
  files -> a gpart checkpoint (`import_wholegraph`, `import_torch` directly).
- `export_checkpoint(run, out, to=..., options=ExportOptions(...))`: a gpart checkpoint -> the files
  WholeGraph or DistDGL resume from.
- `checkpoint_info(dir)`, `verify_checkpoint(dir)`: what `gpart info` / `gpart verify` show.

Both directions stream in pieces of about 32 MiB through a few reused
buffers, so memory stays flat (about 130 MB peak RSS) whatever the table size:

- remainder shards are gathered by interleaving each shard's slice of a chunk
  with one strided numpy copy (`out[r::W] = shard_r[lo:hi]`), read through
  memory maps whose pages are read ahead (MADV_WILLNEED) and given back
  after use (MADV_DONTNEED), so mapped pages never pile up in the RSS;
- range shards and global files are read with preadv into the buffers, one
  piece ahead in a helper thread;
- contiguous to contiguous (range or global to range or global) is a kernel
  copy (gpart.bytes.copy.copy_spans, copy_file_range). Gathering is a
  concatenation of whole shards, so the output's CRC-32 is combined
  (crc32_combine) from the input manifest's shard CRCs without reading the
  data; scatter cuts shards, so each piece's CRC-32 is computed from the
  mapped source pages in a helper thread and combined into both the output's
  CRC and a check of the input's own CRC. Where the kernel cannot copy
  between the files, both stream instead.

Results are built in a staging directory and committed with the manifest
last (gpart.formats.files.commit). The flat global files of gather-ckpt are written
by export-feat's file-list writer (gpart.formats.filelist.layout).

The package's rooms: `streaming` (rows in global order from any layout, and
back into shards), `reshard` (gather / scatter), `info` (info / verify); other
systems' checkpoints in through `foreign_import`, whose sources (the
ImportSource interface of `import_source`: `wholegraph_import`,
`torch_import`) `import_registry` lists, and out through `foreign_export`,
whose targets (the ExportTarget interface of `export_target`:
`wholegraph_export`, `distdgl_export`) `export_registry` lists: a new system is
one module and one registration line; on torch.distributed ranks, `distributed_reshard`
(gather / scatter, `python -m gpart.distributed gather-ckpt / scatter-ckpt`)
with `per_machine_run` (run directories spread over machines). A training
script saves and loads ShardedEmbedding tables and sparse optimizer states
with `gpart.runtime.save_checkpoint` / `load_checkpoint`
(gpart.runtime.embedding.checkpoint_save / checkpoint_load).
Shards written in row order go through gpart.formats.checkpoint.writer's
ShardWriter (write_shard too), contiguous copies through gpart.bytes.copy,
the torch importer's rows placed by id through a memory map; every shard's
manifest entry comes from gpart.formats.checkpoint.entries.shard_entry.

This module is the public API of the command-line operations above: import
them from `gpart.ckpt`. The distributed and runtime modules need torch and are
imported from their own modules (so that `gpart.ckpt` imports without it).
"""

from gpart.ckpt.export_target import ExportOptions
from gpart.ckpt.foreign_export import export_checkpoint
from gpart.ckpt.foreign_import import import_checkpoint
from gpart.ckpt.import_source import ImportOptions
from gpart.ckpt.info import checkpoint_info, verify_checkpoint
from gpart.ckpt.reshard import gather_checkpoint, scatter_checkpoint
from gpart.ckpt.torch_import import import_torch
from gpart.ckpt.wholegraph_import import import_wholegraph

__all__ = [
    "ExportOptions",
    "ImportOptions",
    "checkpoint_info",
    "export_checkpoint",
    "gather_checkpoint",
    "import_checkpoint",
    "import_torch",
    "import_wholegraph",
    "scatter_checkpoint",
    "verify_checkpoint",
]
