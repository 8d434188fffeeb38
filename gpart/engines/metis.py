"""The METIS binding (pymetis, and METIS's multi-constraint call through its C library):
vertex weights from balance constraints, options, and `metis_book`.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from gpart.base.errors import GpartError, InputError
from gpart.base.graph import Graph
from gpart.base.progress import Progress
from gpart.engines.balance import in_degrees
from gpart.engines.isolate import call_isolated
from gpart.engines.symmetric import symmetric_csr
from gpart.formats.partition.book import ArrayBook

# "auto" picks METIS recursive bisection for the cut objective with node
# balance only, and k-way for the volume objective (recursive bisection only
# minimises the cut) or with extra balance constraints. Measured with
# benchmarks/bench_assign.py on 1M-node/10M-edge power-law graphs (ufactor 30),
# cut fraction of undirected edges, recursive vs k-way:
#   2 parts 0.236 vs 0.381, 4 parts 0.420 vs 0.572, 8 parts 0.556 vs 0.684
#   (Chung-Lu exponent ~2.25), 16 parts 0.713 vs 0.752, 32 parts 0.776 vs
#   0.797 (tests/support/synthetic.py, exponent 2.5); recursive was also 1.5-2.5x faster
#   at every count. So no part count measured favours k-way on power-law graphs.
# On the Walshaw meshes (2 parts, 5%) k-way is ~5% better (geomean 1.17x vs
# 1.23x the best-known cut over 10 seeds), but GNN graphs are power-law-like.
# With extra constraints recursive bisection exceeds the tolerance (Cora,
# 4 parts, 3%: node imbalance 4-6%) while k-way holds it.


def vertex_weights(graph: Graph, balance: Sequence[str] = (), balance_edges: bool = False) -> tuple[Optional[np.ndarray], list[str]]:
    """METIS multi-constraint vertex weights (N*ncon, node-major) and the constraint names.

    Constraint 0 is 1 per node (node balance), then one 0/1 constraint per
    `balance` array (as DGL's balance_ntypes), then the in-degree when
    `balance_edges` (edges live with their destination's owner, so this
    balances stored edges, as DGL's balance_edges). Returns (None, ["nodes"])
    when there is nothing beyond node balance.
    """
    if isinstance(balance, (str, bytes)):
        balance = [balance]
    names = ["nodes"]
    columns: list[np.ndarray] = []
    for name in balance:
        columns.append(balance_column(graph, name))
        names.append(name)
    if balance_edges:
        columns.append(in_degrees(graph))
        names.append("in_degree")
    if not columns:
        return None, names
    weights = np.ones((graph.num_nodes, len(names)), dtype=np.int64)
    for j, column in enumerate(columns, start=1):
        weights[:, j] = column
    return weights.reshape(-1), names


def balance_column(graph: Graph, name: str) -> np.ndarray:
    """The 0/1 node array `name` as int64, validated (the --balance arrays)."""
    if not isinstance(name, str):
        raise InputError(graph.source, f"balance names node arrays by name, got {name!r}")
    if name not in graph.node_data:
        known = ", ".join(sorted(graph.node_data)) or "none"
        raise InputError(graph.source, f"balance array {name!r} is not a node array of the graph (node arrays: {known})")
    column = np.asarray(graph.node_data[name])
    if column.ndim != 1:
        raise InputError(graph.source, f"balance array {name!r} must be 1-D boolean, got shape {column.shape}")
    if column.dtype == np.bool_:
        return column.astype(np.int64)
    if column.dtype.kind in "iu" and column.shape[0] and not np.all((column == 0) | (column == 1)):
        raise InputError(graph.source, f"balance array {name!r} must be boolean or 0/1, found other values")
    if column.dtype.kind not in "iu":
        raise InputError(graph.source, f"balance array {name!r} must be boolean or 0/1 integers, got dtype {column.dtype}")
    return column.astype(np.int64)


def resolve_algorithm(algorithm: str, objective: str, num_parts: int, num_constraints: int = 1) -> str:
    """The METIS algorithm that runs for a requested one ("auto": see the rule above it)."""
    if algorithm != "auto":
        return algorithm
    if objective == "volume" or num_constraints > 1:
        return "kway"
    return "recursive"


def metis_seed_of(seed: int) -> int:
    """METIS's seed for a gpart seed. METIS (GKlib) runs identically for seeds 0 and 1
    (measured), so seeds are shifted by one to make every gpart seed a distinct run."""
    return int(seed) + 1


def ufactor_of(imbalance: float) -> int:
    """METIS ufactor: allowed imbalance in thousandths (max part <= (1 + ufactor/1000) * average)."""
    return max(1, int(round(float(imbalance) * 1000)))


@dataclass(frozen=True)
class MetisRun:
    """What METIS is asked for: its seed and tolerance (`ufactor_of`), the objective ("cut" or "volume"), the
    algorithm ("auto": `resolve_algorithm`), trials (NCUTS) and iterations (NITER, None: METIS's default), and
    the balance constraints beyond node count (`vertex_weights`: 0/1 node arrays, and the in-degree)."""

    seed: int
    imbalance: float
    objective: str = "cut"
    algorithm: str = "auto"
    trials: int = 1
    iterations: Optional[int] = None
    balance: Sequence[str] = ()
    balance_edges: bool = False


def metis_book(graph: Graph, num_parts: int, run: MetisRun, progress: Progress) -> tuple[ArrayBook, dict[str, Any]]:
    """METIS on the symmetrised graph (in a forked child: METIS traps SIGTERM), and the parameters as run."""
    seed, imbalance, objective, algorithm = run.seed, run.imbalance, run.objective, run.algorithm
    trials, iterations, balance, balance_edges = run.trials, run.iterations, run.balance, run.balance_edges
    weights, constraints = vertex_weights(graph, balance, balance_edges)
    ran = resolve_algorithm(algorithm, objective, num_parts, len(constraints))
    xadj, adjncy = symmetric_csr(graph, progress)
    settings = dict(seed=seed, imbalance=imbalance, objective=objective, trials=trials, iterations=iterations)
    with progress.stage("metis"):
        try:
            if num_parts == 1:  # nothing to partition (and METIS mishandles nparts=1)
                objective_value, owner = 0, np.zeros(graph.num_nodes, dtype=np.int64)
            else:
                def run_metis(out: np.ndarray) -> int:  # in a child process: METIS traps SIGTERM (gpart.engines.isolate)
                    if weights is None:
                        value, out[:] = part_graph_pymetis(xadj, adjncy, num_parts, ran == "recursive", settings)
                    else:
                        value, out[:] = part_graph_multiconstraint(
                            xadj, adjncy, weights, len(constraints), num_parts, ran == "recursive", settings)
                    return int(value)

                objective_value, owner = call_isolated(run_metis, graph.num_nodes)
        except (RuntimeError, ValueError, MemoryError) as exc:
            raise GpartError(graph.source, f"METIS failed: {exc}") from None
    params = dict(metis_params(run, ran, constraints), metis_objective_value=int(objective_value),
                  symmetric_edges=int(adjncy.shape[0] // 2), metis=f"pymetis {pymetis_version()}")
    return ArrayBook(owner.astype(np.int32), num_parts), params


def metis_params(run: MetisRun, ran: str, constraints: list[str]) -> dict[str, Any]:
    """What the manifest records of `run` with the algorithm that ran (`ran`) and its constraints' names, before
    METIS's own figures (objective value, symmetric edges, version)."""
    balance = run.balance
    return {
        "seed": int(run.seed),
        "metis_seed": metis_seed_of(run.seed),
        "imbalance": float(run.imbalance),
        "ufactor": ufactor_of(run.imbalance),
        "objective": run.objective,
        "algorithm_requested": run.algorithm,
        "algorithm": ran,
        "trials": int(run.trials),
        "iterations": None if run.iterations is None else int(run.iterations),
        "balance": [balance] if isinstance(balance, str) else [str(name) for name in balance],
        "balance_edges": bool(run.balance_edges),
        "constraints": constraints,
    }


def part_graph_pymetis(xadj, adjncy, num_parts, recursive, settings) -> tuple[int, np.ndarray]:
    import pymetis  # native library loaded only when METIS runs (start-up of every other command)

    result = pymetis.part_graph(
        num_parts, pymetis.CSRAdjacency(xadj, adjncy), recursive=recursive, options=metis_options(**settings))
    return int(result.edge_cuts), np.asarray(result.vertex_part, dtype=np.int64)


def part_graph_multiconstraint(xadj, adjncy, weights, ncon, num_parts, recursive, settings,
                               edge_weights: Optional[np.ndarray] = None) -> tuple[int, np.ndarray]:
    """METIS with ncon > 1 balance constraints, called through ctypes (`edge_weights`: one per adjncy entry, or None).

    pymetis 2025.2.2 passes ncon = 1 to METIS whatever the length of
    `vweights` (measured: a second constraint is ignored and node weights are
    misread), so multi-constraint runs call METIS_PartGraph{Recursive,Kway}
    from the METIS library pymetis bundles, with the same options.
    """
    import pymetis  # native library loaded only when METIS runs (start-up of every other command)
    from pymetis._internal import options_indices

    library = ctypes.CDLL(pymetis._internal.__file__)
    try:
        function = library.METIS_PartGraphRecursive if recursive else library.METIS_PartGraphKway
        set_defaults = library.METIS_SetDefaultOptions
    except AttributeError:
        raise RuntimeError("this pymetis build does not expose METIS for multi-constraint balancing") from None
    if pymetis.zero_copy_dtype() != np.dtype(np.int64):
        raise RuntimeError("multi-constraint balancing needs a pymetis built with 64-bit METIS indices")
    index = np.ctypeslib.ndpointer(dtype=np.int64, flags="C_CONTIGUOUS")
    options = np.zeros(METIS_OPTIONS_SLOTS, dtype=np.int64)
    set_defaults.argtypes = [index]
    set_defaults(options)
    for name, value in option_values(settings).items():
        options[getattr(options_indices, name)] = value
    options[options_indices.NUMBERING] = 0
    nvtxs = np.array([xadj.shape[0] - 1], dtype=np.int64)
    ncon_arr = np.array([ncon], dtype=np.int64)
    nparts = np.array([num_parts], dtype=np.int64)
    edgecut = np.zeros(1, dtype=np.int64)
    part = np.empty(xadj.shape[0] - 1, dtype=np.int64)
    null = ctypes.c_void_p
    function.restype = ctypes.c_int
    adjwgt = None if edge_weights is None else np.ascontiguousarray(edge_weights, dtype=np.int64)
    function.argtypes = [index, index, index, index, index, null, null if adjwgt is None else index, index, null, null,
                         index, index, index]
    status = function(nvtxs, ncon_arr, np.ascontiguousarray(xadj), np.ascontiguousarray(adjncy),
                      np.ascontiguousarray(weights, dtype=np.int64), None, adjwgt, nparts, None, None,
                      options, edgecut, part)
    if status != METIS_OK:
        raise RuntimeError(f"METIS returned status {status} ({METIS_STATUS.get(status, 'unknown')})")
    return int(edgecut[0]), part


# METIS_NOPTIONS is 40 in METIS 5.1/5.2; a larger array is harmless (METIS reads only its own slots).
METIS_OPTIONS_SLOTS = 64
METIS_OK = 1
METIS_STATUS = {1: "ok", -2: "input error", -3: "out of memory", -4: "error"}


def option_values(settings: dict[str, Any]) -> dict[str, int]:
    import pymetis  # native library loaded only when METIS runs (start-up of every other command)

    values = {
        "SEED": metis_seed_of(settings["seed"]),
        "UFACTOR": ufactor_of(settings["imbalance"]),
        "NCUTS": int(settings["trials"]),
        "OBJTYPE": int(pymetis.ObjType.VOL if settings["objective"] == "volume" else pymetis.ObjType.CUT),
    }
    if settings["iterations"] is not None:
        values["NITER"] = int(settings["iterations"])
    return values


def metis_options(*, seed: int, imbalance: float, objective: str, trials: int, iterations: Optional[int]):
    """pymetis.Options for these settings (the same values the multi-constraint path sets)."""
    import pymetis  # native library loaded only when METIS runs (start-up of every other command)

    return pymetis.Options(**{name.lower(): value for name, value in option_values(
        dict(seed=seed, imbalance=imbalance, objective=objective, trials=trials, iterations=iterations)).items()})


def pymetis_version() -> str:
    from importlib.metadata import version  # ~0.1 s of import: paid only when a METIS run records its version

    try:
        return version("pymetis")
    except Exception:  # metadata missing in odd installs: the version is informative only
        return "unknown"
