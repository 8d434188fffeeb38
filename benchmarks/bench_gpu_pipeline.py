"""The runtime's pipeline on one device: sampling, gathering x and y, a GraphSAGE epoch; beside other samplers.

    python benchmarks/bench_gpu_pipeline.py                       # ogbn-products' size on CUDA when present
    python benchmarks/bench_gpu_pipeline.py --scale 0.1 --device cpu --batches 3   # a tenth of it, on this CPU

A generated power-law graph of ogbn-products' size (2,449,029 nodes,
61,859,140 edges, 100 float32 features, 47 classes; --scale shrinks nodes and
edges alike), one partition, loaded on --device. Fanouts [15, 10, 5], batch
sizes 1024 and 8192, the same seeds (a fixed permutation of the training
nodes, no shuffling) for every sampler. Printed per batch size:

- gpart, topology only: sampled edges/s (the loader's whole batch: sampling,
  relabelling, edge_index), with the torch ops and host synchronisations of
  one batch (gpart.runtime.sampling.op_count); on CUDA also padded batches
  (padded=True: no synchronisation) and padded batches replayed from CUDA
  graphs (loader.protocol.replay);
- gpart with x and y gathered: batches/s;
- a GraphSAGE step (examples/train_sage.py's model: 3 mean-aggregation layers,
  hidden 256, trimmed per layer; on CUDA padded batches, the mean over their
  fanout tables, bfloat16 autocast and TF32; Adam) on those batches: seconds
  per batch, and the epoch over every training node
  (measured when --batches covers the epoch, else extrapolated: said so);
- on CUDA, graphs larger than the GPU: the same loader with the topology in
  pinned host memory read by the GPU (load_partition(topology="pinned")), and
  with x in host memory behind a device cache of 20% of the rows (its hit rate
  printed); the issue's bar: 3x Quiver's 34 M edges/s from host memory, and
  batches/s with x within 1.5x of all on the GPU;
- gpart on the CPU beside, when --device is CUDA (the CPU path of the same code);
  on the CPU, also the GPU's hop form (`loader.sampler.table_hops`) run on the CPU;
- WholeGraph's `unweighted_sample_without_replacement` per hop on the same
  CSC in GPU memory, when pylibwholegraph is importable and CUDA is present
  (sampling only: WholeGraph's kernel draws neighbours; the relabelling to a
  batch is not part of it, so it is a lower bound of a loader on it);
- DGL 2.1's `sample_neighbors` + `to_block` per hop, one thread, on the CPU, in
  DGL's own interpreter (--dgl-python, as bench_dgl_cut.py) when it exists;
  gpart runs one thread too for this comparison (`gpart 1 thread`, or the
  first row with --threads 1).
Each figure is the median of --repeats runs of --batches batches after a
warm-up batch; sampled edges also per CPU second of the sampling process (on
a shared CPU with one thread each, what the machine's load changes least);
compare figures of the same run only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from harness import child_result, peak_rss_mib, script_child  # first: puts the repository root on sys.path

HERE = Path(__file__).resolve()
PRODUCTS = (2_449_029, 61_859_140)
FANOUTS = [15, 10, 5]


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prepare(workdir: Path, nodes: int, edges: int) -> tuple[Path, Path]:
    """(the generated graph, its one-partition result), written when missing."""
    from gpart.pipeline.partition import partition_graph  # gpart's side only: the DGL child runs this module without gpart
    from tests.support.synthetic import write_powerlaw_npz

    workdir.mkdir(parents=True, exist_ok=True)
    graph = workdir / f"products_like_{nodes}_{edges}.npz"
    parts = workdir / f"parts_{nodes}_{edges}"
    if not graph.exists():
        start = time.perf_counter()
        write_powerlaw_npz(graph, nodes, edges, feat_dim=100, seed=0, num_classes=47)
        print(f"generated {graph} in {time.perf_counter() - start:.1f} s", flush=True)
    if not (parts / "manifest.json").exists():
        start = time.perf_counter()
        partition_graph(graph, parts, 1, "remainder")
        print(f"partitioned into {parts} in {time.perf_counter() - start:.1f} s", flush=True)
    return graph, parts


def seed_order(graph: Path, count: int) -> np.ndarray:
    """The seeds every sampler gets: a fixed permutation of the training nodes, repeated up to `count` ids."""
    with np.load(graph) as z:
        train = np.flatnonzero(z["train_mask"])
    return np.resize(np.random.default_rng(0).permutation(train), count)


def _rate(work) -> tuple[float, float]:
    """`work()`'s count per wall second and per CPU second of this process (one thread: the latter is what a
    shared machine's load changes least)."""
    wall, cpu = time.perf_counter(), time.process_time()
    count = work()
    return count / (time.perf_counter() - wall), count / max(time.process_time() - cpu, 1e-9)


def _median_rate(run, repeats: int) -> tuple[float, float]:
    """The (wall, CPU) rates of the run with the median wall rate among `repeats`."""
    rates = sorted(run() for _ in range(repeats))
    return rates[len(rates) // 2]


def gpart_side(parts: Path, device_name: str, seeds: np.ndarray, batch: int, batches: int, repeats: int,
               with_model: bool, train_count: int, table_hops: Optional[bool] = None, **load_options) -> dict:
    """gpart's figures on one device for one batch size (table_hops: force the loader's hop form, None: its default;
    load_options: load_partition's, e.g. topology="pinned", feature_device="cpu", cache=0.2)."""
    import gpart.runtime as gr  # gpart's side only: the DGL child runs this module without gpart

    part = gr.load_partition(parts, device=device_name, **load_options)
    device = part.device
    for t in (part.indptr, part.indices, part.node_ids, part.edge_ids, *part.node_data.values()):
        int(t.reshape(-1)[::512].to(torch.float64).sum())  # every page read once: figures are not page-fault counts
    ids = torch.from_numpy(seeds[: batch * (batches * repeats + 5)])  # warm-ups and counted batches too

    def loader(**kw):
        made = gr.DistNeighborLoader(part, ids, fanouts=FANOUTS, batch_size=batch, shuffle=False, **kw)
        made.sampler.table_hops = made.sampler.table_hops if table_hops is None else table_hops
        return iter(made)

    topo = loader(node_data=None, labels=None)
    next(topo)

    def edges() -> int:
        _sync(device)
        count = sum(next(topo).num_edges for _ in range(batches))
        _sync(device)
        return count

    out = dict(zip(("edges_per_s", "edges_per_cpu_s"), _median_rate(lambda: _rate(edges), repeats)))
    from gpart.runtime.sampling.op_count import OpCounter  # gpart's side only, as above

    with OpCounter() as count:
        next(topo)
    out["ops"], out["syncs"] = count.ops, count.syncs
    if device.type == "cuda":  # padded batches (no synchronisation), eager then replayed from CUDA graphs
        out.update(padded_rates(part, ids, batch, batches, repeats))
    full = loader(node_data=["feat"], labels="label")
    next(full)

    def gathered() -> int:
        _sync(device)
        for _ in range(batches):
            b = next(full)
        _sync(device)
        out["x_mib"] = b.x.numel() * b.x.element_size() / 2**20
        return batches

    out["batches_per_s"] = _median_rate(lambda: _rate(gathered), repeats)[0]
    if part.row_cache is not None:
        out["hit_rate"] = part.cache_stats()["feat"]["hit_rate"]
    if with_model:
        out.update(sage_step_seconds(part, ids, batch, batches, train_count))
    out["rss_mib"] = peak_rss_mib()
    return out


def padded_rates(part, ids: torch.Tensor, batch: int, batches: int, repeats: int) -> dict:
    """Sampled edges/s of padded batches (padded=True: no host synchronisation), eager and replayed from CUDA graphs
    (loader.protocol.replay); the edges are counted from the batches' device sizes after the timing."""
    import gpart.runtime as gr  # gpart's side only: the DGL child runs this module without gpart
    from gpart.runtime.sampling.op_count import OpCounter

    out = {}
    for label, replay in (("padded", False), ("replayed", True)):
        loader = gr.DistNeighborLoader(part, ids, fanouts=FANOUTS, batch_size=batch, shuffle=False, node_data=None,
                                       labels=None, padded=True)
        loader.protocol.replay = replay
        it = iter(loader)
        for _ in range(3):  # warm: buffers made, graphs captured
            next(it)

        def edges(it=it) -> int:
            _sync(part.device)
            sizes = [next(it).sizes[-1].clone() for _ in range(batches)]  # reused buffers: keep the counts
            _sync(part.device)
            return int(torch.stack(sizes).sum())

        with OpCounter() as count:
            next(it)
        out[f"{label}_edges_per_s"] = _median_rate(lambda: _rate(edges), repeats)[0]
        out[f"{label}_ops"], out[f"{label}_syncs"] = count.ops, count.syncs
    return out


def sage_step_seconds(part, ids, batch: int, batches: int, train_count: int) -> dict:
    """Seconds per training step (batch sampled, x and y gathered, forward, backward, Adam) and the epoch."""
    import gpart.runtime as gr  # gpart's side only: the DGL child runs this module without gpart

    example = example_sage()
    torch.manual_seed(0)
    model = example.SAGE(100, 256, 47, len(FANOUTS), dropout=0.0, row_normalize=False).to(part.device)
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    cuda = part.device.type == "cuda"  # as the example: padded batches, TF32, bfloat16 on a GPU
    torch.backends.cuda.matmul.allow_tf32 = cuda
    it = iter(gr.DistNeighborLoader(part, ids, fanouts=FANOUTS, batch_size=batch, shuffle=False, padded=cuda))

    def step() -> None:
        b = next(it)
        loss = torch.nn.functional.cross_entropy(example.forward(model, b), b.y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()  # warm-up
    _sync(part.device)
    start = time.perf_counter()
    for _ in range(batches):
        step()
    _sync(part.device)
    per = (time.perf_counter() - start) / batches
    per_epoch = -(-train_count // batch)
    return {"step_s": per, "epoch_s": per * per_epoch, "epoch_batches": per_epoch, "epoch_measured": batches >= per_epoch}


def example_sage():
    """examples/train_sage.py as a module: the benchmark trains the model a user copies (per-layer trimming, the
    fanout-table mean on padded batches, bfloat16 autocast on CUDA)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpart_example_train_sage", HERE.parents[1] / "examples" / "train_sage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_WHOLEMEMORY: dict = {}


def wholegraph_side(parts: Path, seeds: np.ndarray, batch: int, batches: int, repeats: int) -> dict:
    """WholeGraph's per-hop sampler on gpart's CSC copied into WholeMemory on the GPU (sampled edges/s; the next
    frontier by torch.unique), or why it did not run."""
    if not torch.cuda.is_available():
        return {"error": "no CUDA device"}
    try:  # optional: NVIDIA's pylibwholegraph wheels (DEVELOPERS.md)
        with contextlib.suppress(ImportError):  # librmm-cu13's library is loaded before pylibwholegraph links to it
            import librmm

            librmm.load_library()
        from pylibwholegraph.torch import initialize as wg_init
        from pylibwholegraph.torch import tensor as wg_tensor
        from pylibwholegraph.torch import wholegraph_ops
    except ImportError as exc:
        return {"error": f"pylibwholegraph not importable ({exc})"}
    import gpart.runtime as gr  # gpart's side only: the DGL child runs this module without gpart

    if "comm" not in _WHOLEMEMORY:  # WholeMemory initialises once a process: every batch size reuses it
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        _WHOLEMEMORY["comm"] = wg_init.init_torch_env_and_create_wm_comm(0, 1, 0, 1)[0]  # one process, one GPU
    comm = _WHOLEMEMORY["comm"]
    part = gr.load_partition(parts, device="cpu")
    csr = []
    for host in (part.indptr, part.indices):  # CSC of in-edges = WholeGraph's CSR of the sampled nodes
        wm = wg_tensor.create_wholememory_tensor(comm, "continuous", "cuda", [host.numel()], host.dtype, None)
        local, offset = wm.get_local_tensor()
        local.copy_(host[offset:offset + local.numel()])
        csr.append(wm)
    ids = torch.from_numpy(seeds).to("cuda")
    state = {"at": 0}

    def sampled() -> int:
        torch.cuda.synchronize()
        edges = 0
        for _ in range(batches):
            frontier = ids[state["at"]:state["at"] + batch]
            state["at"] += batch
            for fanout in FANOUTS:
                _, dest = wholegraph_ops.unweighted_sample_without_replacement(csr[0].wmb_tensor, csr[1].wmb_tensor, frontier,
                                                                               fanout, random_seed=state["at"])
                edges += int(dest.numel())
                frontier = torch.unique(dest)
        torch.cuda.synchronize()
        return edges

    return {"edges_per_s": _median_rate(lambda: _rate(sampled), repeats)[0]}


def dgl_child(graph: Path, seeds_file: Path, batch: int, batches: int, repeats: int) -> dict:
    """In DGL's interpreter: sample_neighbors + to_block per hop, one thread, the given seeds (sampled edges/s)."""
    import dgl  # only in DGL's interpreter

    torch.set_num_threads(1)
    with np.load(graph) as z:
        src, dst, n = torch.from_numpy(z["src"]), torch.from_numpy(z["dst"]), int(z["num_nodes"])
    g = dgl.graph((src, dst), num_nodes=n)
    g.create_formats_()
    ids = torch.from_numpy(np.load(seeds_file))
    state = {"at": 0}

    def one(seeds) -> int:
        edges = 0
        for fanout in FANOUTS:
            frontier = dgl.sampling.sample_neighbors(g, seeds, fanout)
            block = dgl.to_block(frontier, seeds)
            edges += block.num_edges()
            seeds = block.srcdata[dgl.NID]
        return edges

    one(ids[:batch])

    def sampled() -> int:
        edges = 0
        for _ in range(batches):
            state["at"] += batch
            edges += one(ids[state["at"]:state["at"] + batch])
        return edges

    wall, cpu = _median_rate(lambda: _rate(sampled), repeats)
    return {"edges_per_s": wall, "edges_per_cpu_s": cpu, "version": dgl.__version__}


def dgl_side(args, graph: Path, seeds: np.ndarray, batch: int) -> dict:
    if not Path(args.dgl_python).exists():
        return {"error": f"{args.dgl_python} not found"}
    seeds_file = args.workdir / "seeds.npy"
    np.save(seeds_file, seeds)
    cmd = script_child(HERE, "dgl", "--graph", str(graph), "--seeds", str(seeds_file), "--batch", str(batch),
                       "--batches", str(args.batches), "--repeats", str(args.repeats), python=args.dgl_python)
    try:
        # one thread: torch's and DGL's OpenMP pool (DGL's samplers are OpenMP loops)
        return child_result(cmd, env={**os.environ, "PYTHONPATH": str(HERE.parents[1]), "OMP_NUM_THREADS": "1"})
    except Exception as exc:  # noqa: BLE001 - the comparison is optional: say why it is missing
        return {"error": f"DGL child failed: {str(getattr(exc, 'stderr', exc)).strip().splitlines()[-1:]}"}


def one_thread_gpart(parts: Path, seeds: np.ndarray, batch: int, batches: int, repeats: int) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return gpart_side(parts, "cpu", seeds, batch, batches, repeats, False, 0)
    finally:
        torch.set_num_threads(threads)


def report(batch: int, rows: list[tuple[str, dict]]) -> None:
    print(f"\nbatch {batch}, fanouts {FANOUTS}")
    print(f"  {'sampler':<36}{'M edges/s':>10}{'/CPU-s':>8}{'batches/s x,y':>15}{'SAGE s/step':>12}{'epoch s':>9}  note")
    for name, r in rows:
        if "error" in r:
            print(f"  {name:<36}{'-':>10}{'-':>8}{'-':>15}{'-':>12}{'-':>9}  {r['error']}")
            continue
        per_cpu = f"{r['edges_per_cpu_s'] / 1e6:.2f}" if "edges_per_cpu_s" in r else "-"
        bps = f"{r['batches_per_s']:.2f}" if "batches_per_s" in r else "-"
        step = f"{r['step_s']:.3f}" if "step_s" in r else "-"
        epoch = f"{r['epoch_s']:.1f}" if "epoch_s" in r else "-"
        note = ""
        if "epoch_s" in r and not r["epoch_measured"]:
            note = f"epoch extrapolated from {r['epoch_batches']} batches x measured step; "
        if "x_mib" in r:
            note += f"x {r['x_mib']:.0f} MiB/batch; RSS {r['rss_mib']:.0f} MiB"
        if "ops" in r:
            note += f"; {r['ops']} ops, {r['syncs']} syncs/batch"
        if "hit_rate" in r:
            note += f"; cache hit rate {r['hit_rate']:.1%}"
        print(f"  {name:<36}{r['edges_per_s'] / 1e6:10.2f}{per_cpu:>8}{bps:>15}{step:>12}{epoch:>9}  {note}", flush=True)
        for label in ("padded", "replayed"):
            if f"{label}_edges_per_s" in r:
                print(f"  {'  ' + label + ' batches':<36}{r[label + '_edges_per_s'] / 1e6:10.2f}{'-':>8}{'-':>15}{'-':>12}"
                      f"{'-':>9}  {r[label + '_ops']} ops, {r[label + '_syncs']} syncs/batch", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of ogbn-products' nodes and edges (default 1)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--batch-sizes", default="1024,8192")
    parser.add_argument("--batches", type=int, default=20, help="timed batches per run (default 20)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's); 1 on a shared CPU")
    parser.add_argument("--skip-model", action="store_true", help="no GraphSAGE step (sampling and gathering only)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_gpu_pipeline"))
    parser.add_argument("--dgl-python", default="/tmp/dglvenv/bin/python")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--graph", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--seeds", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "dgl":
        print(json.dumps(dgl_child(args.graph, args.seeds, args.batch, args.batches, args.repeats)))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    nodes, edges = (max(1000, int(v * args.scale)) for v in PRODUCTS)
    graph, parts = prepare(args.workdir, nodes, edges)
    print(f"graph: {nodes} nodes, {edges} edges, 100 float32 features, 47 classes; device {device}; torch threads "
          f"{torch.get_num_threads()}" + ("" if device.startswith("cuda") else "; CUDA figures: not measured (no GPU)"))
    with np.load(graph) as z:
        train_count = int(np.count_nonzero(z["train_mask"]))
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        seeds = seed_order(graph, batch * (args.batches * args.repeats + 6))
        rows = [(f"gpart on {device}", gpart_side(parts, device, seeds, batch, args.batches, args.repeats, not args.skip_model,
                                                          train_count))]
        if device.startswith("cuda"):  # graphs larger than the GPU: topology, then x, in pinned host memory
            rows.append(("gpart, topology in pinned host memory", gpart_side(parts, device, seeds, batch, args.batches, args.repeats,
                                                                             False, 0, topology="pinned")))
            rows.append(("gpart, x in host memory + 20% cache", gpart_side(parts, device, seeds, batch, args.batches, args.repeats,
                                                                           False, 0, feature_device="cpu", cache=0.2)))
            rows.append(("gpart on cpu (same code)", gpart_side(parts, "cpu", seeds, batch, args.batches, args.repeats, False, 0)))
        rows.append(("WholeGraph sampler (GPU)", wholegraph_side(parts, seeds, batch, args.batches, args.repeats)))
        if device == "cpu":  # the GPU's hop form (sample_table + add_masked) through the same code on the CPU
            rows.append(("gpart table hops (GPU path) on cpu",
                         gpart_side(parts, "cpu", seeds, batch, args.batches, args.repeats, False, 0, table_hops=True)))
        if torch.get_num_threads() > 1 or device != "cpu":  # else the first row is gpart on one CPU thread already
            rows.append(("gpart 1 thread (cpu)", one_thread_gpart(parts, seeds, batch, args.batches, args.repeats)))
        rows.append(("DGL sample_neighbors+to_block 1 thread", dgl_side(args, graph, seeds, batch)))
        report(batch, rows)


if __name__ == "__main__":
    main()
