"""gather-ckpt from per-machine run directories (SPEC.md 10.4): shard bytes travel to the tensor writers.

When a rank's run directory holds only the source shards `s % W == r` (plus
the manifest), the writer of each tensor gets the shards it lacks through
gpart.distributed.shuffle: the shard files are cut into fixed-width records
(tensor, shard, position, length, bytes) sent in rounds of bounded
all_to_all messages, and written at their position into scratch copies
beside the output. The writer then gathers the tensor with gpart.ckpt's own
gather_tensor from a view of the checkpoint whose missing shards point at
those copies (same bytes, and their CRC-32s are checked as they are read),
so the result is the single-process result byte for byte.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable, Iterator, Union

import numpy as np

from gpart.base.errors import GpartError, InputError, OutputError
from gpart.collectives.comm import Comm
from gpart.distributed.shuffle import column, pack, rows_per_round, shuffle
from gpart.formats.checkpoint import entries as ck
from gpart.formats.checkpoint.reader import Checkpoint, parse_checkpoint, read_checkpoint
from gpart.formats.files.manifest import MANIFEST_NAME, read_manifest

PathLike = Union[str, "os.PathLike[str]"]
PIECE = 1 << 16  # shard bytes per record
HEAD = 4  # int64 fields before the bytes: tensor index, shard index, position in the file, length


def read_run(comm: Comm, run_dir: PathLike) -> tuple[Checkpoint, bool]:
    """The checkpoint, and whether its shards are spread over the ranks' machines (every rank decides alike).

    Complete everywhere: the usual full check (read_checkpoint). Otherwise every
    rank must hold the shards `s % W == r` of every tensor, with their sizes."""
    error, src, complete = None, None, False
    try:
        directory = Path(run_dir)
        src = parse_checkpoint(read_manifest(directory, expected_format=ck.FORMAT), directory,
                                  directory / MANIFEST_NAME, check_files=False, verify=False)
        complete = all((directory / s.file).is_file() for t in src.tensors.values() for s in t.shards)
    except GpartError as exc:
        error = exc
    comm.agree(error, "reading the checkpoint")
    spread = not all(v == b"1" for v in comm.all_gather_bytes(b"1" if complete else b"0"))
    error = None
    try:
        if not spread:
            src = read_checkpoint(run_dir)
        else:
            _check_my_shards(src, comm.rank, comm.world)
    except GpartError as exc:
        error = exc
    comm.agree(error, "reading the checkpoint")
    return src, spread


def _check_my_shards(src: Checkpoint, rank: int, world: int) -> None:
    for t in src.tensors.values():
        for s in t.shards[rank::world]:
            path = src.directory / s.file
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                raise InputError(path, f"no such file: rank {rank} of {world} holds shard {s.rank} of tensor {t.name} "
                                       f"(shards s % {world} == {rank}) when the run directory is per machine") from None
            if size != s.bytes:
                raise InputError(path, f"size {size} bytes, manifest says {s.bytes}")


def fetch_shards(comm: Comm, src: Checkpoint, writer_of: Callable[[int], int], scratch: Path,
                 max_message: int) -> dict[str, Checkpoint]:
    """Ship every shard to the writer of its tensor; {tensor name: view of src reading local or received shards}
    for this rank's tensors. Scratch copies are created under `scratch`."""
    names = list(src.tensors)
    row_bytes = HEAD * 8 + PIECE
    step = rows_per_round(max_message, row_bytes)
    mine = [(i, k) for i, name in enumerate(names) for k in range(comm.rank, len(src.tensors[name].shards), comm.world)
            if writer_of(i) != comm.rank]
    pieces = [(i, k, pos) for i, k in mine for pos in range(0, src.tensors[names[i]].shards[k].bytes, PIECE)]
    copies = {(i, k): scratch / f"{i}-{k}.shard" for i, name in enumerate(names) if writer_of(i) == comm.rank
              for k in range(len(src.tensors[name].shards)) if k % comm.world != comm.rank}
    for path in copies.values():
        path.touch()

    def blocks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for a in range(0, len(pieces), step):
            batch = pieces[a:a + step]
            head = np.zeros((len(batch), HEAD), dtype=np.int64)
            body = np.zeros((len(batch), PIECE), dtype=np.uint8)
            for row, (i, k, pos) in enumerate(batch):  # one read per 64 KiB piece, not per tensor row
                with open(src.directory / src.tensors[names[i]].shards[k].file, "rb") as fh:
                    fh.seek(pos)
                    data = fh.read(PIECE)
                head[row] = (i, k, pos, len(data))
                body[row, :len(data)] = np.frombuffer(data, dtype=np.uint8)
            yield pack([head, body], len(batch)), np.array([writer_of(int(i)) for i, _, _ in batch], dtype=np.int64)

    def deliver(rows: np.ndarray) -> None:
        head = column(rows, 0, np.int64, (HEAD,))
        for row, (i, k, pos, length) in enumerate(head.tolist()):
            path = copies[(i, k)]
            try:
                with open(path, "r+b") as fh:
                    fh.seek(pos)
                    fh.write(rows[row, HEAD * 8:HEAD * 8 + length].tobytes())
            except OSError as exc:
                raise OutputError(path, f"write failed: {exc.strerror or exc}") from None

    rounds = -(-len(pieces) // step)
    shuffle(comm, blocks(), rounds, row_bytes, deliver, "sending shards to the tensor writers")
    return {name: _view(src, name, {k: p for (j, k), p in copies.items() if j == i})
            for i, name in enumerate(names) if writer_of(i) == comm.rank}


def _view(src: Checkpoint, name: str, received: dict[int, Path]) -> Checkpoint:
    """src, with tensor `name`'s received shards read from their scratch copies (absolute paths)."""
    t = src.tensors[name]
    shards = tuple(dataclasses.replace(s, file=os.fspath(received[k].absolute())) if k in received else s
                   for k, s in enumerate(t.shards))
    tensors = {**src.tensors, name: dataclasses.replace(t, shards=shards)}
    return dataclasses.replace(src, tensors=tensors, _maps={})
