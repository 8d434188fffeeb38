"""The shard writer of embedding checkpoints (SPEC.md 6.2): one rank's rows of one tensor as a
flat file, fsynced, described by the entry build_checkpoint_manifest takes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np

from gpart.bytes.torch_bridge import tensor_dtype_name, tensor_to_numpy
from gpart.bytes.crc import CHUNK_BYTES
from gpart.formats.arrays import ArrayWriter
from gpart.formats.checkpoint import check_embedding_name, shard_entry, shard_file_name, split_tensor_name
from gpart.formats.dtypes import STORAGE_DTYPES, storage_dtype
from gpart.formats.names import safe_name


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


def _numpy_chunks(arr: np.ndarray, chunk_bytes: int) -> Iterable[np.ndarray]:
    row_bytes = max(1, int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize)
    step = max(1, chunk_bytes // row_bytes)
    for start in range(0, arr.shape[0], step):
        yield arr[start : start + step]


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
    emb, state = split_tensor_name(tensor)
    check_embedding_name(emb, directory)
    if state is not None:
        safe_name(state, "state name", directory)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world of size {world_size}")
    if type(data).__module__.startswith("torch"):
        dname, rshape, chunks = _torch_chunks(data, chunk_bytes)
        if dtype is not None and dtype != dname:
            raise ValueError(f"tensor dtype {dname} differs from dtype={dtype}; convert before saving")
    elif isinstance(data, np.ndarray):
        arr = data.reshape(1) if data.ndim == 0 else data
        from gpart.formats.dtypes import dtype_name

        dname = dtype or dtype_name(arr.dtype)
        rshape = tuple(int(s) for s in arr.shape[1:])
        chunks = _numpy_chunks(arr, chunk_bytes)
    else:
        if dtype is None or row_shape is None:
            raise ValueError("dtype and row_shape are required when data is an iterable of chunks")
        dname, rshape, chunks = dtype, tuple(int(s) for s in row_shape), data
    if row_shape is not None and tuple(int(s) for s in row_shape) != rshape:
        raise ValueError(f"rows of shape {rshape} differ from row_shape={tuple(row_shape)}")
    storage_dtype(dname)
    name = shard_file_name(tensor, rank, world_size)
    with ArrayWriter(Path(directory) / name, dname, rshape) as writer:
        for chunk in chunks:
            writer.write(chunk)
    return shard_entry(tensor, rank, name, writer.rows, writer.entry(name).nbytes, writer.crc, dname, rshape)
