"""Prove `gpart convert --to dgl` and `gpart export-ckpt --to distdgl` with DGL itself.

    python benchmarks/check_dgl_convert.py [--typed-edges E] [GRAPH ...]     # in a venv where `import dgl` works

DGL 2.1 installs only with torch <= 2.2.1, so this runs in a separate venv
(`pip install torch==2.2.1 'numpy<2' 'setuptools<70' torchdata==0.7.1 dgl==2.1.0
pandas pyyaml pydantic click rich h5py`, gpart importable from the checkout with
PYTHONPATH). For each graph (default: sample_data/cora.npz and
tests/data/public/email-enron/email-Enron.txt.gz) it partitions with gpart
(random, 3 parts, a float edge array added), converts to DGL's layout, then
loads every partition with `dgl.distributed.load_partition` and checks, through
the saved orig_nids / orig_eids mapping:

- each partition's inner nodes are exactly its range of the part config's
  node_map, and map back to the nodes gpart assigned to it;
- every input edge appears exactly once as an inner edge, with the right
  endpoints, in the partition of its destination, and as a non-inner edge in
  the partition of its source when that differs (as DGL's own partitions hold
  the out-edges of their inner nodes);
- every node and edge feature row equals the input's row.

Typed results (SPEC.md 7.6): typed Cora and bench_hetero's generated typed
graph (200,000 edges by default; --typed-edges), edge arrays added to two edge
types, partitioned by gpart (random, 3 parts; Cora also with halo 1) and
converted; every partition is loaded with `load_partition`, and through DGL's
own partition book (map_to_per_ntype / map_to_per_etype, nid2partid with
types) and the saved per-type orig_nids / orig_eids:

- each partition's inner nodes are its ranges of every type's node_map, their
  `_TYPE` is DGL's type of their id, and they map back to the typed nodes
  gpart assigned to the partition, each typed node once over all partitions;
- every typed input edge is an inner edge exactly once, in its destination's
  partition, with its type and typed endpoints, and the non-inner edges are
  exactly the out-edges of inner nodes owned elsewhere;
- every typed node and edge data row equals the input's row.

Then, on one-partition conversions of Cora and of typed Cora (DGL's standalone
mode needs one partition), it opens a `DistGraph`, samples in-neighbours with
DGL (of every edge type, typed) and compares them and feature rows with the
input, and resumes a DistDGL `SparseAdam` with `opt.load(prefix)`
from `gpart export-ckpt --to distdgl` files: every state row, the table and the
hyper-parameters must come back exactly.

tests/test_convert.py runs the same checks when dgl is importable (skipped otherwise).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from interop_common import CORA_TYPED, DEFAULT_GRAPHS, graphs_and_typed_edges, partition_typed, partition_with_edge_weights, typed_inputs  # noqa: E402  (interop_common puts gpart on sys.path)

from gpart.ckpt import ExportOptions, export_checkpoint  # noqa: E402
from gpart.convert import convert_partitions  # noqa: E402
from gpart.formats.checkpoint import entries as ck  # noqa: E402
from gpart.formats.checkpoint.writer import write_checkpoint_manifest, write_shard  # noqa: E402
from gpart.formats.foreign.dgl import require_dgl  # noqa: E402
from gpart.formats.input.readers import read_graph  # noqa: E402
from gpart.formats.sharding.policies import RemainderPolicy  # noqa: E402
from gpart.pipeline.partition import partition_graph  # noqa: E402

# dgl (and torch with it) is imported inside the functions: it is optional, importable only in its own venv,
# and tests/test_convert.py loads this module to ask available() wherever it runs.


def available() -> bool:
    """Whether dgl imports here (it needs torch <= 2.2.1)."""
    try:
        require_dgl()
        return True
    except Exception:
        return False


def check_dgl_partitions(config: Path, graph, edge_weight: np.ndarray, num_parts: int) -> dict:
    """Load every partition of the DGL part config with DGL and compare it with `graph` (a gpart Graph)."""
    os.environ.setdefault("DGLBACKEND", "pytorch")
    import dgl
    import torch

    orig_nids = torch.load(config.parent / "orig_nids.pt", weights_only=True).numpy()
    orig_eids = torch.load(config.parent / "orig_eids.pt", weights_only=True).numpy()
    src, dst = np.asarray(graph.src, np.int64), np.asarray(graph.dst, np.int64)
    seen_edges = np.zeros(src.size, np.int64)
    seen_nodes = np.zeros(graph.num_nodes, np.int64)
    node_owner = np.zeros(graph.num_nodes, np.int64)  # input id -> partition, from the relabelling's ranges
    for p in range(num_parts):
        _, _, _, gpb, _, _, _ = dgl.distributed.load_partition(str(config), p, load_feats=False)
        node_owner[orig_nids] = gpb.nid2partid(torch.arange(orig_nids.size)).numpy()
        break
    for p in range(num_parts):
        g, nfeat, efeat, gpb, _, ntypes, etypes = dgl.distributed.load_partition(str(config), p)
        inner = g.ndata["inner_node"].numpy().astype(bool)
        nid = g.ndata["_ID"].numpy()
        start, end = gpb.partid2nids(p).numpy()[[0, -1]]
        assert np.array_equal(nid[inner], np.arange(start, end + 1)), p
        assert np.all(gpb.nid2partid(torch.from_numpy(nid)).numpy() == g.ndata["part_id"].numpy())
        seen_nodes[orig_nids[nid[inner]]] += 1
        s, d = (x.numpy() for x in g.edges())
        eid = g.edata["_ID"].numpy()
        inner_edge = g.edata["inner_edge"].numpy().astype(bool)
        assert np.array_equal(inner_edge, inner[d])  # as in DGL's own partitions: inner edges are the inner nodes' in-edges
        assert np.all((gpb.eid2partid(torch.from_numpy(eid)).numpy() == p) == inner_edge)
        orig = orig_eids[eid]
        assert np.array_equal(src[orig], orig_nids[nid[s]]) and np.array_equal(dst[orig], orig_nids[nid[d]]), p
        seen_edges[orig[inner_edge]] += 1
        # the other edges: exactly the out-edges of inner nodes whose destination is owned elsewhere
        owner = node_owner[src], node_owner[dst]
        want = np.flatnonzero((owner[0] == p) & (owner[1] != p))
        assert np.array_equal(np.sort(orig[~inner_edge]), want), p
        assert inner[s[~inner_edge]].all() and not inner[d[~inner_edge]].any()
        for name, data in graph.node_data.items():
            assert np.array_equal(nfeat[f"_N/{name}"].numpy(), np.asarray(data)[orig_nids[nid[inner]]]), name
        assert np.array_equal(efeat["_N:_E:_N/edge_w"].numpy(), edge_weight[orig[inner_edge]])  # rows of inner edges
    assert np.all(seen_edges == 1) and np.all(seen_nodes == 1)
    return {"nodes": int(graph.num_nodes), "edges": int(src.size), "parts": num_parts}


def convert_and_check(graph_path: Path, work: Path, num_parts: int = 3) -> dict:
    graph, weight, parts = partition_with_edge_weights(graph_path, work, num_parts)
    convert_partitions(parts, work / "dgl", to="dgl", graph_name="g", force=True)
    return check_dgl_partitions(work / "dgl" / "g.json", graph, weight, num_parts)


def check_dgl_typed(config: Path, graph, num_parts: int) -> dict:
    """Load every partition of a typed conversion with DGL and compare it with `graph` (a gpart HeteroGraph)."""
    os.environ.setdefault("DGLBACKEND", "pytorch")
    import dgl
    import torch

    orig_nids = {t: v.numpy() for t, v in torch.load(config.parent / "orig_nids.pt", weights_only=True).items()}
    orig_eids = {e: v.numpy() for e, v in torch.load(config.parent / "orig_eids.pt", weights_only=True).items()}
    ntypes, etypes = graph.node_types, graph.edge_types
    assert list(orig_nids) == ntypes and list(orig_eids) == etypes
    node_map = json.loads(config.read_text())["node_map"]
    gpb = dgl.distributed.load_partition_book(str(config), 0)[0]
    os.environ["DGL_DIST_DEBUG"] = "1"  # load_partition runs DGL's own _verify_dgl_partition of every partition, too
    # the partition DGL's book gives each input node: per-type ids 0..N_t-1 are orig_nids[t]'s positions
    owner = {t: np.empty(graph.num_nodes[t], np.int64) for t in ntypes}
    for t in ntypes:
        owner[t][orig_nids[t]] = gpb.nid2partid(torch.arange(graph.num_nodes[t]), t).numpy()
    seen_nodes = {t: np.zeros(graph.num_nodes[t], np.int64) for t in ntypes}
    seen_edges = {e: np.zeros(graph.num_edges(e), np.int64) for e in etypes}
    for p in range(num_parts):
        g, nfeat, efeat, gpb, _, got_ntypes, got_etypes = dgl.distributed.load_partition(str(config), p)
        assert got_ntypes == ntypes and got_etypes == etypes, (got_ntypes, got_etypes)
        inner = g.ndata["inner_node"].numpy().astype(bool)
        nid = g.ndata["_ID"].numpy()
        ntype_idx, typed_nid = (x.numpy() for x in gpb.map_to_per_ntype(torch.from_numpy(nid)))
        assert np.array_equal(ntype_idx, g.ndata["_TYPE"].numpy())
        assert np.all(gpb.nid2partid(torch.from_numpy(nid)).numpy() == g.ndata["part_id"].numpy())
        assert np.array_equal(np.sort(nid[inner]), np.concatenate([np.arange(*node_map[t][p]) for t in ntypes])), p
        node_in = np.empty(nid.size, np.int64)  # each local node's input typed id
        for i, t in enumerate(ntypes):
            mine = ntype_idx == i
            node_in[mine] = orig_nids[t][typed_nid[mine]]
            held = inner & mine
            assert np.all(owner[t][node_in[held]] == p)
            seen_nodes[t][node_in[held]] += 1
            for name, data in graph.node_data.get(t, {}).items():
                assert np.array_equal(nfeat[f"{t}/{name}"].numpy(), np.asarray(data)[node_in[held]]), (t, name)
        s, d = (x.numpy() for x in g.edges())
        eid = g.edata["_ID"].numpy()
        inner_edge = g.edata["inner_edge"].numpy().astype(bool)
        assert np.array_equal(inner_edge, inner[d])  # as DGL's own partitions: inner edges are the inner nodes' in-edges
        etype_idx, typed_eid = (x.numpy() for x in gpb.map_to_per_etype(torch.from_numpy(eid)))
        assert np.array_equal(etype_idx, g.edata["_TYPE"].numpy())
        assert np.all((gpb.eid2partid(torch.from_numpy(eid)).numpy() == p) == inner_edge)
        for r, e in enumerate(etypes):
            mine = etype_idx == r
            orig = orig_eids[e][typed_eid[mine]]
            src, dst = (np.asarray(x, np.int64) for x in graph.edges[e])
            assert np.all(ntype_idx[s[mine]] == ntypes.index(e[0])) and np.all(ntype_idx[d[mine]] == ntypes.index(e[2]))
            assert np.array_equal(src[orig], node_in[s[mine]]) and np.array_equal(dst[orig], node_in[d[mine]]), (p, e)
            here = inner_edge[mine]
            seen_edges[e][orig[here]] += 1
            want_out = np.flatnonzero((owner[e[0]][src] == p) & (owner[e[2]][dst] != p))
            assert np.array_equal(np.sort(orig[~here]), want_out), (p, e)
            for name, data in graph.edge_data.get(e, {}).items():
                assert np.array_equal(efeat[f"{':'.join(e)}/{name}"].numpy(), np.asarray(data)[orig[here]]), (e, name)
    assert all(np.all(v == 1) for v in seen_nodes.values()) and all(np.all(v == 1) for v in seen_edges.values())
    return {"nodes": sum(graph.num_nodes.values()), "edges": sum(graph.num_edges(e) for e in etypes), "parts": num_parts,
            "types": (len(ntypes), len(etypes))}


def convert_and_check_typed(npz: Path, work: Path, num_parts: int = 3, halo: int = 0) -> dict:
    graph, parts = partition_typed(npz, work, num_parts, halo=halo)
    convert_partitions(parts, work / "dgl_typed", to="dgl", graph_name="typed", force=True)
    return check_dgl_typed(work / "dgl_typed" / "typed.json", graph, num_parts)


def check_standalone(graph_path: Path, work: Path) -> dict:
    """One-partition conversion opened as a DistGraph; a DistDGL SparseAdam resumed from export-ckpt files."""
    os.environ["DGL_DIST_MODE"] = "standalone"
    os.environ.setdefault("DGLBACKEND", "pytorch")
    import dgl
    import torch

    graph = read_graph(graph_path)
    n = graph.num_nodes
    partition_graph(graph_path, work / "p1", 1, "remainder", force=True)
    convert_partitions(work / "p1", work / "d1", to="dgl", graph_name="g1", force=True)
    rng = np.random.default_rng(0)
    arrays = {"ent": rng.standard_normal((n, 8)).astype(np.float32), "ent.step": rng.integers(0, 5000, n).astype(np.int32),
              "ent.exp_avg": rng.standard_normal((n, 8)).astype(np.float32), "ent.exp_avg_sq": rng.random((n, 8)).astype(np.float32)}
    policy = RemainderPolicy(n, 3)
    (work / "run").mkdir()
    entries = [write_shard(work / "run", t, r, 3, a[policy.global_ids(r)]) for t, a in arrays.items() for r in range(3)]
    opt_params = {"type": "adam", "lr": 0.05, "betas": [0.8, 0.99], "eps": 1e-7}
    spec = ck.EmbeddingSpec("ent", n, (8,), "float32", policy)
    write_checkpoint_manifest(work / "run", ck.build_checkpoint_manifest([spec], entries, 3, opt_params))
    export_checkpoint(work / "run", work / "exp", to="distdgl", options=ExportOptions(world_size=1))

    dgl.distributed.initialize(None)
    g = dgl.distributed.DistGraph("g1", part_config=str(work / "d1" / "g1.json"))
    src, dst = np.asarray(graph.src, np.int64), np.asarray(graph.dst, np.int64)
    seeds = np.unique(dst)[:: max(1, n // 50)]
    sub = dgl.distributed.sample_neighbors(g, torch.from_numpy(seeds), -1)
    got = sorted(zip(*(t.tolist() for t in sub.edges())))
    want = sorted(zip(src[np.isin(dst, seeds)].tolist(), dst[np.isin(dst, seeds)].tolist()))
    assert got == want, "sample_neighbors differs from the input's in-edges"

    emb = dgl.distributed.DistEmbedding(n, 8, name="ent", init_func=lambda shape, dtype: torch.zeros(shape, dtype=dtype))
    opt = dgl.distributed.optim.SparseAdam([emb], lr=0.001)
    opt.load(str(work / "exp" / "sparse_opt"))  # DGL 2.1's name for load_state_from
    tables = torch.load(work / "exp" / "sparse_opt_emb_0.pt", weights_only=True)
    emb.weight[tables["ent.ids"]] = tables["ent"]
    ids = torch.arange(n)
    step, mem, power = (state[ids] for state in opt._state["ent"])
    assert torch.equal(step, torch.from_numpy(arrays["ent.step"].astype(np.float32)))
    assert torch.equal(mem, torch.from_numpy(arrays["ent.exp_avg"])) and torch.equal(power, torch.from_numpy(arrays["ent.exp_avg_sq"]))
    assert torch.equal(emb.weight[ids], torch.from_numpy(arrays["ent"]))
    assert (opt._lr, opt._beta1, opt._beta2, opt._eps) == (0.05, 0.8, 0.99, 1e-7)
    typed_edges = _check_typed_distgraph(work)  # last: its node types' policies would make DistEmbedding's ambiguous
    return {"sampled_edges": len(got), "rows": n, "typed_sampled_edges": typed_edges}


def _check_typed_distgraph(work: Path) -> int:
    """A one-partition typed conversion of typed Cora as a DistGraph (DGL already initialised standalone): its types,
    every sampled in-edge of every type of some papers, and their feature rows, through orig_nids."""
    import dgl
    import torch

    graph, parts = partition_typed(CORA_TYPED, work, 1, method="remainder")
    convert_partitions(parts, work / "t1", to="dgl", graph_name="t1", force=True)
    g = dgl.distributed.DistGraph("t1", part_config=str(work / "t1" / "t1.json"))
    assert g.ntypes == graph.node_types and g.canonical_etypes == graph.edge_types
    orig = {t: v.numpy() for t, v in torch.load(work / "t1" / "orig_nids.pt", weights_only=True).items()}
    seeds = torch.arange(0, graph.num_nodes["paper"], 40)
    sub = dgl.distributed.sample_neighbors(g, {"paper": seeds}, -1)
    sampled = 0
    assert set(sub.canonical_etypes) <= {e for e in graph.edge_types if e[2] == "paper"}  # in-edges of papers only
    for e in sub.canonical_etypes:
        src, dst = (np.asarray(x, np.int64) for x in graph.edges[e])
        into = np.isin(dst, orig["paper"][seeds.numpy()])
        want = sorted(zip(src[into].tolist(), dst[into].tolist()))
        s, d = (x.numpy() for x in sub.edges(etype=e))
        assert sorted(zip(orig[e[0]][s].tolist(), orig[e[2]][d].tolist())) == want, e
        sampled += len(want)
    feat = g.nodes["paper"].data["feat"][seeds].numpy()
    assert np.array_equal(feat, np.asarray(graph.node_data["paper"]["feat"])[orig["paper"][seeds.numpy()]])
    return sampled


def main() -> None:
    graphs, typed_edges = graphs_and_typed_edges(sys.argv[1:])
    import dgl
    import torch

    print(f"dgl {dgl.__version__}, torch {torch.__version__}")
    for path in graphs:
        with tempfile.TemporaryDirectory() as tmp:
            result = convert_and_check(path, Path(tmp))
        print(f"OK {path}: {result['nodes']:,} nodes, {result['edges']:,} edges, {result['parts']} parts: "
              "dgl.distributed.load_partition returns every edge and feature row")
    with tempfile.TemporaryDirectory() as tmp:
        for label, npz in typed_inputs(Path(tmp), typed_edges):
            for halo in (0, 1) if "Cora" in label else (0,):
                result = convert_and_check_typed(npz, Path(tmp), halo=halo)
                print(f"OK {label}, halo {halo}: {result['nodes']:,} nodes, {result['edges']:,} edges, {result['types'][0]} node and "
                      f"{result['types'][1]} edge types, {result['parts']} parts: load_partition returns every typed edge and data row")
    with tempfile.TemporaryDirectory() as tmp:
        result = check_standalone(DEFAULT_GRAPHS[0], Path(tmp))
    print(f"OK DistGraph over a converted partition: sample_neighbors returned the input's {result['sampled_edges']} in-edges "
          f"(typed Cora: {result['typed_sampled_edges']} typed in-edges, feature rows too); "
          f"DistDGL SparseAdam.load resumed {result['rows']:,} rows of export-ckpt --to distdgl states exactly")


if __name__ == "__main__":
    main()
