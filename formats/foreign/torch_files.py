"""torch.save files for other programs to load (PyG, GLT, DGL, DistDGL): plain dicts and CPU tensors only.

gpart writes these files but never reads one back except with
`torch.load(weights_only=True)`. Tensors are wrapped around numpy arrays
(memory maps included) without copying.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from typing import Any, BinaryIO, Callable, TypeVar, Union

import numpy as np

from gpart.base.errors import OutputError
from gpart.bytes.crc import file_crc32
from gpart.bytes.torch_bridge import numpy_to_tensor

FileEntry = dict[str, Any]  # {file, bytes, crc32}: one written file as manifests list it
T = TypeVar("T")


def as_torch(rows: np.ndarray, dtype: str) -> Any:
    """A CPU tensor over `rows` (no copy); bfloat16 rows are stored as their uint16 bit patterns."""
    return numpy_to_tensor(rows, dtype, read_only_ok=True)  # read-only maps: only ever saved, never written


class _CrcWriter:
    """A binary file that keeps the CRC-32 of what is written to it (so the file is never read back),
    and the first write error: torch.save's zip writer reports a failed write as a RuntimeError
    about positions when it closes, which `error` turns back into the cause."""

    def __init__(self, fh: BinaryIO):
        self.fh, self.crc, self.nbytes = fh, 0, 0
        self.error: OSError | None = None

    def write(self, data: Union[bytes, bytearray, memoryview]) -> int:
        view = memoryview(data).cast("B")
        self.crc = zlib.crc32(view, self.crc)
        self.nbytes += len(view)
        try:
            return self.fh.write(view)
        except OSError as exc:
            self.error = self.error or exc
            raise

    def flush(self) -> None:
        self.fh.flush()


def write_new_file(path: Path, fill: Callable[[BinaryIO], T]) -> T:
    """Create `path` (it must not exist yet), let `fill` write it, fsync; what `fill` returned.
    An OSError is a one-line OutputError naming `path`."""
    try:
        with open(path, "xb") as fh:
            result = fill(fh)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise OutputError(path, f"write failed: {exc.strerror or exc}") from None
    return result


def save_torch_file(obj: Any, path: Path) -> FileEntry:
    """torch.save `obj` (plain dicts, lists and tensors only) to the new file `path`, fsync it.

    Returns {file, bytes, crc32} of the written file, the CRC-32 taken on the way out.
    """
    import torch  # torch costs about a second of import: only conversions that write .pt files pay it

    def fill(fh: BinaryIO) -> _CrcWriter:
        out = _CrcWriter(fh)
        try:
            # torch.save writes through any object with write() and flush(); its annotation names only IO[bytes]
            torch.save(obj, out)  # type: ignore[arg-type]
        except RuntimeError:
            if out.error is not None:  # a full disk, not torch's own complaint: report the OSError
                raise out.error from None
            raise
        return out

    out = write_new_file(path, fill)
    size = path.stat().st_size
    if size != out.nbytes:  # torch.save seeked back and rewrote: checksum the file itself
        return file_entry(path)
    return {"file": path.name, "bytes": size, "crc32": f"{out.crc:08x}"}


def file_entry(path: Path) -> FileEntry:
    """{file, bytes, crc32} of a complete file, as export manifests list them."""
    return {"file": path.name, "bytes": path.stat().st_size, "crc32": f"{file_crc32(path):08x}"}
