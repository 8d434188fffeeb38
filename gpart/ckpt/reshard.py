"""gather-ckpt and scatter-ckpt: any checkpoint layout to global files or to W shards (SPEC.md section 6).

Contiguous to contiguous (range or global to range or global) is a kernel copy
(gpart.bytes.copy); everything else streams global-order pieces
(gpart.ckpt.streaming). Results are built in a staging directory and
committed with the manifest last (gpart.formats.files.commit).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from gpart.base.errors import InputError, IntegrityError
from gpart.base.progress import or_null
from gpart.bytes.copy import ByteSpan, KernelCopyUnsupported, copy_spans_to_new_file
from gpart.bytes.crc import crc32_combine
from gpart.bytes.sink import ByteSink
from gpart.ckpt.streaming import (
    PIECE_BYTES,
    GlobalRows,
    ShardSink,
    contiguous_spans,
    iter_global_chunks,
    rows_per_piece,
    tensor_bytes,
)
from gpart.formats.checkpoint import entries as ck
from gpart.formats.checkpoint.reader import Checkpoint, TensorInfo, read_checkpoint
from gpart.formats.checkpoint.writer import write_checkpoint_manifest
from gpart.formats.filelist.layout import BFLOAT16_NOTE
from gpart.formats.filelist.writer import FileListWriter
from gpart.formats.files.commit import staged_output
from gpart.formats.files.manifest import write_json_atomic
from gpart.formats.input.npz import npy_header
from gpart.formats.sharding.policies import POLICIES, POLICY_CLASSES, ShardPolicy, make_policy

PathLike = Union[str, "os.PathLike[str]"]


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
    (gpart.formats.filelist.layout: `<tensor>_part_0_of_1` + `<tensor>.json`);
    `npy` writes `<tensor>.npy` instead.
    """
    src = read_checkpoint(run_dir, verify=verify)
    progress = or_null(progress)
    with staged_output(out_dir, force=force, inputs=[run_dir]) as stage:
        tensors_json = [gather_tensor(src, name, stage, npy=npy, chunk_rows=chunk_rows, progress=progress) for name in src.tensors]
        manifest = ck.build_global_manifest(src, tensors_json, os.fspath(run_dir))
        write_checkpoint_manifest(stage, manifest)
    return manifest


def gather_tensor(src: Checkpoint, name: str, stage: Path, *, npy: bool = False, chunk_rows: Optional[int] = None,
                  progress=None) -> dict[str, Any]:
    """Write tensor `name` of `src` in global row order into `stage`; return its manifest entry
    (the distributed gather, gpart.ckpt.distributed_reshard, gathers different tensors on different ranks with it)."""
    t = src.tensors[name]
    progress = or_null(progress)
    entry = _gather_npy(src, name, t, stage, chunk_rows, progress) if npy else _gather_flat(src, name, t, stage, chunk_rows, progress)
    return {**t.describe(), "storage": "npy" if npy else "flat", "file": entry}


def _gather_flat(src: Checkpoint, name: str, t: TensorInfo, stage: Path, chunk_rows, progress) -> dict[str, Any]:
    """One tensor as a one-file export of gpart.formats.filelist.layout (SPEC.md section 5)."""
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
    return ck.global_file_entry(part["file"], part["bytes"], int(part["crc32"], 16))


def _gather_npy(src: Checkpoint, name: str, t: TensorInfo, stage: Path, chunk_rows, progress) -> dict[str, Any]:
    path, header = stage / f"{name}.npy", npy_header(t.np_dtype, (t.num_rows, *t.row_shape))
    policy = src.policy(name)
    if policy.is_contiguous:  # a concatenation of the shards after the header: kernel copy, CRCs combined
        try:
            with progress.stage(f"gather {name}", total=t.nbytes, unit="B") as bar:
                crc, nbytes = copy_spans_to_new_file(contiguous_spans(src, t, policy, 0, t.num_rows), path, header, PIECE_BYTES, None, bar.advance)
            return ck.global_file_entry(path.name, len(header) + nbytes, crc, len(header))
        except KernelCopyUnsupported:
            path.unlink(missing_ok=True)
    out = ByteSink(path, header)
    try:
        with progress.stage(f"gather {name}", total=t.nbytes, unit="B") as bar:
            for _, chunk in iter_global_chunks(src, name, chunk_rows):
                out.write(chunk)
                bar.advance(chunk.nbytes)
    finally:
        out.close()
    return ck.global_file_entry(path.name, len(header) + out.nbytes, out.crc, len(header))


def target_policy(name: str, num_rows: int, world_size: int, boundaries: Optional[Sequence[int]] = None) -> ShardPolicy:
    """The sharding policy scatter writes: remainder, or range (WholeGraph split unless boundaries given)."""
    if name not in POLICIES:
        raise InputError(None, f"unknown policy {name!r} (expected one of {', '.join(POLICIES)})")
    if world_size < 1:
        raise InputError(None, f"world size must be at least 1, got {world_size}")
    if boundaries is None:
        return make_policy(name, num_rows, world_size)
    policy_class = POLICY_CLASSES[name]
    if "boundaries" not in policy_class.FIELDS:
        takes = " or ".join(f"--policy {n}" for n, c in POLICY_CLASSES.items() if "boundaries" in c.FIELDS)
        raise InputError(None, f"--boundaries is only meaningful with {takes}")
    try:
        return policy_class.from_fields(num_rows, world_size, {"boundaries": boundaries})
    except ValueError as exc:
        raise InputError(None, str(exc)) from None


def target_policies(src: Checkpoint, policy: str, world_size: int, boundaries: Optional[Sequence[int]] = None) -> dict[str, ShardPolicy]:
    """{embedding name: the policy scatter writes it under} for every embedding of `src`."""
    return {e.name: target_policy(policy, e.num_rows, world_size, boundaries) for e in src.embeddings.values()}


def scatter_manifest(src: Checkpoint, policies: dict[str, ShardPolicy], entries: Any, world_size: int) -> dict[str, Any]:
    """The manifest of `src` scattered under `policies` (target_policies) from the shards' `entries`
    (a flat list or per-rank lists, as build_checkpoint_manifest takes them)."""
    specs = [ck.EmbeddingSpec(e.name, e.num_rows, e.row_shape, e.dtype, policies[e.name]) for e in src.embeddings.values()]
    return ck.build_checkpoint_manifest(specs, entries, world_size, src.optimizer, extra=src.manifest.get("extra"))


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
    src = read_checkpoint(full_dir, verify=verify)
    policies = target_policies(src, policy, world_size, boundaries)
    progress = or_null(progress)
    entries: list[dict[str, Any]] = []
    with staged_output(out_dir, force=force, inputs=[full_dir]) as stage:
        with progress.stage("scattering", total=tensor_bytes(src), unit="B") as bar:
            for name, t in src.tensors.items():
                entries += shard_tensor(src, name, policies[t.embedding], stage, chunk_rows, bar)
        manifest = scatter_manifest(src, policies, entries, world_size)
        write_checkpoint_manifest(stage, manifest)
    return manifest


def shard_tensor(
    src: Checkpoint, name: str, target: ShardPolicy, directory: Path, chunk_rows: Optional[int], bar,
    stem: Optional[str] = None, ranks: Optional[Sequence[int]] = None,
) -> list[dict[str, Any]]:
    """Write tensor `name` of `src` as the shard files `<stem>_part_<r>_of_<W>` (W = target.world_size) of the
    ranks `ranks` (default: all) in `directory`; return their shard entries.

    `stem` defaults to the tensor name (gpart's own shard names); export-ckpt passes
    another system's file names. `ranks`: the distributed scatter writes some shards
    on each of its ranks. Contiguous to contiguous is a kernel copy; anything else
    streams global-order pieces into the shards (a range shard's rows alone when
    only some shards are written).
    """
    t = src.tensor(name)
    stem = stem or name
    ranks = list(range(target.world_size) if ranks is None else ranks)
    if src.policy(name).is_contiguous and target.is_contiguous and hasattr(os, "copy_file_range"):
        try:
            return _copy_contiguous(src, name, t, target, directory, chunk_rows, bar, stem, ranks)
        except KernelCopyUnsupported:
            for r in ranks:
                (directory / ck.shard_file_name(stem, r, target.world_size)).unlink(missing_ok=True)
    step = min(max(1, t.num_rows), rows_per_piece(t.row_bytes, chunk_rows, PIECE_BYTES))
    with ShardSink(directory, name, t, target, step, stem, ranks) as sink:
        for a, chunk in iter_global_chunks(src, name, chunk_rows, spans=_rows_of(target, ranks)):
            sink.feed(a, chunk)
            bar.advance(chunk.nbytes)
        return sink.close()


def _rows_of(target: ShardPolicy, ranks: list[int]) -> Optional[list[tuple[int, int]]]:
    """The global rows [lo, hi) that shards `ranks` of a contiguous target hold (None: all rows, which a
    remainder shard's rows, interleaved through the table, need anyway)."""
    if not target.is_contiguous or len(ranks) == target.world_size:
        return None
    bounds = target.row_bounds()
    return [(int(bounds[r]), int(bounds[r + 1])) for r in ranks]


def _copy_contiguous(src: Checkpoint, name: str, t: TensorInfo, target: ShardPolicy, stage: Path, chunk_rows, bar, stem: str,
                     ranks: list[int]) -> list[dict[str, Any]]:
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

    piece = max(1, rows_per_piece(t.row_bytes, chunk_rows, PIECE_BYTES)) * max(1, t.row_bytes)
    bounds = target.row_bounds()
    entries = []
    for r in ranks:
        g0, g1 = int(bounds[r]), int(bounds[r + 1])
        # the source's own CRCs are checked instead of trusted: no known CRCs passed on
        spans = [ByteSpan(sp.path, sp.offset, sp.nbytes, None, sp.file_size) for sp in contiguous_spans(src, t, source, g0, g1)]
        path = stage / ck.shard_file_name(stem, r, target.world_size)
        crc, nbytes = copy_spans_to_new_file(spans, path, 0, piece, check_source, bar.advance)
        entries.append(ck.shard_entry(name, r, path.name, g1 - g0, nbytes, crc, t.dtype, t.row_shape))
    return entries
