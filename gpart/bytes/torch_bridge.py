"""The one torch <-> numpy bridge: tensors over numpy memory and back without copies.

bfloat16 has no numpy dtype; on disk and in numpy it is its raw 16-bit pattern
(uint16, SPEC.md 1.2), viewed as torch.bfloat16 on the torch side. torch is
imported on first use only, so the byte layer loads without it.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np


def numpy_to_tensor(arr: np.ndarray, dtype_name: str, read_only_ok: bool = False) -> Any:
    """A CPU tensor sharing `arr`'s memory; bfloat16 (stored as uint16 bit patterns) viewed as torch.bfloat16.

    `read_only_ok`: silence torch's warning for a read-only array (a map whose
    tensor is only ever read or saved, never written).
    """
    import torch  # the byte layer serves torch-free commands too: torch is imported on first use

    with warnings.catch_warnings():
        if read_only_ok:
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        if dtype_name == "bfloat16":
            return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(arr)


def tensor_dtype_name(dtype: Any) -> str:
    """gpart's dtype name of a torch dtype (torch.bfloat16 -> "bfloat16", torch.float32 -> "float32")."""
    return str(dtype).replace("torch.", "")


def torch_dtype(dtype_name: str) -> Any:
    """The torch dtype of a gpart dtype name (bfloat16 included)."""
    import torch  # the byte layer serves torch-free commands too: torch is imported on first use

    if dtype_name == "bfloat16":
        return torch.bfloat16
    return torch.from_numpy(np.zeros(0, dtype=np.dtype(dtype_name))).dtype


def tensor_to_numpy(tensor: Any) -> np.ndarray:
    """A C-contiguous CPU numpy array of a tensor's values (no copy when it already is one);
    bfloat16 as its uint16 bit patterns."""
    import torch  # the byte layer serves torch-free commands too: torch is imported on first use

    t = tensor.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()
