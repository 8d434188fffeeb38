"""Reproducible synthetic power-law graphs with features, labels and a training mask.

The generator is Chung-Lu style: both endpoints of every edge are drawn from
the same power-law weight distribution over node ranks (weight of rank `i`
proportional to `(i+1)^(-1/(exponent-1))`, giving degrees with a power-law
tail of `exponent`), and ranks are mapped to node ids by a seeded permutation
so high-degree nodes are spread over the id space rather than packed at 0
(which would flatter range partitioning).

Every array is generated in fixed-size chunks, each from its own seeded
stream, so `powerlaw_graph` (in memory) and `write_powerlaw_npz` (streamed to
an uncompressed `.npz`, one chunk in memory at a time) produce identical
arrays for the same arguments.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

import numpy as np

from gpart.base.graph import Graph
from gpart.base.progress import Progress, or_null

PathLike = Union[str, "os.PathLike[str]"]

CHUNK_ROWS = 1 << 20  # rows per generated chunk; part of the reproducibility contract
FEAT_CHUNK_BYTES = 16 << 20  # feature rows are drawn in chunks of this size (also part of it)
DEFAULT_EXPONENT = 2.5
DEFAULT_CLASSES = 16
DEFAULT_TRAIN_FRACTION = 0.1

# stream tags: every array draws from its own SeedSequence branch
_PERM, _SRC, _DST, _LABEL, _CENTROIDS, _FEAT, _TRAIN = range(7)


def _rng(seed: int, tag: int, chunk: int = 0) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, tag, chunk]))


class PowerlawSpec:
    """The parameters of one synthetic graph and chunked generators of its arrays."""

    def __init__(
        self,
        num_nodes: int,
        num_edges: int,
        feat_dim: int = 128,
        seed: int = 0,
        exponent: float = DEFAULT_EXPONENT,
        num_classes: int = DEFAULT_CLASSES,
        train_fraction: float = DEFAULT_TRAIN_FRACTION,
    ):
        if num_nodes < 1 or num_edges < 0 or feat_dim < 0:
            raise ValueError("need num_nodes >= 1, num_edges >= 0, feat_dim >= 0")
        if exponent <= 2.0:
            raise ValueError("exponent must be > 2 (finite mean degree)")
        self.num_nodes, self.num_edges, self.feat_dim = int(num_nodes), int(num_edges), int(feat_dim)
        self.seed, self.exponent = int(seed), float(exponent)
        self.num_classes, self.train_fraction = int(num_classes), float(train_fraction)
        self._perm: Optional[np.ndarray] = None
        self._labels: Optional[np.ndarray] = None

    # -- node permutation and endpoints ------------------------------------

    @property
    def perm(self) -> np.ndarray:
        """rank -> node id (int64 [N])."""
        if self._perm is None:
            self._perm = _rng(self.seed, _PERM).permutation(self.num_nodes).astype(np.int64)
        return self._perm

    def _endpoints(self, tag: int, chunk: int, count: int) -> np.ndarray:
        # Inverse CDF of the continuous rank density p(x) ~ x^(-a), a = 1/(exponent-1) < 1,
        # on [0, N): x = N * u^(1/(1-a)). Closed form, so no search over N weights.
        a = 1.0 / (self.exponent - 1.0)
        u = _rng(self.seed, tag, chunk).random(count)
        rank = (self.num_nodes * u ** (1.0 / (1.0 - a))).astype(np.int64)
        np.minimum(rank, self.num_nodes - 1, out=rank)
        return self.perm[rank]

    def src_chunks(self) -> Iterator[np.ndarray]:
        return self._edge_chunks(_SRC)

    def dst_chunks(self) -> Iterator[np.ndarray]:
        return self._edge_chunks(_DST)

    def _edge_chunks(self, tag: int) -> Iterator[np.ndarray]:
        for i, start in enumerate(range(0, self.num_edges, CHUNK_ROWS)):
            yield self._endpoints(tag, i, min(CHUNK_ROWS, self.num_edges - start))

    # -- node data -----------------------------------------------------------

    @property
    def labels(self) -> np.ndarray:
        if self._labels is None:
            self._labels = np.concatenate(list(self._node_chunks(_LABEL, lambda r, n: r.integers(0, self.num_classes, n))))
        return self._labels

    def label_chunks(self) -> Iterator[np.ndarray]:
        for start in range(0, self.num_nodes, CHUNK_ROWS):
            yield self.labels[start : start + CHUNK_ROWS]

    def feat_chunks(self) -> Iterator[np.ndarray]:
        """Gaussian noise around a per-class centroid, so features carry label signal."""
        centroids = _rng(self.seed, _CENTROIDS).standard_normal((self.num_classes, self.feat_dim), dtype=np.float32)
        rows = max(1, FEAT_CHUNK_BYTES // max(1, 4 * self.feat_dim))
        for i, start in enumerate(range(0, self.num_nodes, rows)):
            n = min(rows, self.num_nodes - start)
            chunk = _rng(self.seed, _FEAT, i).standard_normal((n, self.feat_dim), dtype=np.float32)
            chunk += 0.5 * centroids[self.labels[start : start + n]]
            yield chunk

    def train_mask_chunks(self) -> Iterator[np.ndarray]:
        return self._node_chunks(_TRAIN, lambda r, n: r.random(n) < self.train_fraction)

    def _node_chunks(self, tag: int, draw: Callable[[np.random.Generator, int], np.ndarray]) -> Iterator[np.ndarray]:
        for i, start in enumerate(range(0, self.num_nodes, CHUNK_ROWS)):
            yield draw(_rng(self.seed, tag, i), min(CHUNK_ROWS, self.num_nodes - start))

    # -- the members of the .npz, in file order ------------------------------

    def members(self) -> list[tuple[str, tuple[int, ...], np.dtype, Callable[[], Iterator[np.ndarray]]]]:
        n, e = self.num_nodes, self.num_edges
        return [
            ("src", (e,), np.dtype("<i8"), self.src_chunks),
            ("dst", (e,), np.dtype("<i8"), self.dst_chunks),
            ("num_nodes", (), np.dtype("<i8"), lambda: iter([np.array(n, dtype=np.int64)])),
            ("feat", (n, self.feat_dim), np.dtype("<f4"), self.feat_chunks),
            ("label", (n,), np.dtype("<i8"), self.label_chunks),
            ("train_mask", (n,), np.dtype("|b1"), self.train_mask_chunks),
        ]


def powerlaw_graph(num_nodes: int, num_edges: int, feat_dim: int = 128, seed: int = 0, *, exponent: float = DEFAULT_EXPONENT,
                   num_classes: int = DEFAULT_CLASSES, train_fraction: float = DEFAULT_TRAIN_FRACTION) -> Graph:
    """An in-memory synthetic power-law graph: int64 src/dst, float32 `feat`, int64 `label`, bool `train_mask`."""
    spec = PowerlawSpec(num_nodes, num_edges, feat_dim, seed, exponent, num_classes, train_fraction)
    arrays = {name: _collect(shape, dtype, chunks()) for name, shape, dtype, chunks in spec.members()}
    graph = Graph(spec.num_nodes, arrays.pop("src"), arrays.pop("dst"), source=None, input_format="synthetic")
    arrays.pop("num_nodes")
    graph.node_data.update(arrays)
    return graph


def _collect(shape: tuple[int, ...], dtype: np.dtype, chunks: Iterator[np.ndarray]) -> np.ndarray:
    if not shape:
        return next(chunks).astype(dtype)
    out = np.empty(shape, dtype=dtype)
    pos = 0
    for chunk in chunks:
        out[pos : pos + chunk.shape[0]] = chunk
        pos += chunk.shape[0]
    assert pos == shape[0]
    return out


def write_powerlaw_npz(path: PathLike, num_nodes: int, num_edges: int, feat_dim: int = 128, seed: int = 0, *,
                       exponent: float = DEFAULT_EXPONENT, num_classes: int = DEFAULT_CLASSES,
                       train_fraction: float = DEFAULT_TRAIN_FRACTION, progress: Optional[Progress] = None) -> Path:
    """Stream the graph `powerlaw_graph` would return into an uncompressed (memory-mappable) `.npz`.

    Written to `path + ".tmp"` and renamed when complete; one chunk in memory at a time
    (plus the N-entry rank permutation and labels).
    """
    spec = PowerlawSpec(num_nodes, num_edges, feat_dim, seed, exponent, num_classes, train_fraction)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    members = spec.members()
    total = sum(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize for _, shape, dtype, _ in members)
    try:
        with or_null(progress).stage("generate", total=total, unit="B") as task:
            with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
                for name, shape, dtype, chunks in members:
                    _write_member(zf, name, shape, dtype, chunks(), task)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _write_member(zf: zipfile.ZipFile, name: str, shape: tuple[int, ...], dtype: np.dtype, chunks: Iterator[np.ndarray], task) -> None:
    """One `.npy` member, header then chunks, as np.savez would store it (ZIP_STORED)."""
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    with zf.open(name + ".npy", "w", force_zip64=True) as fh:
        np.lib.format.write_array_header_1_0(fh, header)
        for chunk in chunks:
            data = np.ascontiguousarray(chunk, dtype=dtype)
            fh.write(memoryview(data.reshape(-1).view(np.uint8)) if data.size else b"")
            task.advance(data.nbytes)


__all__ = ["powerlaw_graph", "write_powerlaw_npz", "PowerlawSpec", "rmat_graph"]


def rmat_graph(num_nodes: int, num_edges: int, seed: int = 0) -> Graph:
    """The scale benchmark's R-MAT graph (benchmarks/scale_graphs.py: repeats kept, ids permuted) in memory, with a
    10% training mask."""
    import sys

    benchmarks = str(Path(__file__).resolve().parents[2] / "benchmarks")
    if benchmarks not in sys.path:
        sys.path.insert(0, benchmarks)
    from scale_graphs import rmat_chunks

    pieces = list(rmat_chunks(num_nodes, num_edges, seed))
    rng = np.random.default_rng(seed)
    return Graph.from_arrays(np.concatenate([s for s, _ in pieces]), np.concatenate([d for _, d in pieces]), num_nodes,
                             train_mask=rng.random(num_nodes) < 0.1)
