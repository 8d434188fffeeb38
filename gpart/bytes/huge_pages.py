"""Large fresh CPU tensors on transparent huge pages: `empty_huge(shape, dtype)`.

A fresh buffer's pages fault in on first touch, one 4 KiB page at a time:
for a batch's rows (hundreds of megabytes) that costs as much as copying
them. glibc's malloc maps every block past 32 MiB on its own and unmaps
it when freed, so such a buffer faults in again on every batch; smaller
blocks come from its heap, whose pages stay mapped from batch to batch, and
are left to torch's allocator. Anonymous memory advised MADV_HUGEPAGE faults in 2 MiB at a time
where the kernel's transparent huge pages are "madvise" or "always" (with
"never", the advice is ignored and the buffer is an ordinary one). The
tensor owns its mapping: the pages go back to the system when the tensor
is freed, as with torch's own allocator.
"""

from __future__ import annotations

import math
import mmap
from typing import Sequence

import torch

HUGE_FROM_BYTES = 32 << 20  # glibc's largest mmap threshold: smaller blocks are reused from the heap


def empty_huge(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """torch.empty(shape, dtype=dtype) on the CPU, on huge pages from HUGE_FROM_BYTES up."""
    count = math.prod(shape)
    nbytes = count * torch.empty(0, dtype=dtype).element_size()
    advise = getattr(mmap, "MADV_HUGEPAGE", None)
    if nbytes < HUGE_FROM_BYTES or advise is None:
        return torch.empty(tuple(shape), dtype=dtype)
    area = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        area.madvise(advise)
    except OSError:  # a kernel without transparent huge pages: an ordinary mapping
        pass
    return torch.frombuffer(area, dtype=dtype, count=count).view(tuple(shape))
