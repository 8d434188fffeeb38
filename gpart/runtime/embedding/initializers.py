"""Initialisers for ShardedEmbedding tables, and the rule that makes them world-size independent.

An initialiser is any callable `init(rows: torch.Tensor) -> None` that fills a
float32 CPU tensor in place using torch's default CPU generator (as
`torch.nn.init` functions and `Tensor.uniform_` do). ShardedEmbedding does not
call it on the whole table: it calls it on consecutive chunks of
`INIT_CHUNK_ROWS` global rows, with the CPU generator seeded from
(seed, embedding name, chunk index) for each chunk, and keeps the rows the rank
owns. The global table is therefore the same for every world size and policy,
and the same on CPU and GPU. A shape-dependent initialiser (xavier) sees the
chunk's shape `(rows_in_chunk, dim)`, not the table's.
"""

from __future__ import annotations

import zlib
from typing import Callable, Iterator

import numpy as np
import torch

Initializer = Callable[[torch.Tensor], None]

# Part of the determinism contract: changing it changes every initial table.
INIT_CHUNK_ROWS = 1 << 16


def uniform(low: float = -0.1, high: float = 0.1) -> Initializer:
    """Rows drawn uniformly from [low, high)."""
    if not low < high:
        raise ValueError(f"uniform initialiser needs low < high, got {low}, {high}")

    def fill(rows: torch.Tensor) -> None:
        rows.uniform_(low, high)

    fill.__qualname__ = f"uniform({low}, {high})"
    return fill


def normal(mean: float = 0.0, std: float = 1.0) -> Initializer:
    """Rows drawn from N(mean, std^2)."""
    if std < 0:
        raise ValueError(f"normal initialiser needs std >= 0, got {std}")

    def fill(rows: torch.Tensor) -> None:
        rows.normal_(mean, std)

    fill.__qualname__ = f"normal({mean}, {std})"
    return fill


def zeros() -> Initializer:
    """All-zero rows."""

    def fill(rows: torch.Tensor) -> None:
        rows.zero_()

    fill.__qualname__ = "zeros()"
    return fill


def chunk_seed(seed: int, name: str, chunk: int) -> int:
    """The generator seed of one chunk of global rows: a hash of (seed, name, chunk index)."""
    words = [seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF, zlib.crc32(name.encode()), chunk]
    return int(np.random.SeedSequence(words).generate_state(1, dtype=np.uint64)[0] & 0x7FFF_FFFF_FFFF_FFFF)


def iter_init_chunks(
    num_rows: int, dim: int, name: str, seed: int, init: Initializer, first_row: int = 0, stop_row: int | None = None
) -> Iterator[tuple[int, torch.Tensor]]:
    """(start, rows) for every chunk of the global table overlapping [first_row, stop_row).

    Each chunk is initialised whole (so its values do not depend on which part
    of it a rank needs) on the CPU in float32, under a private generator state
    so the caller's random stream is left untouched.
    """
    stop_row = num_rows if stop_row is None else stop_row
    if stop_row <= first_row:
        return
    first_chunk = first_row // INIT_CHUNK_ROWS
    last_chunk = (stop_row - 1) // INIT_CHUNK_ROWS
    for chunk in range(first_chunk, last_chunk + 1):
        start = chunk * INIT_CHUNK_ROWS
        rows = torch.empty((min(INIT_CHUNK_ROWS, num_rows - start), dim), dtype=torch.float32)
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(chunk_seed(seed, name, chunk))
            result = init(rows)
        if isinstance(result, torch.Tensor) and result is not rows:
            # DGL-style initialisers return the tensor; accept a returned replacement of the same shape
            if result.shape != rows.shape:
                raise ValueError(f"initialiser returned shape {tuple(result.shape)}, expected {tuple(rows.shape)}")
            rows = result.to(torch.float32)
        yield start, rows
