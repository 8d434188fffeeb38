"""Gather, scatter, import, inspect and verify embedding checkpoints (SPEC.md section 6).

- `gather_checkpoint(run, full)`: any checkpoint -> one file per tensor in global row order.
- `scatter_checkpoint(full, run, W, policy)`: any checkpoint -> W shards under a policy.
- `import_wholegraph(...)`, `import_torch(...)`: other systems' checkpoint files -> a gpart checkpoint.
- `checkpoint_info(dir)`, `verify_checkpoint(dir)`: what `gpart info` / `gpart verify` show.

Both directions stream in pieces of about 32 MiB through a few reused
buffers, so memory stays flat (about 130 MB peak RSS) whatever the table size:

- remainder shards are gathered by interleaving each shard's slice of a chunk
  with one strided numpy copy (`out[r::W] = shard_r[lo:hi]`), read through
  memory maps whose pages are read ahead (MADV_WILLNEED) and given back
  after use (MADV_DONTNEED), so mapped pages never pile up in the RSS;
- range shards and global files are read with preadv into the buffers, one
  piece ahead in a helper thread;
- contiguous to contiguous (range or global to range or global) is a kernel
  copy (gpart.formats.filelist.copy_spans, copy_file_range). Gathering is a
  concatenation of whole shards, so the output's CRC-32 is combined
  (crc32_combine) from the input manifest's shard CRCs without reading the
  data; scatter cuts shards, so each piece's CRC-32 is computed from the
  mapped source pages in a helper thread and combined into both the output's
  CRC and a check of the input's own CRC. Where the kernel cannot copy
  between the files, both stream instead.

Results are built in a staging directory and committed with the manifest
last (gpart.formats.commit). The flat global files of gather-ckpt are written
by export-feat's file-list writer (gpart.formats.filelist).
"""

from __future__ import annotations

import mmap
import os
import queue
import threading
import zlib
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from gpart import __version__
from gpart.errors import InputError, IntegrityError, OutputError
from gpart.formats import checkpoint as ck
from gpart.formats.arrays import CHUNK_BYTES, OnTheWayCrc, preallocate
from gpart.formats.commit import staged_output
from gpart.formats.dtypes import STORAGE_DTYPES, storage_dtype
from gpart.formats.foreign_ckpt import DISTDGL_PARAMS, DISTDGL_STATES, WHOLEGRAPH_STATE_FILES
from gpart.formats.filelist import BFLOAT16_NOTE, BufferRing, ByteSpan, FileListWriter, KernelCopyUnsupported, copy_spans, crc32_combine, crc_pool
from gpart.formats.manifest import read_manifest, write_json_atomic
from gpart.progress import or_null
from gpart.shard import POLICIES, RangePolicy, ShardPolicy, make_policy

PathLike = Union[str, "os.PathLike[str]"]


# --------------------------------------------------------------------------- low-level streaming


# Rows move in pieces of about 32 MiB; BUFFERS such buffers are in flight at once
# (one being written, one queued, one being read: see _in_background), so memory
# stays near 100 MiB whatever the table size.
PIECE_BYTES = CHUNK_BYTES // 2
BUFFERS = 3


def _chunk_rows(row_bytes: int, chunk_rows: Optional[int], chunk_bytes: int = CHUNK_BYTES) -> int:
    if chunk_rows is not None:
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be at least 1, got {chunk_rows}")
        return int(chunk_rows)
    return max(1, chunk_bytes // max(1, row_bytes))


def _range_pieces(policy: ShardPolicy, num_rows: int, a: int, b: int) -> Iterator[tuple[int, int, int, int]]:
    """(rank, rank's first global row, start, stop) of the rows [a, b) of a range (or one global) layout."""
    bounds = policy.bounds if isinstance(policy, RangePolicy) else np.array([0, num_rows])
    r = int(np.searchsorted(bounds, a, side="right") - 1)
    pos = a
    while pos < b:
        end = min(b, int(bounds[r + 1]))
        if end > pos:
            yield r, int(bounds[r]), pos, end
            pos = end
        r += 1


def _pread_into(fd: int, view: memoryview, offset: int, path: Path) -> None:
    """Fill `view` from file offset `offset`; a short file is an InputError naming it."""
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n <= 0:
            raise InputError(path, f"file ended early at byte {offset + done} (it changed while being read?)")
        done += n


def _bytes_view(arr: np.ndarray) -> memoryview:
    return memoryview(arr.reshape(-1).view(np.uint8)) if arr.size else memoryview(b"")


class _ShardMaps:
    """Read-only memory maps of one tensor's shards, with pages given back as rows are consumed.

    Rows are read straight from the page cache (no copy into a read buffer);
    `release` drops the mapped pages of consumed rows (MADV_DONTNEED) so that
    they do not accumulate in the process's resident memory.
    """

    def __init__(self, ckpt: ck.Checkpoint, t: ck.TensorInfo):
        self.t = t
        self.maps: list[Optional[mmap.mmap]] = []
        self.views: list[np.ndarray] = []
        try:
            for s in t.shards:
                path = ckpt.directory / s.file
                if s.rows == 0:
                    self.maps.append(None)
                    self.views.append(np.empty((0, *t.row_shape), dtype=t.np_dtype))
                    continue
                with open(path, "rb") as fh:
                    mm = mmap.mmap(fh.fileno(), s.bytes, access=mmap.ACCESS_READ)
                if hasattr(mmap, "MADV_SEQUENTIAL"):
                    mm.madvise(mmap.MADV_SEQUENTIAL)
                self.maps.append(mm)
                self.views.append(np.frombuffer(mm, dtype=t.np_dtype, count=s.rows * t.row_bytes // t.np_dtype.itemsize, offset=s.offset).reshape(s.rows, *t.row_shape))
        except OSError as exc:
            self.close()
            raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
        except ValueError as exc:  # mmap of a file that changed size since it was checked
            self.close()
            raise InputError(path, f"cannot map: {exc}") from None

    def prefetch(self, rank: int, lo: int, hi: int) -> None:
        """Start reading rows [lo, hi) of a shard in the background (MADV_WILLNEED)."""
        self._advise(rank, lo, hi, getattr(mmap, "MADV_WILLNEED", None))

    def release(self, rank: int, lo: int, hi: int) -> None:
        """Unmap the pages of consumed rows [lo, hi) (they stay in the page cache)."""
        self._advise(rank, lo, hi, getattr(mmap, "MADV_DONTNEED", None))

    def advise_bytes(self, rank: int, start: int, nbytes: int, advice: Optional[int]) -> None:
        mm = self.maps[rank]
        if mm is None or nbytes <= 0 or advice is None:
            return
        aligned = start - start % mmap.PAGESIZE
        mm.madvise(advice, aligned, start + nbytes - aligned)

    def _advise(self, rank: int, lo: int, hi: int, advice: Optional[int]) -> None:
        mm = self.maps[rank]
        hi = min(hi, self.t.shards[rank].rows)
        if mm is None or hi <= lo or advice is None:
            return
        start = self.t.shards[rank].offset + lo * self.t.row_bytes
        aligned = start - start % mmap.PAGESIZE
        end = self.t.shards[rank].offset + hi * self.t.row_bytes
        mm.madvise(advice, aligned, end - aligned)

    def close(self) -> None:
        self.views = []
        for mm in self.maps:
            if mm is not None:
                try:
                    mm.close()
                except BufferError:  # a caller still holds a view; the map goes when it does
                    pass
        self.maps = []

    def __enter__(self) -> "_ShardMaps":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class GlobalRows:
    """Rows of one tensor in global order, read on demand from any layout (a file-list RowSource).

    `read(start, stop)` returns rows [start, stop) in a reused buffer that stays
    intact for the next BUFFERS - 1 calls (at least what gpart.formats.filelist's
    RowSource contract asks, and what the one-ahead reader thread of
    iter_global_chunks needs). Remainder shards are interleaved through memory maps,
    `out[r::W] = shard_r[lo:hi]`, one strided copy per shard, with the pages
    read ahead (MADV_WILLNEED) and given back after use (MADV_DONTNEED); range
    shards and global files are read with preadv straight into the buffer.
    Reads are expected in ascending order (any order works, only slower).
    """

    def __init__(self, ckpt: ck.Checkpoint, name: str):
        self.ckpt = ckpt
        self.t = t = ckpt.tensor(name)
        self.policy = ckpt.policy(name)
        self.shape = (t.num_rows, *t.row_shape)
        self.dtype = t.np_dtype
        self._ring = BufferRing(BUFFERS)
        self._strided = self.policy.name == "remainder" and self.policy.world_size > 1
        self._maps = _ShardMaps(ckpt, t) if self._strided and t.row_bytes else None
        self._paths = [ckpt.directory / s.file for s in t.shards]
        self._fds: dict[int, int] = {}
        # the shards' CRCs are checked as they are read, so damaged input is not re-certified
        self._crc = OnTheWayCrc(self._paths, [s.bytes - s.offset for s in t.shards], [s.crc32 for s in t.shards])

    def read(self, start: int, stop: int) -> np.ndarray:
        out = self._ring.get((stop - start, *self.t.row_shape), self.dtype)
        if stop <= start or self.t.row_bytes == 0:
            return out
        if self._strided:
            self._read_strided(start, stop, out)
        else:
            self._read_ranges(start, stop, out)
        return out

    def byte_spans(self, start: int, stop: int) -> Optional[list[ByteSpan]]:
        """Where rows [start, stop) lie in the shard files (contiguous layouts), for kernel copies; else None."""
        if self._strided:
            return None
        return contiguous_spans(self.ckpt, self.t, self.policy, start, stop)

    def _read_strided(self, a: int, b: int, out: np.ndarray) -> None:
        world, maps = self.policy.world_size, self._maps
        ahead = b - a
        for r in range(world):  # ask the kernel for the next chunk while this one is copied
            maps.prefetch(r, b // world, (b + ahead) // world + 1)
        for r in range(world):
            first = a + (r - a) % world  # first global row >= a that rank r holds
            if first >= b:
                continue
            lo = first // world
            hi = lo + (b - 1 - first) // world + 1
            out[first - a :: world] = maps.views[r][lo:hi]
            self._crc.feed(r, lo * self.t.row_bytes, maps.views[r][lo:hi])
            maps.release(r, lo, hi)

    def _read_ranges(self, a: int, b: int, out: np.ndarray) -> None:
        for r, start, pos, end in _range_pieces(self.policy, self.t.num_rows, a, b):
            s = self.t.shards[r]
            _pread_into(self._fd(r), _bytes_view(out[pos - a : end - a]), s.offset + (pos - start) * self.t.row_bytes, self._paths[r])
            self._crc.feed(r, (pos - start) * self.t.row_bytes, out[pos - a : end - a])

    def _fd(self, rank: int) -> int:
        if rank not in self._fds:
            for old in list(self._fds):  # shards are read one after another: keep one open
                os.close(self._fds.pop(old))
            try:
                fd = os.open(self._paths[rank], os.O_RDONLY)
            except OSError as exc:
                raise InputError(self._paths[rank], f"cannot read: {exc.strerror or exc}") from None
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            self._fds[rank] = fd
        return self._fds[rank]

    def close(self) -> None:
        if self._maps is not None:
            self._maps.close()
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
        self._ring.clear()

    def __enter__(self) -> "GlobalRows":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def iter_global_chunks(
    ckpt: ck.Checkpoint, name: str, chunk_rows: Optional[int] = None, background: bool = True
) -> Iterator[tuple[int, np.ndarray]]:
    """(start, rows[start:start+k]) of tensor `name` in global row order, from any layout.

    Pieces of at most `chunk_rows` rows (about 32 MiB by default), each valid
    until the next one is requested. With `background`, a helper thread reads
    the next piece while the caller writes the current one.
    """
    t = ckpt.tensor(name)
    n = t.num_rows
    if n == 0:
        return
    step = min(n, _chunk_rows(t.row_bytes, chunk_rows, PIECE_BYTES))

    def pieces() -> Iterator[tuple[int, np.ndarray]]:
        with GlobalRows(ckpt, name) as rows:
            for a in range(0, n, step):
                yield a, rows.read(a, min(n, a + step))

    yield from (_in_background(pieces()) if background else pieces())


_DONE = object()


def _in_background(pieces: Iterator[Any]) -> Iterator[Any]:
    """Run a generator in a helper thread, one item ahead; errors are re-raised in the caller."""
    q: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in pieces:
                if stop.is_set():
                    break
                q.put(item)
            q.put(_DONE)
        except BaseException as exc:  # handed to the consumer
            q.put(exc)
        finally:
            pieces.close()

    worker = threading.Thread(target=produce, name="gpart-read", daemon=True)
    worker.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while worker.is_alive():  # unblock a producer waiting on a full queue
            try:
                q.get(timeout=0.05)
            except queue.Empty:
                pass
        worker.join()


class _StreamFile:
    """Appends raw bytes to a new file after an optional header, with a CRC-32 of the data part."""

    def __init__(self, path: Path, header: bytes = b""):
        self.path = path
        self.offset = len(header)
        self.crc = 0
        self.nbytes = 0
        try:
            self._fh = open(path, "wb", buffering=0)
            self._fh.write(header)
        except OSError as exc:
            raise OutputError(path, f"cannot write: {exc.strerror or exc}") from None

    def write(self, arr: np.ndarray) -> None:
        view = _bytes_view(np.ascontiguousarray(arr))
        # The CRC of a chunk runs in a helper thread while the chunk is written
        # (both release the GIL), so checksumming costs little extra time.
        crc = crc_pool().submit(zlib.crc32, view, self.crc) if len(view) >= (1 << 20) else None
        try:
            written = 0
            while written < len(view):
                written += self._fh.write(view[written:])
        except OSError as exc:
            raise OutputError(self.path, f"write failed: {exc.strerror or exc}") from None
        finally:
            self.crc = crc.result() if crc is not None else zlib.crc32(view, self.crc)
        self.nbytes += len(view)

    def close(self) -> None:
        if self._fh.closed:
            return
        try:
            os.fsync(self._fh.fileno())
        except OSError as exc:
            raise OutputError(self.path, f"write failed: {exc.strerror or exc}") from None
        finally:
            self._fh.close()

    def entry(self) -> dict[str, Any]:
        out = {"file": self.path.name, "bytes": self.offset + self.nbytes, "crc32": f"{self.crc:08x}"}
        if self.offset:
            out["offset"] = self.offset
        return out


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    import io

    d = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": tuple(shape)}
    buf = io.BytesIO()
    try:
        np.lib.format.write_array_header_1_0(buf, d)
    except ValueError:
        buf = io.BytesIO()
        np.lib.format.write_array_header_2_0(buf, d)
    return buf.getvalue()


class _ShardSink:
    """Distributes global-order chunks of one tensor to W shard files under a target policy."""

    def __init__(self, directory: Path, name: str, t: ck.TensorInfo, policy: ShardPolicy, step: int, stem: Optional[str] = None):
        self.name, self.t, self.policy = name, t, policy
        world = policy.world_size
        self.files = [_StreamFile(directory / ck.shard_file_name(stem or name, r, world)) for r in range(world)]
        strided = policy.name == "remainder" and world > 1
        self.tmp = np.empty((-(-step // world) + 1, *t.row_shape), dtype=t.np_dtype) if strided else None

    def feed(self, a: int, chunk: np.ndarray) -> None:
        b = a + chunk.shape[0]
        world = self.policy.world_size
        if self.tmp is not None:
            for r in range(world):
                first = (r - a) % world
                if first >= chunk.shape[0]:
                    continue
                count = (chunk.shape[0] - 1 - first) // world + 1
                np.copyto(self.tmp[:count], chunk[first::world])
                self.files[r].write(self.tmp[:count])
            return
        for r, _, pos, end in _range_pieces(self.policy, self.policy.num_rows, a, b):
            self.files[r].write(chunk[pos - a : end - a])

    def close(self) -> list[dict[str, Any]]:
        entries = []
        for r, f in enumerate(self.files):
            f.close()
            rows = f.nbytes // self.t.row_bytes if self.t.row_bytes else self.policy.count(r)
            entries.append(
                {
                    "tensor": self.name,
                    "rank": r,
                    "file": f.path.name,
                    "rows": int(rows),
                    "bytes": f.nbytes,
                    "crc32": f"{f.crc:08x}",
                    "dtype": self.t.dtype,
                    "row_shape": list(self.t.row_shape),
                }
            )
        return entries


def _tensor_bytes(ckpt: ck.Checkpoint) -> int:
    return sum(t.nbytes for t in ckpt.tensors.values())


def _specs(ckpt: ck.Checkpoint, policy_for: Any) -> list[ck.EmbeddingSpec]:
    return [ck.EmbeddingSpec(e.name, e.num_rows, e.row_shape, e.dtype, policy_for(e)) for e in ckpt.embeddings.values()]


# --------------------------------------------------------------------------- gather / scatter


def gather_checkpoint(
    run_dir: PathLike,
    out_dir: PathLike,
    *,
    npy: bool = False,
    force: bool = False,
    verify: bool = False,
    progress=None,
    chunk_rows: Optional[int] = None,
) -> dict[str, Any]:
    """Write every tensor of the checkpoint `run_dir` in global row order to `out_dir`; return its manifest.

    Flat output goes through the file-list writer of export-feat
    (gpart.formats.filelist: `<tensor>_part_0_of_1` + `<tensor>.json`);
    `npy` writes `<tensor>.npy` instead.
    """
    src = ck.read_checkpoint(run_dir, verify=verify)
    progress = or_null(progress)
    with staged_output(out_dir, force=force, inputs=[run_dir]) as stage:
        tensors_json = [gather_tensor(src, name, stage, npy=npy, chunk_rows=chunk_rows, progress=progress) for name in src.tensors]
        manifest = gather_manifest(src, run_dir, tensors_json)
        ck.write_checkpoint_manifest(stage, manifest)
    return manifest


def gather_tensor(src: ck.Checkpoint, name: str, stage: Path, *, npy: bool = False, chunk_rows: Optional[int] = None,
                  progress=None) -> dict[str, Any]:
    """Write tensor `name` of `src` in global row order into `stage`; return its manifest entry
    (gpart.distributed gathers different tensors on different ranks with it)."""
    t = src.tensors[name]
    progress = or_null(progress)
    entry = _gather_npy(src, name, t, stage, chunk_rows, progress) if npy else _gather_flat(src, name, t, stage, chunk_rows, progress)
    return {**t.describe(), "storage": "npy" if npy else "flat", "file": entry}


def gather_manifest(src: ck.Checkpoint, run_dir: PathLike, tensors_json: list[dict[str, Any]]) -> dict[str, Any]:
    """The manifest of a gathered checkpoint, its tensors' entries in `src.tensors` order."""
    manifest = {
        "format": ck.FORMAT,
        "version": ck.VERSION,
        "layout": "global",
        "created_by": f"gpart {__version__}",
        "world_size": 1,
        "optimizer": src.optimizer,
        "embeddings": [
            {
                "name": e.name,
                "num_rows": e.num_rows,
                "row_shape": list(e.row_shape),
                "dtype": e.dtype,
                "states": list(e.states),
                "source_policy": e.source_policy if src.layout == "global" else e.policy.to_json(),
            }
            for e in src.embeddings.values()
        ],
        "tensors": tensors_json,
        "source": {"directory": os.fspath(run_dir), "world_size": src.world_size},
    }
    if "extra" in src.manifest:
        manifest["extra"] = src.manifest["extra"]
    return manifest


def _gather_flat(src: ck.Checkpoint, name: str, t: ck.TensorInfo, stage: Path, chunk_rows, progress) -> dict[str, Any]:
    """One tensor as a one-file export of gpart.formats.filelist (SPEC.md section 5)."""
    chunk_bytes = PIECE_BYTES if chunk_rows is None else max(1, chunk_rows * t.row_bytes)
    with GlobalRows(src, name) as rows, FileListWriter(stage, chunk_bytes=chunk_bytes, progress=progress) as writer:
        writer.add(name, rows, 1, None, source=os.fspath(src.directory))
        exported = writer.commit()[0]
    if t.dtype == "bfloat16":
        # the rows are passed on as their raw bits (uint16); name them as what they are
        exported.update(dtype="bfloat16", source_dtype="bfloat16", note=BFLOAT16_NOTE)
        for f in exported["files"]:
            f["dtype"] = "bfloat16"
        write_json_atomic(stage / f"{name}.json", exported)
    part = exported["files"][0]
    return {"file": part["file"], "bytes": int(part["bytes"]), "crc32": part["crc32"]}


def _gather_npy(src: ck.Checkpoint, name: str, t: ck.TensorInfo, stage: Path, chunk_rows, progress) -> dict[str, Any]:
    path, header = stage / f"{name}.npy", _npy_header(t.np_dtype, (t.num_rows, *t.row_shape))
    policy = src.policy(name)
    if _contiguous(policy):  # a concatenation of the shards after the header: kernel copy, CRCs combined
        try:
            with progress.stage(f"gather {name}", total=t.nbytes, unit="B") as bar:
                crc, nbytes = _copy_spans_to_new_file(contiguous_spans(src, t, policy, 0, t.num_rows), path, header, PIECE_BYTES, None, bar.advance)
            return {"file": path.name, "bytes": len(header) + nbytes, "crc32": f"{crc:08x}", "offset": len(header)}
        except KernelCopyUnsupported:
            path.unlink(missing_ok=True)
    out = _StreamFile(path, header)
    try:
        with progress.stage(f"gather {name}", total=t.nbytes, unit="B") as bar:
            for _, chunk in iter_global_chunks(src, name, chunk_rows):
                out.write(chunk)
                bar.advance(chunk.nbytes)
    finally:
        out.close()
    return out.entry()


def target_policy(name: str, num_rows: int, world_size: int, boundaries: Optional[Sequence[int]] = None) -> ShardPolicy:
    """The sharding policy scatter writes: remainder, or range (WholeGraph split unless boundaries given)."""
    if name not in POLICIES:
        raise InputError(None, f"unknown policy {name!r} (expected one of {', '.join(POLICIES)})")
    if world_size < 1:
        raise InputError(None, f"world size must be at least 1, got {world_size}")
    if boundaries is None:
        return make_policy(name, num_rows, world_size)
    if name != "range":
        raise InputError(None, "--boundaries is only meaningful with --policy range")
    try:
        return RangePolicy(num_rows, world_size, tuple(int(b) for b in boundaries))
    except ValueError as exc:
        raise InputError(None, str(exc)) from None


def scatter_checkpoint(
    full_dir: PathLike,
    out_dir: PathLike,
    world_size: int,
    policy: str = "remainder",
    *,
    boundaries: Optional[Sequence[int]] = None,
    force: bool = False,
    verify: bool = False,
    progress=None,
    chunk_rows: Optional[int] = None,
) -> dict[str, Any]:
    """Shard every tensor of the checkpoint `full_dir` over `world_size` ranks by `policy`; return the manifest."""
    src = ck.read_checkpoint(full_dir, verify=verify)
    policies = {e.name: target_policy(policy, e.num_rows, world_size, boundaries) for e in src.embeddings.values()}
    progress = or_null(progress)
    entries: list[dict[str, Any]] = []
    with staged_output(out_dir, force=force, inputs=[full_dir]) as stage:
        with progress.stage("scattering", total=_tensor_bytes(src), unit="B") as bar:
            for name, t in src.tensors.items():
                entries += shard_tensor(src, name, policies[t.embedding], stage, chunk_rows, bar)
        manifest = ck.build_checkpoint_manifest(
            _specs(src, lambda e: policies[e.name]), entries, world_size, src.optimizer, extra=src.manifest.get("extra")
        )
        ck.write_checkpoint_manifest(stage, manifest)
    return manifest


def shard_tensor(
    src: ck.Checkpoint, name: str, target: ShardPolicy, directory: Path, chunk_rows: Optional[int], bar, stem: Optional[str] = None
) -> list[dict[str, Any]]:
    """Write tensor `name` of `src` as `target.world_size` shard files `<stem>_part_<r>_of_<W>` in `directory`.

    `stem` defaults to the tensor name (gpart's own shard names); export-ckpt passes
    another system's file names. Contiguous to contiguous is a kernel copy; anything
    else streams global-order pieces into the shards. Returns the shard entries.
    """
    t = src.tensor(name)
    stem = stem or name
    if _contiguous(src.policy(name)) and _contiguous(target) and hasattr(os, "copy_file_range"):
        try:
            return _copy_contiguous(src, name, t, target, directory, chunk_rows, bar, stem)
        except KernelCopyUnsupported:
            for r in range(target.world_size):
                (directory / ck.shard_file_name(stem, r, target.world_size)).unlink(missing_ok=True)
    step = min(max(1, t.num_rows), _chunk_rows(t.row_bytes, chunk_rows, PIECE_BYTES))
    sink = _ShardSink(directory, name, t, target, step, stem)
    try:
        for a, chunk in iter_global_chunks(src, name, chunk_rows):
            sink.feed(a, chunk)
            bar.advance(chunk.nbytes)
    finally:
        entries = sink.close()
    return entries


# --------------------------------------------------------------------------- contiguous copies


def _contiguous(policy: ShardPolicy) -> bool:
    """Whether each rank's rows are one contiguous run of global rows (range, or a single rank)."""
    return policy.name == "range" or policy.world_size == 1


def _copy_contiguous(src: ck.Checkpoint, name: str, t: ck.TensorInfo, target: ShardPolicy, stage: Path, chunk_rows, bar, stem: str) -> list[dict[str, Any]]:
    """Contiguous shards to contiguous shards: byte ranges copied inside the kernel (copy_spans).

    The pieces are checksummed from the source's mapped pages while the next one is
    copied, and each CRC is combined twice: into the output shard's CRC and into a
    running CRC of its source file, which must match the source manifest once the
    file has been read through, so damaged input fails here instead of being
    re-checksummed as if it were intact.
    """
    source = src.policy(name)
    paths = {s.file: rank for rank, s in enumerate(t.shards)}
    src_crc, src_seen = [0] * len(t.shards), [0] * len(t.shards)

    def check_source(span: ByteSpan, at: int, n: int, crc: int) -> None:
        rank = paths[span.path.name]
        shard = t.shards[rank]
        src_crc[rank] = crc32_combine(src_crc[rank], crc, n)
        src_seen[rank] += n
        if src_seen[rank] == shard.bytes - shard.offset and shard.crc32 is not None and src_crc[rank] != shard.crc32:
            raise IntegrityError(span.path, f"checksum mismatch: crc32 {src_crc[rank]:08x}, manifest says {shard.crc32:08x} (the input is damaged)")

    piece = max(1, _chunk_rows(t.row_bytes, chunk_rows, PIECE_BYTES)) * max(1, t.row_bytes)
    bounds = _bounds(target, t.num_rows)
    entries = []
    for r in range(target.world_size):
        g0, g1 = int(bounds[r]), int(bounds[r + 1])
        # the source's own CRCs are checked instead of trusted: no known CRCs passed on
        spans = [ByteSpan(sp.path, sp.offset, sp.nbytes, None, sp.file_size) for sp in contiguous_spans(src, t, source, g0, g1)]
        path = stage / ck.shard_file_name(stem, r, target.world_size)
        crc, nbytes = _copy_spans_to_new_file(spans, path, 0, piece, check_source, bar.advance)
        entries.append(
            {"tensor": name, "rank": r, "file": path.name, "rows": g1 - g0, "bytes": nbytes, "crc32": f"{crc:08x}", "dtype": t.dtype, "row_shape": list(t.row_shape)}
        )
    return entries


def _copy_spans_to_new_file(spans, path: Path, header: Union[bytes, int], piece: int, on_piece, advance) -> tuple[int, int]:
    """Create `path` (after an optional header) and fill it with copy_spans; (CRC-32 of the data, data bytes)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as exc:
        raise OutputError(path, f"cannot create file: {exc.strerror or exc}") from None
    try:
        if header:
            os.pwrite(fd, header, 0)
        result = copy_spans(spans, fd, path, len(header) if header else 0, piece_bytes=piece, on_piece=on_piece, advance=advance)
        os.fsync(fd)
        return result
    except OSError as exc:
        raise OutputError(path, f"write failed: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _bounds(policy: ShardPolicy, num_rows: int) -> np.ndarray:
    """Row boundaries of a contiguous policy (range, or one rank)."""
    return policy.bounds if isinstance(policy, RangePolicy) else np.array([0, num_rows])


def contiguous_spans(ckpt: ck.Checkpoint, t: ck.TensorInfo, policy: ShardPolicy, start: int, stop: int) -> list[ByteSpan]:
    """Where global rows [start, stop) of a contiguously sharded tensor lie in its shard files.

    A span that covers a whole shard carries the shard's CRC-32 and size from the
    manifest, so a copy can combine CRCs instead of reading the data.
    """
    bounds = _bounds(policy, t.num_rows)
    spans = []
    for rank, shard in enumerate(t.shards):
        lo, hi = max(start, int(bounds[rank])), min(stop, int(bounds[rank + 1]))
        if hi <= lo or t.row_bytes == 0:
            continue
        begin = shard.offset + (lo - int(bounds[rank])) * t.row_bytes
        nbytes = (hi - lo) * t.row_bytes
        whole = begin == shard.offset and begin + nbytes == shard.bytes
        spans.append(ByteSpan(ckpt.directory / shard.file, begin, nbytes, shard.crc32 if whole else None, shard.bytes))
    return spans


# --------------------------------------------------------------------------- info / verify


def checkpoint_info(directory: PathLike) -> dict[str, Any]:
    """Summary of a checkpoint for `gpart info`: embeddings, states, world size, policy, sizes."""
    c = ck.read_checkpoint(directory)
    embeddings = []
    for e in c.embeddings.values():
        names = c.tensor_names(e.name)
        embeddings.append(
            {
                "name": e.name,
                "num_rows": e.num_rows,
                "row_shape": list(e.row_shape),
                "dtype": e.dtype,
                "policy": e.policy.to_json() if c.layout == "sharded" else None,
                "source_policy": e.source_policy,
                "states": list(e.states),
                "bytes": sum(c.tensors[n].nbytes for n in names),
            }
        )
    tensors = [
        {
            **t.describe(),
            "bytes": t.nbytes,
            "storage": t.storage,
            "shard_rows": [s.rows for s in t.shards],
            "files": [s.file for s in t.shards],
        }
        for t in c.tensors.values()
    ]
    return {
        "path": os.fspath(directory),
        "directory": os.fspath(directory),
        "format": ck.FORMAT,
        "version": ck.VERSION,
        "layout": c.layout,
        "created_by": c.manifest.get("created_by"),
        "world_size": c.world_size,
        "optimizer": c.optimizer,
        "embeddings": embeddings,
        "tensors": tensors,
        "num_files": sum(len(t.shards) for t in c.tensors.values()),
        "total_bytes": _tensor_bytes(c),
    }


def verify_checkpoint(directory: PathLike) -> dict[str, Any]:
    """Check a checkpoint for `gpart verify`: manifest structure, row counts against the policy,
    every shard's presence, size and CRC-32.

    Returns {"ok", "problems" (one line each), "notes", "checked", "files", "bytes"}.
    A directory without a readable manifest raises InputError; a manifest that is
    not a consistent checkpoint description raises IntegrityError (damage).
    """
    directory = Path(directory)
    obj = read_manifest(directory, expected_format=ck.FORMAT)
    try:
        c = ck._parse(obj, directory, directory / "manifest.json", check_files=False, verify=False)  # noqa: SLF001
    except InputError as exc:
        raise IntegrityError(exc.path, f"manifest is invalid: {exc.problem}") from None
    problems = c.verify()
    files = sum(len(t.shards) for t in c.tensors.values())
    return {
        "path": os.fspath(directory),
        "directory": os.fspath(directory),
        "format": ck.FORMAT,
        "ok": not problems,
        "problems": problems,
        "notes": [],
        "checked": {"checksums": True, "invariants": True, "arrays": files},
        "files": files,
        "bytes": sum(s.bytes for t in c.tensors.values() for s in t.shards),
    }


# --------------------------------------------------------------------------- import: WholeGraph

def import_wholegraph(
    prefix: PathLike,
    out_dir: PathLike,
    *,
    num_rows: int,
    row_shape: Sequence[int],
    dtype: str,
    world_size: int,
    name: str = "embedding",
    optimizer: str = "none",
    state_dtype: str = "float32",
    state_files: Optional[Mapping[str, str]] = None,
    boundaries: Optional[Sequence[int]] = None,
    hyper_params: Optional[Mapping[str, Any]] = None,
    force: bool = False,
    progress=None,
) -> dict[str, Any]:
    """Import `WholeMemoryEmbedding.save(prefix)` files as a range-sharded gpart checkpoint.

    The files carry no header, so shape, dtype and world size come from the caller;
    every file must hold exactly its rank's rows (WholeGraph split, or `boundaries`).
    """
    prefix = Path(prefix)
    ck.check_embedding_name(name)
    storage_dtype(dtype)
    if optimizer not in WHOLEGRAPH_STATE_FILES:
        raise InputError(prefix, f"WholeGraph import supports optimizers {', '.join(WHOLEGRAPH_STATE_FILES)}, not {optimizer!r}")
    files = dict(WHOLEGRAPH_STATE_FILES[optimizer])
    for state, fname in (state_files or {}).items():
        if state not in files:
            raise InputError(prefix, f"optimizer {optimizer} has no state {state!r} (states: {', '.join(files) or 'none'})")
        files[state] = fname
    policy = target_policy("range", num_rows, world_size, boundaries)
    row_shape = tuple(int(s) for s in row_shape)
    sources: dict[str, tuple[str, str, tuple[int, ...]]] = {name: (f"{prefix.name}_embedding_tensor", dtype, row_shape)}
    for state, fname in files.items():
        spec = ck.OPTIMIZER_STATES[optimizer][state]
        sdt = "float32" if spec.row_shape == "pair" else state_dtype
        if sdt not in spec.dtypes:
            raise InputError(prefix, f"state {state} cannot be {sdt} (allowed: {', '.join(spec.dtypes)})")
        sources[ck.tensor_name(name, state)] = (f"{prefix.name}_{fname}", sdt, spec.shape_for(row_shape))
    # check every file before writing anything
    plan = []
    for tname, (stem, tdtype, tshape) in sources.items():
        row_bytes = int(np.prod(tshape, dtype=np.int64)) * storage_dtype(tdtype).itemsize
        for r in range(world_size):
            path = prefix.parent / f"{stem}_part_{r}_of_{world_size}"
            want = policy.count(r) * row_bytes
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                raise InputError(path, f"missing: rank {r} of {world_size} of tensor {tname}") from None
            except OSError as exc:
                raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
            if size != want:
                raise InputError(
                    path,
                    f"size {size} bytes, expected {want} ({policy.count(r)} rows of {tdtype} {list(tshape)}, "
                    f"rows {policy.boundaries[r]}..{policy.boundaries[r + 1]} of {num_rows}); wrong --num-rows/--dim/--dtype/--world-size?",
                )
            plan.append((tname, r, path, tdtype, tshape))
    progress = or_null(progress)
    entries = []
    with staged_output(out_dir, force=force, inputs=[]) as stage:
        with progress.stage("importing", total=len(plan)) as bar:
            for tname, r, path, tdtype, tshape in plan:
                entries.append(_copy_shard(path, stage, tname, r, world_size, tdtype, tshape))
                bar.advance(1)
        opt = {"type": optimizer, **dict(hyper_params or {}), "imported_from": "wholegraph"}
        spec = ck.EmbeddingSpec(name, num_rows, row_shape, dtype, policy)
        manifest = ck.build_checkpoint_manifest([spec], entries, world_size, opt)
        ck.write_checkpoint_manifest(stage, manifest)
    return manifest


def _copy_shard(path: Path, stage: Path, tname: str, rank: int, world: int, dtype: str, row_shape: tuple[int, ...]) -> dict[str, Any]:
    out = _StreamFile(stage / ck.shard_file_name(tname, rank, world))
    buf = np.empty(CHUNK_BYTES, dtype=np.uint8)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while pos < size:
            n = min(len(buf), size - pos)
            _pread_into(fd, memoryview(buf)[:n], pos, path)
            out.write(buf[:n])
            pos += n
    finally:
        os.close(fd)
        out.close()
    row_bytes = int(np.prod(row_shape, dtype=np.int64)) * storage_dtype(dtype).itemsize
    return {
        "tensor": tname,
        "rank": rank,
        "file": out.path.name,
        "rows": out.nbytes // row_bytes if row_bytes else 0,
        "bytes": out.nbytes,
        "crc32": f"{out.crc:08x}",
        "dtype": dtype,
        "row_shape": list(row_shape),
    }


# --------------------------------------------------------------------------- import: torch.save files

# DistDGL sparse optimizer state-name suffixes -> (optimizer type, gpart state)
DISTDGL_STATE_SUFFIXES = {suffix: (opt, state) for opt, states in DISTDGL_STATES.items() for state, suffix in states.items()}


def expand_rank_files(inputs: Sequence[PathLike], world_size: Optional[int] = None) -> list[list[Path]]:
    """Per-rank lists of files: each input is one rank's file, or (all of them) `{rank}` patterns with world_size."""
    texts = [os.fspath(p) for p in inputs]
    if not texts:
        raise InputError(None, "no input files")
    patterned = ["{rank}" in s for s in texts]
    if any(patterned):
        if not all(patterned):
            raise InputError(texts[patterned.index(False)], "mixes a {rank} pattern with plain files")
        if not world_size:
            raise InputError(texts[0], "a {rank} pattern needs --world-size")
        return [[Path(s.replace("{rank}", str(r))) for s in texts] for r in range(world_size)]
    if world_size is not None and world_size != len(texts):
        raise InputError(texts[0], f"{len(texts)} files given for world size {world_size}")
    return [[Path(s)] for s in texts]


def _load_torch(path: Path) -> Any:
    import torch

    from gpart.formats.readers import check_input_file

    check_input_file(path)  # exists, readable, and a regular file (a FIFO would block torch.load)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # torch raises many types for bad files; all are input problems
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception:
            pass
        raise InputError(path, f"cannot read as a torch.save file with weights_only=True: {' '.join(str(exc).split())[:300]}") from None


def _to_numpy(value: Any, path: Path, key: str) -> tuple[np.ndarray, str]:
    import torch

    if not isinstance(value, torch.Tensor):
        raise InputError(path, f"{key!r} is a {type(value).__name__}, expected a tensor")
    value = value.detach().cpu()
    if value.dtype == torch.bfloat16:
        return value.contiguous().view(torch.int16).numpy().view(np.uint16), "bfloat16"
    name = str(value.dtype).replace("torch.", "")
    if name not in STORAGE_DTYPES:
        raise InputError(path, f"{key!r} has unsupported dtype {value.dtype}")
    return value.contiguous().numpy(), name


def _jsonable(obj: Any) -> Any:
    """Optimizer hyper-parameters from a torch file, as JSON (tensors become numbers/lists; others dropped)."""
    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return obj
    if isinstance(obj, (list, tuple)):
        return [_jsonable(x) for x in obj]
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)


# DistDGL's saved names (`_lr`, `_eps`, and `num_clients`, the job's world size) -> gpart's names
DISTDGL_HYPER_PARAMS = {**DISTDGL_PARAMS, "num_clients": "world_size"}


def _distdgl_params(raw: dict[str, Any]) -> dict[str, Any]:
    """DistDGL's saved optimizer params with gpart's names: lr, eps, betas = [beta1, beta2]."""
    params = {DISTDGL_HYPER_PARAMS.get(k, k): v for k, v in raw.items() if k not in ("_beta1", "_beta2")}
    if "_beta1" in raw and "_beta2" in raw:
        params["betas"] = [raw["_beta1"], raw["_beta2"]]
    else:  # only one of the two: keep it under its own name rather than guess the other
        params.update({k[1:]: raw[k] for k in ("_beta1", "_beta2") if k in raw})
    return params


def _step_as_int32(value: Any, path: Path, key: str) -> Any:
    """A floating step-count state (DistDGL and dgl.optim keep Adam's step as float32) as int32.

    Exact when every count is a whole number in 0..2^31-1; anything else is refused.
    """
    import torch

    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return value
    wide = value.detach().to(torch.float64)
    whole = torch.isfinite(wide) & (wide >= 0) & (wide < 2**31) & (wide == torch.floor(wide))
    if not bool(whole.all()):
        bad = wide[~whole][0].item()
        raise InputError(path, f"{key!r}: step count {bad!r} is not a whole number in 0..2147483647, so it cannot be stored as int32")
    return wide.to(torch.int32)


def _normalise_rank_dict(obj: Any, path: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(tensors by gpart name, ids by embedding or "" for all, optimizer params) of one file."""
    if not isinstance(obj, Mapping):
        raise InputError(path, f"holds a {type(obj).__name__}, expected a dict of tensors")
    tensors: dict[str, Any] = {}
    ids: dict[str, Any] = {}
    params: dict[str, Any] = {}
    if "emb_states" in obj:  # DistDGL DistSparseGradOptimizer.save
        params = _distdgl_params(dict(_jsonable(obj.get("params") or {})))
        if "world_size" in obj:
            params.setdefault("world_size", _jsonable(obj["world_size"]))
        for emb, d in dict(obj["emb_states"]).items():
            ck.check_embedding_name(emb, path)
            if not isinstance(d, Mapping) or "states" not in d:
                raise InputError(path, f"emb_states[{emb!r}] lacks 'states'")
            if "ids" in d:
                ids[emb] = d["ids"]
            for key, value in dict(d["states"]).items():
                state = next((s for suf, (_, s) in DISTDGL_STATE_SUFFIXES.items() if str(key).endswith(suf)), None)
                if state is None:
                    raise InputError(path, f"emb_states[{emb!r}] state {key!r}: unknown suffix (expected {', '.join(DISTDGL_STATE_SUFFIXES)})")
                tensors[ck.tensor_name(emb, state)] = value
        rest = {k: v for k, v in obj.items() if k not in ("emb_states", "params", "world_size")}
    else:
        rest = dict(obj)
    for key, value in rest.items():
        key = str(key)
        if key == "ids":
            ids[""] = value
        elif key.endswith(".ids"):
            ids[key[: -len(".ids")]] = value
        elif key in ("params", "optimizer"):
            params.update(_jsonable(value) if isinstance(value, Mapping) else {})
        else:
            emb, state = ck.split_tensor_name(key)
            ck.check_embedding_name(emb, path)
            tensors[key] = value
    return tensors, ids, params


def import_torch(
    inputs: Sequence[PathLike],
    out_dir: PathLike,
    *,
    world_size: Optional[int] = None,
    layout: str = "remainder",
    policy: str = "remainder",
    hyper_params: Optional[Mapping[str, Any]] = None,
    force: bool = False,
    progress=None,
) -> dict[str, Any]:
    """Import per-rank torch.save files (SPEC.md 6.6) as a sharded gpart checkpoint with one shard per rank file."""
    groups = expand_rank_files(inputs, world_size)
    world = len(groups)
    ranks = []  # per rank: (tensors, ids, file of each tensor)
    params: dict[str, Any] = {}
    for r, files in enumerate(groups):
        tensors: dict[str, tuple[np.ndarray, str, Path]] = {}
        ids: dict[str, tuple[np.ndarray, Path]] = {}
        for path in files:
            t, i, p = _normalise_rank_dict(_load_torch(path), path)
            for key, value in t.items():
                if key in tensors:
                    raise InputError(path, f"tensor {key!r} also in {tensors[key][2]}")
                if ck.split_tensor_name(key)[1] == "step":
                    value = _step_as_int32(value, path, key)
                arr, dname = _to_numpy(value, path, key)
                tensors[key] = (arr, dname, path)
            for key, value in i.items():
                arr, _ = _to_numpy(value, path, f"{key}.ids" if key else "ids")
                if arr.ndim != 1 or arr.dtype.kind not in "iu":
                    raise InputError(path, f"ids must be a 1-D integer tensor, got {arr.dtype} {list(arr.shape)}")
                ids[key] = (arr, path)
            saved_world = p.pop("world_size", None)
            if saved_world is not None and saved_world != world:
                raise InputError(path, f"was saved by a job of world size {saved_world}, but {world} rank files are given")
            if r == 0:
                params.update(p)
        ranks.append((tensors, ids))
    names0 = sorted(ranks[0][0])
    if not names0:
        raise InputError(groups[0][0], "holds no tensors")
    for r, (tensors, _) in enumerate(ranks):
        if sorted(tensors) != names0:
            raise InputError(groups[r][0], f"tensors {sorted(tensors)} differ from rank 0's {names0}")
    embeddings = sorted({ck.split_tensor_name(n)[0] for n in names0})
    opt_type = _infer_optimizer(embeddings, names0, groups[0][0])
    opt = {"type": opt_type, **params, **dict(hyper_params or {}), "imported_from": "torch"}
    progress = or_null(progress)
    with staged_output(out_dir, force=force, inputs=[]) as stage:
        entries, specs = [], []
        with progress.stage("importing", total=len(names0) * world) as bar:
            for emb in embeddings:
                spec, ents = _import_embedding(emb, ranks, groups, stage, opt_type, layout, policy, bar)
                specs.append(spec)
                entries += ents
        manifest = ck.build_checkpoint_manifest(specs, entries, world, opt)
        ck.write_checkpoint_manifest(stage, manifest)
    return manifest


def _infer_optimizer(embeddings: list[str], names: list[str], where: Path) -> str:
    for emb in embeddings:
        if emb not in names:
            raise InputError(where, f"embedding {emb!r} has states but no table (tensor {emb!r}); add the table's files")
    found = {ck.split_tensor_name(n)[1] for n in names} - {None}
    for kind, states in ck.OPTIMIZER_STATES.items():
        if found == set(states):
            for emb in embeddings:
                have = {ck.split_tensor_name(n)[1] for n in names if ck.split_tensor_name(n)[0] == emb} - {None}
                if have != found:
                    raise InputError(where, f"embedding {emb!r} has states {sorted(have)}, others {sorted(found)}")
            return kind
    raise InputError(where, f"states {sorted(found)} match no optimizer ({'; '.join(f'{k}: {sorted(v)}' for k, v in ck.OPTIMIZER_STATES.items())})")


def _import_embedding(emb, ranks, groups, stage, opt_type, layout, policy_name, bar):
    world = len(ranks)
    names = [emb] + [ck.tensor_name(emb, s) for s in ck.OPTIMIZER_STATES[opt_type]]
    # per tensor: dtype and row shape equal across ranks; per rank: equal row counts
    meta = {}
    for name in names:
        arr0, dt0, p0 = ranks[0][0][name]
        for r in range(world):
            arr, dt, path = ranks[r][0][name]
            if arr.ndim == 0:
                raise InputError(path, f"tensor {name!r} is a scalar, expected rows")
            if dt != dt0 or arr.shape[1:] != arr0.shape[1:]:
                raise InputError(path, f"tensor {name!r} is {dt} rows {list(arr.shape[1:])}, rank 0 ({p0}) has {dt0} rows {list(arr0.shape[1:])}")
        meta[name] = (dt0, tuple(int(s) for s in arr0.shape[1:]))
    rows = []
    for r in range(world):
        counts = {ranks[r][0][n][0].shape[0] for n in names}
        if len(counts) != 1:
            raise InputError(ranks[r][0][emb][2], f"tensors of embedding {emb!r} have different row counts {sorted(counts)}")
        rows.append(counts.pop())
    n = int(sum(rows))
    ids = [ranks[r][1].get(emb, ranks[r][1].get("")) for r in range(world)]
    if any(i is not None for i in ids):
        missing = next(r for r in range(world) if ids[r] is None) if any(i is None for i in ids) else None
        if missing is not None:
            raise InputError(groups[missing][0], f"has no ids for embedding {emb!r} while other ranks do")
        target = target_policy(policy_name, n, world)
        _check_ids(ids, rows, n, emb)
        entries = _place_by_ids(emb, names, meta, ranks, ids, target, stage, bar)
    else:
        if layout not in POLICIES:
            raise InputError(None, f"unknown layout {layout!r}")
        target = make_policy(layout, n, world)
        for r in range(world):
            if rows[r] != target.count(r):
                raise InputError(
                    ranks[r][0][emb][2],
                    f"{rows[r]} rows, but rank {r} of {world} holds {target.count(r)} of {n} rows under the {layout} layout "
                    "(wrong rank order or layout, or a rank's rows are missing; save the ids to import any layout)",
                )
        entries = []
        for name in names:
            for r in range(world):
                entries.append(ck.write_shard(stage, name, r, world, ranks[r][0][name][0], dtype=meta[name][0], row_shape=meta[name][1]))
                bar.advance(1)
    dt, shape = meta[emb]
    return ck.EmbeddingSpec(emb, n, shape, dt, target), entries


def _check_ids(ids: list, rows: list[int], n: int, emb: str) -> None:
    seen = np.zeros(n, dtype=bool)
    for r, (arr, path) in enumerate(ids):
        if arr.shape[0] != rows[r]:
            raise InputError(path, f"{arr.shape[0]} ids for {rows[r]} rows of embedding {emb!r}")
        if arr.size == 0:
            continue
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= n:
            bad = lo if lo < 0 else hi
            raise InputError(path, f"id {bad} of embedding {emb!r} outside 0..{n - 1} (all files hold {n} rows): ids must cover 0..N-1 exactly once, so some id is missing")
        uniq, counts = np.unique(arr, return_counts=True)
        if (counts > 1).any():
            raise InputError(path, f"id {int(uniq[counts > 1][0])} of embedding {emb!r} appears {int(counts.max())} times")
        dup = arr[seen[arr]]
        if dup.size:
            raise InputError(path, f"id {int(dup[0])} of embedding {emb!r} is also in an earlier rank's file")
        seen[arr] = True
    if not seen.all():  # unreachable when counts add up, kept as a guard
        raise InputError(ids[0][1], f"id {int(np.flatnonzero(~seen)[0])} of embedding {emb!r} is in no file")


def _place_by_ids(emb, names, meta, ranks, ids, target: ShardPolicy, stage: Path, bar) -> list[dict[str, Any]]:
    """Write each tensor's shards under `target` by scattering every rank file's rows to their ids."""
    world = target.world_size
    entries = []
    owners = [target.owner(arr.astype(np.int64)) for arr, _ in ids]
    locals_ = [target.local(arr.astype(np.int64)) for arr, _ in ids]
    for name in names:
        dt, shape = meta[name]
        sdt = storage_dtype(dt)
        row_bytes = int(np.prod(shape, dtype=np.int64)) * sdt.itemsize
        for out_rank in range(world):
            rows = target.count(out_rank)
            fname = ck.shard_file_name(name, out_rank, world)
            path = stage / fname
            if rows == 0 or row_bytes == 0:
                path.touch()
            else:
                preallocate(path, rows * row_bytes)  # a full disk is an error here, not a SIGBUS below
                out = np.memmap(path, dtype=sdt, mode="r+", shape=(rows, *shape))
                for r in range(len(ranks)):
                    sel = owners[r] == out_rank
                    if sel.any():
                        out[locals_[r][sel]] = ranks[r][0][name][0][sel]
                out.flush()
                del out
            crc = ck.data_crc32(path) if rows and row_bytes else 0
            with open(path, "rb+") as fh:
                os.fsync(fh.fileno())
            entries.append(
                {"tensor": name, "rank": out_rank, "file": fname, "rows": rows, "bytes": rows * row_bytes, "crc32": f"{crc:08x}", "dtype": dt, "row_shape": list(shape)}
            )
        bar.advance(len(ranks))
    return entries
