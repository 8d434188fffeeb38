"""The collectives of the distributed preparation commands: bytes and numpy arrays, each bounded in time.

`Comm` holds the default gloo process group's rank and size (a world of one
when the process was not launched by torchrun) and the timeout every call
waits at most (gpart.collectives.process_group.wait). Bytes travel as uint8
tensors (JSON text, packed rows), never pickled. Every rank calls the same
methods in the same order; the calls that may fail on one rank only (`agree`,
`exchange_rows` with an error) still make the same collective calls on every
rank, then raise everywhere. The shuffle's rows move through the runtime's
all_to_all (gpart.collectives.all_to_all).
"""

from __future__ import annotations

import datetime
import os
from typing import Optional

import numpy as np
import torch
import torch.distributed as dist

from gpart.base.errors import GpartError, RankMismatchError
from gpart.collectives.all_to_all import all_to_all_rows, exchange_counts
from gpart.collectives.process_group import first_line, is_initialized, wait

DEFAULT_TIMEOUT_S = 600.0


def init_from_env(timeout_s: float = DEFAULT_TIMEOUT_S) -> "Comm":
    """Join the job torchrun (or MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE) describes; a world of one without them."""
    if not dist.is_initialized() and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        try:
            dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=timeout_s))
        except (RuntimeError, ValueError) as exc:  # a peer that never came, a bad address
            raise RankMismatchError(None, f"rank {os.environ.get('RANK', '?')}: cannot join the process group "
                                          f"within {timeout_s:g} s ({first_line(exc)})") from None
    return Comm(timeout_s)


class ShuffleAborted(Exception):
    """Ranks `failed` reported an error in a shuffle round; every rank stops at that round."""

    def __init__(self, failed: list[int]):
        self.failed = failed
        super().__init__(f"ranks {failed} failed")


class Comm:
    """Rank, world size and the bounded collectives of one job."""

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S):
        self.timeout_s = float(timeout_s)
        self.active = is_initialized()
        self.rank = dist.get_rank() if self.active else 0
        self.world = dist.get_world_size() if self.active else 1
        self.largest_message = 0  # bytes of the largest single rank-to-rank message this rank sent

    def _wait(self, work, what: str) -> None:
        wait(work, self.timeout_s, what)

    def all_reduce(self, values: np.ndarray, op: str = "max") -> np.ndarray:
        """Element-wise max / min / sum of an int64 vector over all ranks."""
        tensor = torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64).copy())
        if self.world > 1:
            red = {"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "sum": dist.ReduceOp.SUM}[op]
            self._wait(dist.all_reduce(tensor, op=red, async_op=True), f"reducing ({op})")
        return tensor.numpy()

    def all_gather_bytes(self, data: bytes) -> list[bytes]:
        """Every rank's `data`, in rank order, on every rank (lengths first, then padded payloads)."""
        if self.world == 1:
            return [data]
        sizes = self._all_gather(torch.tensor([len(data)], dtype=torch.int64), "gathering sizes")
        width = max(1, int(max(int(s) for s in sizes)))
        buf = torch.zeros(width, dtype=torch.uint8)
        if data:
            buf[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        out = self._all_gather(buf, "gathering reports")
        return [bytes(t[: int(n)].numpy().tobytes()) for t, n in zip(out, sizes)]

    def _all_gather(self, tensor: torch.Tensor, what: str) -> list[torch.Tensor]:
        out = [torch.empty_like(tensor) for _ in range(self.world)]
        self._wait(dist.all_gather(out, tensor, async_op=True), what)
        return out

    def agree(self, error: Optional[BaseException], what: str) -> None:
        """Every rank passes None or the error it hit; all return, or all raise: a failing rank its
        own error (the one-line message naming its file), the others an error quoting the first."""
        text = (error.one_line() if isinstance(error, GpartError) else first_line(error)) if error is not None else ""
        reports = self.all_gather_bytes(text.encode() if error is None or text else b"error")
        failed = [(r, t.decode(errors="replace")) for r, t in enumerate(reports) if t]
        if error is not None:
            raise error
        if failed:
            rank, text = failed[0]
            raise RankMismatchError(None, f"rank {self.rank}: {what} failed on rank {rank}: {text}")

    def broadcast_bytes(self, data: Optional[bytes], root: int = 0) -> bytes:
        """`data` of rank `root` on every rank (others pass None)."""
        if self.world == 1:
            return data or b""
        size = torch.tensor([len(data) if self.rank == root else 0], dtype=torch.int64)
        self._wait(dist.broadcast(size, root, async_op=True), "broadcasting a size")
        buf = torch.zeros(int(size[0]), dtype=torch.uint8)
        if self.rank == root and data:
            buf[:] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if int(size[0]):
            self._wait(dist.broadcast(buf, root, async_op=True), "broadcasting data")
        return bytes(buf.numpy().tobytes())

    def broadcast_array(self, arr: Optional[np.ndarray], num: int, dtype, piece_bytes: int, root: int = 0) -> np.ndarray:
        """An array of `num` entries of rank `root` on every rank, in pieces of at most `piece_bytes`."""
        out = arr if self.rank == root else np.empty(num, dtype=dtype)
        if self.world == 1:
            return out
        step = max(1, piece_bytes // np.dtype(dtype).itemsize)
        for start in range(0, num, step):
            piece = torch.from_numpy(np.ascontiguousarray(out[start:start + step]).view(np.uint8).copy())
            self._wait(dist.broadcast(piece, root, async_op=True), "broadcasting the assignment")
            if self.rank != root:
                out[start:start + step] = piece.numpy().view(dtype)
        return out

    def exchange_rows(self, rows: np.ndarray, counts: Optional[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """One round of the shuffle: rows (uint8 [n, row_bytes], grouped by destination rank, counts[r] for rank r).

        Returns (received rows, in sender order; rows per sender). `counts`
        None means this rank failed: it sends -1 counts, and every rank
        learns in this same round that the shuffle stops (ShuffleAborted).
        """
        send = np.full(self.world, -1, dtype=np.int64) if counts is None else np.asarray(counts, dtype=np.int64)
        if self.world == 1:
            if counts is None:
                raise ShuffleAborted([0])
            self.largest_message = max(self.largest_message, int(rows.nbytes))
            return rows, send
        recv_counts = np.array(exchange_counts(send, timeout_s=self.timeout_s), dtype=np.int64)
        failed = [r for r in range(self.world) if recv_counts[r] < 0]
        if failed:
            raise ShuffleAborted(failed)
        self.largest_message = max(self.largest_message, int(send.max(initial=0)) * rows.shape[1])
        received = all_to_all_rows(torch.from_numpy(np.ascontiguousarray(rows)), send.tolist(), recv_counts.tolist(),
                                   timeout_s=self.timeout_s)
        return received.numpy(), recv_counts
