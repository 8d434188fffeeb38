"""The dtype names gpart writes in manifests (SPEC.md, "Dtypes").

Names, not numpy codes, so that a manifest reads the same to numpy, torch and
WholeGraph users. Every array is stored little-endian. bfloat16 has no numpy
dtype: it is stored and memory-mapped as its raw 16-bit pattern (uint16).
"""

from __future__ import annotations

import os
from typing import Optional

import numpy as np

from gpart.base.errors import InputError

# name -> numpy dtype used to store / memory-map the bytes
STORAGE_DTYPES: dict[str, np.dtype] = {
    "bool": np.dtype("|b1"),
    "int8": np.dtype("<i1"),
    "uint8": np.dtype("<u1"),
    "int16": np.dtype("<i2"),
    "uint16": np.dtype("<u2"),
    "int32": np.dtype("<i4"),
    "uint32": np.dtype("<u4"),
    "int64": np.dtype("<i8"),
    "uint64": np.dtype("<u8"),
    "float16": np.dtype("<f2"),
    "bfloat16": np.dtype("<u2"),  # raw bit pattern, see SPEC.md
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
}


def dtype_name(dtype: np.dtype | type | str) -> str:
    """The manifest name of a numpy dtype ('float32', 'int64', ...)."""
    dt = np.dtype(dtype)
    name = dt.name
    if name not in STORAGE_DTYPES or name == "bfloat16":
        raise ValueError(f"unsupported dtype {dt}")
    return name


def storage_dtype(name: str, path: Optional[os.PathLike | str] = None) -> np.dtype:
    """The little-endian numpy dtype that holds the bytes of a manifest dtype name."""
    try:
        return STORAGE_DTYPES[name]
    except KeyError:
        raise InputError(path, f"unknown dtype {name!r} (expected one of {', '.join(STORAGE_DTYPES)})") from None


def is_supported(dtype: np.dtype) -> bool:
    dt = np.dtype(dtype)
    return dt.name in STORAGE_DTYPES and dt.name != "bfloat16" and dt.kind in "biuf"
