"""KaMinPar (shared-memory multilevel partitioner, PyPI `kaminpar`) as an assignment backend.

The Python binding builds its graph only from a file, so the symmetric CSR
(gpart.pipeline.assign.symmetric_csr) is written as a ParHiP binary graph into a
preallocated scratch file that is removed afterwards. ParHiP layout, as
KaMinPar's reader parses it: three uint64 header words (version flags,
n, m = adjacency entries), n+1 uint64 byte offsets of each neighbour list
from the start of the file, m neighbour ids, then n vertex weights. Version
flag bits, set meaning "absent" or "32-bit": 1 edge weights, 2 vertex
weights, 4 32-bit edge offsets, 8 32-bit vertex ids, 16 32-bit vertex
weights, 32 32-bit edge weights. We write 64-bit offsets, 32-bit vertex ids
(4 bytes per adjacency entry instead of 8) and 64-bit vertex weights.

Given a vertex order (gpart.engines.locality_order: breadth-first where a graph
past the cache has ids that look random), KaMinPar gets the graph renumbered
by it and its owners are mapped back to the input ids in its child:
KaMinPar's accesses to its neighbours' entries then hit the cache.

The compressed path (`on_disk`: a gpart.engines.parhip_file.ParhipFile built on
disk in bounded memory) skips the arrays: each run rewrites the file's
weights and KaMinPar reads it with compress=True (TeraPart's graph
compression), one run at a time, with the preset asked for, in a forked
child that then measures and repairs its result. The `terapart` preset
(memory-lean coarsening, taken where nothing else fits) runs from that
child in a fresh interpreter (gpart.engines.kaminpar_process): in a forked
child its partition moved with the state of the process that forked it.
Where KaMinPar would not hold even the compressed graph in the memory it is
given (`KaminparRun.memory`), the file is first coarsened on disk, once for
every weighting, and KaMinPar partitions the coarsest level
(gpart.engines.disk_levels).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, NamedTuple, Optional, Sequence, Union

import numpy as np

from gpart.base.memory import release_freed_memory
from gpart.bytes.copy import KernelCopyUnsupported, kernel_copy
from gpart.engines.disk_levels import DiskLevels, coarsen, kaminpar_fits, partition_levels
from gpart.engines.isolate import call_isolated_many
from gpart.engines.kaminpar_process import PRESETS, compressed_owner, kaminpar_context, run_fresh
from gpart.engines.parhip_file import (
    FLAG_32BIT_EDGE_WEIGHTS,
    FLAG_32BIT_VERTEX_IDS,
    FLAG_NO_EDGE_WEIGHTS,
    FLAG_NO_VERTEX_WEIGHTS,
    HEADER_BYTES,
    WRITE_CHUNK,
    ParhipFile,
    write_renumbered,
)
from gpart.formats.files.scratch import ScratchDir

FRESH_PRESETS = ("terapart",)  # run in a fresh interpreter (see the module)
# then(index, owner) -> (owner to keep, facts): what runs in a KaMinPar run's child after it (kaminpar_partitions)
Then = Callable[[int, np.ndarray], tuple[np.ndarray, Any]]
BUCKET_SHARE = 4  # the share of KaMinPar's memory an on-disk level's buckets may use while it is built

__all__ = ["PRESETS", "KaminparResult", "KaminparRun", "KaminparUnavailable", "kaminpar_partition", "kaminpar_partitions",
           "kaminpar_version"]


class KaminparUnavailable(RuntimeError):
    """The `kaminpar` package cannot be imported on this platform."""


def kaminpar_version() -> str:
    try:
        import kaminpar  # optional: wheels exist for Linux x86_64 only (pyproject)
    except ImportError as exc:
        raise KaminparUnavailable(f"the kaminpar package is not installed or has no wheel for this platform ({exc})") from None
    return str(getattr(kaminpar, "__version__", "unknown"))


@dataclass(frozen=True)
class KaminparRun:
    """How KaMinPar runs: its seed, its tolerance (one for every run, or one per weighting: KaMinPar keeps every
    part's weight within (1 + imbalance) * total / num_parts), its threads and preset (PRESETS), the vertex
    order it sees (`order[i]` as node i; None: the input ids), and on the compressed path the memory KaMinPar's
    process may take (None: any; past it the graph is first coarsened on disk, gpart.engines.disk_levels)."""

    seed: int
    imbalance: Union[float, Sequence[float]]
    threads: int
    preset: str = "default"
    order: Optional[np.ndarray] = None
    memory: Optional[int] = None


class KaminparResult(NamedTuple):
    """One run's owners (int32, input ids), KaMinPar's seconds, what `then` said, and the sizes of the levels
    coarsened on disk before KaMinPar ran (empty where it ran on the graph itself)."""

    owner: np.ndarray
    seconds: float
    facts: Any
    disk_levels: list


def kaminpar_partition(
    xadj: np.ndarray,
    adjncy: np.ndarray,
    weights: Optional[np.ndarray],
    num_parts: int,
    *,
    seed: int,
    imbalance: float,
    threads: int,
    preset: str = "default",
    order: Optional[np.ndarray] = None,
) -> np.ndarray:
    """Owner (int32 [n]) of each vertex of the symmetric CSR graph, from KaMinPar.

    `weights`: one int64 weight per vertex or None (unit weights); KaMinPar
    keeps every part's weight within (1 + imbalance) * total / num_parts.
    `order`: KaMinPar sees node order[i] as node i (None: the input ids).
    Runs in a forked child process (gpart.engines.isolate).
    """
    [result] = kaminpar_partitions(xadj, adjncy, [weights], num_parts,
                                   KaminparRun(seed=seed, imbalance=imbalance, threads=threads, preset=preset, order=order))
    return result.owner


def kaminpar_partitions(
    xadj: np.ndarray,
    adjncy: np.ndarray,
    weightings: Sequence[Optional[np.ndarray]],
    num_parts: int,
    run: KaminparRun,
    *,
    workers: int = 1,
    then: Optional[Then] = None,
    on_disk: Optional[ParhipFile] = None,
) -> list[KaminparResult]:
    """`kaminpar_partition` once per vertex weighting, up to `workers` runs at a time, each in its own child
    process: a KaminparResult per weighting, in their order. Each run is what
    `kaminpar_partition` gives for its weights, whatever runs beside it. `run.imbalance`: one tolerance for
    every run, or one per weighting.

    `then(i, owner)`, when given, runs in the same child right after KaMinPar (so the work that follows a
    run goes side by side too): it returns the owner array to keep and JSON-able facts about it.

    `on_disk`: the graph's ParHiP file (renumbered by `run.order` where one is given), read compressed by
    KaMinPar; the runs then go one after the other (`workers` is ignored) and `adjncy` is only passed on.
    """
    kaminpar_version()
    import kaminpar  # optional: wheels exist for Linux x86_64 only (pyproject)

    n = int(xadj.shape[0] - 1)
    if n >= 2**32:
        raise ValueError(f"{n} nodes exceed KaMinPar's 32-bit vertex ids")
    if num_parts == 1:
        return _single_part([np.zeros(n, dtype=np.int32) for _ in weightings], then)
    imbalance, order = run.imbalance, run.order
    tolerances = ([float(t) for t in imbalance] if isinstance(imbalance, (Sequence, np.ndarray))
                  else [float(imbalance)] * len(weightings))
    if len(tolerances) != len(weightings):
        raise ValueError(f"{len(tolerances)} tolerances for {len(weightings)} weightings")
    if on_disk is not None:
        if run.memory is None or kaminpar_fits(on_disk.num_nodes, on_disk.num_entries, run.memory, lean_preset(run.preset)):
            return [_file_run(on_disk, weights, num_parts, run, tolerance, index, then)
                    for index, (weights, tolerance) in enumerate(zip(weightings, tolerances))]
        return _coarsened_runs(on_disk, weightings, num_parts, run, tolerances, then)
    context = kaminpar_context(kaminpar, run.preset)
    with ScratchDir() as scratch:
        paths = _write_parhips(scratch, xadj, adjncy, weightings, order)

        def child(index: int, path: Path) -> Callable[[np.ndarray], dict[str, Any]]:
            def partition(out: np.ndarray) -> dict[str, Any]:
                start = time.perf_counter()
                graph = kaminpar.load_graph(str(path), kaminpar.GraphFileFormat.PARHIP)
                path.unlink()
                kaminpar.reseed(int(run.seed))
                solver = kaminpar.KaMinPar(int(run.threads), context)
                owner = np.fromiter(solver.compute_partition(graph, int(num_parts), tolerances[index]), dtype=np.int32, count=n)
                owner = _in_input_ids(owner, order)
                seconds = time.perf_counter() - start
                del graph, solver
                owner, facts = _then(then, index, owner)
                out[:] = owner
                return {"seconds": round(seconds, 3), "then": facts}
            return partition

        # In child processes: the binding holds the GIL for the whole run (measured: a Python thread
        # ticking every 0.1 s ran 6 times in a 20 s run), which froze the progress display at `0/?`
        # and kept Ctrl-C waiting; the parent waits without it. Each graph is read from its file there.
        results = call_isolated_many([child(i, path) for i, path in enumerate(paths)], n, np.int32, workers=workers)
    return [KaminparResult(owner, float(status["seconds"]), status["then"], []) for status, owner in results]


def _file_run(on_disk: ParhipFile, weights: Optional[np.ndarray], num_parts: int, run: KaminparRun, tolerance: float,
              index: int, then: Optional[Then], levels: Optional[DiskLevels] = None) -> KaminparResult:
    """One KaMinPar run on `on_disk` with `weights` (written into the file first) in a forked child, which then runs
    `then` on the result; a FRESH_PRESETS run goes on from there to a fresh interpreter (see the module). With
    `levels` (`on_disk` coarsened on disk), KaMinPar partitions the coarsest level with weighting `index`."""
    if levels is None:
        on_disk.write_weights(weights, run.order)
    release_freed_memory()  # this process waits on KaMinPar's: what its allocator holds would count beside it

    def kaminpar_on(file: ParhipFile) -> np.ndarray:
        if run.preset in FRESH_PRESETS:
            return run_fresh(file.path, run.preset, threads=run.threads, seed=run.seed, num_parts=num_parts,
                             tolerance=tolerance, num_nodes=file.num_nodes)
        return compressed_owner(str(file.path), run.preset, run.threads, run.seed, num_parts, tolerance, file.num_nodes)

    def partition(out: np.ndarray) -> dict[str, Any]:
        start = time.perf_counter()
        if levels is None:
            owner = kaminpar_on(on_disk)
        else:
            owner = partition_levels(levels, index, num_parts, tolerance, run.seed, kaminpar_on)
        owner = _in_input_ids(owner, run.order)
        seconds = time.perf_counter() - start
        owner, facts = _then(then, index, owner)
        out[:] = owner
        return {"seconds": round(seconds, 3), "then": facts}

    [(status, owner)] = call_isolated_many([partition], on_disk.num_nodes, np.int32, workers=1)
    return KaminparResult(owner, float(status["seconds"]), status["then"], [] if levels is None else levels.sizes())


def _coarsened_runs(on_disk: ParhipFile, weightings: Sequence[Optional[np.ndarray]], num_parts: int, run: KaminparRun,
                    tolerances: list[float], then: Optional[Then]) -> list[KaminparResult]:
    """The runs of `kaminpar_partitions` on a file too large for `run.memory`: its levels coarsened on disk once for
    every weighting (next to the file), then one run per weighting on them (gpart.engines.disk_levels)."""
    assert run.memory is not None
    memory = run.memory
    columns = np.empty((on_disk.num_nodes, len(weightings)), dtype=np.int64)
    for j, weights in enumerate(weightings):  # in the file's order
        columns[:, j] = 1 if weights is None else (weights if run.order is None else np.asarray(weights)[run.order])
    with ScratchDir(on_disk.path.parent) as scratch:
        lean = lean_preset(run.preset)
        levels = coarsen(on_disk, columns, tolerances, num_parts, run.seed,
                         lambda n, m: kaminpar_fits(n, m, memory, lean), scratch, memory // BUCKET_SHARE)
        return [_file_run(on_disk, None, num_parts, run, tolerance, index, then, levels)
                for index, tolerance in enumerate(tolerances)]


def lean_preset(preset: str) -> bool:
    """Whether `preset` is one of KaMinPar's memory-lean ones (terapart, terapart-eco): the estimates of
    gpart.engines.disk_levels.kaminpar_fits and of the planner (gpart.partition_methods.memory) tell them apart."""
    return preset.startswith("terapart")


def _in_input_ids(owner: np.ndarray, order: Optional[np.ndarray]) -> np.ndarray:
    """KaMinPar's owners (of node `order[i]` at i) indexed by input id."""
    if order is None:
        return owner
    mapped = np.empty_like(owner)
    mapped[order] = owner
    return mapped


def _single_part(owners: list[np.ndarray], then: Optional[Then]) -> list[KaminparResult]:
    """One part: every node in part 0, no KaMinPar run (`then` still runs, in this process)."""
    return [KaminparResult(owner, 0.0, facts, []) for owner, facts in (_then(then, i, owner) for i, owner in enumerate(owners))]


def _then(then: Optional[Then], index: int, owner: np.ndarray) -> tuple[np.ndarray, Any]:
    """`then(index, owner)`, or the owner unchanged and no facts without one."""
    return then(index, owner) if then is not None else (owner, None)


def _write_parhips(scratch: ScratchDir, xadj: np.ndarray, adjncy: np.ndarray,
                   weightings: Sequence[Optional[np.ndarray]], order: Optional[np.ndarray]) -> list[Path]:
    """One ParHiP file per weighting, nodes renumbered so that node `order[i]` is i (None: as they are). The
    files share their header, offsets and neighbour ids: the first is written from the arrays, the others copy
    those bytes from it inside the kernel (the conversion runs once) and add their own vertex weights."""
    paths: list[Path] = []
    for i, weights in enumerate(weightings):
        like = paths[0] if paths and (weights is None) == (weightings[0] is None) else None
        paths.append(_write_parhip(scratch, f"graph-{i}.parhip", xadj, adjncy, weights, order, like))
    return paths


def _write_parhip(scratch: ScratchDir, name: str, xadj: np.ndarray, adjncy: np.ndarray, weights: Optional[np.ndarray],
                  order: Optional[np.ndarray], like: Optional[Path] = None) -> Path:
    """The ParHiP file of the graph with `weights`, renumbered by `order`; `like`: a file of the same graph,
    order and flags to copy all but the weights from."""
    n, m = int(xadj.shape[0] - 1), int(adjncy.shape[0])
    flags = FLAG_NO_EDGE_WEIGHTS | FLAG_32BIT_VERTEX_IDS | FLAG_32BIT_EDGE_WEIGHTS
    if weights is None:
        flags |= FLAG_NO_VERTEX_WEIGHTS
    offsets_at = HEADER_BYTES
    adjncy_at = offsets_at + 8 * (n + 1)
    weights_at = adjncy_at + 4 * m
    total = weights_at + (8 * n if weights is not None else 0)
    path = scratch.file(name, total)
    with open(path, "r+b") as out:
        if like is None or not _copied(like, out, weights_at, path):
            _write_structure(out, flags, xadj, adjncy, adjncy_at, order)
        out.seek(weights_at)
        if weights is not None:
            for start in range(0, n, WRITE_CHUNK):
                rows = slice(start, start + WRITE_CHUNK) if order is None else order[start:start + WRITE_CHUNK]
                out.write(np.asarray(weights)[rows].astype("<i8").tobytes())
    return path


def _write_structure(out: BinaryIO, flags: int, xadj: np.ndarray, adjncy: np.ndarray, adjncy_at: int,
                     order: Optional[np.ndarray]) -> None:
    """Header, byte offsets and neighbour ids, from the start of `out`, renumbered by `order` unless None."""
    n, m = int(xadj.shape[0] - 1), int(adjncy.shape[0])
    out.seek(0)
    out.write(np.array([flags, n, m], dtype="<u8").tobytes())
    if order is not None:
        write_renumbered(out, xadj, adjncy, adjncy_at, order)
        return
    for start in range(0, n + 1, WRITE_CHUNK):
        block = np.asarray(xadj[start:start + WRITE_CHUNK], dtype=np.int64) * 4 + adjncy_at
        out.write(block.astype("<u8").tobytes())
    for start in range(0, m, WRITE_CHUNK):
        out.write(np.asarray(adjncy[start:start + WRITE_CHUNK]).astype("<u4").tobytes())


def _copied(like: Path, out: BinaryIO, nbytes: int, path: Path) -> bool:
    """Bytes [0, nbytes) of `like` copied into `out` inside the kernel; False where the kernel cannot."""
    out.flush()
    with open(like, "rb") as source:
        try:
            kernel_copy(source.fileno(), out.fileno(), 0, 0, nbytes, like, path)
        except KernelCopyUnsupported:
            return False
    return True
