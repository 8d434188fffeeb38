"""Property: for any small graph and every method, the partitions reconstruct the input exactly.

Graphs are drawn with isolated nodes, self-loops, duplicate edges and more
parts than connected components; the check is independent of gpart.inspection.result:
the stored edges, mapped back through node_ids, must be exactly the input's
(src, dst) pairs with their edge ids, and data rows must match.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpart.base.graph import Graph
from gpart.formats.partition.reader import PartitionReader
from gpart.inspection.result import verify
from gpart.pipeline.partition import partition_graph

METHODS = ["metis", "remainder", "range", "random", "assignment"]


@st.composite
def graphs(draw):
    n = draw(st.integers(1, 30))
    e = draw(st.integers(0, 80))
    ids = st.integers(0, n - 1)
    src = draw(st.lists(ids, min_size=e, max_size=e))
    dst = draw(st.lists(ids, min_size=e, max_size=e))
    if e and draw(st.booleans()):  # force self-loops and duplicate edges
        src += [src[0], dst[0], src[0]]
        dst += [dst[0], dst[0], dst[0]]
    g = Graph.from_arrays(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64), n)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    g.node_data["feat"] = rng.standard_normal((n, 3)).astype(np.float32)
    g.node_data["label"] = rng.integers(0, 4, n)
    g.edge_data["edge_weight"] = rng.random(g.num_edges)
    parts = draw(st.integers(1, n))
    return g, parts


def check_reconstruction(out: Path, g: Graph, halo: int) -> None:
    src, dst = np.asarray(g.src), np.asarray(g.dst)
    seen = np.zeros(g.num_edges, dtype=np.int64)
    owned_total = 0
    with PartitionReader(out) as reader:
        for p in range(reader.num_parts):
            node_ids = np.asarray(reader.array(p, "node_ids"))
            indptr = np.asarray(reader.array(p, "indptr"))
            indices = np.asarray(reader.array(p, "indices"))
            edge_ids = np.asarray(reader.array(p, "edge_ids"))
            num_owned = indptr.shape[0] - 1
            owned_total += num_owned
            column = np.repeat(np.arange(num_owned), np.diff(indptr))
            np.testing.assert_array_equal(node_ids[indices], src[edge_ids])
            np.testing.assert_array_equal(node_ids[column], dst[edge_ids])
            np.add.at(seen, edge_ids, 1)
            rows = node_ids if halo else node_ids[:num_owned]
            np.testing.assert_array_equal(reader.array(p, "node_data/feat"), g.node_data["feat"][rows])
            np.testing.assert_array_equal(reader.array(p, "node_data/label"), g.node_data["label"][rows])
            np.testing.assert_array_equal(reader.array(p, "edge_data/edge_weight"), g.edge_data["edge_weight"][edge_ids])
    assert owned_total == g.num_nodes
    assert np.all(seen == 1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.sampled_from(METHODS), st.sampled_from(["binary", "hdf5"]), st.integers(0, 1), st.integers(0, 1000))
def test_partitions_reconstruct_the_input(drawn, method, storage, halo, seed):
    g, parts = drawn
    extra = {}
    if method == "assignment":
        extra["assignment"] = np.random.default_rng(seed).integers(0, parts, g.num_nodes)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        manifest = partition_graph(g, out, parts, method, storage=storage, halo=halo, seed=seed, **extra)
        assert manifest["num_parts"] == parts
        check_reconstruction(out, g, halo)
        report = verify(out, g)
        assert report["ok"], report["problems"]
