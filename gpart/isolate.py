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

import json
import mmap
import os
import signal
from typing import Any, Callable

import numpy as np

# exception types a child may report, re-raised as themselves in the parent
_ERRORS = {"RuntimeError": RuntimeError, "ValueError": ValueError, "MemoryError": MemoryError}


def call_isolated(fn: Callable[[np.ndarray], Any], length: int, dtype: Any = np.int64) -> tuple[Any, np.ndarray]:
    """Run `fn(out)` in a forked child, `out` a shared array of `length` items; return
    (fn's JSON-able result, a copy of out). Where fork is unavailable, runs in-process."""
    dtype = np.dtype(dtype)
    if not hasattr(os, "fork"):
        out = np.empty(length, dtype)
        return fn(out), out
    shared = mmap.mmap(-1, max(1, length * dtype.itemsize), flags=mmap.MAP_SHARED)
    out = np.frombuffer(shared, dtype=dtype, count=length)
    try:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns, never runs the parent's cleanup
            os.close(read_fd)
            _child(fn, out, write_fd)
        os.close(write_fd)
        status = _wait_for(pid, read_fd)
        result = np.array(out)
    finally:
        del out
        try:
            shared.close()
        except BufferError:  # a view is still referenced (by a traceback): freed with it
            pass
    if "error" in status:
        raise _ERRORS.get(status["type"], RuntimeError)(status["error"])
    return status["value"], result


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
