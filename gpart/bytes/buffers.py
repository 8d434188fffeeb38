"""Reused buffers and read-ahead of the byte layer.

- `BufferRing`: a few chunk buffers handed out in turn (no allocation per chunk,
  the previous chunk intact while the next is produced);
- `in_background(generator)`: a generator run one item ahead in a helper thread.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Generator, Iterator, Optional

import numpy as np

# Reused buffers a source or converter rotates: a chunk stays intact until two reads later.
RING = 2


class BufferRing:
    """`RING` reusable buffers handed out in turn: no chunk-sized allocation per step, and
    the previous chunk stays intact while the next one is produced."""

    def __init__(self, count: int = RING):
        self._bufs: list[Optional[np.ndarray]] = [None] * count
        self._next = 0

    def get(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        i = self._next
        self._next = (i + 1) % len(self._bufs)
        buf = self._bufs[i]
        if buf is None or buf.dtype != dtype or buf.shape[1:] != tuple(shape[1:]) or buf.shape[0] < shape[0]:
            buf = self._bufs[i] = np.empty(shape, dtype=dtype)
        return buf[: shape[0]]

    def clear(self) -> None:
        self._bufs = [None] * len(self._bufs)


_DONE = object()


def in_background(pieces: Generator[Any, None, None]) -> Iterator[Any]:
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
