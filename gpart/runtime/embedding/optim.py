"""Sparse Adam and Adagrad for ShardedEmbedding: only rows that received gradients change.

The math is DGL's (dgl.optim.SparseAdam / SparseAdagrad, DGL 2.x), so runs
migrated from DGL train identically:

- the gradients of an id that occurs several times in a step (several times
  in a batch, in several lookups, or on several ranks) are **averaged**
  (`duplicates="mean"`, DGL's behaviour); `duplicates="sum"` adds them
  instead, which is the exact gradient (PyTorch's coalesced sparse gradient);
- Adam keeps one int32 step count per row, incremented only when the row is
  updated, and corrects the bias with the row's own count, so rows not
  touched do not decay:
      t += 1;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
      w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
- Adagrad: s += g^2;  w -= lr * g / sqrt(s + eps)   (eps inside the root, as DGL).

step() is a collective when torch.distributed is initialised: each rank
coalesces its own gradients per id, sends them (with occurrence counts) to the
rows' owners, and every owner updates its rows. The loop is the usual one:
zero_grad() -> forward -> backward -> step().
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from gpart.collectives.all_to_all import all_to_all_variable, group_by_owner
from gpart.runtime.embedding.table import ShardedEmbedding, check_embedding_group

DUPLICATE_MODES = ("mean", "sum")
STATE_DTYPES = {"float32": torch.float32, "float16": torch.float16}


class SparseOptimizer:
    """Shared machinery: traces -> per-owner coalesced gradients -> row updates."""

    kind = ""
    state_names: tuple[str, ...] = ()

    def __init__(self, params: Sequence[ShardedEmbedding], lr: float, duplicates: str = "mean"):
        params = check_embedding_group(params, f"one {type(self).__name__} optimizer")
        if duplicates not in DUPLICATE_MODES:
            raise ValueError(f"duplicates must be 'mean' or 'sum', got {duplicates!r}")
        if not lr >= 0:
            raise ValueError(f"learning rate must be non-negative, got {lr}")
        self.params = params
        self.duplicates = duplicates
        self.param_groups: list[dict[str, Any]] = [{"lr": float(lr)}]
        self.state: dict[str, dict[str, torch.Tensor]] = {p.name: self._new_state(p) for p in params}

    @property
    def lr(self) -> float:
        return float(self.param_groups[0]["lr"])

    # ---- loop ---------------------------------------------------------------------------

    def zero_grad(self) -> None:
        """Forget the gradients recorded by backward since the last zero_grad()."""
        for emb in self.params:
            emb.reset_trace()

    @torch.no_grad()
    def step(self) -> None:
        """Apply the recorded gradients to the rows they belong to (a collective in a process group)."""
        for emb in self.params:
            rows, grads = self.owned_gradients(emb)
            if rows.numel():
                self._update(emb, self.state[emb.name], rows, grads)

    def owned_gradients(self, emb: ShardedEmbedding) -> tuple[torch.Tensor, torch.Tensor]:
        """(unique local rows of this rank, their combined gradient), from every rank's trace."""
        ids, grads = emb.trace()
        ids = ids.to(emb.device)
        grads = grads.to(emb.device)
        unique_ids, sums, counts = _coalesce(ids, grads)
        if emb.world_size > 1:
            unique_ids, sums, counts = self._send_to_owners(emb, unique_ids, sums, counts)
            unique_ids, sums, counts = _coalesce(unique_ids, sums, counts)
        if self.duplicates == "mean":
            sums = sums / counts.unsqueeze(1).to(sums.dtype)
        return emb.to_local(unique_ids), sums

    @staticmethod
    def _send_to_owners(
        emb: ShardedEmbedding, ids: torch.Tensor, sums: torch.Tensor, counts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        sorted_ids, per_rank, order = group_by_owner(ids, emb.owner(ids), emb.world_size)
        split = [int(c) for c in (per_rank.tolist() if isinstance(per_rank, torch.Tensor) else per_rank)]
        # one exchange: each row carries (id, count) as 16 bytes, then its float32 gradient sum
        keys = torch.stack([sorted_ids, counts[order]], dim=1).contiguous().view(torch.uint8)
        values = sums[order].to(torch.float32).contiguous().view(torch.uint8)
        packed = torch.cat([keys, values], dim=1)
        received = torch.cat(all_to_all_variable(list(torch.split(packed, split))))
        keys_in = received[:, :16].contiguous().view(torch.int64)
        sums_in = received[:, 16:].contiguous().view(torch.float32)
        return keys_in[:, 0], sums_in, keys_in[:, 1]

    # ---- checkpoint support -------------------------------------------------------------

    def state_tensors(self, emb: ShardedEmbedding) -> dict[str, torch.Tensor]:
        """This rank's state shards of `emb`, by state name (rows in the embedding's local order)."""
        return self.state[emb.name]

    def hyperparameters(self) -> dict[str, Any]:
        # key named as SPEC.md 6's example of how duplicate gradient rows were combined
        return {"lr": self.lr, "grad_duplicates": self.duplicates}

    def load_hyperparameters(self, params: dict[str, Any]) -> None:
        """Restore the hyper-parameters present in `params` (a checkpoint's optimizer entry); keep the others."""
        if "lr" in params:
            self.param_groups[0]["lr"] = float(params["lr"])
        duplicates = params.get("grad_duplicates", self.duplicates)
        if duplicates not in DUPLICATE_MODES:
            raise ValueError(f"unknown duplicates mode {duplicates!r}")
        self.duplicates = duplicates

    # ---- per-optimizer parts ------------------------------------------------------------

    def _new_state(self, emb: ShardedEmbedding) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def _update(self, emb: ShardedEmbedding, state: dict[str, torch.Tensor], rows: torch.Tensor, grad: torch.Tensor) -> None:
        raise NotImplementedError


class SparseAdam(SparseOptimizer):
    """DGL's SparseAdam: per-row int32 step counts, moments in float32 (or float16 with state_dtype)."""

    kind = "adam"
    state_names = ("step", "exp_avg", "exp_avg_sq")

    def __init__(
        self,
        params: Sequence[ShardedEmbedding],
        lr: float = 0.001,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        duplicates: str = "mean",
        state_dtype: torch.dtype = torch.float32,
    ):
        b1, b2 = (float(b) for b in betas)
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        if not eps >= 0:
            raise ValueError(f"eps must be non-negative, got {eps}")
        if state_dtype not in STATE_DTYPES.values():
            raise ValueError(f"state_dtype must be torch.float32 or torch.float16, got {state_dtype}")
        self.state_dtype = state_dtype
        super().__init__(params, lr, duplicates)
        self.param_groups[0].update(betas=(b1, b2), eps=float(eps))

    def _new_state(self, emb: ShardedEmbedding) -> dict[str, torch.Tensor]:
        rows, dev = emb.num_rows_local, emb.device
        return {
            "step": torch.zeros(rows, dtype=torch.int32, device=dev),
            "exp_avg": torch.zeros((rows, emb.dim), dtype=self.state_dtype, device=dev),
            "exp_avg_sq": torch.zeros((rows, emb.dim), dtype=self.state_dtype, device=dev),
        }

    def _update(self, emb: ShardedEmbedding, state: dict[str, torch.Tensor], rows: torch.Tensor, grad: torch.Tensor) -> None:
        group = self.param_groups[0]
        b1, b2 = group["betas"]
        lr, eps = group["lr"], group["eps"]
        # rows are unique: index_select/index_copy_ are exact and cheaper than advanced indexing
        step = state["step"]
        t = step.index_select(0, rows).add_(1)
        step.index_copy_(0, rows, t)
        m = state["exp_avg"].index_select(0, rows).to(torch.float32).mul_(b1).add_(grad, alpha=1.0 - b1)
        v = state["exp_avg_sq"].index_select(0, rows).to(torch.float32).mul_(b2).addcmul_(grad, grad, value=1.0 - b2)
        state["exp_avg"].index_copy_(0, rows, m.to(self.state_dtype))
        state["exp_avg_sq"].index_copy_(0, rows, v.to(self.state_dtype))
        t64 = t.to(torch.float64)
        bias1 = (1.0 - torch.pow(b1, t64)).to(torch.float32).unsqueeze(1)
        bias2 = (1.0 - torch.pow(b2, t64)).to(torch.float32).unsqueeze(1)
        # m and v were copied into the state above, so they can be reused in place here
        denom = v.div_(bias2).sqrt_().add_(eps)
        delta = m.div_(bias1).mul_(lr).div_(denom)
        _apply_delta(emb, rows, delta)

    def hyperparameters(self) -> dict[str, Any]:
        group = self.param_groups[0]
        return {
            **super().hyperparameters(),
            "betas": [float(b) for b in group["betas"]],
            "eps": float(group["eps"]),
            "state_dtype": _dtype_name(self.state_dtype),
        }

    def load_hyperparameters(self, params: dict[str, Any]) -> None:
        super().load_hyperparameters(params)
        if "betas" in params:
            b1, b2 = (float(b) for b in params["betas"])
            self.param_groups[0]["betas"] = (b1, b2)
        if "eps" in params:
            self.param_groups[0]["eps"] = float(params["eps"])


class SparseAdagrad(SparseOptimizer):
    """DGL's SparseAdagrad: one float32 sum of squared gradients per table entry."""

    kind = "adagrad"
    state_names = ("state_sum",)

    def __init__(self, params: Sequence[ShardedEmbedding], lr: float = 0.01, eps: float = 1e-10, duplicates: str = "mean"):
        if not eps >= 0:
            raise ValueError(f"eps must be non-negative, got {eps}")
        super().__init__(params, lr, duplicates)
        self.param_groups[0].update(eps=float(eps))

    def _new_state(self, emb: ShardedEmbedding) -> dict[str, torch.Tensor]:
        return {"state_sum": torch.zeros((emb.num_rows_local, emb.dim), dtype=torch.float32, device=emb.device)}

    def _update(self, emb: ShardedEmbedding, state: dict[str, torch.Tensor], rows: torch.Tensor, grad: torch.Tensor) -> None:
        lr, eps = self.param_groups[0]["lr"], self.param_groups[0]["eps"]
        total = state["state_sum"].index_select(0, rows).addcmul_(grad, grad)
        state["state_sum"].index_copy_(0, rows, total)
        delta = grad.mul(lr).div_(total.add_(eps).sqrt_())
        _apply_delta(emb, rows, delta)

    def hyperparameters(self) -> dict[str, Any]:
        return {**super().hyperparameters(), "eps": float(self.param_groups[0]["eps"])}

    def load_hyperparameters(self, params: dict[str, Any]) -> None:
        super().load_hyperparameters(params)
        if "eps" in params:
            self.param_groups[0]["eps"] = float(params["eps"])


def _apply_delta(emb: ShardedEmbedding, rows: torch.Tensor, delta: torch.Tensor) -> None:
    """weight[rows] -= delta for unique rows, computed in float32 and rounded once to the table dtype."""
    if emb.weight.dtype == torch.float32:
        emb.weight.index_add_(0, rows, delta, alpha=-1.0)
    else:
        updated = emb.weight.index_select(0, rows).to(torch.float32).sub_(delta)
        emb.weight.index_copy_(0, rows, updated.to(emb.weight.dtype))


def _coalesce(
    ids: torch.Tensor, sums: torch.Tensor, counts: Optional[torch.Tensor] = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Unique ids (ascending), the sum of their gradient rows and their occurrence counts.

    `counts` are the occurrences each input row already stands for (None: one each).
    """
    if counts is None:
        unique_ids, inverse, total_counts = torch.unique(ids, return_inverse=True, return_counts=True)
    else:
        unique_ids, inverse = torch.unique(ids, return_inverse=True)
        total_counts = torch.zeros(unique_ids.shape[0], dtype=torch.int64, device=ids.device)
        total_counts.index_add_(0, inverse, counts.to(torch.int64))
    total = torch.zeros((unique_ids.shape[0], sums.shape[1]), dtype=torch.float32, device=sums.device)
    total.index_add_(0, inverse, sums.to(torch.float32))
    return unique_ids, total, total_counts


def _dtype_name(dtype: torch.dtype) -> str:
    return {v: k for k, v in STATE_DTYPES.items()}[dtype]
