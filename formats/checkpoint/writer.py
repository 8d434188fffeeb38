"""The writer of embedding checkpoints (SPEC.md 6.2): shard files and the manifest.

- `ShardWriter`: one rank's rows of one tensor appended to its flat shard file
  (fsynced on close), described by `shard_entry()`, the entry
  build_checkpoint_manifest takes. Every writer of gpart's shard files uses it:
  training's save, the importers, scatter-ckpt (single-process and distributed).
- `write_shard`: a whole shard from a numpy array, a torch tensor or row chunks.
- `write_checkpoint_manifest`: check the manifest against the files, then commit it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np

from gpart.bytes.crc import CHUNK_BYTES
from gpart.bytes.torch_bridge import tensor_dtype_name, tensor_to_numpy
from gpart.formats.checkpoint.entries import check_embedding_name, shard_entry, shard_file_name, split_tensor_name
from gpart.formats.checkpoint.reader import parse_checkpoint
from gpart.formats.files.arrays import ArrayWriter, iter_row_chunks
from gpart.formats.files.dtypes import STORAGE_DTYPES, dtype_name, storage_dtype
from gpart.formats.files.manifest import MANIFEST_NAME, write_manifest
from gpart.formats.files.names import safe_name


def check_shard(directory: Union[str, os.PathLike], tensor: str, rank: int, world_size: int) -> None:
    """A shard of `tensor` for rank `rank` of `world_size` can be named: a valid tensor name and rank."""
    emb, state = split_tensor_name(tensor)
    check_embedding_name(emb, directory)
    if state is not None:
        safe_name(state, "state name", directory)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world of size {world_size}")


class ShardWriter(ArrayWriter):
    """Rank `rank`'s shard of `tensor` among `world_size`: rows appended in the rank's local order.

    The file is `<stem>_part_<rank>_of_<world_size>` in `directory`; `stem` is the tensor
    name unless another system's file names are wanted (export-ckpt). `crc_in_thread`:
    large pieces are checksummed in the shared CRC thread while they are written (the
    streaming reshards); otherwise right after each write (gpart.bytes.sink.ByteSink).
    Close it (or leave its `with` block) before asking for `shard_entry()`.
    """

    def __init__(
        self,
        directory: Union[str, os.PathLike],
        tensor: str,
        rank: int,
        world_size: int,
        dtype: str,
        row_shape: Sequence[int],
        *,
        stem: Optional[str] = None,
        crc_in_thread: bool = False,
    ):
        check_shard(directory, tensor, rank, world_size)
        self.tensor, self.rank = tensor, rank
        super().__init__(Path(directory) / shard_file_name(stem or tensor, rank, world_size), dtype, row_shape)
        self.crc_in_thread = crc_in_thread

    def shard_entry(self) -> dict[str, Any]:
        """The shard's entry for build_checkpoint_manifest: {tensor, rank, file, rows, bytes, crc32, dtype, row_shape}."""
        return shard_entry(self.tensor, self.rank, self.path.name, self.rows, self.nbytes, self.crc, self.dtype_name, self.row_shape)


def _torch_chunks(tensor: Any, chunk_bytes: int) -> tuple[str, tuple[int, ...], Iterable[np.ndarray]]:
    dt = tensor.dtype
    name = tensor_dtype_name(dt)
    if name not in STORAGE_DTYPES:
        raise ValueError(f"unsupported tensor dtype {dt}")
    t = tensor.detach()
    if t.dim() == 0:
        t = t.reshape(1)
    row_bytes = max(1, int(np.prod(t.shape[1:], dtype=np.int64)) * t.element_size())
    step = max(1, chunk_bytes // row_bytes)

    def chunks() -> Iterable[np.ndarray]:
        for start in range(0, t.shape[0], step):
            yield tensor_to_numpy(t[start : start + step])

    return name, tuple(int(s) for s in t.shape[1:]), chunks()


def write_shard(
    directory: Union[str, os.PathLike],
    tensor: str,
    rank: int,
    world_size: int,
    data: Any,
    *,
    dtype: Optional[str] = None,
    row_shape: Optional[Sequence[int]] = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> dict[str, Any]:
    """Write one rank's shard of `tensor` (rows in the rank's local order) and fsync it.

    `data`: numpy array, torch tensor, or iterable of numpy row chunks (then
    `dtype` and `row_shape` are required). `dtype` converts numpy input to that
    manifest dtype name (not bfloat16). Returns the shard entry for
    build_checkpoint_manifest: {tensor, rank, file, rows, bytes, crc32, dtype, row_shape}.
    """
    check_shard(directory, tensor, rank, world_size)
    if type(data).__module__.startswith("torch"):
        dname, rshape, chunks = _torch_chunks(data, chunk_bytes)
        if dtype is not None and dtype != dname:
            raise ValueError(f"tensor dtype {dname} differs from dtype={dtype}; convert before saving")
    elif isinstance(data, np.ndarray):
        arr = data.reshape(1) if data.ndim == 0 else data
        dname = dtype or dtype_name(arr.dtype)
        rshape = tuple(int(s) for s in arr.shape[1:])
        chunks = iter_row_chunks(arr, chunk_bytes)
    else:
        if dtype is None or row_shape is None:
            raise ValueError("dtype and row_shape are required when data is an iterable of chunks")
        dname, rshape, chunks = dtype, tuple(int(s) for s in row_shape), data
    if row_shape is not None and tuple(int(s) for s in row_shape) != rshape:
        raise ValueError(f"rows of shape {rshape} differ from row_shape={tuple(row_shape)}")
    storage_dtype(dname)
    with ShardWriter(directory, tensor, rank, world_size, dname, rshape) as writer:
        for chunk in chunks:
            writer.write(chunk)
    return writer.shard_entry()


def write_checkpoint_manifest(directory: Union[str, os.PathLike], manifest: dict[str, Any], verify: bool = False) -> Path:
    """Check the manifest against the files in `directory` (sizes; CRCs with verify), then commit it atomically."""
    parse_checkpoint(dict(manifest), Path(directory), Path(directory) / MANIFEST_NAME, check_files=True, verify=verify)
    return write_manifest(directory, dict(manifest))
