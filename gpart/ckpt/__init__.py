"""Gather, scatter, import, inspect and verify embedding checkpoints (SPEC.md section 6).

- `gather_checkpoint(run, full)`: any checkpoint -> one file per tensor in global row order.
- `scatter_checkpoint(full, run, W, policy)`: any checkpoint -> W shards under a policy.
- `import_wholegraph(...)`, `import_torch(...)`: other systems' checkpoint files -> a gpart checkpoint.
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
last (gpart.formats.commit). The flat global files of gather-ckpt are written
by export-feat's file-list writer (gpart.formats.filelist).

The package's rooms: `streaming` (rows in global order from any layout, and
back into shards), `reshard` (gather / scatter), `wholegraph` and
`torch_import` (other systems' checkpoints), `info` (info / verify). This
module is the public facade: import from `gpart.ckpt`.
"""

from gpart.ckpt.info import checkpoint_info, verify_checkpoint
from gpart.ckpt.reshard import gather_checkpoint, gather_tensor, scatter_checkpoint, shard_tensor, target_policy
from gpart.ckpt.streaming import BUFFERS, PIECE_BYTES, GlobalRows, contiguous_spans, iter_global_chunks
from gpart.ckpt.torch_import import DISTDGL_HYPER_PARAMS, DISTDGL_STATE_SUFFIXES, expand_rank_files, import_torch
from gpart.ckpt.wholegraph_import import import_wholegraph

__all__ = [
    "BUFFERS",
    "DISTDGL_HYPER_PARAMS",
    "DISTDGL_STATE_SUFFIXES",
    "PIECE_BYTES",
    "GlobalRows",
    "checkpoint_info",
    "contiguous_spans",
    "expand_rank_files",
    "gather_checkpoint",
    "import_torch",
    "import_wholegraph",
    "iter_global_chunks",
    "scatter_checkpoint",
    "shard_tensor",
    "target_policy",
    "verify_checkpoint",
]
