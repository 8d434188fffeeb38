"""Where each rank of the job is, as far as gpart's collectives know, kept in the job's store.

Two records per rank in the default group's store: the last named collective
it entered (its sequence number, name and when: one store write per
`check_same_across_ranks`, nothing per exchange), and whether it has ended
(its process exited, with its uncaught error if any, or it called
destroy_process_group), written by an exit hook and a finalizer of the
default process group. A rank that waits in a collective reads them only
when the wait is slow or failed, to say in its one-line error what the
missing ranks are doing ("rank 1, which has exited after #4 'node_split'"),
and meanwhile polls one counter (how many ranks ended) so that a peer that
is gone makes it fail at once instead of at the time limit.

Writes go through one daemon thread and reads are bounded in time: a store
whose host is gone (a cut link) never blocks a rank here. Nothing raises:
without a store (a world of one) there are no records.

At exit the writer is waited for (up to EXIT_DRAIN_S, when the store's host
still accepts connections) after the end record:
a daemon thread still inside a store call (C++, the GIL released) when the
interpreter finalizes is killed as it returns, which aborts the whole
process ("terminate called without an active exception", exit -6) after
the script has succeeded. So the thread is left running at exit only when
the store does not answer for that long.
"""

from __future__ import annotations

import multiprocessing.util
import os
import queue
import socket
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch.distributed as dist

from gpart.collectives.one_line import first_line

_KEY = "gpart/presence"
_ENDED = f"{_KEY}/ended"  # a counter (store.add): how many ranks wrote an end record
END_WRITE_S = 1.0  # how long an ending process waits for its end record to reach the store
EXIT_DRAIN_S = 15.0  # how long an exiting process waits for the writer to leave the store (see the module)
PROBE_S = 0.3  # how long an ending process tries to reach the store's host before writing to it
READ_S = 2.0  # the longest a read of the records may take (the store may be unreachable)
SHOWN = 4  # ranks named in one message


def default_store() -> Any:
    """The default process group's store (TCPStore behind a prefix), or None."""
    try:
        return dist.distributed_c10d._get_default_store()  # no public accessor; the group's store
    except (RuntimeError, ValueError, AttributeError):
        return None


@dataclass
class _State:
    store: Any = None
    rank: int = -1
    group: Optional[weakref.ref] = None  # the default process group the records belong to
    last: Optional[tuple[int, str]] = None  # (sequence number, name) of the last collective entered here
    ended_count: int = 0  # the counter's value when `ended` was last read
    ended: dict[int, str] = field(default_factory=dict)
    end_written: bool = False
    silent: bool = False  # a read went unanswered: the store's host is lost, ask it nothing more
    pid: int = 0  # the process that registered (a forked child that exits is not this rank ending)


_state = _State()
_exit_hook = [False]


class _Writer:
    """Store writes in order on one daemon thread: a caller never blocks on the store."""

    def __init__(self) -> None:
        self.items: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: Optional[threading.Thread] = None

    def put(self, store: Any, key: str, value: str, count: bool = False) -> threading.Event:
        done = threading.Event()
        self.items.put((store, key, value, count, done))
        if self.thread is None or not self.thread.is_alive():  # first use, or a forked child
            self.thread = threading.Thread(target=self._run, name="gpart-presence", daemon=True)
            self.thread.start()
        return done

    def drain(self, limit_s: float) -> bool:
        """Wait up to `limit_s` for every write queued so far to finish; whether they did."""
        if self.thread is None or not self.thread.is_alive():
            return True
        return self.put(None, "", "").wait(limit_s)

    def _run(self) -> None:
        while True:
            store, key, value, count, done = self.items.get()
            try:
                if store is not None:  # None: a marker that drain waits for
                    store.set(key, value)
                    if count:
                        store.add(_ENDED, 1)
            except Exception:  # noqa: BLE001 - a lost store shows in the collectives themselves
                pass
            done.set()


_writer = _Writer()


def register(rank: int) -> None:
    """Hook this process's end into the records (once per default process group; a world of one: nothing)."""
    global _state
    group = _default_group()
    if group is None or (_state.group is not None and _state.group() is group):
        return
    store = default_store()
    if store is None:
        return
    _state = _State(store=store, rank=rank, group=weakref.ref(group), pid=os.getpid())
    # destroy_process_group drops the last reference to the default group: its finalizer marks the end
    # (not at exit: the exit hook says "exited" then)
    weakref.finalize(group, _write_end, _state, "called destroy_process_group").atexit = False
    if not _exit_hook[0]:
        _exit_hook[0] = True
        # runs at interpreter exit and in multiprocessing children too (they leave through os._exit)
        multiprocessing.util.Finalize(None, _at_exit, exitpriority=0)
    _writer.put(store, f"{_KEY}/end/{rank}", "")  # no end left over from an earlier group of this process


def enter(seq: int, what: str) -> None:
    """Record that this rank entered collective #seq `what` (one store write, in the background)."""
    _state.last = (seq, what)
    if _state.store is not None and not _state.end_written:
        _writer.put(_state.store, f"{_KEY}/at/{_state.rank}", f"{seq}\t{time.time():.3f}\t{what}")


def last() -> Optional[tuple[int, str]]:
    """(sequence number, name) of the last named collective this rank entered, or None."""
    return _state.last


def _default_group() -> Any:
    try:
        return dist.distributed_c10d._get_default_group() if dist.is_initialized() else None
    except (RuntimeError, ValueError, AttributeError):
        return None


def _at_exit() -> None:
    error = getattr(sys, "last_value", None)  # an uncaught exception the interpreter printed
    _write_end(_state, f"has exited with {type(error).__name__}: {first_line(error)}" if error else "has exited")
    # the writer must not be in a store call when the interpreter finalizes (a store that accepts no
    # connection, a cut link, is not waited for: its calls may block past any bound)
    if _state.pid == os.getpid() and _state.store is not None and _reachable(_state.store):
        _writer.drain(EXIT_DRAIN_S)


def _write_end(state: _State, what: str) -> None:
    if state.store is None or state.end_written or state.pid != os.getpid():
        return
    state.end_written = True
    if _reachable(state.store):  # the store's host often ends first: writing then only prints c10d's stack trace
        _writer.put(state.store, f"{_KEY}/end/{state.rank}", what, count=True).wait(END_WRITE_S)


def _reachable(store: Any) -> bool:
    """Whether a TCPStore's server accepts a connection (a plain socket: no c10d error log); other stores: True."""
    while not hasattr(store, "port") and hasattr(store, "underlying_store"):
        store = store.underlying_store
    if not hasattr(store, "port"):
        return True
    try:
        with socket.create_connection((store.host, store.port), timeout=PROBE_S):
            return True
    except OSError:
        return False


def _bounded(read: Callable[[Any], Any], limit_s: float = READ_S) -> Any:
    """read(store) in a daemon thread, None when it fails or is late (a store client may block on a cut link)."""
    store = _state.store
    if store is None or _state.silent:
        return None
    answer: list[Any] = []

    def run() -> None:
        try:
            answer.append(read(store))
        except Exception:  # noqa: BLE001 - no answer is the answer
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit_s)
    _state.silent = thread.is_alive()
    return answer[0] if answer else None


def ended_among(ranks: Sequence[int]) -> dict[int, str]:
    """{rank: what it did ('has exited', 'called destroy_process_group')} for the `ranks` that ended.

    One store round trip (the counter) unless a rank ended since the last call."""
    count = _bounded(lambda store: store.add(_ENDED, 0))
    if count is not None and count != _state.ended_count:
        fresh = _bounded(lambda store: _read(store, [r for r in ranks if r not in _state.ended], "end"))
        if fresh is not None:
            _state.ended.update({r: text for r, text in fresh.items() if text})
            _state.ended_count = count
    return {r: _state.ended[r] for r in ranks if r in _state.ended}


def await_end(ranks: Sequence[int], limit_s: float) -> dict[int, str]:
    """ended_among, asked again for up to `limit_s` until a rank shows as ended (a collective that just broke:
    a peer's end record may reach the store a moment after its connections closed)."""
    deadline = time.monotonic() + limit_s
    gone = ended_among(ranks)
    while not gone and time.monotonic() < deadline:
        time.sleep(0.05)
        gone = ended_among(ranks)
    return gone


def _read(store: Any, ranks: Sequence[int], kind: str) -> dict[int, str]:
    keys = [f"{_KEY}/{kind}/{r}" for r in ranks]
    if keys and store.check(keys):  # all there: one round trip
        return {r: v.decode(errors="replace") for r, v in zip(ranks, store.multi_get(keys))}
    return {r: store.get(k).decode(errors="replace") for r, k in zip(ranks, keys) if store.check([k])}


def describe(ranks: Sequence[int], seq: Optional[int], what: Optional[str]) -> str:
    """What the `ranks` that are not in collective #seq `what` are doing, as far as the records say:
    'rank 1, which has exited (its last gpart collective: #4 'node_split')'; '' when all are there."""
    return _joined([phrase for _, phrase in _phrases(ranks, seq, what)])


def stuck(ranks: Sequence[int], seq: Optional[int], what: Optional[str]) -> str:
    """describe, of the `ranks` known to be stuck or gone only: ended, ahead in a later collective, or in
    another one of the same number; '' when none is (a rank behind, or in none yet, may be computing)."""
    return _joined([phrase for known, phrase in _phrases(ranks, seq, what) if known])


def _joined(phrases: list[str]) -> str:
    more = f"; and {len(phrases) - SHOWN} more ranks" if len(phrases) > SHOWN else ""
    return "; ".join(phrases[:SHOWN]) + more


def _phrases(ranks: Sequence[int], seq: Optional[int], what: Optional[str]) -> list[tuple[bool, str]]:
    """(known to be stuck or gone, what it does) of each rank that is not in collective #seq `what`."""
    ended = ended_among(ranks)
    records = _bounded(lambda store: _read(store, ranks, "at"))
    known = records is not None  # None: the store did not answer, so a missing record says nothing
    now, phrases = time.time(), []
    for r in ranks:
        fields = (records or {}).get(r, "").split("\t", 2)
        at = (int(fields[0]), float(fields[1]), fields[2]) if len(fields) == 3 else None
        its_last = f" (its last gpart collective: #{at[0]} {at[2]!r})" if at else ""
        if r in ended:
            phrases.append((True, f"rank {r}, which {ended[r]}{its_last}"))
        elif at is None and known:
            phrases.append((False, f"rank {r}, which has not entered any gpart collective"))
        elif at is None:
            continue
        elif seq is not None and at[0] > seq:
            phrases.append((True, f"rank {r}, which is ahead, in collective #{at[0]} {at[2]!r}"))
        elif (at[0], at[2]) != (seq, what):
            # the same number in another collective cannot complete this one; a lower number may be computing
            phrases.append((seq is not None and at[0] == seq,
                            f"rank {r}, which has not entered a gpart collective for {max(0.0, now - at[1]):.0f} s{its_last}"))
    return phrases
