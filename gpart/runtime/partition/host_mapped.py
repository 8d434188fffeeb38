"""Host memory the GPU reads directly: a CUDA tensor over pinned host memory (UVA, zero-copy).

    view = map_to_device(host_tensor, torch.device("cuda", 0))   # torch CUDA ops read it over PCIe

This is how a partition's topology stays in host memory while the GPU samples
it (load_partition(topology="pinned")), as DGL's UVA sampling and Quiver do:
every torch CUDA operation takes `view` as any CUDA tensor, and its kernels
read the host pages over the bus, touching only the bytes a draw needs.

How: the array is copied once into plain host memory of its exact size and
registered with cudaHostRegister (portable, mapped). torch's own pinned
allocator (`pin_memory()`) would round every allocation up to a power of two:
a 5 GB topology would hold 8 GB of unswappable memory. With unified
addressing (every 64-bit CUDA platform) the registered pages have the same
address on the device, which torch wraps through `__cuda_array_interface__`
without a copy; the view keeps the registration alive, and the registration
is undone when the last view goes.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from gpart.base.errors import InputError

# cudaHostRegister flags (cuda_runtime_api.h): usable from every device's context, mapped into the device's space
REGISTER_PORTABLE, REGISTER_MAPPED = 0x01, 0x02
_REGISTERED: dict[int, int] = {}  # host address -> bytes, of every live registration


def cuda_array_interface(pointer: int, shape: tuple[int, ...], dtype: torch.dtype) -> dict[str, Any]:
    """The `__cuda_array_interface__` (version 2) of a C-contiguous array of `dtype` at device address `pointer`."""
    typestr = torch.empty(0, dtype=dtype).numpy().dtype.str
    return {"shape": tuple(int(s) for s in shape), "typestr": typestr, "data": (int(pointer), False), "version": 2,
            "strides": None}


class HostRegistration:
    """A host tensor registered with CUDA for the life of this object, offered to torch as device memory."""

    def __init__(self, host: torch.Tensor, device: torch.device):
        self.host = host
        self.nbytes = host.numel() * host.element_size()
        with torch.cuda.device(device):
            code = int(torch.cuda.cudart().cudaHostRegister(host.data_ptr(), self.nbytes, REGISTER_PORTABLE | REGISTER_MAPPED))
        if code != 0:
            raise InputError(None, f"cannot keep {self.nbytes} bytes in pinned host memory for {device} "
                                   f"(cudaHostRegister error {code}: the locked-memory limit, `ulimit -l`, or host memory)")
        _REGISTERED[host.data_ptr()] = self.nbytes
        self._undo = weakref.finalize(self, _unregister, host.data_ptr())

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return cuda_array_interface(self.host.data_ptr(), tuple(self.host.shape), self.host.dtype)


def _unregister(pointer: int) -> None:
    _REGISTERED.pop(pointer, None)
    torch.cuda.cudart().cudaHostUnregister(pointer)


def map_to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CUDA tensor on `device` over a pinned host copy of `host` (same values, shape and dtype), read by the GPU
    in place. An empty array is an ordinary (empty) device tensor."""
    if device.type != "cuda":
        raise InputError(None, f"host memory mapped for the GPU needs a CUDA device, not {device}")
    if host.numel() == 0:
        return torch.empty(host.shape, dtype=host.dtype, device=device)
    owned = torch.empty(host.shape, dtype=host.dtype)  # plain pages of the exact size (see the module)
    owned.copy_(host.cpu())
    view = torch.as_tensor(HostRegistration(owned, device), device=device)
    if view.data_ptr() != owned.data_ptr():  # torch copied instead of wrapping: the promise of this module fails
        raise InputError(None, f"torch copied host memory to {device} instead of mapping it (UVA unavailable)")
    return view


def is_host_mapped(tensor: torch.Tensor) -> bool:
    """Whether `tensor` lies in host memory registered by map_to_device (False for device and CPU memory)."""
    return tensor.device.type == "cuda" and tensor.numel() > 0 and tensor.untyped_storage().data_ptr() in _REGISTERED
