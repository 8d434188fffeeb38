"""Counting what a batch asks of the device, on any device: torch operations and host synchronisations.

    with OpCounter() as count:
        batch = next(loader)
    count.ops, count.syncs, count.by_name     # aten operations dispatched, synchronisations, per-op counts

The CPU proxy of a GPU's per-batch cost: on CUDA every dispatched aten
operation is a kernel launch (views and metadata ones are counted too: they
cost a dispatch each), and every host synchronisation drains the GPU's queue
while Python waits. Counted as synchronisations: the operations that read a
device value on the host (aten._local_scalar_dense: .item(), int(), bool(),
and operations whose output size depends on values: nonzero, masked_select,
unique, repeat_interleave without output_size, ...), copies from a device to
the host, and .tolist() (which copies to the host; on the CPU it dispatches
nothing, so it is caught here by name). numpy() on a CPU tensor (the CPU
path's own host code) is not a synchronisation: a CUDA tensor must be copied
to the host first, which is counted. A fused kernel launched outside torch's
dispatcher (Triton) reports itself through `launch()`, counted as one
operation, with what runs inside it not counted (under the Triton
interpreter it runs torch and numpy code that a GPU would not).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any, Iterator, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten operations that wait for the device: a value read on the host, or an output sized by values
SYNC_OPS = frozenset({
    "_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique", "_unique2", "unique_dim", "unique_consecutive",
    "equal", "is_nonzero", "bincount", "histc",
})
# sized by values only without their output size argument
SIZED_OPS = {"repeat_interleave": "output_size"}

_ACTIVE: list["OpCounter"] = []


class OpCounter(TorchDispatchMode):
    """Counts aten operations and host synchronisations while active (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_name: Counter = Counter()
        self.syncs_by_name: Counter = Counter()
        self._saved: dict[str, Any] = {}

    @property
    def ops(self) -> int:
        return sum(self.by_name.values())

    @property
    def syncs(self) -> int:
        return sum(self.syncs_by_name.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.by_name[name] += 1
        kwargs = kwargs or {}
        if name in SYNC_OPS or (name in SIZED_OPS and kwargs.get(SIZED_OPS[name]) is None):
            self.syncs_by_name[name] += 1
        out = func(*args, **kwargs)
        if name in ("_to_copy", "copy_") and _device_to_host(args, out):
            self.syncs_by_name["to_host"] += 1
        return out

    def __enter__(self) -> "OpCounter":
        for method in ("tolist",):  # a host copy that dispatches nothing on the CPU
            original = getattr(torch.Tensor, method)
            self._saved[method] = original
            setattr(torch.Tensor, method, _counted(self, method, original))
        _ACTIVE.append(self)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE.remove(self)
        for method, original in self._saved.items():
            setattr(torch.Tensor, method, original)
        self._saved.clear()
        return super().__exit__(*exc)


def _device_to_host(args: tuple, out: Any) -> bool:
    """Whether a copy read a device tensor into host memory."""
    source = args[1] if len(args) > 1 and isinstance(args[1], torch.Tensor) else args[0]
    return isinstance(out, torch.Tensor) and out.device.type == "cpu" and source.device.type != "cpu"


def _counted(counter: OpCounter, method: str, original: Any) -> Any:
    def call(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if _launching.depth == 0:
            counter.syncs_by_name[method] += 1
        return original(tensor, *args, **kwargs)

    return call


class _Launching:
    depth = 0


_launching = _Launching()


def active() -> Optional[OpCounter]:
    """The innermost active counter, if any."""
    return _ACTIVE[-1] if _ACTIVE else None


@contextlib.contextmanager
def launch(name: str) -> Iterator[None]:
    """A kernel launched outside torch's dispatcher: one operation named `name` for an active counter, nothing
    inside it counted."""
    counter = active()
    if counter is None:
        yield
        return
    counter.by_name[name] += 1
    _launching.depth += 1
    try:
        with torch.utils._python_dispatch._disable_current_modes():
            yield
    finally:
        _launching.depth -= 1
