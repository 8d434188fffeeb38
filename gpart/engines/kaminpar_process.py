"""KaMinPar on a ParHiP file in a fresh interpreter: the compressed path's runs.

    owner = run_fresh(path, "terapart", threads=1, seed=0, num_parts=8, tolerance=0.03, num_nodes=n)

The compressed path reads the graph from its file, so KaMinPar needs nothing
of the asking process: it can run in `python -m gpart.engines.kaminpar_process`,
which imports numpy and kaminpar only. Its memory is then its own (no page
of the asking process is charged to it, nothing of KaMinPar's stays behind),
and it starts from the same state whoever asks. gpart runs KaMinPar's
`terapart` preset this way (gpart.engines.kaminpar.FRESH_PRESETS): in a
forked child its partition moved with the state of the process that forked
it (torch imported or not). Fresh interpreters are not a full cure: they
gave one partition in some 200 runs of the same file and seed (environments
of different sizes, OMP_NUM_THREADS set or not, other processes loading the
cores), but twice, started from a test worker deep in a full test run,
another one (once `terapart`, once `fast`; cause not found).

The owners come back through a scratch file next to the graph (int32, one per
node), written whole and then renamed, so a partial file is never read. The
child dies with its parent (PR_SET_PDEATHSIG), so a killed run leaves no
KaMinPar behind. A failure is one RuntimeError: the child's last stderr line,
or the signal that ended it (a memory cap's kill is SIGKILL).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

PRESETS = ("default", "fast", "strong", "terapart")
_PR_SET_PDEATHSIG = 1


def kaminpar_context(kaminpar: Any, preset: str) -> Any:
    """KaMinPar's context object of `preset` (one of PRESETS)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown KaMinPar preset {preset!r} (expected one of {', '.join(PRESETS)})")
    return getattr(kaminpar, f"{preset}_context")()


def run_fresh(path: Path, preset: str, *, threads: int, seed: int, num_parts: int, tolerance: float,
              num_nodes: int) -> np.ndarray:
    """The owner (int32 [num_nodes]) of each node of the ParHiP graph at `path`, from KaMinPar reading it compressed
    in a fresh interpreter (see the module)."""
    owners = path.with_name(path.name + ".owners")
    command = [sys.executable, "-m", "gpart.engines.kaminpar_process", str(path), preset, str(int(threads)),
               str(int(seed)), str(int(num_parts)), repr(float(tolerance)), str(owners)]
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, preexec_fn=_die_with_parent, check=False)
        if done.returncode != 0:
            raise RuntimeError(_failure(done.returncode, done.stderr))
        owner = np.fromfile(owners, dtype=np.int32)
        if owner.size != num_nodes:
            raise RuntimeError(f"KaMinPar's process gave {owner.size} owners for the {num_nodes} nodes of {path.name}")
        return owner
    finally:
        owners.unlink(missing_ok=True)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the process that started it ends (Linux; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):  # no prctl: the child is then not tied to its parent
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _failure(code: int, stderr: str) -> str:
    """One line for a child that exited with `code`."""
    if code < 0:
        name = signal.Signals(-code).name
        return f"KaMinPar's process was killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"KaMinPar's process exited with status {code}"


def compressed_owner(path: str, preset: str, threads: int, seed: int, num_parts: int, tolerance: float,
                     num_nodes: int = -1) -> np.ndarray:
    """KaMinPar's owner (int32) of each node of the ParHiP graph at `path`, read compressed, in this process (the
    forked child of gpart.engines.kaminpar, or the fresh interpreter of main); num_nodes -1: as many as it gives."""
    import kaminpar  # optional: wheels exist for Linux x86_64 only (pyproject)

    # The solver first: it limits KaMinPar to `threads`, and the compressed reader then runs within that
    # (loaded first, it used every core, and the partition changed with the cores the machine had).
    solver = kaminpar.KaMinPar(int(threads), kaminpar_context(kaminpar, preset))
    graph = kaminpar.load_graph(str(path), kaminpar.GraphFileFormat.PARHIP, compress=True)
    kaminpar.reseed(int(seed))
    return np.fromiter(solver.compute_partition(graph, int(num_parts), float(tolerance)), dtype=np.int32, count=num_nodes)


def main(argv: list[str]) -> int:
    path, preset, threads, seed, num_parts, tolerance, owners = argv
    owner = compressed_owner(path, preset, int(threads), int(seed), int(num_parts), float(tolerance))
    staging = owners + ".part"
    owner.tofile(staging)
    os.replace(staging, owners)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
