"""Adam's per-row step counts <-> WholeGraph LazyAdam's per-row `beta12t` pairs (SPEC.md 6.7, 6.8).

DGL-style Adam keeps each row's step count `t`; WholeGraph's LazyAdam keeps
`(beta1^t, beta2^t)` as float32, multiplied by float32 `beta` once per step
of the row, starting from 1. `pow32(beta, t)` is that float32 product, read
from a table of `x_0 .. x_L` (x_L the sequence's fixed point, where `x * beta`
rounds back to `x`), built by `numpy.multiply.accumulate` in float32, which
multiplies in the same order as the kernel. The table grows on demand up to
the largest step count seen, so one streaming pass over the steps suffices.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from gpart.base.errors import InputError
from gpart.ckpt.streaming import iter_global_chunks
from gpart.formats.checkpoint.reader import Checkpoint
from gpart.formats.checkpoint.writer import ShardWriter
from gpart.formats.sharding.policies import ShardPolicy

# the most entries a table may hold (256 MiB of float32); longer only for betas very close to 1
MAX_TABLE = 1 << 26
_GROW = 1 << 16


class PowerTable:
    """x_t = pow32(beta, t) for t = 0 .. len - 1, extended on demand until the fixed point x_L = x_{L+1}."""

    def __init__(self, beta: float) -> None:
        self.beta = np.float32(beta)
        self.values = np.ones(1, dtype=np.float32)
        self.fixed: Optional[int] = 0 if self.beta == 1 else None  # L, once reached

    def extend_to(self, t: int) -> None:
        """Make x_min(t, L) available; ValueError when that needs more than MAX_TABLE entries."""
        while self.fixed is None and len(self.values) <= t:
            self._grow(f"beta {float(self.beta)!r} to the power {t}")

    def extend_below(self, power: float) -> None:
        """Extend until the table reaches `power` or its fixed point (the inverse needs every x_t >= power)."""
        while self.fixed is None and self.values[-1] > power:
            self._grow(f"finding {float(power)!r} among the powers of beta {float(self.beta)!r}")

    def _grow(self, what: str) -> None:
        """Append the next x_t (about as many as there are, at least 65536), stopping at the fixed point."""
        n = len(self.values)
        if n >= MAX_TABLE:
            raise ValueError(f"{what} needs more than {MAX_TABLE} float32 products")
        run = np.full(1 + min(max(_GROW, n), MAX_TABLE - n), self.beta, dtype=np.float32)
        run[0] = self.values[-1]
        run = np.multiply.accumulate(run, dtype=np.float32)  # x_{n-1}, x_n, x_{n+1}, ... in the kernel's order
        same = np.flatnonzero(run[1:] == run[:-1])
        if same.size:  # x_{n-1+i+1} == x_{n-1+i}: the fixed point is L = n - 1 + i
            self.fixed = n - 1 + int(same[0])
            run = run[: same[0] + 1]
        self.values = np.concatenate([self.values, run[1:]])

    def of(self, steps: np.ndarray) -> np.ndarray:
        """pow32(beta, t) for each t of `steps` (non-negative integers)."""
        steps = np.asarray(steps, dtype=np.int64)
        if steps.size:
            self.extend_to(int(steps.max()))
        return self.values[np.minimum(steps, len(self.values) - 1)]

    def steps_of(self, powers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(t, found) for each float32 power: t where it is x_t in the strictly decreasing part x_0 .. x_{L-1}
        (its inverse is one t only there); found is False elsewhere (the fixed point, or no power of beta)."""
        if powers.size:
            self.extend_below(float(powers.min()))
        decreasing = self.values if self.fixed is None else self.values[: self.fixed]
        ascending = decreasing[::-1]
        pos = np.searchsorted(ascending, powers)
        hit = pos < ascending.size
        hit[hit] = ascending[pos[hit]] == powers[hit]
        return np.where(hit, ascending.size - 1 - pos, -1), hit


class BetaPowers:
    """The two tables of one Adam's (beta1, beta2)."""

    def __init__(self, betas: Sequence[float]) -> None:
        b1, b2 = (float(b) for b in betas)
        if not (0.0 <= b1 <= 1.0 and 0.0 <= b2 <= 1.0):
            raise ValueError(f"betas must lie in [0, 1], got {[b1, b2]}")
        self.tables = (PowerTable(b1), PowerTable(b2))

    def pairs(self, steps: np.ndarray) -> np.ndarray:
        """float32 [n, 2]: (pow32(beta1, t), pow32(beta2, t)) per step count t >= 0."""
        out = np.empty((len(steps), 2), dtype=np.float32)
        out[:, 0] = self.tables[0].of(steps)
        out[:, 1] = self.tables[1].of(steps)
        return out

    def steps(self, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(t int64, bad) per float32 pair: the one t whose pair it is; `bad` rows have none, or several."""
        t2, ok2 = self.tables[1].steps_of(pairs[:, 1])
        t1, ok1 = self.tables[0].steps_of(pairs[:, 0])
        t = np.where(ok2, t2, t1)
        bad = ~(ok1 | ok2)
        good = ~bad
        bad[good] = (self.tables[0].of(t[good]) != pairs[good, 0]) | (self.tables[1].of(t[good]) != pairs[good, 1])
        return t, bad


def adam_betas(optimizer: Mapping[str, Any], where: Any) -> tuple[float, float]:
    """An adam checkpoint's (beta1, beta2), which beta12t needs; a one-line InputError when it has none."""
    betas = optimizer.get("betas")
    if not (isinstance(betas, (list, tuple)) and len(betas) == 2 and all(isinstance(b, (int, float)) and 0 <= b <= 1 for b in betas)):
        raise InputError(where, f"optimizer adam records no betas [beta1, beta2] in [0, 1] (got {betas!r}); WholeGraph's beta12t state needs them")
    return float(betas[0]), float(betas[1])


def write_beta12t(src: Checkpoint, name: str, target: ShardPolicy, stage: Path, stem: str, betas: Sequence[float],
                  chunk_rows: Optional[int], bar) -> list[dict[str, Any]]:
    """The step counts `name` of `src` as WholeGraph's beta12t files `<stem>_part_<r>_of_<W>` of the range policy
    `target`, in global-order pieces (each split at the rank boundaries); their shard entries."""
    powers = BetaPowers(betas)
    bounds = [int(b) for b in target.row_bounds()]
    world = target.world_size
    with ExitStack() as files:  # every rank's file open at once: one pass in global order fills them in turn
        writers = [files.enter_context(ShardWriter(stage, name, r, world, "float32", (2,), stem=stem)) for r in range(world)]
        for a, steps in iter_global_chunks(src, name, chunk_rows):
            steps = np.asarray(steps, dtype=np.int64)
            if steps.size and steps.min() < 0:
                raise InputError(src.directory, f"{name}: negative step count {int(steps.min())} at row {a + int(np.argmin(steps))}")
            try:
                pairs = powers.pairs(steps)
            except ValueError as exc:
                raise InputError(src.directory, f"{name}: {exc}") from None
            b = a + len(steps)
            for r in range(world):
                lo, hi = max(a, bounds[r]), min(b, bounds[r + 1])
                if lo < hi:
                    writers[r].write(pairs[lo - a: hi - a])
            bar.advance(steps.nbytes)
    return [w.shard_entry() for w in writers]
