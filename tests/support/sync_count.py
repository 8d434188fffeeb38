"""Count the torch ops a piece of code runs, and those that make a GPU wait for the host's answer.

    with OpCounter() as ops:
        run()
    ops.total, ops.syncs, ops.by_name

A host synchronisation on CUDA is an op whose result the host must read
(`item`, `int(t)`: aten._local_scalar_dense) or whose output shape depends
on tensor values (nonzero, masked_select, unique, repeat_interleave without
output_size): the host waits for the device to know how much to allocate.
On the CPU the same ops run, so counting them on the CPU counts the waits
the code would make on a GPU. `paused()` leaves a region out (another
component's ops). Reads through Tensor.tolist() are not dispatched: code that
reads sizes counts them itself (gpart.runtime.partition.exchange.Exchange.host).
"""

from __future__ import annotations

import collections
import contextlib
from typing import Iterator

from torch.utils._python_dispatch import TorchDispatchMode

DATA_DEPENDENT = {"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique", "_unique2", "unique_dim",
                  "unique_consecutive"}


class OpCounter(TorchDispatchMode):
    """Counts dispatched aten ops by name while active (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_name: collections.Counter = collections.Counter()
        self.syncs = 0
        self.total = 0
        self._paused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self._paused:
            name = func.__name__.split(".")[0]
            self.total += 1
            self.by_name[name] += 1
            if name in DATA_DEPENDENT or (name == "repeat_interleave" and kwargs.get("output_size") is None):
                self.syncs += 1
        return func(*args, **kwargs)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1
