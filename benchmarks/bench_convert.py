"""Benchmark `gpart convert` (PyG, GLT) and `gpart export-ckpt` beside `gpart partition` itself.

    python benchmarks/bench_convert.py [--input G.npz] [--parts 4] [--method remainder] [--targets pyg,glt] [--ckpt-rows 1000000] [--skip-ckpt]
    python benchmarks/bench_convert.py --typed 3000000   # only (e), typed Cora and a generated typed graph of that many edges
    PYTHONPATH=. /path/to/dgl-venv/bin/python benchmarks/bench_convert.py --typed 3000000 --targets dgl   # (e) for DGL
    PYTHONPATH=. /path/to/dgl-venv/bin/python benchmarks/bench_convert.py --targets dgl --skip-ckpt   # where dgl imports

Every measurement runs in its own subprocess, so each peak RSS is that
process's own (resource.getrusage). Figures, all from the same run:

(a) `gpart partition` of the input (default: the 1M-node / 10M-edge / 128-dim
    power-law graph of benchmarks/make_powerlaw.py, generated if missing);
(b) `gpart convert --to pyg` and `--to glt` (and `--to dgl` with --targets, in a
    venv where dgl imports) of that result;
(c) baseline for (b): the same per-partition tensors built the simple way, every
    partition array read fully into memory (np.fromfile) and torch.save'd (and
    fsynced, as gpart's outputs are), as PyG's Partitioner saves its in-memory
    partitions; a plain copy of the partition directory, fsynced (the I/O
    floor); and `import torch` alone (its time and RSS are part of every
    torch.save writer);
(d) `gpart export-ckpt --to wholegraph` of a range-sharded lazyadam and of an adam
    checkpoint (1M x 64 by default: 736 MiB for adam; adam's step counts become
    LazyAdam's beta12t, SPEC.md 6.7) and `--to distdgl` of the adam one, each beside a
    plain (fsynced) copy of the checkpoint directory.
(e) with --typed E: `gpart convert --to T` (T of --targets: pyg, glt, and dgl where dgl
    imports) of typed results (SPEC.md 7.5-7.7): typed Cora (sample_data/cora_hetero.npz)
    and, with E > 0, benchmarks/bench_hetero.py's generated typed graph of E edges, each
    beside the same conversion of its homogeneous (type-erased) twin (the same edges over
    erased ids, and the same `feat` bytes where every node type has `feat`; Cora's words
    have none, so its twin carries no features), both partitioned with --method.

Temporary data lives in /tmp/gpart-bench-convert/ and is deleted at the end
(the input too when this script generated it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

DEFAULT_INPUT = Path("/tmp/gpart-bench-convert/powerlaw_1m_10m.npz")
WORKDIR = Path("/tmp/gpart-bench-convert")


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


# --------------------------------------------------------------------------- children (one measurement each)


def child(args) -> dict:
    # Each child process imports only what its one measurement runs (here and in the helpers it calls), so that
    # its time and peak RSS are that work's, import torch's included where the work needs it.
    start = time.perf_counter()
    if args.child == "partition":
        from gpart.pipeline.partition import partition_graph

        partition_graph(args.input, args.out, args.parts, args.method, force=True)
    elif args.child == "convert":
        from gpart.convert import convert_partitions

        convert_partitions(args.input, args.out, to=args.target, force=True)
    elif args.child == "naive":
        naive_torch_save(Path(args.input), Path(args.out))
    elif args.child == "import-torch":
        import torch  # noqa: F401
    elif args.child == "copy":
        shutil.copytree(args.input, args.out)
        for f in Path(args.out).rglob("*"):  # fsynced like every gpart output, so the times compare
            if f.is_file():
                fd = os.open(f, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
    elif args.child == "make-ckpt":
        make_checkpoint(Path(args.out), args.rows, args.dim, args.optimizer)
    elif args.child == "export":
        from gpart.ckpt import ExportOptions, export_checkpoint

        export_checkpoint(args.input, args.out, to=args.target, options=ExportOptions(world_size=args.world), force=True)
    wall = time.perf_counter() - start
    return {"wall": wall, "rss": peak_rss_mib(), "bytes": dir_bytes(Path(args.out)) if args.out and Path(args.out).exists() else 0}


def naive_torch_save(parts: Path, out: Path) -> None:
    """The baseline: every array of every partition read whole into memory, converted and torch.save'd."""
    import torch

    m = json.loads((parts / "manifest.json").read_text())
    out.mkdir(parents=True)
    load = lambda p, k: np.fromfile(parts / m["partitions"][p]["arrays"][k]["file"], dtype=m["partitions"][p]["arrays"][k]["dtype"])  # noqa: E731
    for p, info in enumerate(m["partitions"]):
        node_ids, indptr, indices, eids = (load(p, k) for k in ("node_ids", "indptr", "indices", "edge_ids"))
        owned = node_ids[: info["num_owned"]]
        graph = {"edge_id": torch.from_numpy(eids), "row": torch.from_numpy(node_ids[indices]),
                 "col": torch.from_numpy(np.repeat(owned, np.diff(indptr))), "size": (m["graph"]["num_nodes"],) * 2}
        feats = {}
        for name, spec in m["node_data"].items():
            feats[name] = torch.from_numpy(load(p, f"node_data/{name}").reshape(-1, *spec["row_shape"]))
        (out / f"part_{p}").mkdir()
        for name, obj in (("graph.pt", graph), ("node_feats.pt", {"global_id": torch.from_numpy(owned), "feats": feats})):
            with open(out / f"part_{p}" / name, "wb") as fh:  # fsynced like every gpart output, so the times compare
                torch.save(obj, fh)
                fh.flush()
                os.fsync(fh.fileno())


def make_checkpoint(out: Path, rows: int, dim: int, optimizer: str) -> None:
    """A range-sharded checkpoint over 4 ranks written with the library's shard writer, in 64 MiB pieces."""
    from gpart.formats.checkpoint import entries as ck
    from gpart.formats.checkpoint.writer import write_checkpoint_manifest, write_shard
    from gpart.formats.sharding.policies import RangePolicy

    world = 4
    policy = RangePolicy.wholegraph(rows, world)
    out.mkdir(parents=True)
    rng = np.random.default_rng(0)
    tensors = {"emb": ("float32", (dim,))}
    for state, spec in ck.OPTIMIZER_STATES[optimizer].items():
        dtype = "int32" if state == "step" else "float32"
        tensors[ck.tensor_name("emb", state)] = (dtype, spec.shape_for((dim,)))
    entries = []
    for name, (dtype, shape) in tensors.items():
        for r in range(world):
            n = policy.count(r)

            def chunks(n=n, dtype=dtype, shape=shape):
                step = max(1, (64 << 20) // (4 * int(np.prod(shape, dtype=np.int64)) or 1))
                for a in range(0, n, step):
                    k = min(step, n - a)
                    yield rng.integers(0, 1000, (k, *shape)).astype(dtype) if dtype == "int32" else rng.random((k, *shape), dtype=np.float32)

            entries.append(write_shard(out, name, r, world, chunks(), dtype=dtype, row_shape=shape))
    spec = ck.EmbeddingSpec("emb", rows, (dim,), "float32", policy)
    opt = {"type": optimizer, "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8}
    write_checkpoint_manifest(out, ck.build_checkpoint_manifest([spec], entries, world, opt))


# --------------------------------------------------------------------------- parent


def typed_results(edges: int, parts: int, method: str, targets: list[str]) -> None:
    """(e): convert --to each target of typed results beside their type-erased twins."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_hetero import CORA, generate, untyped_twin

    from gpart.formats.input.typed import read_hetero_graph

    inputs = [("typed Cora", CORA)]
    if edges:
        gen = WORKDIR / "typed_gen.npz"
        generate(edges, gen)
        inputs.append((f"generated typed, {edges:,} edges", gen))
    for label, typed in inputs:
        g = read_hetero_graph(typed)
        twin = WORKDIR / f"{typed.stem}_twin.npz"
        untyped_twin(typed, twin, with_feat=all("feat" in g.node_data.get(t, {}) for t in g.node_types))
        print(f"  {label}: {sum(g.num_nodes.values()):,} nodes, {sum(g.num_edges(e) for e in g.edge_types):,} edges, {parts} parts, method {method}")
        for side, npz in (("erased twin", twin), ("typed", typed)):
            measure("partition", input=npz, out=WORKDIR / f"tparts_{side[0]}", parts=parts, method=method)
        for target in targets:
            results = {}
            for side in ("erased twin", "typed"):
                results[side] = measure("convert", input=WORKDIR / f"tparts_{side[0]}", out=WORKDIR / "tconv", target=target)
                shutil.rmtree(WORKDIR / "tconv")
            show(f"(e) gpart convert --to {target}, erased twin", results["erased twin"])
            show(f"(e) gpart convert --to {target}, typed", results["typed"], results["erased twin"])
        for side in ("e", "t"):
            shutil.rmtree(WORKDIR / f"tparts_{side}")
        twin.unlink()
        if typed != CORA:
            typed.unlink()


def checkpoint_exports(rows: int, world: int) -> None:
    """(d): export-ckpt of range-sharded checkpoints beside a plain copy of each."""
    for target, optimizer in (("wholegraph", "lazyadam"), ("wholegraph", "adam"), ("distdgl", "adam")):
        run = WORKDIR / f"run_{optimizer}"
        measure("make-ckpt", out=run, rows=rows, dim=64, optimizer=optimizer)
        copy = measure("copy", input=run, out=WORKDIR / "ckcopy")
        shutil.rmtree(WORKDIR / "ckcopy")
        print(f"  checkpoint: {rows:,} x 64 float32, {optimizer}, range over 4 ranks, {dir_bytes(run) / 2**20:.0f} MiB")
        show("(d) floor: copy of the checkpoint directory", copy)
        show(f"(d) gpart export-ckpt {optimizer} --to {target} -w {world}", measure("export", input=run, out=WORKDIR / target, target=target, world=world), copy)
        shutil.rmtree(WORKDIR / target)
        shutil.rmtree(run)


def measure(what: str, **kw) -> dict:
    cmd = [sys.executable, __file__, "--child", what] + [f"--{k.replace('_', '-')}={v}" for k, v in kw.items()]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"child {what} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def show(label: str, r: dict, base: dict | None = None) -> None:
    ratio = f"  ({r['wall'] / base['wall']:.2f}x time, {r['rss'] / base['rss']:.2f}x RSS of baseline)" if base else ""
    print(f"  {label:<44} {r['wall']:7.2f} s  peak RSS {r['rss']:7.0f} MiB  out {r['bytes'] / 2**20:8.0f} MiB{ratio}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--input", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--method", default="remainder", help="partition method of (a) (default remainder; metis works too, slower)")
    ap.add_argument("--target", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=4, help="world size of the exported checkpoints")
    ap.add_argument("--rows", type=int, default=1_000_000, help=argparse.SUPPRESS)
    ap.add_argument("--dim", type=int, default=64, help=argparse.SUPPRESS)
    ap.add_argument("--optimizer", default="lazyadam", help=argparse.SUPPRESS)
    ap.add_argument("--ckpt-rows", type=int, default=1_000_000, help="rows of the benchmark checkpoint (64 wide)")
    ap.add_argument("--skip-ckpt", action="store_true", help="skip (d)")
    ap.add_argument("--only-ckpt", action="store_true", help="only (d)")
    ap.add_argument("--typed", type=int, default=None, metavar="E", help="only (e): typed Cora and, if E > 0, a generated typed graph of E edges")
    ap.add_argument("--targets", default="pyg,glt", help="convert targets of (b), comma-separated (dgl needs dgl importable)")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return

    WORKDIR.mkdir(parents=True, exist_ok=True)
    if args.typed is not None:
        typed_results(args.typed, args.parts, args.method, args.targets.split(","))
        return
    if args.only_ckpt:
        checkpoint_exports(args.ckpt_rows, args.world)
        return
    made_input = False
    src = args.input or DEFAULT_INPUT
    if not src.exists():
        print(f"generating {src} (1M nodes, 10M edges, 128-dim features) ...", flush=True)
        subprocess.run([sys.executable, str(Path(__file__).with_name("make_powerlaw.py")), str(src)], check=True)
        made_input = src == DEFAULT_INPUT
    # into the page cache for every run alike, read by `cat`: a child's peak RSS counts its parent's
    # high-water mark (it survives fork and exec), so this process never holds data itself
    subprocess.run(["cat", str(src)], stdout=subprocess.DEVNULL, check=True)
    parts = WORKDIR / "parts"
    try:
        print(f"input {src} ({src.stat().st_size / 2**20:.0f} MiB), {args.parts} parts, method {args.method}; shared machine: compare within this run only")
        show(f"(a) gpart partition --method {args.method}", measure("partition", input=src, out=parts, parts=args.parts, method=args.method))
        base = measure("naive", input=parts, out=WORKDIR / "naive")
        shutil.rmtree(WORKDIR / "naive")
        copy = measure("copy", input=parts, out=WORKDIR / "copy")
        shutil.rmtree(WORKDIR / "copy")
        show("(c) baseline: read all + torch.save", base)
        show("(c) floor: copy of the partition directory", copy)
        show("(c) floor: import torch alone", measure("import-torch"))
        for target in args.targets.split(","):
            out = WORKDIR / target
            show(f"(b) gpart convert --to {target}", measure("convert", input=parts, out=out, target=target), base)
            shutil.rmtree(out)
        shutil.rmtree(parts)
        if not args.skip_ckpt:
            checkpoint_exports(args.ckpt_rows, args.world)
    finally:
        for p in (parts, WORKDIR / "pyg", WORKDIR / "glt", WORKDIR / "dgl", WORKDIR / "naive", WORKDIR / "copy"):
            shutil.rmtree(p, ignore_errors=True)
        if made_input:
            src.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
