"""Benchmark gpart.runtime: local gather vs torch.index_select, distributed gather over gloo,
and partition load time vs reading the same bytes from disk.

    python benchmarks/bench_runtime.py [--rows 1000000] [--dim 128] [--ids 1000000]

Writes its partitions under /tmp/gpart-bench-runtime/ and deletes them at the end.
Figures are printed; the page cache is warm for every timed read (the files were
just written), which the load-time lines say.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
from harness import best_times, peak_rss_mib  # first: puts the repository root on sys.path

from tests.support.gloo_processes import run_distributed

ROOT = Path("/tmp/gpart-bench-runtime")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_graph(num_rows: int, dim: int, seed: int = 0):
    from gpart.base.graph import Graph

    rng = np.random.default_rng(seed)
    num_edges = 2 * num_rows
    src = rng.integers(0, num_rows, num_edges, dtype=np.int64)
    dst = rng.integers(0, num_rows, num_edges, dtype=np.int64)
    feat = rng.standard_normal((num_rows, dim), dtype=np.float32)
    return Graph(num_rows, src, dst, {"feat": feat})


def write_partition(graph, directory: Path, num_parts: int, kind: str, storage: str = "binary") -> None:
    from gpart.formats.partition.book import ArrayBook, remainder_book
    from gpart.pipeline.write_plan import ResultPlan
    from gpart.pipeline.write_result import partition_with_book

    if kind == "remainder":
        book = remainder_book(graph.num_nodes, num_parts)
    else:  # an array book, as metis and random produce
        owner = np.random.default_rng(1).integers(0, num_parts, graph.num_nodes).astype(np.int32)
        book = ArrayBook(owner, num_parts)
    partition_with_book(graph, book, directory, ResultPlan(kind if kind == "remainder" else "random", storage=storage), force=True)


# --------------------------------------------------------------------------- local gather


def bench_local(directory: Path, num_ids: int, device: torch.device) -> None:
    import gpart.runtime as gr

    part = gr.load_partition(directory, 0, device=device)
    table = part.node_data["feat"]
    table.sum()  # fault the mapping in: both sides then read the same resident pages
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, part.num_nodes, (num_ids,), generator=gen).to(device)
    out_bytes = num_ids * table.shape[1] * table.element_size()

    def run_gather():
        part.gather("feat", ids)
        sync(device)

    def run_index_select():
        torch.index_select(table, 0, ids)
        sync(device)

    assert torch.equal(part.gather("feat", ids), torch.index_select(table, 0, ids))
    t_gather, t_index = best_times(run_gather, run_index_select, repeat=7)
    print(f"local gather [{device.type}] {num_ids:,} random ids from {part.num_nodes:,} x {table.shape[1]} float32 "
          f"(1 partition, {part.book.kind} book):")
    print(f"  part.gather        {t_gather * 1e3:8.1f} ms  {out_bytes / t_gather / 1e9:6.2f} GB/s")
    print(f"  torch.index_select {t_index * 1e3:8.1f} ms  {out_bytes / t_index / 1e9:6.2f} GB/s")
    print(f"  ratio gather / index_select throughput: {t_index / t_gather:.2f}x (target >= 0.8x)")


def bench_local_multi(directory: Path, num_parts: int, num_ids: int, device: torch.device) -> None:
    """A rank of a multi-partition result gathering its own rows: book lookup + index_select."""
    import gpart.runtime as gr

    part = gr.load_partition(directory, 0, device=device)
    table = part.node_data["feat"]
    table.sum()
    gen = torch.Generator().manual_seed(0)
    ids = part.owned_ids[torch.randint(0, part.num_owned, (num_ids,), generator=gen).to(device)]
    rows = part.to_local(ids)
    out_bytes = num_ids * table.shape[1] * table.element_size()
    t_gather, t_index = best_times(lambda: (part.gather("feat", ids), sync(device)),
                                   lambda: (torch.index_select(table, 0, rows), sync(device)), repeat=7)
    print(f"local gather [{device.type}] of owned rows, partition 0 of {num_parts} ({part.book.kind} book, "
          f"{part.num_owned:,} rows): {out_bytes / t_gather / 1e9:.2f} GB/s vs index_select on precomputed "
          f"local rows {out_bytes / t_index / 1e9:.2f} GB/s ({t_index / t_gather:.2f}x)")


# --------------------------------------------------------------------------- distributed gather


def _dist_worker(rank: int, world_size: int, directory: str, batch: int, steps: int) -> dict:
    import gpart.collectives as gdist
    import gpart.runtime as gr

    comm = {"s": 0.0}
    originals = {name: getattr(gdist, name) for name in ("all_to_all_rows", "exchange_counts")}

    def comm_timed(fn):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                comm["s"] += time.perf_counter() - t0
        return wrapper

    for name, fn in originals.items():
        setattr(gdist, name, comm_timed(fn))
    part = gr.load_partition(directory, device="cpu")
    part.node_data["feat"].sum()
    gen = torch.Generator().manual_seed(rank)
    ids = [torch.randint(0, part.num_nodes, (batch,), generator=gen) for _ in range(steps)]
    part.gather("feat", ids[0])  # warm-up, includes the one-off agreement check
    gdist.barrier()
    comm["s"] = 0.0
    t0 = time.perf_counter()
    for step_ids in ids:
        part.gather("feat", step_ids)
    elapsed = time.perf_counter() - t0
    return {"elapsed": elapsed, "comm": comm["s"], "rows": batch * steps,
            "row_bytes": part.node_data["feat"].shape[1] * 4, "rss_mib": peak_rss_mib()}


def bench_distributed(directory: Path, world_size: int, batch: int, steps: int) -> None:
    results = run_distributed(_dist_worker, world_size, str(directory), batch, steps, timeout_s=600, threads=1)
    elapsed = max(r["elapsed"] for r in results)
    rows = sum(r["rows"] for r in results)
    outside = [1 - r["comm"] / r["elapsed"] for r in results]
    print(f"distributed gather, {world_size} gloo processes (1 thread each), {steps} steps of {batch:,} random ids per rank:")
    print(f"  {rows / elapsed:,.0f} rows/s in total ({rows * results[0]['row_bytes'] / elapsed / 1e9:.2f} GB/s), "
          f"{rows / elapsed / world_size:,.0f} rows/s per rank")
    print(f"  time outside all_to_all calls: {100 * np.mean(outside):.0f}% (ranks: {', '.join(f'{100 * x:.0f}%' for x in outside)})")
    print(f"  peak RSS per rank: {max(r['rss_mib'] for r in results):.0f} MiB")


# --------------------------------------------------------------------------- load time


def _read_bytes(directory: Path, rank: int = 0) -> int:
    """Read the bytes of every array partition `rank` loads (its arrays and the book) into memory."""
    from gpart.formats.partition.reader import PartitionReader

    with PartitionReader(directory) as reader:
        entries = [reader.entry(rank, key) for key in reader.keys(rank)] + list(reader.book_entries().values())
        if reader.storage == "binary":
            ranges = [(directory / e.file, 0, e.nbytes) for e in entries]
        else:
            import h5py

            with h5py.File(directory / "partitions.h5", "r") as h5:
                ranges = [(directory / e.file, h5[e.extra["dataset"]].id.get_offset() or 0, e.nbytes) for e in entries]
    total = 0
    for path, offset, nbytes in ranges:
        buf = bytearray(nbytes)
        with open(path, "rb", buffering=0) as fh:
            fh.seek(offset)
            view = memoryview(buf)
            got = 0
            while got < nbytes:
                n = fh.readinto(view[got:])
                if not n:
                    break
                got += n
        total += got
    return total


def bench_load(directory: Path, label: str) -> None:
    import gpart.runtime as gr

    def touch(part) -> None:
        # make every mapped page resident by reading all of it once
        for t in [part.node_ids, part.indptr, part.indices, part.edge_ids, *part.node_data.values()]:
            t.view(-1)[::max(1, 4096 // t.element_size())].sum()

    nbytes = _read_bytes(directory)
    t_read = best_times(lambda: _read_bytes(directory), repeat=3)[0]
    t_load = best_times(lambda: gr.load_partition(directory, 0, device="cpu", verify=False), repeat=3)[0]
    t_touch = best_times(lambda: touch(gr.load_partition(directory, 0, device="cpu", verify=False)), repeat=3)[0]
    t_verify = best_times(lambda: gr.load_partition(directory, 0, device="cpu"), repeat=1)[0]
    print(f"load partition 0 of {label} ({nbytes / 2**20:.0f} MiB, warm page cache):")
    print(f"  read its files' bytes     {t_read * 1e3:8.1f} ms  {nbytes / t_read / 1e9:6.2f} GB/s")
    print(f"  load, verify=False        {t_load * 1e3:8.1f} ms  (mapped, no checksums)")
    print(f"  load + touch every page   {t_touch * 1e3:8.1f} ms  {nbytes / t_touch / 1e9:6.2f} GB/s")
    print(f"  load (checked, default)   {t_verify * 1e3:8.1f} ms  {nbytes / t_verify / 1e9:6.2f} GB/s (CRC-32 of every array)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--ids", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--keep", action="store_true", help="keep /tmp/gpart-bench-runtime")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CUDA {'available' if torch.cuda.is_available() else 'not available'}")
    shutil.rmtree(ROOT, ignore_errors=True)
    ROOT.mkdir(parents=True)
    try:
        t0 = time.perf_counter()
        graph = make_graph(args.rows, args.dim)
        write_partition(graph, ROOT / "p1", 1, "remainder")
        write_partition(graph, ROOT / "p2", 2, "array")
        write_partition(graph, ROOT / "p4", 4, "remainder")
        write_partition(graph, ROOT / "p2h5", 2, "array", storage="hdf5")
        del graph
        print(f"(wrote 4 partition results in {time.perf_counter() - t0:.1f} s)")
        devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
        for device in devices:
            bench_local(ROOT / "p1", args.ids, device)
            bench_local_multi(ROOT / "p2", 2, args.ids // 2, device)
            bench_local_multi(ROOT / "p4", 4, args.ids // 4, device)
        print(f"peak RSS (this process): {peak_rss_mib():.0f} MiB")
        for world_size, directory in ((2, ROOT / "p2"), (4, ROOT / "p4")):
            bench_distributed(directory, world_size, args.batch, args.steps)
        bench_load(ROOT / "p1", "a 1-partition result (binary)")
        bench_load(ROOT / "p2", "a 2-partition result (binary, array book)")
        bench_load(ROOT / "p2h5", "a 2-partition result (hdf5, array book)")
    finally:
        if not args.keep:
            shutil.rmtree(ROOT, ignore_errors=True)
    print(f"peak RSS (this process): {peak_rss_mib():.0f} MiB")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
