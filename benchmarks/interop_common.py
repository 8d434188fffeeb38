"""What check_dgl_convert.py and check_glt_convert.py share: a real graph partitioned by gpart, with an edge array."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from gpart.formats.readers import read_graph  # noqa: E402  (gpart from this checkout: ROOT on sys.path above)
from gpart.partition import partition_graph  # noqa: E402

DEFAULT_GRAPHS = [ROOT / "sample_data" / "cora.npz", ROOT.parent / "shared" / "data" / "email-enron" / "email-Enron.txt.gz"]


def partition_with_edge_weights(graph_path: Path, work: Path, num_parts: int = 3):
    """(graph, edge weights, partition directory): gpart's random partition of `graph_path` with a float edge array edge_w."""
    graph = read_graph(graph_path)
    weight = (np.arange(graph.src.size, dtype=np.float32) * 0.25).reshape(-1, 1)
    np.save(work / "w.npy", weight)
    partition_graph(graph_path, work / "parts", num_parts, "random", edge_data={"edge_w": work / "w.npy"}, force=True)
    return read_graph(graph_path), weight, work / "parts"
