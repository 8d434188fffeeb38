"""METIS and DIMACS text of large generated graphs, formatted with numpy (no Python loop per edge), for the spill
tests and benchmarks/bench_structured_spill.py: a 12M-edge file is written in a few seconds."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

SPACE, NEWLINE = ord(" "), ord("\n")


def decimal_text(values: np.ndarray, ends: np.ndarray) -> bytes:
    """Each value in decimal followed by its end byte; a value of -1 writes its end byte alone (a blank line, a letter)."""
    values = np.asarray(values, dtype=np.int64)
    powers = 10 ** np.arange(1, 19, dtype=np.int64)
    ndigits = np.where(values < 0, 0, 1 + np.searchsorted(powers, values, side="right"))
    width = ndigits + 1
    start = np.cumsum(width) - width
    buf = np.empty(int(width.sum()), dtype=np.uint8)
    for k in range(int(ndigits.max(initial=0))):  # the k-th digit from the right of every value that has one
        has = ndigits > k
        buf[(start + ndigits - 1 - k)[has]] = 48 + (values[has] // 10 ** k) % 10
    buf[start + ndigits] = ends
    return buf.tobytes()


def symmetric_edges(num_nodes: int, num_pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random pairs without self loops, both directions, sorted by source (a METIS adjacency: 2 * num_pairs entries)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, num_nodes, num_pairs)
    b = (a + rng.integers(1, num_nodes, num_pairs)) % num_nodes
    src, dst = np.concatenate([a, b]), np.concatenate([b, a])
    order = np.argsort(src, kind="stable")
    return src[order], dst[order]


def metis_text(num_nodes: int, src: np.ndarray, dst: np.ndarray, weight: Optional[np.ndarray] = None) -> bytes:
    """A METIS .graph of the adjacency `src -> dst` (sorted by src, both directions listed), edge weights when given:
    vertex v's line is its neighbours (1-based), a vertex without any a blank line."""
    per_edge = 1 if weight is None else 2
    num_tokens = per_edge * src.shape[0] + num_nodes
    values = np.empty(num_tokens, dtype=np.int64)
    ends = np.full(num_tokens, SPACE, dtype=np.uint8)
    at = per_edge * np.arange(src.shape[0]) + src  # edge j follows the newlines of the src[j] lines before its own
    values[at] = dst + 1
    if weight is not None:
        values[at + 1] = weight
    line_end = per_edge * np.cumsum(np.bincount(src, minlength=num_nodes)) + np.arange(num_nodes)
    values[line_end] = -1
    ends[line_end] = NEWLINE
    header = f"% generated\n{num_nodes} {src.shape[0] // 2}{' 001' if weight is not None else ''}\n".encode()
    return header + decimal_text(values, ends)


def dimacs_sp_text(num_nodes: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray) -> bytes:
    """A DIMACS shortest-path .gr: `p sp n m`, then `a u v w` per arc (1-based ids)."""
    m = src.shape[0]
    values = np.full((m, 5), -1, dtype=np.int64)
    values[:, 2], values[:, 3], values[:, 4] = src + 1, dst + 1, weight
    ends = np.empty((m, 5), dtype=np.uint8)
    ends[:] = (ord("a"), SPACE, SPACE, SPACE, NEWLINE)  # 'a', ' ', then u, v, w
    return f"c generated\np sp {num_nodes} {m}\n".encode() + decimal_text(values.reshape(-1), ends.reshape(-1))


def write_metis(path: Path, num_nodes: int, num_pairs: int, seed: int = 0, weights: bool = False) -> None:
    src, dst = symmetric_edges(num_nodes, num_pairs, seed)
    weight = np.random.default_rng(seed + 1).integers(1, 100, src.shape[0]) if weights else None
    path.write_bytes(metis_text(num_nodes, src, dst, weight))


def write_dimacs_sp(path: Path, num_nodes: int, num_arcs: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    src, dst = rng.integers(0, num_nodes, num_arcs), rng.integers(0, num_nodes, num_arcs)
    path.write_bytes(dimacs_sp_text(num_nodes, src, dst, rng.integers(1, 1000, num_arcs)))


def circulant_neighbours(first: int, stop: int, num_nodes: int, offsets: tuple[int, ...]) -> np.ndarray:
    """Neighbours (0-based) of vertices first..stop-1 of the circulant graph joining v to v +- each offset (mod n),
    one row per vertex, in the order its METIS line lists them: symmetric without a global sort."""
    steps = np.array([s for k in offsets for s in (k, -k)], dtype=np.int64)
    return (np.arange(first, stop, dtype=np.int64)[:, None] + steps[None, :]) % num_nodes


def write_circulant_metis(path: Path, num_nodes: int, offsets: tuple[int, ...], block: int = 1 << 17) -> None:
    """A METIS .graph of `circulant_neighbours`, 2 * len(offsets) entries per vertex, written a block of vertices at
    a time (the writer holds one block's tokens, whatever the graph's size)."""
    width = 2 * len(offsets) + 1  # the neighbours, then the line's newline
    with open(path, "wb") as fh:
        fh.write(f"{num_nodes} {num_nodes * len(offsets)}\n".encode())
        for first in range(0, num_nodes, block):
            stop = min(num_nodes, first + block)
            values = np.full((stop - first, width), -1, dtype=np.int64)
            values[:, :-1] = circulant_neighbours(first, stop, num_nodes, offsets) + 1
            ends = np.full(values.shape, SPACE, dtype=np.uint8)
            ends[:, -1] = NEWLINE
            fh.write(decimal_text(values.reshape(-1), ends.reshape(-1)))
