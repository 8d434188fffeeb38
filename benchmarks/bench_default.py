"""The default partition method against the old default, random and stream, on graph families it was not tuned on.

    python benchmarks/bench_default.py --base /tmp/old-default                       # every graph, 4/8/16/32 parts
    python benchmarks/bench_default.py --base /tmp/old-default --graphs rmat-1m --parts 4 8

Graphs (generated into --workdir when missing, as uncompressed .npz): R-MAT
(a, b, c, d = 0.45, 0.22, 0.22, 0.11, node ids randomly permuted, no self
loops or duplicates) 1M/10M and 4M/50M, Chung-Lu (tests/support/synthetic.py,
power-law expected degrees, exponent 2.5, 10% training mask) 1M/10M, the SNAP
social graphs of tests/data/public (as read, and with their ids randomly
permuted), road-NY, the Walshaw meshes 4elt and crack and a 2-D grid (1000 x
1000, 4-neighbour, both directions).

Every measurement is one child process (this script with --child) that
reads the graph and runs gpart.pipeline.assign.assign (the partition step only:
reading and writing the result are the same for every method). It reports
the step's wall and CPU time (its forked children's included), the
process's peak RSS (its own since exec, or its forked KaMinPar / METIS
child's, whichever is larger: the child starts as a copy of the parent), the tries the default made with their seconds (manifest
`params.tried`), the cut (fraction of input edges whose endpoints have
different owners) and the node / in-edge / training-node balances; the
parent adds the whole process's wall time (start-up and reading included).
Beside the cut: its ratio to random's (/random) and to the default's (/default, where
`default` is among --methods: it runs before `stream`), measured in the same run.
`--base` names a checkout of gpart before this change (e.g. `git worktree
add /tmp/old-default <commit>`); its default runs in the same table as
`old default`, its child importing gpart from there. DGL is not compared
here (benchmarks/bench_dgl_cut.py does that in its own venv).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from harness import TreeMemory, machine_line, peak_rss_mib, rmat_block, run_child, script_child

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
DATA = REPO / "tests" / "data" / "public"  # the public graphs shipped with the repository


# --------------------------------------------------------------------------- graphs


def rmat_edges(num_nodes: int, num_edges: int, seed: int = 0, chunk: int = 1 << 22) -> tuple[np.ndarray, np.ndarray]:
    """R-MAT edges over 2^ceil(log2 N) ids folded onto N, ids permuted, self loops and duplicates dropped.

    Edges are drawn in rounds until `num_edges` distinct ones exist (each round draws what is missing plus 5%).
    """
    rng = np.random.default_rng(seed)
    keys = np.zeros(0, dtype=np.int64)
    while keys.size < num_edges:
        want = int((num_edges - keys.size) * 1.05) + 16
        drawn = []
        for start in range(0, want, chunk):
            src, dst = rmat_block(rng, min(chunk, want - start), num_nodes)
            keep = src != dst
            drawn.append(src[keep] * num_nodes + dst[keep])
        keys = np.unique(np.concatenate([keys] + drawn))
    keys = rng.permutation(keys)[:num_edges]
    relabel = rng.permutation(num_nodes)
    return relabel[keys // num_nodes], relabel[keys % num_nodes]


def grid_edges(side: int) -> tuple[np.ndarray, np.ndarray]:
    """A side x side 4-neighbour grid, every edge in both directions."""
    ids = np.arange(side * side, dtype=np.int64).reshape(side, side)
    pairs = [(ids[:, :-1].ravel(), ids[:, 1:].ravel()), (ids[:-1, :].ravel(), ids[1:, :].ravel())]
    src = np.concatenate([a for a, b in pairs] + [b for a, b in pairs])
    dst = np.concatenate([b for a, b in pairs] + [a for a, b in pairs])
    return src, dst


def write_npz(path: Path, num_nodes: int, src: np.ndarray, dst: np.ndarray, train: Optional[np.ndarray] = None) -> None:
    arrays = {"src": src.astype(np.int64), "dst": dst.astype(np.int64), "num_nodes": np.int64(num_nodes)}
    if train is not None:
        arrays["train_mask"] = train
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def permuted_copy(source: Path, seed: int = 0) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        from gpart.formats.input.readers import read_graph

        graph = read_graph(source)
        relabel = np.random.default_rng(seed).permutation(graph.num_nodes)
        write_npz(path, graph.num_nodes, relabel[np.asarray(graph.src)], relabel[np.asarray(graph.dst)])
    return make


def rmat_maker(num_nodes: int, num_edges: int) -> Callable[[Path], None]:
    return lambda path: write_npz(path, num_nodes, *rmat_edges(num_nodes, num_edges))


def chunglu_maker(num_nodes: int, num_edges: int) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        from tests.support.synthetic import write_powerlaw_npz  # the repository root is on sys.path (harness)

        write_powerlaw_npz(path, num_nodes, num_edges, 0, 0)
    return make


FACEBOOK = DATA / "facebook-combined" / "facebook_combined.txt.gz"
ENRON = DATA / "email-enron" / "email-Enron.txt.gz"
GRAPHS: dict[str, Callable[[Path], None] | Path] = {
    "rmat-1m": rmat_maker(1_000_000, 10_000_000),
    "rmat-4m": rmat_maker(4_000_000, 50_000_000),
    "chunglu-1m": chunglu_maker(1_000_000, 10_000_000),
    "facebook": FACEBOOK,
    "facebook-perm": permuted_copy(FACEBOOK),
    "enron": ENRON,
    "enron-perm": permuted_copy(ENRON),
    "road-ny": DATA / "road-ny" / "NY.gr.xz",
    "4elt": DATA / "walshaw-small" / "4elt.graph.gz",
    "crack": DATA / "walshaw-small" / "crack.graph.gz",
    "grid-1m": lambda path: write_npz(path, 1_000_000, *grid_edges(1000)),
}


def graph_path(name: str, workdir: Path) -> Path:
    made = GRAPHS[name]
    if isinstance(made, Path):
        return made
    path = workdir / f"{name}.npz"
    if not path.exists():
        workdir.mkdir(parents=True, exist_ok=True)
        made(path)
    return path


# --------------------------------------------------------------------------- one measurement per child process


def child(path: str, parts: int, method: str) -> dict:
    """Read the graph, time gpart.pipeline.assign.assign, measure the result (runs in the child process)."""
    import resource

    from gpart.engines.balance import balances, in_degrees, train_mask
    from gpart.formats.input.readers import read_graph
    from gpart.pipeline.assign import assign

    graph = read_graph(path)
    memory = TreeMemory(os.getpid())  # the default's KaMinPar runs go side by side: their memory adds up
    start, cpu = time.perf_counter(), time.process_time()
    result = assign(graph, parts, method)
    wall = time.perf_counter() - start
    tree_mib = memory.stop_mib()
    owner = result.book.owner_array
    src, dst = np.asarray(graph.src), np.asarray(graph.dst)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # KaMinPar and METIS run in forked children
    # this image's own peak (ru_maxrss would carry over this script's parent's), a forked child's
    # (its peak counts from its RSS at the fork: the pages it shares with this process included),
    # or the process tree's together (sampled), whichever is largest
    peak_mib = max(peak_rss_mib(since_exec=True), children.ru_maxrss / 1024, tree_mib)
    return {
        "wall": wall, "cpu": time.process_time() - cpu + children.ru_utime + children.ru_stime,
        "peak_mib": peak_mib, "edges": graph.num_edges,
        "cut": float(np.count_nonzero(owner[src] != owner[dst]) / max(graph.num_edges, 1)),
        **balances(owner, parts, in_degrees(graph), train_mask(graph)),
        "tried": result.params.get("tried"), "start": result.params.get("start"),
    }


# label -> (method, which checkout: "new" this one, "base" the --base one)
METHODS = {"default": ("balanced", "new"), "old default": ("balanced", "base"), "stream": ("stream", "new"),
           "old stream": ("stream", "base"), "random": ("random", "new")}


def measure(path: Path, parts: int, label: str, base: Optional[Path], timeout: float) -> Optional[dict]:
    method, checkout = METHODS[label]
    if checkout == "base" and base is None:
        return None
    env = dict(os.environ)
    if checkout == "base":  # gpart from the base checkout: first on the path, and the worktree shim's root where one is used
        kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != REPO]
        env.update(PYTHONPATH=os.pathsep.join([str(base)] + kept), GPART_ROOT=str(base))
    try:
        run = run_child(script_child(HERE, str(path), str(parts), method), timeout=timeout, env=env, cwd="/")
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:.0f} s"}
    if run.returncode != 0:
        return {"error": run.last_error_line() or f"exit {run.returncode}"}
    return dict(run.result(), process=run.seconds)


def tries_text(tried: Optional[list]) -> str:
    """'kaminpar 16.2 s, repair 1.0 s' from params.tried (the base checkout records no seconds)."""
    if not tried:
        return ""
    names = []
    for t in tried:
        name = "repair" if t.get("repaired") else t["backend"]
        names.append(f"{name} {t['seconds']:.1f} s" if "seconds" in t else (f"{name} (error)" if "error" in t else name))
    return ", ".join(names)


def row(graph: str, parts: int, label: str, m: Optional[dict], random_cut: Optional[float],
        default_cut: Optional[float]) -> str:
    if m is None:
        return ""
    if "error" in m:
        return f"| {graph} | {parts} | {label} | {m['error']} | | | | | | | | | | |"
    ratio = f"{m['cut'] / random_cut:.2f}" if random_cut else ""
    to_default = f"{m['cut'] / default_cut:.2f}" if default_cut else ""
    train = "" if m["train_balance"] is None else f"{m['train_balance']:.3f}"
    how = tries_text(m["tried"]) or (f"start: {m['start']}" if m.get("start") else "")
    return (f"| {graph} | {parts} | {label} | {m['wall']:.1f} | {m['process']:.1f} | {m['cpu']:.1f} | {m['peak_mib']:.0f} | {m['cut']:.3f} | "
            f"{ratio} | {to_default} | {m['node_balance']:.3f} | {m['edge_balance']:.3f} | {train} | {how} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="checkout of gpart before this change (its default: `old default`)")
    parser.add_argument("--graphs", nargs="+", default=list(GRAPHS), choices=list(GRAPHS))
    parser.add_argument("--parts", nargs="+", type=int, default=[4, 8, 16, 32])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_default"), help="where generated graphs go")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per measurement")
    parser.add_argument("--child", nargs=3, metavar=("GRAPH", "PARTS", "METHOD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child[:1], int(args.child[1]), args.child[2])))
        return
    print(machine_line())
    print("| graph | parts | method | wall s | process s | cpu s | peak MiB | cut | /random | /default | node | in-edge | train "
          "| tries |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for name in args.graphs:
        path = graph_path(name, args.workdir)
        for parts in args.parts:
            cuts: dict[str, float] = {}  # random's and the default's, for the ratios of the methods measured after them
            for label in ["random"] + [m for m in args.methods if m != "random"]:
                m = measure(path, parts, label, args.base, args.timeout)
                if m and "error" not in m:
                    cuts[label] = m["cut"]
                if label in args.methods:
                    print(row(name, parts, label, m, cuts.get("random"), cuts.get("default")), flush=True)


if __name__ == "__main__":
    main()
