"""The symmetric adjacency the quality methods hand KaMinPar: in memory, or on disk for its compressed path.

    with symmetric_adjacency(graph, compressed, scratch_dir, budget, progress) as adj:
        kaminpar_partitions(adj.xadj, adj.adjncy, ..., KaminparRun(..., order=adj.order), on_disk=adj.on_disk)

In memory (gpart.engines.symmetric.symmetric_csr): xadj and adjncy are int64
arrays, about 18 bytes per input edge while built. Compressed
(gpart.engines.symmetric_file): the adjacency is built on disk in bounded
memory as a ParHiP file; xadj stays in memory (8 bytes per node), adjncy is
mapped from the file, and KaMinPar reads the file compressed. Either way the
same vertex order is chosen (gpart.engines.locality_order, over the mapped
file on the compressed path). On the compressed path a renumbered copy of
the file is what KaMinPar reads, and it replaces the file: xadj and adjncy
are then the copy's, in the order's ids (`renumbered`), so the disk holds
the finest level once (on R-MAT at 1B edges, about 8 GB less).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

from gpart.base.graph import Graph
from gpart.base.progress import Progress
from gpart.engines.locality_order import locality_order
from gpart.engines.parhip_file import ParhipFile, renumbered_file
from gpart.engines.refine import repair_balance
from gpart.engines.symmetric import symmetric_csr
from gpart.engines.symmetric_file import least_scratch_bytes, symmetric_parhip
from gpart.formats.files.scratch import ScratchDir, check_free_disk
from gpart.partition_methods.method import PathLike

# The share of the memory budget the on-disk build's buckets may use (the rest: the node arrays beside it).
BUCKET_SHARE = 4


@dataclass
class Adjacency:
    """The symmetric simple graph (xadj, adjncy: arrays, or adjncy mapped from `on_disk`'s source), the vertex
    order KaMinPar sees it in (None: input ids) and, on the compressed path, the file KaMinPar reads."""

    xadj: np.ndarray
    adjncy: np.ndarray
    order: Optional[np.ndarray]
    on_disk: Optional[ParhipFile] = None
    renumbered: bool = False  # xadj and adjncy list node order[i] as node i (the compressed path's copy)

    @property
    def storage(self) -> str:
        """What the manifest records (params.adjacency): "memory" or "compressed"."""
        return "memory" if self.on_disk is None else "compressed"

    def repair_balance(self, owner: np.ndarray, shares: np.ndarray, num_parts: int, bound: float) -> np.ndarray:
        """gpart.engines.refine.repair_balance of `owner` and `shares` (both by input id) on this adjacency, the
        result by input id."""
        if not self.renumbered:
            return repair_balance(owner, shares, num_parts, bound, self.xadj, self.adjncy)
        assert self.order is not None
        repaired = repair_balance(owner[self.order], shares[self.order], num_parts, bound, self.xadj, self.adjncy)
        by_input_id = np.empty_like(repaired)
        by_input_id[self.order] = repaired
        return by_input_id


@contextlib.contextmanager
def symmetric_adjacency(graph: Graph, compressed: bool, scratch_dir: Optional[PathLike], budget: Optional[int],
                        progress: Progress) -> Iterator[Adjacency]:
    """The Adjacency of `graph`, in memory or (`compressed`) on disk in `scratch_dir` (None: the system's
    temporary directory) with bucket memory a share of `budget`; the files are removed when the block ends."""
    if not compressed:
        xadj, adjncy = symmetric_csr(graph, progress)
        yield Adjacency(xadj, adjncy, _order(xadj, adjncy, progress))
        return
    check_free_disk(scratch_dir, least_scratch_bytes(graph.num_nodes, graph.num_edges), "the compressed adjacency")
    with ScratchDir(scratch_dir) as scratch:
        source, xadj = symmetric_parhip(graph, scratch, (budget or 1 << 30) // BUCKET_SHARE, progress)
        order = _order(xadj, source.adjacency(), progress)
        if order is None:
            yield Adjacency(xadj, source.adjacency(), None, source)
            return
        with progress.stage("adjacency: renumber on disk"):
            on_disk = renumbered_file(source, xadj, order, scratch.file("renumbered.parhip", source.nbytes))
        del xadj
        source.path.unlink()  # nothing maps it any more: its disk goes back now, not when the block ends
        yield Adjacency(on_disk.list_starts(), on_disk.adjacency(), order, on_disk, renumbered=True)


def _order(xadj: np.ndarray, adjncy: np.ndarray, progress: Progress) -> Optional[np.ndarray]:
    """The vertex order KaMinPar gets the symmetric graph in (gpart.engines.locality_order; None: the input ids)."""
    with progress.stage("adjacency: vertex order"):
        return locality_order(xadj, adjncy)
