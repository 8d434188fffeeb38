"""Benchmark `gpart partition` on the 1M-node / 10M-edge / 128-dim power-law graph.

    python benchmarks/bench_partition.py [--input G.npz] [--parts 4] [--skip-metis] [--repeat 2]

Every measurement runs in its own subprocess, so each peak RSS is that
process's own (resource.getrusage). The input is read once beforehand so
that every run finds it in the page cache.

(a) --method remainder, binary: wall and peak RSS beside the I/O floor
    measured in the same run: numpy loading the same input (np.load, every
    array) and writing the same number of bytes the partition wrote (fsynced,
    as gpart's writer does). Targets: wall <= 2.5x floor, peak RSS <= 1.5x the
    input's in-memory size.
(b) --method metis: end-to-end wall and peak RSS beside the raw pymetis call
    (same options) on a ready CSR of the same graph loaded from .npy.
    Targets: <= 1.3x wall and <= 1.3x peak RSS.
(c) edge cut and balance of every method.

Temporary data lives in /tmp/gpart-bench-partition/ and is deleted at the end
(the input too when this script generated it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
from harness import child_result, dir_bytes, fastest, peak_rss_mib, script_child  # first: puts the repository root on sys.path

from tests.support.synthetic import write_powerlaw_npz

DEFAULT_INPUT = Path("/tmp/gpart-bench-inputs/powerlaw_1m_10m.npz")
WORKDIR = Path("/tmp/gpart-bench-partition")
CHUNK = 64 << 20


# --------------------------------------------------------------------------- children (one measurement each)


def child_partition(args) -> dict:
    from gpart.pipeline.partition import partition_graph

    stages = []
    start = time.perf_counter()
    manifest = partition_graph(args.input, args.out, args.parts, args.method, force=True,
                               verbose_log=lambda *r: stages.append(r))
    wall = time.perf_counter() - start
    return {"wall": wall, "rss": peak_rss_mib(), "stats": manifest["stats"], "bytes": dir_bytes(args.out),
            "params": manifest["params"], "stages": stages}


def child_floor(args) -> dict:
    """numpy's I/O floor: load every array of the input, write `out_bytes` bytes, fsync."""
    start = time.perf_counter()
    with np.load(args.input, allow_pickle=False) as z:
        arrays = [z[k] for k in z.files]
    loaded = time.perf_counter()
    in_memory = sum(a.nbytes for a in arrays)
    views = [memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8)) for a in arrays if a.nbytes]
    remaining, i = args.out_bytes, 0
    path = Path(args.out) / "floor.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        while remaining > 0:
            view = views[i % len(views)]
            for offset in range(0, len(view), CHUNK):
                piece = view[offset: offset + min(CHUNK, remaining)]
                fh.write(piece)
                remaining -= len(piece)
                if remaining <= 0:
                    break
            i += 1
        fh.flush()
        os.fsync(fh.fileno())
    wall = time.perf_counter() - start
    return {"wall": wall, "load": loaded - start, "rss": peak_rss_mib(), "in_memory": in_memory}


def child_csr(args) -> dict:
    """Build the symmetric CSR METIS gets (gpart.pipeline.assign.symmetric_csr) and save it, untimed."""
    from gpart.engines.symmetric import symmetric_csr
    from gpart.formats.input.readers import read_graph

    xadj, adjncy = symmetric_csr(read_graph(args.input))
    np.save(Path(args.out) / "xadj.npy", xadj)
    np.save(Path(args.out) / "adjncy.npy", adjncy)
    return {"nodes": int(xadj.shape[0] - 1), "adjacency": int(adjncy.shape[0])}


def child_metis_raw(args) -> dict:
    """The raw pymetis call gpart makes, with the same options, on a CSR loaded ready from .npy."""
    import pymetis

    from gpart.engines.metis import metis_options, resolve_algorithm

    xadj = np.load(Path(args.out) / "xadj.npy")
    adjncy = np.load(Path(args.out) / "adjncy.npy")
    algorithm = resolve_algorithm("auto", "cut", args.parts)
    options = metis_options(seed=0, imbalance=0.03, objective="cut", trials=1, iterations=None)
    start = time.perf_counter()
    result = pymetis.part_graph(args.parts, pymetis.CSRAdjacency(xadj, adjncy), recursive=algorithm == "recursive",
                                options=options)
    wall = time.perf_counter() - start
    return {"wall": wall, "rss": peak_rss_mib(), "cut": int(result.edge_cuts), "algorithm": algorithm}


CHILDREN = {"partition": child_partition, "floor": child_floor, "csr": child_csr, "metis_raw": child_metis_raw}


def spawn(kind: str, **kw) -> dict:
    """One measurement in a child of this script: `--child KIND --KEY VALUE ...`."""
    flags = [item for key, value in kw.items() for item in (f"--{key.replace('_', '-')}", str(value))]
    return child_result(script_child(__file__, kind, *flags))


# --------------------------------------------------------------------------- the run


def warm(path: Path) -> None:
    with open(path, "rb", buffering=0) as fh:
        buf = bytearray(CHUNK)
        while fh.readinto(buf):
            pass


def ensure_input(path: Path) -> bool:
    """Generate the benchmark graph if missing; True when this run made it (and should delete it)."""
    if path.exists():
        return False
    print(f"generating {path} (1M nodes, 10M edges, 128-dim float32 features) ...", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_powerlaw_npz(path, 1_000_000, 10_000_000, 128, 0)
    return True


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, default=None, help=f"input .npz (default {DEFAULT_INPUT}, generated if missing)")
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2, help="runs of (a), best wall kept for both sides (default 2)")
    parser.add_argument("--metis-repeat", type=int, default=1, help="runs of (b), alternating raw and end to end; best wall of each kept (default 1)")
    parser.add_argument("--skip-metis", action="store_true", help="skip (b) and the metis row of (c)")
    parser.add_argument("--only-a", action="store_true", help="run (a) only")
    parser.add_argument("--keep", action="store_true", help=f"keep {WORKDIR}")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--method", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out-bytes", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child](args)))
        return

    WORKDIR.mkdir(parents=True, exist_ok=True)
    made_input = False
    if args.input is None:
        args.input = DEFAULT_INPUT if DEFAULT_INPUT.exists() else WORKDIR / "powerlaw_1m_10m.npz"
    made_input = ensure_input(args.input)
    try:
        run(args)
    finally:
        if not args.keep:
            shutil.rmtree(WORKDIR, ignore_errors=True)
        if made_input and not args.keep:
            args.input.unlink(missing_ok=True)


def run(args) -> None:
    p = args.parts
    out = WORKDIR / "out"
    print(f"input {args.input} ({args.input.stat().st_size / 1e6:.0f} MB on disk), {p} parts, "
          f"{os.cpu_count()} CPUs; page cache warmed first; best of {args.repeat} for (a)\n", flush=True)
    warm(args.input)

    # (a) remainder vs the I/O floor
    parts_runs, floor_runs = [], []
    for _ in range(args.repeat):
        parts_runs.append(spawn("partition", input=args.input, out=out, parts=p, method="remainder"))
        shutil.rmtree(out, ignore_errors=True)
        floor_runs.append(spawn("floor", input=args.input, out=WORKDIR / "floor", out_bytes=parts_runs[-1]["bytes"]))
        shutil.rmtree(WORKDIR / "floor", ignore_errors=True)
    rem, floor = fastest(parts_runs), fastest(floor_runs)
    in_memory_mib = floor["in_memory"] / (1 << 20)
    wall_ratio, rss_ratio = rem["wall"] / floor["wall"], rem["rss"] / in_memory_mib
    print("(a) --method remainder, binary")
    print(f"    {'':34}{'wall s':>9}{'peak RSS MiB':>15}")
    print(f"    {'gpart partition':34}{rem['wall']:9.2f}{rem['rss']:15.0f}")
    print(f"    {'numpy floor (load + write, fsync)':34}{floor['wall']:9.2f}{floor['rss']:15.0f}"
          f"   (load {floor['load']:.2f} s; {rem['bytes'] / 1e6:.0f} MB written)")
    print(f"    input in memory: {in_memory_mib:.0f} MiB")
    print(f"    wall / floor     = {wall_ratio:5.2f}  (target <= 2.5: {verdict(wall_ratio <= 2.5)})")
    print(f"    peak RSS / input = {rss_ratio:5.2f}  (target <= 1.5: {verdict(rss_ratio <= 1.5)})")
    print("    stages: " + ", ".join(f"{name} {sec:.2f} s" for name, sec, _ in rem["stages"]))
    paired = float(np.median([a["wall"] / b["wall"] for a, b in zip(parts_runs, floor_runs)]))
    print("    all runs (partition / floor wall s): "
          + ", ".join(f"{a['wall']:.2f} / {b['wall']:.2f}" for a, b in zip(parts_runs, floor_runs))
          + f"; median of paired ratios {paired:.2f}\n", flush=True)

    results = {"remainder": rem}
    if args.only_a:
        return
    # (b) metis vs the raw pymetis call
    if not args.skip_metis:
        spawn("csr", input=args.input, out=WORKDIR)
        raw_runs, metis_runs = [], []
        for _ in range(args.metis_repeat):
            raw_runs.append(spawn("metis_raw", input=args.input, out=WORKDIR, parts=p))
            metis_runs.append(spawn("partition", input=args.input, out=out, parts=p, method="metis"))
            shutil.rmtree(out, ignore_errors=True)
        (WORKDIR / "xadj.npy").unlink()
        (WORKDIR / "adjncy.npy").unlink()
        raw, metis = fastest(raw_runs), fastest(metis_runs)
        results["metis"] = metis
        w, r = metis["wall"] / raw["wall"], metis["rss"] / raw["rss"]
        print(f"(b) --method metis ({raw['algorithm']})")
        print(f"    {'':34}{'wall s':>9}{'peak RSS MiB':>15}")
        print(f"    {'gpart partition (end to end)':34}{metis['wall']:9.2f}{metis['rss']:15.0f}")
        print(f"    {'raw pymetis.part_graph on CSR':34}{raw['wall']:9.2f}{raw['rss']:15.0f}")
        print(f"    wall ratio = {w:5.2f}  (target <= 1.3: {verdict(w <= 1.3)})")
        print(f"    RSS ratio  = {r:5.2f}  (target <= 1.3: {verdict(r <= 1.3)})")
        print("    stages: " + ", ".join(f"{name} {sec:.2f} s" for name, sec, _ in metis["stages"]))
        paired = float(np.median([a["wall"] / b["wall"] for a, b in zip(metis_runs, raw_runs)]))
        own = sum(sec for name, sec, _ in metis["stages"] if name not in ("read graph", "assign") and "overlapped" not in name)
        print(f"    gpart's own stages after METIS (layout, data, write): {own:.2f} s = {own / raw['wall']:.1%} of the raw call")
        print("    all runs (end to end / raw wall s): "
              + ", ".join(f"{a['wall']:.2f} / {b['wall']:.2f}" for a, b in zip(metis_runs, raw_runs))
              + f"; median of paired ratios {paired:.2f}\n", flush=True)

    # (c) cut and balance of every method
    for method in ("range", "random"):
        results[method] = spawn("partition", input=args.input, out=out, parts=p, method=method)
        shutil.rmtree(out, ignore_errors=True)
    print(f"(c) {p} parts: edge cut and balance")
    print(f"    {'method':<11}{'edge cut':>12}{'cut ratio':>11}{'node bal':>10}{'edge bal':>10}{'halo ratio':>12}{'wall s':>9}{'RSS MiB':>9}")
    for method, res in results.items():
        s = res["stats"]
        print(f"    {method:<11}{s['edge_cut']:>12,}{s['edge_cut_ratio']:>11.3f}{s['node_balance']:>10.3f}"
              f"{s['edge_balance']:>10.3f}{s['halo_ratio']:>12.3f}{res['wall']:>9.2f}{res['rss']:>9.0f}")


if __name__ == "__main__":
    main()
