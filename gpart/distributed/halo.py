"""Halo rows for `--halo 1` in a distributed run: node data of the non-owned sources of each partition.

The halo of a partition is known only once its topology is built, on the rank
that writes it; the rows live in the node chunks, read by rank j % W for
chunk j. So two shuffles (gpart.distributed.shuffle, bounded rounds): each
rank sends (node id, partition) requests to the rank reading the node's
chunk, which answers with (partition, node id, node data) rows read from its
chunk files; the answers land in one scratch file per partition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

from gpart.distributed.partition_job import ID_BYTES, PartitionJob
from gpart.distributed.shuffle import Block, PartFiles, column, pack, rows_per_round, shuffle


def fetch_halo_rows(job: PartitionJob, halos: dict[int, np.ndarray], directory: Path, error: Optional[BaseException]) -> PartFiles:
    """Rows [node id, node arrays...] of every halo node of this rank's partitions (halos: part -> ids).

    `error` (this rank failed before): sent through the first round, so every rank stops with it.
    """
    comm, cg = job.comm, job.cg
    names = list(job.node_layout)
    data_bytes = sum(int(np.prod(s, dtype=np.int64)) * d.itemsize for d, s in job.node_layout.values())

    def chunk_of(ids: np.ndarray) -> np.ndarray:
        return np.searchsorted(cg.node_offsets, ids, side="right") - 1

    step = rows_per_round(job.max_message, 2 * ID_BYTES)
    rounds = sum(-(-h.shape[0] // step) for h in halos.values()) if error is None else 1

    def requests() -> Iterator[Block]:
        if error is not None:
            raise error
        for part, ids in halos.items():
            for a in range(0, ids.shape[0], step):
                piece = np.asarray(ids[a:a + step], dtype=np.int64)
                yield pack([np.stack([piece, np.full(piece.shape[0], part, dtype=np.int64)], axis=1)], piece.shape[0]), \
                    chunk_of(piece) % comm.world

    asked = PartFiles(directory, "halo-requests", [0], 2 * ID_BYTES)
    shuffle(comm, requests(), rounds, 2 * ID_BYTES, lambda rows: asked.append(0, rows), "requesting halo rows")
    answers = PartFiles(directory, "halo", list(halos), ID_BYTES + data_bytes)  # stored without the partition
    wanted = asked.read(0)
    ids, parts = column(wanted, 0, np.int64), column(wanted, ID_BYTES, np.int64)
    del wanted
    step = rows_per_round(job.max_message, 2 * ID_BYTES + data_bytes)

    def answer() -> Iterator[Block]:
        for a in range(0, ids.shape[0], step):
            piece, owners = ids[a:a + step], parts[a:a + step]
            columns = [np.stack([piece, owners], axis=1)] + [_rows(cg, name, piece, chunk_of(piece)) for name in names]
            yield pack(columns, piece.shape[0]), owners % comm.world

    rounds = -(-ids.shape[0] // step)
    shuffle(comm, answer(), rounds, 2 * ID_BYTES + data_bytes,
            lambda rows: answers.append_grouped(_drop_part(rows), column(rows, ID_BYTES, np.int64), job.num_parts),
            "answering halo rows")
    return answers


def _drop_part(rows: np.ndarray) -> np.ndarray:
    """Answer rows without their partition column: [node id, node arrays...]."""
    return np.concatenate([rows[:, :ID_BYTES], rows[:, 2 * ID_BYTES:]], axis=1)


def _rows(cg: Any, name: str, ids: np.ndarray, chunks: np.ndarray) -> np.ndarray:
    """Rows `ids` of node array `name`, read from the chunks that hold them (all read by this rank)."""
    first = cg.data_chunk("node", name, int(chunks[0])) if ids.shape[0] else None
    out = np.empty((ids.shape[0], *first.shape[1:]), dtype=first.dtype) if first is not None else np.empty(0)
    for j in np.unique(chunks):
        mask = chunks == j
        out[mask] = cg.data_chunk("node", name, int(j))[ids[mask] - cg.node_offsets[j]]
    return out
