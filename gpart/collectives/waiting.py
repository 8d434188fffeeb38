"""How a rank waits for a gloo collective: in slices, so that a peer that has ended fails it at once, a slow
one is reported once, and the time limit still holds.

The work's own timed wait takes each slice (a condition variable: an exchange
that completes returns at once, nothing is polled then). Between slices the
rank asks the store (gpart.collectives.presence) whether a rank of the
group has ended: a peer that exited or destroyed its process group cannot
come, so waiting for the limit would only delay the error. A peer that is
merely late is normal work (rank 0 computing a book while the others wait)
and stays silent: a warning line (logger `gpart.collectives`), once, only
when a peer is known to be stuck (in another collective) or when half the
limit has passed; the caller raises at the limit. NCCL works are not waited here: their
wait does not block the CPU.
"""

from __future__ import annotations

import datetime
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from gpart.collectives import presence

GRACE_S = 3.0  # a peer this late is worth asking about: a warning line if it is known to be stuck or gone
RECHECK_S = 10.0  # how often a longer wait asks again whether a peer is known to be stuck
SLICE_S = 0.5  # how often a waiting rank asks the store whether a peer has ended
_SHORTEST_S = 0.01  # c10d reads a timed wait of 0 ms as no limit at all: no slice is shorter than this
LAST_CHANCE_S = 0.5  # a peer that ended right after its part of the exchange: the exchange may still complete
END_RECORD_S = 0.5  # after a broken exchange, how long a peer's end record may take to arrive
log = logging.getLogger("gpart.collectives")


@dataclass
class Outcome:
    """How a wait ended: 'done', 'failed' (the work raised `error`), 'ended' (ranks in `ended` are gone),
    or 'timeout'; `ended` also names the ranks gone when the work failed because of them."""

    status: str
    error: Optional[BaseException] = None
    ended: dict[int, str] = field(default_factory=dict)
    waited_s: float = 0.0


def watch(work: Any, timeout_s: float, peers: Sequence[int], warning: Callable[[float, bool], Optional[str]]) -> Outcome:
    """Wait for a gloo `work` at most `timeout_s`; `peers`: the global ranks it waits for.

    `warning(waited_s, late)` is asked after GRACE_S (and every RECHECK_S after that) for a line naming the
    peers known to be stuck or gone (None: none is known to be; they may be computing, which is normal
    work and stays silent), and once more with `late` True when half the limit has passed, when it must
    return a line; the first line it returns is logged, once (never when the limit comes first)."""
    start = time.monotonic()
    deadline = start + timeout_s
    warned = False
    ask_at = start + GRACE_S
    while True:
        left = deadline - time.monotonic()
        if left < _SHORTEST_S:
            return Outcome("timeout", waited_s=time.monotonic() - start)
        finished = _wait_slice(work, min(SLICE_S, left))
        if finished is not None:
            if finished.status == "failed":
                finished.ended = presence.await_end(peers, END_RECORD_S)
            finished.waited_s = time.monotonic() - start
            return finished
        gone = presence.ended_among(peers)
        if gone:
            finished = _wait_slice(work, LAST_CHANCE_S)
            if finished is not None and finished.status == "done":
                return finished
            return Outcome("ended", finished.error if finished else None, gone, time.monotonic() - start)
        now = time.monotonic()
        if not warned and now >= ask_at and deadline - now > SLICE_S:
            late = now - start >= max(GRACE_S, timeout_s / 2)
            line = warning(now - start, late)
            warned = line is not None or late
            ask_at = min(now + RECHECK_S, max(start + GRACE_S, start + timeout_s / 2))
            if line is not None:
                log.warning(line)


def _wait_slice(work: Any, seconds: float) -> Optional[Outcome]:
    """The work's timed wait: an Outcome when it finished (done or failed), None when the slice ran out
    (gloo's timed wait raises then and leaves the work pending)."""
    try:
        work.wait(datetime.timedelta(seconds=seconds))
        return Outcome("done")
    except RuntimeError:
        if not work.is_completed():
            return None
    try:
        work.wait()  # it finished as the slice ran out: its own outcome
        return Outcome("done")
    except RuntimeError as exc:
        return Outcome("failed", exc)
