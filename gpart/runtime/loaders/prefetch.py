"""Batches prepared ahead of the caller: the loaders' `prefetch=k`.

    for batch in prefetched(make, count=len(loader), depth=k, device=part.device):
        ...                     # make(i + 1) .. make(i + k) run while the caller works on batch i

One background thread calls make(0), make(1), ... in order and keeps at
most `depth` finished batches ahead of the caller, so the batches are the
ones the caller would make itself, in the same order, from the same
random streams (the thread is the only user of the loader's generator
during the iteration). On CUDA the thread works on its own stream; each
batch carries an event recorded there, the caller's stream waits for it
before the batch is handed over, and every tensor of the batch is marked
as used on the caller's stream (record_stream), so the allocator does not
reuse its memory while the caller's kernels may still read it.

The rule for collectives: while an iteration runs, the loader's sampling
collectives are made by its background thread only, on a process group of
the loader's own (gpart.runtime.partition.trainers.own_groups, created
when the loader is built), never on the default group. The caller's own
collectives (gradient all-reduce, embedding gathers, barriers) go to other
groups, so the two threads' calls never interleave on one group, which
could order them differently on different ranks. Two prefetching loaders
iterated at once each have their own group.

How many batches the thread makes is decided by the caller's progress
alone: when the caller stops early (a `break`: the iterator is closed),
the thread still makes every batch up to `depth` past the last one the
caller took, then stops, and closing waits for it. Every rank that stops
at the same batch thus makes the same collectives. An error in the thread
(a peer that failed, a time limit) is raised in the caller when it asks
for the batch that failed, as one line (BackgroundBatchError, or the
GpartError itself), with the thread's traceback chained.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from typing import Any, Callable, Iterator, Optional

import torch

from gpart.base.errors import BackgroundBatchError, GpartError


def prefetched(make: Callable[[int], Any], count: int, depth: int, device: torch.device) -> Iterator[Any]:
    """make(0), ..., make(count - 1), in order, made up to `depth` ahead on a background thread (see the module)."""
    ahead = _Ahead(make, int(count), max(1, int(depth)), device)
    try:
        for _ in range(count):
            yield ahead.take()
    finally:
        ahead.close()


class _Ahead:
    """The background thread and the batches it has made that the caller has not taken yet."""

    def __init__(self, make: Callable[[int], Any], count: int, depth: int, device: torch.device):
        self.make, self.count, self.depth, self.device = make, count, depth, device
        self.cond = threading.Condition()
        self.ready: collections.deque = collections.deque()  # (index, batch, event, error)
        self.made = self.taken = 0
        self.closing = False
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.thread = threading.Thread(target=self._run, name="gpart-prefetch", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        index = 0
        try:
            for index in range(self.count):
                with self.cond:
                    while self.made >= self.taken + self.depth and not self.closing:
                        self.cond.wait()
                    if self.made >= self.taken + self.depth:  # closed, and `depth` past the caller's last batch
                        return
                batch, event = self._make(index)
                with self.cond:
                    self.ready.append((index, batch, event, None))
                    self.made += 1
                    self.cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, raised there
            with self.cond:
                self.ready.append((index, None, None, exc))
                self.made = self.count  # nothing more comes
                self.cond.notify_all()

    def _make(self, index: int) -> tuple[Any, Optional[Any]]:
        if self.stream is None:
            return self.make(index), None
        with torch.cuda.stream(self.stream):
            batch = self.make(index)
            event = torch.cuda.Event()
            event.record(self.stream)
        return batch, event

    def take(self) -> Any:
        """The next batch (waits for the thread; its error, raised here)."""
        with self.cond:
            while not self.ready:
                self.cond.wait()
            index, batch, event, error = self.ready.popleft()
            self.taken += 1
            self.cond.notify_all()
        if error is not None:
            if isinstance(error, GpartError):
                raise error
            text = " ".join(str(error).split()) or type(error).__name__
            raise BackgroundBatchError(None, f"batch {index} (prepared in the background, prefetch={self.depth}) failed: "
                                             f"{type(error).__name__}: {text}") from error
        if event is not None:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(event)
            for tensor in tensors_of(batch):
                if tensor.device.type == "cuda":
                    tensor.record_stream(stream)
        return batch

    def close(self) -> None:
        """Stop after `depth` batches past the caller's last one, and wait for the thread."""
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.thread.join()


def tensors_of(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor in a batch: its fields, dictionaries and lists, walked."""
    if isinstance(value, torch.Tensor):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from tensors_of(getattr(value, f.name))
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_of(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_of(item)
