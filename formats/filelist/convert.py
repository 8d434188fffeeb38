"""dtype conversion on the way into an export (SPEC.md 5.2): float16 / bfloat16 / narrower
integers, refusing overflow and non-finite values unless allowed; bfloat16 as its raw bits."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from gpart.base.errors import InputError
from gpart.bytes.buffers import BufferRing
from gpart.formats.files.dtypes import STORAGE_DTYPES, dtype_name, storage_dtype

# bits that are all set exactly for Inf and NaN, per 16-bit float format
NONFINITE_MASK16 = {"float16": 0x7C00, "bfloat16": 0x7F80}
FLOAT_TARGETS = ("float16", "bfloat16", "float32", "float64")
INT_TARGETS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


class Converter:
    """Casts chunks of one source dtype to a target dtype name, refusing lossy overflow.

    float -> float16/bfloat16/float32/float64, rounding to nearest even exactly as
    torch's `Tensor.to` (float64 goes through float32 for the 16-bit targets, as torch
    does); a result that is Inf or NaN is an error unless `allow_overflow`. integer ->
    integer only when every value fits; bool and equal dtypes pass through.

    numpy only: importing torch would cost ~190 MB of RSS and seconds of start-up for
    what a few vectorised passes do at memory speed. Output buffers are reused (BufferRing).
    """

    def __init__(self, source: np.dtype, target: Optional[str], where: Any, allow_overflow: bool = False):
        self.source = np.dtype(source)
        try:
            self.source_name = dtype_name(self.source)
        except ValueError:
            raise InputError(where, f"dtype {self.source} is not supported (numeric or bool arrays only)") from None
        self.target = target or self.source_name
        self.where = where
        self.allow_overflow = allow_overflow
        self.storage = storage_dtype(self.target)
        self._ring = BufferRing()
        self._scratch: dict[str, np.ndarray] = {}  # per-chunk temporaries, free again after each call
        self.kind = self._plan()

    def _plan(self) -> str:
        src, dst = self.source_name, self.target
        if dst not in STORAGE_DTYPES:
            raise InputError(self.where, f"unknown target dtype {dst!r}")
        if src == dst:
            return "same"
        if self.source.kind == "f" and dst in FLOAT_TARGETS:
            widening = dst != "bfloat16" and np.dtype(dst).itemsize >= self.source.itemsize
            return "float_widen" if widening else "float_narrow"
        if self.source.kind in "iu" and dst in INT_TARGETS:
            return "int"
        raise InputError(
            self.where,
            f"cannot convert {src} to {dst}: float arrays convert to {'/'.join(FLOAT_TARGETS)}, "
            f"integer arrays to integer dtypes whose range holds every value, bool arrays stay bool",
        )

    def __call__(self, chunk: np.ndarray) -> np.ndarray:
        if self.kind == "same":
            return chunk if chunk.dtype == self.storage else chunk.astype(self.storage)
        if self.kind == "int":
            return self._int(chunk)
        out = self._buffer(chunk.shape)
        self._cast_float(chunk, out)
        if self.kind == "float_narrow":
            self._check_finite(chunk, out)
        return out

    def _scratch_like(self, key: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        size = int(np.prod(shape, dtype=np.int64))
        buf = self._scratch.get(key)
        if buf is None or buf.size < size or buf.dtype != np.dtype(dtype):
            buf = self._scratch[key] = np.empty(size, dtype=dtype)
        return buf[:size].reshape(shape)

    def _cast_float(self, chunk: np.ndarray, out: np.ndarray) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is detected (and reported) by _check_finite
            self._cast_float_quiet(chunk, out)

    def _cast_float_quiet(self, chunk: np.ndarray, out: np.ndarray) -> None:
        if self.target not in ("float16", "bfloat16") or chunk.dtype == np.float32:
            f32 = chunk
        else:  # torch rounds float64 -> float16/bfloat16 through float32; so do we
            f32 = self._scratch_like("f32", chunk.shape, np.float32)
            np.copyto(f32, chunk, casting="unsafe")
        if self.target == "bfloat16":
            float32_to_bfloat16_bits(np.ascontiguousarray(f32, dtype=np.float32), out, self._scratch_like("u32", chunk.shape, np.uint32))
        else:
            np.copyto(out, f32, casting="unsafe")

    def _buffer(self, shape: tuple[int, ...]) -> np.ndarray:
        return self._ring.get(shape, self.storage)

    def _int(self, chunk: np.ndarray) -> np.ndarray:
        if chunk.size:
            info = np.iinfo(self.storage)
            lo, hi = chunk.min(), chunk.max()
            if int(lo) < info.min or int(hi) > info.max:
                bad = int(lo) if int(lo) < info.min else int(hi)
                raise InputError(
                    self.where,
                    f"cannot store {self.source_name} as {self.target}: value {bad} is outside [{info.min}, {info.max}]",
                )
        out = self._buffer(chunk.shape)
        np.copyto(out, chunk, casting="unsafe")
        return out

    def _check_finite(self, chunk: np.ndarray, out: np.ndarray) -> None:
        mask = NONFINITE_MASK16.get(self.target)
        if mask is not None:
            bits = out.reshape(-1).view(np.uint16)
            finite = not np.any((bits & mask) == mask) if bits.size else True
        else:
            finite = bool(np.isfinite(out).all())
        if self.target == "bfloat16":  # the rounding trick maps NaN to Inf or (wrapping) to a finite pattern
            finite = finite and bool(np.isfinite(chunk).all())
        if finite:
            return
        if self.target == "bfloat16":
            out[np.isnan(chunk)] = _BFLOAT16_NAN
        if self.allow_overflow:
            return
        source_bad = int(np.count_nonzero(~np.isfinite(chunk)))
        if source_bad:
            problem = f"contains {source_bad} NaN/Inf value(s)"
        else:
            result = out if mask is None else to_float32(out, self.target)
            overflow = int(np.count_nonzero(~np.isfinite(result)))
            biggest = float(np.abs(chunk[~np.isfinite(result)]).max())
            problem = f"{overflow} finite value(s) overflow {self.target} (largest magnitude {biggest:.6g})"
        raise InputError(self.where, f"{problem} when converting {self.source_name} to {self.target}; pass --allow-overflow to store them as Inf/NaN")


_BFLOAT16_NAN = 0x7FC0


def float32_to_bfloat16_bits(f32: np.ndarray, out: np.ndarray, tmp: np.ndarray) -> None:
    """Upper 16 bits of float32 rounded to nearest even (torch's round_to_nearest_even):
    bits + 0x7FFF + (bit 16 of bits), shifted down. In place on one uint32 temporary.
    NaN is not preserved here; the caller's finiteness check restores it."""
    bits = f32.view(np.uint32)
    np.right_shift(bits, 16, out=tmp)
    np.bitwise_and(tmp, 1, out=tmp)
    np.add(tmp, 0x7FFF, out=tmp)
    np.add(tmp, bits, out=tmp)  # wraps around only for some negative NaN patterns
    np.right_shift(tmp, 16, out=tmp)
    np.copyto(out, tmp, casting="unsafe")


def to_float32(bits: np.ndarray, target: str) -> np.ndarray:
    if target == "float16":
        return bits.astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)
