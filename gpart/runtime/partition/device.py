"""Devices for the runtime: resolving a device, and copying host tensors onto it through reused
pinned buffers (`Stager`, `place`). The partition book on a device is gpart.runtime.partition.book."""

from __future__ import annotations

from typing import Optional, Union

import torch

from gpart.base.errors import InputError
from gpart.runtime.partition.host_mapped import is_host_mapped, map_to_device

DeviceLike = Union[str, torch.device, None]

# Host staging buffer for copies to a GPU: big enough for full PCIe speed,
# small enough to be negligible next to the data.
STAGE_BYTES = 64 << 20

# where a partition keeps its per-edge arrays (CSC, edge data, the tables made from them): copied to its device,
# or in pinned host memory that the GPU reads in place (gpart.runtime.partition.host_mapped)
TOPOLOGIES = ("device", "pinned")


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
                done = torch.cuda.Event()
                done.record(stream)
                self._events[slot] = done
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


def check_topology(topology: str, device: torch.device, where: object) -> None:
    """A one-line InputError unless `topology` is one of TOPOLOGIES and fits `device`."""
    if topology not in TOPOLOGIES:
        raise InputError(where, f"topology must be one of {', '.join(map(repr, TOPOLOGIES))}, got {topology!r}")
    if topology == "pinned" and device.type != "cuda":
        raise InputError(where, f"topology='pinned' keeps the topology in host memory for a GPU to read, but the device is "
                                f"{device} (use a CUDA device, or topology='device')")


def place_topology(array: torch.Tensor, device: torch.device, topology: str, stager: Optional[Stager] = None) -> torch.Tensor:
    """Per-edge array `array` (on the host, or made on `device`) where `topology` says: on `device`, or mapped
    from pinned host memory for it."""
    if topology == "pinned":
        return array if is_host_mapped(array) else map_to_device(array, device)
    if array.device == device:
        return array
    return place(array, device, stager=stager) if array.device.type == "cpu" else array.to(device)
