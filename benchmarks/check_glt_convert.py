"""Prove `gpart convert --to glt` with GraphLearn-for-PyTorch's own loader (DistDataset.load).

    python benchmarks/check_glt_convert.py [--typed-edges E] [GRAPH ...]     # in a venv where `import graphlearn_torch` works

GLT 0.2.4 (the current release) is built against torch 2.3 and does not install
beside gpart's torch, so this runs in a separate venv (`pip install torch==2.3.0
'numpy<2' click rich h5py psutil torch_geometric==2.5.3` (GLT's loaders import
torch_geometric), then `pip install --no-deps graphlearn-torch==0.2.4`, gpart
importable from the checkout with PYTHONPATH). GLT imports torch_sparse,
a compiled package that has no wheel for this torch; GLT uses it only to sort
COO edges into CSR/CSC (SparseTensor(row, col, value).storage.rowptr/col/value),
so this script installs a stand-in module doing exactly that sort with torch
before importing GLT, and says so when it runs.

For each graph (default: sample_data/cora.npz and email-Enron) it partitions
with gpart (random, 3 parts, a float edge array added), converts to GLT's
layout, then for every partition runs `DistDataset(edge_dir="in").load(...)`
(CPU graph, CPU features, whole-graph labels) and checks that GLT's topology
holds exactly the partition's edges with the right endpoints and edge ids (every
input edge once over all partitions), that its node and edge features return
the input's rows for the partition's ids, and that its labels and partition
books match.

Typed results (SPEC.md 7.7): typed Cora and bench_hetero's generated typed
graph (200,000 edges by default), edge arrays added to two edge types
(`edge_feat`, GLT's edge feature slot, on one of them), partitioned by gpart
(random, 3 parts; Cora also with halo 1), converted, and every partition
loaded with `DistDataset(edge_dir="in").load(..., whole_node_label_file=
{ntype: OUT/label/<ntype>.pt})`: per edge type GLT's CSC topology must hold
exactly the partition's typed edges (typed endpoints and edge ids, each input
edge once over all partitions), its per-type partition books gpart's book,
its node features (per type that has `feat`), edge features and labels the
input's rows.
"""

from __future__ import annotations

import sys
import tempfile
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from interop_common import graphs_and_typed_edges, partition_typed, partition_with_edge_weights, typed_inputs  # noqa: E402  (interop_common puts gpart on sys.path)

from gpart.convert import convert_partitions  # noqa: E402

# graphlearn_torch (and torch with it) is imported inside the functions: it is optional, importable only in its
# own venv, and tests/test_convert.py loads this module to ask available() wherever it runs.


def install_torch_sparse_stand_in() -> None:
    """A `torch_sparse` module with SparseTensor's COO -> CSR sort, the only part GLT's loader uses."""
    import torch

    class Storage:
        def __init__(self, rowptr, col, value):
            self._rowptr, self._col, self._value = rowptr, col, value

        def rowptr(self):
            return self._rowptr

        def col(self):
            return self._col

        def value(self):
            return self._value

    class SparseTensor:
        def __init__(self, row, col, value=None, sparse_sizes=None):
            rows, cols = sparse_sizes
            perm = torch.argsort(row * cols + col, stable=True)  # by row, then column, as torch_sparse
            rowptr = torch.zeros(rows + 1, dtype=torch.long)
            rowptr[1:] = torch.cumsum(torch.bincount(row, minlength=rows), 0)
            self.storage = Storage(rowptr, col[perm], None if value is None else value[perm])

    sys.modules.setdefault("torch_sparse", types.SimpleNamespace(SparseTensor=SparseTensor))


def available() -> bool:
    """Whether graphlearn_torch imports here (0.2.4 needs torch 2.3)."""
    try:
        install_torch_sparse_stand_in()
        import graphlearn_torch  # noqa: F401

        return True
    except Exception:
        return False


def check_glt_partitions(root: Path, graph, edge_weight: np.ndarray, num_parts: int) -> dict:
    import torch
    from graphlearn_torch.distributed import DistDataset

    src, dst = np.asarray(graph.src, np.int64), np.asarray(graph.dst, np.int64)
    feat, label = np.asarray(graph.node_data.get("feat")) if "feat" in graph.node_data else None, graph.node_data.get("label")
    seen = np.zeros(src.size, np.int64)
    for p in range(num_parts):
        ds = DistDataset(edge_dir="in")
        ds.load(str(root), p, graph_mode="CPU", feature_with_gpu=False,
                whole_node_label_file=str(root / "label.pt") if label is not None else None)
        assert ds.num_partitions == num_parts and ds.partition_idx == p
        node_pb, edge_pb = ds.node_pb.numpy(), ds.edge_pb.numpy()
        topo = ds.graph.topo
        indptr, indices, eids = topo.indptr.numpy(), topo.indices.numpy(), topo.edge_ids.numpy()
        cols = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))  # CSC: edge_dir="in"
        assert np.array_equal(src[eids], indices) and np.array_equal(dst[eids], cols), p
        assert np.all(node_pb[cols] == p) and np.all(edge_pb[eids] == p)
        seen[eids] += 1
        mine = torch.from_numpy(np.flatnonzero(node_pb == p))
        if feat is not None:
            assert np.array_equal(ds.node_features[mine].numpy(), feat[mine.numpy()]), p
        if label is not None:
            assert np.array_equal(ds.node_labels.numpy(), np.asarray(label))
        assert np.array_equal(ds.edge_features[torch.from_numpy(eids)].numpy(), edge_weight[eids]), p
    assert np.all(seen == 1)
    return {"nodes": int(graph.num_nodes), "edges": int(src.size), "parts": num_parts}


def check_glt_typed(root: Path, graph, parts: Path, num_parts: int) -> dict:
    """Load every partition of a typed conversion with GLT and compare it with `graph` (a gpart HeteroGraph)."""
    import torch
    from graphlearn_torch.distributed import DistDataset

    from gpart.formats.partition.reader import PartitionReader

    ntypes, etypes = graph.node_types, graph.edge_types
    offsets = dict(zip(ntypes, graph.node_offsets()[:-1].tolist()))
    owner = np.asarray(PartitionReader(parts).book().owner_array)
    labels = {t: str(root / "label" / f"{t}.pt") for t in ntypes if "label" in graph.node_data.get(t, {})}
    seen = {e: np.zeros(graph.num_edges(e), np.int64) for e in etypes}
    for p in range(num_parts):
        ds = DistDataset(edge_dir="in")
        ds.load(str(root), p, graph_mode="CPU", feature_with_gpu=False, whole_node_label_file=labels or None)
        assert ds.num_partitions == num_parts and ds.partition_idx == p
        for t in ntypes:  # GLT's per-type partition book is gpart's book over the type's erased ids
            assert np.array_equal(ds.node_pb[t].numpy(), owner[offsets[t]: offsets[t] + graph.num_nodes[t]]), t
        for e in etypes:
            src, dst = (np.asarray(x, np.int64) for x in graph.edges[e])
            topo = ds.graph[e].topo
            indptr, indices, eids = topo.indptr.numpy(), topo.indices.numpy(), topo.edge_ids.numpy()
            cols = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))  # CSC over the destination type: edge_dir="in"
            assert np.array_equal(src[eids], indices) and np.array_equal(dst[eids], cols), (p, e)
            assert np.all(ds.node_pb[e[2]].numpy()[cols] == p) and np.all(ds.edge_pb[e].numpy()[eids] == p)
            seen[e][eids] += 1
            if "edge_feat" in graph.edge_data.get(e, {}) and eids.size:
                got = ds.edge_features[e][torch.from_numpy(eids)].numpy()
                assert np.array_equal(got, np.asarray(graph.edge_data[e]["edge_feat"])[eids]), (p, e)
        for t in ntypes:
            mine = np.flatnonzero(ds.node_pb[t].numpy() == p)
            if "feat" in graph.node_data.get(t, {}) and mine.size:
                got = ds.node_features[t][torch.from_numpy(mine)].numpy()
                assert np.array_equal(got, np.asarray(graph.node_data[t]["feat"])[mine]), (p, t)
            if t in labels:
                assert np.array_equal(ds.node_labels[t].numpy(), np.asarray(graph.node_data[t]["label"]))
    assert all(np.all(v == 1) for v in seen.values())
    return {"nodes": sum(graph.num_nodes.values()), "edges": sum(graph.num_edges(e) for e in etypes), "parts": num_parts,
            "types": (len(ntypes), len(etypes))}


def convert_and_check_typed(npz: Path, work: Path, num_parts: int = 3, halo: int = 0) -> dict:
    graph, parts = partition_typed(npz, work, num_parts, halo=halo)
    convert_partitions(parts, work / "glt_typed", to="glt", force=True)
    return check_glt_typed(work / "glt_typed", graph, parts, num_parts)


def convert_and_check(graph_path: Path, work: Path, num_parts: int = 3) -> dict:
    graph, weight, parts = partition_with_edge_weights(graph_path, work, num_parts)
    convert_partitions(parts, work / "glt", to="glt", edge_feat="edge_w", force=True)
    return check_glt_partitions(work / "glt", graph, weight, num_parts)


def main() -> None:
    graphs, typed_edges = graphs_and_typed_edges(sys.argv[1:])
    install_torch_sparse_stand_in()
    import graphlearn_torch
    import torch

    print(f"graphlearn_torch {getattr(graphlearn_torch, '__version__', '0.2.4')}, torch {torch.__version__} "
          "(torch_sparse: a stand-in for SparseTensor's COO -> CSR sort)")
    for path in graphs:
        with tempfile.TemporaryDirectory() as tmp:
            result = convert_and_check(path, Path(tmp))
        print(f"OK {path}: {result['nodes']:,} nodes, {result['edges']:,} edges, {result['parts']} parts: "
              "DistDataset(edge_dir='in').load returns every edge, feature row and label")
    with tempfile.TemporaryDirectory() as tmp:
        for label, npz in typed_inputs(Path(tmp), typed_edges):
            for halo in (0, 1) if "Cora" in label else (0,):
                result = convert_and_check_typed(npz, Path(tmp), halo=halo)
                print(f"OK {label}, halo {halo}: {result['nodes']:,} nodes, {result['edges']:,} edges, {result['types'][0]} node and "
                      f"{result['types'][1]} edge types, {result['parts']} parts: DistDataset(edge_dir='in').load returns every typed "
                      "edge, feature row and label")


if __name__ == "__main__":
    main()
