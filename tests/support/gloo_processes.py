"""Run a function on W local processes joined in a gloo process group (tests and benchmarks).

    results = run_distributed(check_something, 4, "some/dir", timeout_s=60)

`fn(rank, world_size, *args)` runs on every rank after
torch.distributed is initialised with gloo on 127.0.0.1 and a free port; its
return values (picklable) come back in rank order. The first rank that raises
makes the call raise `DistributedTestError` with that rank's traceback, after
the other ranks are killed (they would otherwise block in a collective). A
hard timeout kills every worker, so a broken collective never hangs the caller.
`fn` must be importable by the spawned children (a module-level function).
"""

from __future__ import annotations

import datetime
import queue as queue_module
import socket
import time
import traceback
from typing import Any, Callable


def error_text(call: Callable[[], Any]) -> str:
    """"no error" when `call()` returns, else "ErrorType: message": what a rank reports of a call that should fail."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the message is what the tests check
        return f"{type(exc).__name__}: {exc}"
    return "no error"


class DistributedTestError(RuntimeError):
    """A rank raised, died, or the group did not finish in time."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _worker(fn, rank: int, world_size: int, port: int, args: tuple, results, threads: int, pg_timeout_s: float) -> None:
    # Runs in the child: join the group, run fn, report ("ok"|"err", rank, payload).
    try:
        import torch
        import torch.distributed as dist

        if threads:
            torch.set_num_threads(threads)
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=pg_timeout_s),
        )
        value = fn(rank, world_size, *args)
        results.put(("ok", rank, value))
        # Leave together; a peer that failed never arrives, and the parent
        # kills this worker once it has every result or an error.
        try:
            dist.barrier()
            dist.destroy_process_group()
        except Exception:
            pass
    except BaseException:
        results.put(("err", rank, traceback.format_exc()))


def run_distributed(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout_s: float = 60.0,
    threads: int = 1,
    pg_timeout_s: float | None = None,
) -> list[Any]:
    """Run `fn(rank, world_size, *args)` on `world_size` gloo processes; return results by rank.

    Raises DistributedTestError naming the failing rank (with its traceback),
    or listing the ranks still running when `timeout_s` expires.
    `threads` sets torch's intra-op threads per worker (0: leave torch's default).
    A port taken between free_port() and rank 0's listen (another test's
    process got it first: EADDRINUSE) is a race of the harness, not a result:
    the run starts again on a fresh port, at most PORT_TRIES times.
    """
    for attempt in range(PORT_TRIES):
        try:
            return _run_once(fn, world_size, args, timeout_s, threads, pg_timeout_s)
        except DistributedTestError as exc:
            if "EADDRINUSE" not in str(exc) or attempt == PORT_TRIES - 1:
                raise
    raise AssertionError("unreachable")


PORT_TRIES = 3


def _run_once(fn: Callable[..., Any], world_size: int, args: tuple, timeout_s: float, threads: int,
              pg_timeout_s: float | None) -> list[Any]:
    import torch.multiprocessing as mp

    ctx = _context(mp)
    results = ctx.Queue()
    port = free_port()
    pg_timeout = pg_timeout_s if pg_timeout_s is not None else max(5.0, timeout_s)
    procs = [
        ctx.Process(target=_worker, args=(fn, rank, world_size, port, args, results, threads, pg_timeout), daemon=True)
        for rank in range(world_size)
    ]
    for proc in procs:
        proc.start()
    values: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < world_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                missing = sorted(set(range(world_size)) - set(values))
                raise DistributedTestError(f"ranks {missing} of {world_size} did not finish within {timeout_s:g} s (killed)")
            try:
                status, rank, payload = results.get(timeout=min(0.2, remaining))
            except queue_module.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode is not None and r not in values]
                if dead:
                    # A worker can exit before its report is readable; give the queue a moment.
                    try:
                        status, rank, payload = results.get(timeout=1.0)
                    except queue_module.Empty:
                        raise DistributedTestError(
                            f"rank {dead[0]} of {world_size} exited with code {procs[dead[0]].exitcode} without a result"
                        ) from None
                else:
                    continue
            if status == "err":
                raise DistributedTestError(f"rank {rank} of {world_size} raised:\n{payload}")
            values[rank] = payload
        # Every rank reported: give them a moment to leave the group cleanly.
        grace = time.monotonic() + min(3.0, max(0.1, deadline - time.monotonic()))
        for proc in procs:
            proc.join(timeout=max(0.0, grace - time.monotonic()))
    finally:
        _kill(procs)
        results.close()
    return [values[r] for r in range(world_size)]


# what every rank imports, loaded once in the fork server: a test's rank then imports only its own module (pytest and
# gpart's runtime, pipeline and distributed packages took about 0.5 s of each rank's start otherwise)
PRELOAD = ["torch", "torch.distributed", "numpy", "pytest", "gpart.collectives", "gpart.runtime", "gpart.pipeline.partition",
           "gpart.distributed"]


def _context(mp):
    # A fork server with torch already imported starts workers in a fraction of
    # a second instead of re-importing torch in every spawned child; it is
    # started once per process and reused. Plain spawn where it is missing.
    try:
        ctx = mp.get_context("forkserver")
    except ValueError:
        return mp.get_context("spawn")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def _kill(procs) -> None:
    for proc in procs:
        if proc.is_alive():
            proc.kill()
    for proc in procs:
        proc.join(timeout=5)
