"""How a rank waits for a gloo collective: in slices, so that a peer that has ended fails it at once, a slow
one is reported once, and the time limit still holds.

The work's own timed wait takes each slice (a condition variable: an exchange
that completes returns at once, nothing is polled then). Between slices the
rank asks the store (gpart.collectives.presence) whether a rank of the
group has ended: a peer that exited or destroyed its process group cannot
come, so waiting for the limit would only delay the error. After GRACE_S a
warning line (logger `gpart.collectives`) says what the others are doing,
once; the caller raises at the limit. NCCL works are not waited here: their
wait does not block the CPU.
"""

from __future__ import annotations

import datetime
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from gpart.collectives import presence

GRACE_S = 3.0  # a peer this late is worth one warning line
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


def watch(work: Any, timeout_s: float, peers: Sequence[int], warning: Callable[[], str]) -> Outcome:
    """Wait for a gloo `work` at most `timeout_s`; `peers`: the global ranks it waits for; `warning()`: the
    line logged once after GRACE_S (not when the limit comes first)."""
    start = time.monotonic()
    deadline = start + timeout_s
    warned = False
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
        if not warned and time.monotonic() - start >= GRACE_S and deadline - time.monotonic() > SLICE_S:
            warned = True
            log.warning(warning())


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
