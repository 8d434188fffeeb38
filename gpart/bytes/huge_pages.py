"""Large fresh CPU tensors on transparent huge pages: `empty_huge(shape, dtype)`.

A fresh buffer's pages fault in on first touch, one 4 KiB page at a time:
for a batch's rows (hundreds of megabytes) that costs as much as copying
them. Anonymous memory advised MADV_HUGEPAGE faults in 2 MiB at a time
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

HUGE_PAGE_BYTES = 2 << 20  # below this a buffer is left to torch's allocator


def empty_huge(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """torch.empty(shape, dtype=dtype) on the CPU, on huge pages where it spans at least one."""
    count = math.prod(shape)
    nbytes = count * torch.empty(0, dtype=dtype).element_size()
    advise = getattr(mmap, "MADV_HUGEPAGE", None)
    if nbytes < HUGE_PAGE_BYTES or advise is None:
        return torch.empty(tuple(shape), dtype=dtype)
    area = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        area.madvise(advise)
    except OSError:  # a kernel without transparent huge pages: an ordinary mapping
        pass
    return torch.frombuffer(area, dtype=dtype, count=count).view(tuple(shape))
