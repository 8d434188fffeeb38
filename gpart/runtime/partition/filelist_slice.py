"""Load a rank's slice of an export-feat file list (SPEC.md section 5) onto a device.

    feat = load_rows("wg/node_feat.json", rank, world_size, device="cuda")

Rank r of W gets rows [b[r], b[r+1]) with WholeGraph's split
(b[r] = min(r * ceil(N/W), N)), the rows `create_embedding_from_filelist`
gives that rank. The JSON and every part file's size are validated first
(CRC-32s too with verify=True). Only the part files overlapping the slice are
mapped; a slice inside one file is returned without a host copy on CPU, and
pieces are copied straight from the mapping to the device (through a small
pinned staging buffer) on CUDA. bfloat16 exports come back as torch.bfloat16.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch

from gpart.base.errors import InputError
from gpart.bytes.torch_bridge import numpy_to_tensor, torch_dtype
from gpart.formats.filelist.reader import open_filelist
from gpart.formats.files.arrays import open_array
from gpart.runtime.partition.device import DeviceLike, Stager, resolve_device

PathLike = Union[str, "os.PathLike[str]"]


def load_rows(
    json_path: PathLike,
    rank: int,
    world_size: int,
    device: DeviceLike = None,
    pin: bool = False,
    *,
    verify: bool = False,
) -> torch.Tensor:
    """Rows of rank `rank` of `world_size` from the export described by `json_path`.

    device: None -> CUDA when available, else CPU. pin: on CPU, return the
    rows in pinned host memory (one copy; ignored when CUDA is not available,
    since pinning needs it). The result has the export's row shape and dtype.
    """
    json_path = Path(json_path)
    if not isinstance(world_size, (int, np.integer)) or world_size < 1:
        raise InputError(json_path, f"world size must be a positive integer, got {world_size!r}")
    if not isinstance(rank, (int, np.integer)) or not 0 <= rank < world_size:
        raise InputError(json_path, f"rank {rank!r} is not one of 0..{world_size - 1}")
    filelist = open_filelist(json_path, verify=verify)
    dev = resolve_device(device)
    start, stop = filelist.rank_range(int(rank), int(world_size))
    pieces = _pieces(filelist, start, stop)
    if dev.type == "cuda":
        return _to_cuda(pieces, filelist, stop - start, dev)
    if len(pieces) == 1 and not (pin and torch.cuda.is_available()):
        return pieces[0]
    out = _empty(filelist, stop - start, pin=pin and torch.cuda.is_available())
    row = 0
    for piece in pieces:
        out[row : row + piece.shape[0]].copy_(piece)
        row += piece.shape[0]
    return out


def _pieces(filelist, start: int, stop: int) -> list[torch.Tensor]:
    """The rows [start, stop) as tensors over memory maps of the files they lie in, in order."""
    offsets = filelist.file_offsets
    pieces = []
    for i, entry in enumerate(filelist.entries):
        lo, hi = max(start, int(offsets[i])), min(stop, int(offsets[i + 1]))
        if lo >= hi:
            continue
        # copy-on-write map: writable for torch.from_numpy, never written.
        arr = open_array(filelist.directory, entry, mode="c")
        pieces.append(numpy_to_tensor(arr[lo - int(offsets[i]) : hi - int(offsets[i])], filelist.dtype))
    if not pieces:
        pieces.append(_empty(filelist, 0))
    return pieces


def _torch_dtype(filelist) -> torch.dtype:
    return torch_dtype(filelist.dtype)


def _empty(filelist, rows: int, pin: bool = False, device: Optional[torch.device] = None) -> torch.Tensor:
    return torch.empty((rows, *filelist.shape[1:]), dtype=_torch_dtype(filelist), pin_memory=pin, device=device)


def _to_cuda(pieces: list[torch.Tensor], filelist, rows: int, device: torch.device) -> torch.Tensor:
    out = _empty(filelist, rows, device=device)
    stager = Stager(device)
    row = 0
    for piece in pieces:
        stager.copy_into(out[row : row + piece.shape[0]], piece)
        row += piece.shape[0]
    return out
