"""Run native code that traps termination signals in a child process.

METIS (through GKlib) installs its own SIGTERM handler for the length of a
call and turns a SIGTERM into an ordinary error return, so a user's `kill`
came out as "METIS failed", exit 2, instead of an interruption. Blocking the
signal in the calling thread does not help: the kernel then hands it to
another thread (OpenBLAS keeps one), where GKlib's handler would longjmp
across stacks. So the call runs in a forked child: the signal reaches the
parent, whose handler raises gpart.base.errors.Interrupted; the parent kills the
child and unwinds, removing its staging directory like after Ctrl-C.

The child writes its one array result into shared memory and a small JSON
status into a pipe: nothing is pickled.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import signal
from typing import Any, Callable, Sequence

import numpy as np

# exception types a child may report, re-raised as themselves in the parent
_ERRORS = {"RuntimeError": RuntimeError, "ValueError": ValueError, "MemoryError": MemoryError}


def call_isolated(fn: Callable[[np.ndarray], Any], length: int, dtype: Any = np.int64) -> tuple[Any, np.ndarray]:
    """Run `fn(out)` in a forked child, `out` a shared array of `length` items; return
    (fn's JSON-able result, a copy of out). Where fork is unavailable, runs in-process."""
    return call_isolated_many([fn], length, dtype, workers=1)[0]


def call_isolated_many(fns: Sequence[Callable[[np.ndarray], Any]], length: int, dtype: Any = np.int64,
                       workers: int = 1) -> list[tuple[Any, np.ndarray]]:
    """`call_isolated` for each of `fns`, up to `workers` children at a time; the results in the order of `fns`.

    Which child finishes first changes nothing but the wall time. On an error
    or an interruption every child still running is killed, then it is raised.
    """
    dtype = np.dtype(dtype)
    if not hasattr(os, "fork"):
        results = []
        for fn in fns:
            out = np.empty(length, dtype)
            results.append((fn(out), out))
        return results
    results: list[tuple[Any, np.ndarray]] = []
    running: list[_Child] = []
    try:
        for fn in fns:
            if len(running) >= max(1, workers):
                results.append(running.pop(0).result())
            running.append(_Child(fn, length, dtype))
        while running:
            results.append(running.pop(0).result())
    finally:
        for child in running:
            child.kill()
    return results


class _Child:
    """One forked child running fn(out): `out` in shared memory, its JSON status through a pipe."""

    def __init__(self, fn: Callable[[np.ndarray], Any], length: int, dtype: np.dtype) -> None:
        self.shared = mmap.mmap(-1, max(1, length * dtype.itemsize), flags=mmap.MAP_SHARED)
        self.length, self.dtype, self.pid = length, dtype, None
        out = np.frombuffer(self.shared, dtype=dtype, count=length)
        fds: tuple[int, ...] = ()
        try:
            fds = os.pipe()
            pid = os.fork()
        except BaseException:
            for fd in fds:
                os.close(fd)
            del out
            self._close()
            raise
        read_fd, write_fd = fds
        if pid == 0:  # the child: never returns, never runs the parent's cleanup
            os.close(read_fd)
            _child(fn, out, write_fd)
        del out
        os.close(write_fd)
        self.pid, self.read_fd = pid, read_fd

    def result(self) -> tuple[Any, np.ndarray]:
        """Wait for the child: (fn's result, a copy of out); its error re-raised as its own type."""
        pid, self.pid = self.pid, None  # _wait_for reaps it (or kills it when interrupted) and closes the pipe
        try:
            status = _wait_for(pid, self.read_fd)
            out = np.frombuffer(self.shared, dtype=self.dtype, count=self.length)
            result = np.array(out)
            del out
        finally:
            self._close()
        if "error" in status:
            raise _ERRORS.get(status["type"], RuntimeError)(status["error"])
        return status["value"], result

    def kill(self) -> None:
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError, ChildProcessError):  # already gone
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            os.close(self.read_fd)
            self.pid = None
        self._close()

    def _close(self) -> None:
        try:
            self.shared.close()
        except BufferError:  # a view is still referenced (by a traceback): freed with it
            pass


def _child(fn: Callable[[np.ndarray], Any], out: np.ndarray, write_fd: int) -> None:
    code = 1
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        try:
            status = {"value": fn(out)}
            code = 0
        except Exception as exc:  # reported to the parent, which raises it
            status = {"type": type(exc).__name__, "error": str(exc) or type(exc).__name__}
        data = json.dumps(status).encode()
        while data:
            data = data[os.write(write_fd, data):]
    finally:
        os._exit(code)


def _wait_for(pid: int, read_fd: int) -> dict[str, Any]:
    """The child's status; on any interruption (Interrupted, KeyboardInterrupt) the child is killed first."""
    chunks = []
    try:
        with os.fdopen(read_fd, "rb") as pipe:
            while True:
                chunk = pipe.read(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        _, wait_status = os.waitpid(pid, 0)
    except BaseException:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        raise
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        return {"type": "RuntimeError", "error": f"the worker process was killed by {signal.Signals(sig).name}"}
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        return {"type": "RuntimeError", "error": "the worker process ended without a result"}
