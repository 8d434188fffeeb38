"""Streaming generators of the scale benchmark's graphs (benchmarks/bench_scale.py), written to an uncompressed .npz.

    python benchmarks/scale_graphs.py rmat OUT.npz --nodes 8000000 --edges 120000000
    python benchmarks/scale_graphs.py geometric OUT.npz --nodes 12000000 --edges 120000000

Both write `src`, `dst` (int64) and `num_nodes` chunk by chunk (np.savez's
layout, ZIP_STORED, so readers map the arrays): memory is a few N-sized
arrays plus one chunk of edges, never the edge list.

- rmat: the recipe of benchmarks/bench_default.py (a, b, c, d = 0.45, 0.22,
  0.22, 0.11 over 2^ceil(log2 N) ids folded onto N, ids permuted, no
  self-loops), drawn chunk by chunk; unlike bench_default's in-memory
  generator, repeated edges are kept (a global dedup needs the edge list),
  as in a raw crawl; partitioning drops them when it symmetrises.
- geometric: N points uniform in the unit square, bucketed into grid cells
  holding about CELL_POINTS points; each point joins edges/N points drawn
  from its own and the 8 surrounding cells (near neighbours, within about
  two cell widths), then the ids are shuffled.
"""

from __future__ import annotations

import argparse
import os
import zipfile
from pathlib import Path
from typing import Iterator

import numpy as np
from harness import rmat_block

CHUNK = 1 << 22  # edges drawn at a time
CELL_POINTS = 8


def rmat_chunks(num_nodes: int, num_edges: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(src, dst) chunks of R-MAT edges, self-loops redrawn so exactly `num_edges` come out."""
    rng = np.random.default_rng(seed)
    relabel = rng.permutation(num_nodes)
    left = num_edges
    while left:
        src, dst = rmat_block(rng, min(CHUNK, left), num_nodes)
        keep = src != dst
        src, dst = relabel[src[keep]], relabel[dst[keep]]
        left -= src.shape[0]
        yield src, dst


def geometric_chunks(num_nodes: int, num_edges: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(src, dst) chunks of the geometric graph: each point to points of its own and the neighbouring cells."""
    rng = np.random.default_rng(seed)
    side = max(1, int(np.sqrt(num_nodes / CELL_POINTS)))
    points = rng.random((num_nodes, 2))
    cell = np.minimum((points * side).astype(np.int64), side - 1)
    del points
    cell_id = cell[:, 0] * side + cell[:, 1]
    by_cell = np.argsort(cell_id, kind="stable")  # point ids grouped by cell
    cell_start = np.searchsorted(cell_id[by_cell], np.arange(side * side + 1))
    relabel = rng.permutation(num_nodes)  # the ids users see: shuffled
    per_point = num_edges / num_nodes
    emitted = 0
    for first in range(0, num_nodes, max(1, int(CHUNK / per_point))):
        points_here = np.arange(first, min(num_nodes, first + max(1, int(CHUNK / per_point))))
        target = min(num_edges, int(round(points_here[-1] + 1) * per_point)) - emitted
        src = np.repeat(points_here, np.diff(np.linspace(0, target, points_here.shape[0] + 1).astype(np.int64)))
        dx, dy = rng.integers(-1, 2, src.shape[0]), rng.integers(-1, 2, src.shape[0])
        cx = np.clip(cell[src, 0] + dx, 0, side - 1)
        cy = np.clip(cell[src, 1] + dy, 0, side - 1)
        neighbour_cell = cx * side + cy
        start, count = cell_start[neighbour_cell], np.diff(cell_start)[neighbour_cell]
        dst = by_cell[start + (rng.random(src.shape[0]) * np.maximum(count, 1)).astype(np.int64) % np.maximum(count, 1)]
        dst = np.where(count > 0, dst, src)
        loops = dst == src  # an empty cell or the point itself: its neighbour in cell order instead
        dst[loops] = by_cell[(np.searchsorted(cell_id[by_cell], cell_id[src[loops]]) + 1) % num_nodes]
        dst[dst == src] = (src[dst == src] + 1) % num_nodes
        emitted += src.shape[0]
        yield relabel[src], relabel[dst]


def write_npz(path: Path, num_nodes: int, num_edges: int, chunks) -> None:
    """src and dst of `chunks` (an iterator of (src, dst), `num_edges` in all) and num_nodes as an npz."""
    tmp = path.with_suffix(".tmp.npz")
    spill = path.with_suffix(".dst.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zf, open(spill, "wb") as dst_file:
        with zf.open("src.npy", "w", force_zip64=True) as fh:
            np.lib.format.write_array_header_1_0(fh, {"descr": "<i8", "fortran_order": False, "shape": (num_edges,)})
            for src, dst in chunks:  # src straight into the zip, dst to a side file copied in after
                fh.write(np.ascontiguousarray(src, dtype="<i8").tobytes())
                dst_file.write(np.ascontiguousarray(dst, dtype="<i8").tobytes())
        dst_file.close()
        with zf.open("dst.npy", "w", force_zip64=True) as fh, open(spill, "rb") as side:
            np.lib.format.write_array_header_1_0(fh, {"descr": "<i8", "fortran_order": False, "shape": (num_edges,)})
            while block := side.read(1 << 26):
                fh.write(block)
        with zf.open("num_nodes.npy", "w") as fh:
            np.lib.format.write_array(fh, np.asarray(num_nodes, dtype=np.int64))
    spill.unlink()
    os.replace(tmp, path)


GENERATORS = {"rmat": rmat_chunks, "geometric": geometric_chunks}


def make(family: str, path: Path, num_nodes: int, num_edges: int, seed: int = 0) -> None:
    write_npz(path, num_nodes, num_edges, GENERATORS[family](num_nodes, num_edges, seed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=sorted(GENERATORS))
    parser.add_argument("out", type=Path)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--edges", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    make(args.family, args.out, args.nodes, args.edges, args.seed)


if __name__ == "__main__":
    main()
