"""Which host a failed collective lost, for its one-line error.

A collective that fails or times out says only that the exchange broke; on
several machines the question is which one went away. Each rank leaves its
host name in the job's store (torchrun's rendezvous store, the process
group's own) before its first bounded wait; a rank whose wait fails marks
itself failed there and looks, for a few seconds, which ranks do the same:
the ranks that never answer are the lost ones, named with their hosts. A
rank that cannot reach the store itself lost the store's host (MASTER_ADDR).
Nothing here raises: without a store (a world of one, an unknown backend)
the error simply names no host.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import torch.distributed as dist

from gpart.collectives.presence import default_store

_KEY = "gpart/peers"
# How long a failed rank waits for the live ranks to mark themselves failed too: their time
# limits expire within about a second of each other, a killed peer's connections at once.
PROBE_S = 5.0
_registered = [False]


def register(rank: int) -> None:
    """Leave this rank's host name in the job's store (once per process; failures ignored)."""
    if _registered[0]:
        return
    _registered[0] = True
    store = default_store()
    if store is None:
        return
    try:
        store.set(f"{_KEY}/host/{rank}", socket.gethostname())
    except (RuntimeError, dist.DistError):  # the error, if any, comes from the collective itself
        pass


def lost_hosts(rank: int, world_size: int, timeout_s: float) -> str:
    """After a failed collective: '; no answer from rank 1 on hostB' (or the store's host), or ''.

    Takes at most about min(PROBE_S, timeout_s / 2) seconds (`timeout_s`: the failed collective's limit): the store's client may block past
    its own timeout on a cut link, so the probe runs in a daemon thread that is
    abandoned when late (the process is about to exit with the error anyway).
    """
    store = default_store()
    if store is None or world_size < 2:
        return ""
    probe_s = min(PROBE_S, timeout_s / 2)
    answer: list[str] = []
    probe = threading.Thread(target=_probe, args=(store, rank, world_size, probe_s, answer), daemon=True)
    probe.start()
    probe.join(probe_s + 2.0)
    if answer:
        return answer[0]
    # the store itself does not answer: its host is the one lost
    return f"; lost contact with {os.environ.get('MASTER_ADDR', 'the host of the job store')} (the job's store)"


def _probe(store, rank: int, world_size: int, probe_s: float, answer: list[str]) -> None:
    try:
        store.set(f"{_KEY}/failed/{rank}", socket.gethostname())
        missing = _silent_ranks(store, world_size, probe_s)
        named = [f"rank {r} on {_host_of(store, r)}" for r in missing]
        answer.append(f"; no answer from {', '.join(named[:8])}{' ...' if len(named) > 8 else ''}" if named else "")
    except (RuntimeError, dist.DistError):  # no answer appended: the store is lost
        pass


def _silent_ranks(store, world_size: int, probe_s: float) -> list[int]:
    deadline = time.monotonic() + probe_s
    silent = list(range(world_size))
    while silent and time.monotonic() < deadline:
        silent = [r for r in silent if not store.check([f"{_KEY}/failed/{r}"])]
        time.sleep(0.1)
    return silent


def _host_of(store, rank: int) -> str:
    key = f"{_KEY}/host/{rank}"
    return store.get(key).decode(errors="replace") if store.check([key]) else "an unknown host"
