"""One rank's state in a distributed partition run (gpart.distributed.partition_chunks) and the
blocks of packed rows its chunks send: edges with their data, node ids with their rows.

The book of a gathered method (gpart.distributed.gather) and the shuffles to
the partitions' writers both read the chunks through these blocks.
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from gpart.bytes.reader import release_rows
from gpart.collectives.comm import Comm
from gpart.distributed.shuffle import pack, rows_per_round
from gpart.formats.input.chunked import ChunkedGraph

Log = Optional[Callable[[str], None]]

ID_BYTES = 8
# a rank's round buffers: about (world + 4) messages at once (what every rank may send it, its own blocks, their
# packed copy, the placing of what it got), kept within 1/ROUND_SHARE of its memory budget, each message at least
# MIN_ROUND_BYTES (smaller rounds cost more in collectives than they save)
ROUND_SHARE, MIN_ROUND_BYTES = 8, 4 << 20


def round_bytes(comm: Comm, max_message: int, budget: int) -> int:
    """Bytes a rank sends in one all_to_all round, agreed by every rank (a collective): `max_message`, or less where
    some rank's memory `budget` (0: this rank has no say) calls for it."""
    mine = int(max_message)
    if budget:
        mine = min(mine, max(MIN_ROUND_BYTES, int(budget) // (ROUND_SHARE * (comm.world + 4))))
    return int(comm.all_reduce(np.array([mine], dtype=np.int64), "min")[0])


@dataclass
class PartitionJob:
    """One rank's view of a distributed partition run: its communicator, the chunked input, the
    arrays' layouts (agreed with rank 0) and the rounds each shuffle took."""

    comm: Comm
    cg: ChunkedGraph
    num_parts: int
    max_message: int
    log: Log
    halo: int = 0
    node_layout: dict[str, tuple[np.dtype, tuple[int, ...]]] = field(default_factory=dict)
    edge_layout: dict[str, tuple[np.dtype, tuple[int, ...]]] = field(default_factory=dict)
    rounds: dict[str, int] = field(default_factory=dict)
    memory_budget: int = 0  # bytes: what bounds this rank's shuffle rounds and writes (partition_chunks._rank_budget)

    def my_parts(self) -> list[int]:
        return list(range(self.comm.rank, self.num_parts, self.comm.world))

    def my_chunks(self, count: int) -> list[int]:
        return list(range(self.comm.rank, count, self.comm.world))

    def say(self, what: str, start: float) -> None:
        if self.log is not None:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            self.log(f"rank {self.comm.rank}: {what:<16} {time.perf_counter() - start:8.2f} s   peak RSS {rss:8.1f} MiB")


def edge_blocks(job: PartitionJob, dest_of: Callable[[np.ndarray], np.ndarray], names: Sequence[str]):
    """(local rounds, blocks) of this rank's edge chunks: rows src, dst, edge id, then the edge arrays `names`."""
    cg = job.cg
    row_bytes = 3 * ID_BYTES + sum(int(np.prod(job.edge_layout[n][1], dtype=np.int64)) * job.edge_layout[n][0].itemsize for n in names)
    step = rows_per_round(job.max_message, row_bytes)
    mine = job.my_chunks(cg.num_edge_chunks)
    rounds = sum(-(-int(cg.edge_counts[i]) // step) for i in mine)

    def blocks():
        for i in mine:
            src, dst = cg.edges(i)
            data = [cg.data_chunk("edge", n, i) for n in names]
            first = int(cg.edge_offsets[i])
            for a in range(0, int(cg.edge_counts[i]), step):
                b = min(a + step, int(cg.edge_counts[i]))
                ids = np.empty((b - a, 3), dtype=np.int64)  # src, dst, edge id side by side: one row per edge
                ids[:, 0], ids[:, 1], ids[:, 2] = src[a:b], dst[a:b], np.arange(first + a, first + b, dtype=np.int64)
                yield pack([ids] + [np.asarray(arr[a:b]) for arr in data], b - a), dest_of(ids[:, 1])
                for arr in (src, dst, *data):  # chunk pages, once sent, would otherwise count in RSS
                    release_rows(arr, a, b)

    return rounds, blocks(), row_bytes


def node_blocks(job: PartitionJob, dest_of: Callable[[np.ndarray], np.ndarray], names: Sequence[str]):
    """(local rounds, blocks) of this rank's node chunks: rows node id, then the node arrays `names`."""
    cg = job.cg
    row_bytes = ID_BYTES + sum(int(np.prod(job.node_layout[n][1], dtype=np.int64)) * job.node_layout[n][0].itemsize for n in names)
    step = rows_per_round(job.max_message, row_bytes)
    mine = job.my_chunks(cg.num_node_chunks) if names else []
    rounds = sum(-(-int(cg.node_counts[j]) // step) for j in mine)

    def blocks():
        for j in mine:
            data = [cg.data_chunk("node", n, j) for n in names]
            first = int(cg.node_offsets[j])
            for a in range(0, int(cg.node_counts[j]), step):
                b = min(a + step, int(cg.node_counts[j]))
                ids = np.arange(first + a, first + b, dtype=np.int64)
                yield pack([ids] + [np.asarray(arr[a:b]) for arr in data], b - a), dest_of(ids)
                for arr in data:
                    release_rows(arr, a, b)

    return rounds, blocks(), row_bytes
