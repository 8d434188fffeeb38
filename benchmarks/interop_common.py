"""What check_dgl_convert.py and check_glt_convert.py share: real graphs partitioned by gpart, with edge arrays;
homogeneous (a float edge array added) and typed (typed Cora and a generated typed graph, edge arrays added)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, Path(__file__).resolve().parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
from bench_hetero import generate  # noqa: E402  (benchmarks/ on sys.path above: its typed graph generator)

from gpart.formats.input.readers import read_graph  # noqa: E402
from gpart.formats.input.typed import HeteroGraph, read_hetero_graph  # noqa: E402  (gpart from this checkout: ROOT on sys.path)
from gpart.pipeline.partition import partition_graph  # noqa: E402

DEFAULT_GRAPHS = [ROOT / "sample_data" / "cora.npz", ROOT / "tests" / "data" / "public" / "email-enron" / "email-Enron.txt.gz"]
CORA_TYPED = ROOT / "sample_data" / "cora_hetero.npz"
# edges of the generated typed graph the checks convert by default
GENERATED_TYPED_EDGES = 200_000


def graphs_and_typed_edges(args: list[str]) -> tuple[list[Path], int]:
    """A check script's command line: GRAPH ... [--typed-edges N] -> (the graphs, default DEFAULT_GRAPHS that exist;
    the edge count of the generated typed graph)."""
    args = list(args)
    typed_edges = GENERATED_TYPED_EDGES
    if "--typed-edges" in args:
        i = args.index("--typed-edges")
        typed_edges = int(args[i + 1])
        del args[i: i + 2]
    return [Path(a) for a in args] or [g for g in DEFAULT_GRAPHS if g.exists()], typed_edges


def partition_with_edge_weights(graph_path: Path, work: Path, num_parts: int = 3):
    """(graph, edge weights, partition directory): gpart's random partition of `graph_path` with a float edge array edge_w."""
    graph = read_graph(graph_path)
    weight = (np.arange(graph.src.size, dtype=np.float32) * 0.25).reshape(-1, 1)
    np.save(work / "w.npy", weight)
    partition_graph(graph_path, work / "parts", num_parts, "random", edge_data={"edge_w": work / "w.npy"}, force=True)
    return read_graph(graph_path), weight, work / "parts"


def typed_inputs(work: Path, generated_edges: int = GENERATED_TYPED_EDGES) -> list[tuple[str, Path]]:
    """(label, typed .npz) of typed Cora and, with generated_edges > 0, bench_hetero's generated typed graph, each with
    edge arrays added to some edge types: a float `edge_feat` [E, 2] and an int16 `weight` (other types none)."""
    inputs = []
    with np.load(CORA_TYPED) as z:
        cora = {k: z[k] for k in z.files}
    inputs.append(("typed Cora", _with_edge_arrays(cora, work / "cora_typed.npz", ("paper:cites:paper", "paper:has:word"))))
    if generated_edges:
        generate(generated_edges, work / "gen.npz")
        with np.load(work / "gen.npz") as z:
            gen = {k: z[k] for k in z.files}
        inputs.append((f"generated typed ({generated_edges:,} edges)", _with_edge_arrays(gen, work / "gen_typed.npz", ("user:buys:item", "user:follows:user"))))
    return inputs


def _with_edge_arrays(arrays: dict, path: Path, etypes: tuple[str, str]) -> Path:
    rng = np.random.default_rng(7)
    first, second = (arrays[f"{e}/src"].size for e in etypes)
    arrays[f"{etypes[0]}/edge_feat"] = rng.random((first, 2), dtype=np.float32)
    arrays[f"{etypes[1]}/weight"] = rng.integers(0, 1000, second).astype(np.int16)
    np.savez(path, **arrays)
    return path


def partition_typed(npz: Path, work: Path, num_parts: int = 3, method: str = "random", halo: int = 0) -> tuple[HeteroGraph, Path]:
    """(the typed graph, gpart's partition directory of it)."""
    partition_graph(npz, work / "tparts", num_parts, method, halo=halo, force=True)
    return read_hetero_graph(npz), work / "tparts"
