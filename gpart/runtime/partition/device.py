"""Devices for the runtime: resolving a device, copying host tensors onto it through reused
pinned buffers (`Stager`, `place`), and the partition book on a device (`DeviceBook`)."""

from __future__ import annotations

from typing import Optional, Union

import torch

from gpart.base.errors import InputError

DeviceLike = Union[str, torch.device, None]

# Host staging buffer for copies to a GPU: big enough for full PCIe speed,
# small enough to be negligible next to the data.
STAGE_BYTES = 64 << 20


def resolve_device(device: DeviceLike) -> torch.device:
    """None -> the current CUDA device if CUDA is available, else CPU; "cuda" -> the current CUDA device."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(None, f"device {device!r} requested but CUDA is not available (use device='cpu')")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    return dev


class Stager:
    """Copies host tensors to one CUDA device through two reused pinned buffers (double buffering)."""

    def __init__(self, device: torch.device):
        self.device = device
        self._buffers: list[torch.Tensor] = []
        self._events: list[Optional[torch.cuda.Event]] = [None, None]

    def _buffer(self, i: int, nbytes: int) -> torch.Tensor:
        while len(self._buffers) < 2:
            self._buffers.append(torch.empty(0, dtype=torch.uint8, pin_memory=True))
        if self._buffers[i].numel() < nbytes:
            ev = self._events[i]
            if ev is not None:
                ev.synchronize()
            self._buffers[i] = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        return self._buffers[i]

    def copy(self, src: torch.Tensor) -> torch.Tensor:
        """A device copy of host tensor `src`."""
        out = torch.empty(src.shape, dtype=src.dtype, device=self.device)
        self.copy_into(out, src)
        return out

    def copy_into(self, out: torch.Tensor, src: torch.Tensor) -> None:
        """Copy host tensor `src` into the contiguous device tensor `out` (same dtype and size)."""
        nbytes = src.numel() * src.element_size()
        if nbytes == 0:
            return
        src_bytes = src.contiguous().reshape(-1).view(torch.uint8)
        dst_bytes = out.view(-1).view(torch.uint8)
        step = min(STAGE_BYTES, nbytes)
        with torch.cuda.device(self.device):
            stream = torch.cuda.current_stream()
            for i, start in enumerate(range(0, nbytes, step)):
                slot = i % 2
                stop = min(nbytes, start + step)
                buf = self._buffer(slot, step)
                ev = self._events[slot]
                if ev is not None:
                    ev.synchronize()  # the previous copy out of this buffer is done
                buf[: stop - start].copy_(src_bytes[start:stop])
                dst_bytes[start:stop].copy_(buf[: stop - start], non_blocking=True)
                self._events[slot] = torch.cuda.Event()
                self._events[slot].record(stream)
            stream.synchronize()


def place(host: torch.Tensor, device: torch.device, pin: bool = False, stager: Optional[Stager] = None) -> torch.Tensor:
    """Move a (memory-mapped) host tensor to `device` without an intermediate full host copy.

    CPU: returned as it is (still backed by the mapping), or copied once into
    pinned memory with `pin` (only when CUDA is available: pinning needs it).
    """
    if device.type == "cpu":
        if pin and torch.cuda.is_available():
            return host.pin_memory()
        return host
    stager = stager or Stager(device)
    return stager.copy(host)


# --------------------------------------------------------------------------- partition book on a device


class DeviceBook:
    """owner(g) and local(g) for tensors of global ids, computed on the device.

    remainder: `g % P`, `g // P`; range: `searchsorted(boundaries)`, `g - b[owner]`
    (P+1 boundaries); array books (metis, random, assignment): lookups in the
    stored owner/local arrays. Ids must be in 0..num_nodes-1 (checked by callers).
    """

    def __init__(self, kind: str, num_nodes: int, num_parts: int, device: torch.device,
                 boundaries: Optional[torch.Tensor] = None,
                 owner_table: Optional[torch.Tensor] = None, local_table: Optional[torch.Tensor] = None):
        self.kind = kind
        self.num_nodes = int(num_nodes)
        self.num_parts = int(num_parts)
        self.device = device
        self.boundaries = boundaries
        self.owner_table = owner_table
        self.local_table = local_table

    def owner(self, gids: torch.Tensor) -> torch.Tensor:
        """Owning partition of each id (int64, same shape, on the book's device)."""
        return self._owner(gids.to(self.device)).to(torch.int64)

    def to_local(self, gids: torch.Tensor) -> torch.Tensor:
        """Row of each id within its owner's owned nodes (int64, same shape)."""
        return self.owner_and_local(gids)[1]

    def _owner(self, gids: torch.Tensor) -> torch.Tensor:
        # int32 for array books (the stored table), int64 for rules; a fresh tensor either way.
        if self.kind == "remainder":
            return torch.remainder(gids, self.num_parts)
        if self.kind == "range":
            return torch.searchsorted(self.boundaries, gids, right=True).sub_(1)
        return _lookup(self.owner_table, gids)

    def owner_and_local(self, gids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(owner, local) in one pass; owner is an integer tensor (int32 for array books), both fresh."""
        gids = gids.to(self.device)
        if self.kind == "remainder":
            return torch.remainder(gids, self.num_parts), torch.div(gids, self.num_parts, rounding_mode="floor")
        if self.kind == "range":
            owner = self._owner(gids)
            return owner, gids - self.boundaries[owner]
        return _lookup(self.owner_table, gids), _lookup(self.local_table, gids)

    def counts(self) -> torch.Tensor:
        """Owned nodes per partition (CPU int64)."""
        if self.kind == "remainder":
            p = torch.arange(self.num_parts)
            return torch.clamp(-torch.div(-(self.num_nodes - p), self.num_parts, rounding_mode="floor"), min=0)
        if self.kind == "range":
            return torch.diff(self.boundaries).cpu()
        return torch.bincount(self.owner_table.to(torch.int64), minlength=self.num_parts).cpu()


def _lookup(table: torch.Tensor, gids: torch.Tensor) -> torch.Tensor:
    # index_select is markedly faster than advanced indexing for 1-D lookups.
    return torch.index_select(table, 0, gids.reshape(-1)).reshape(gids.shape)
