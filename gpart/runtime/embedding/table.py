"""Sharded trainable node embeddings: each rank holds its rows, lookups fetch remote rows.

    emb = ShardedEmbedding(num_nodes, 128, "node_emb", policy="remainder", device="cuda")
    h = emb(global_ids)          # rows in request order, with autograd
    loss(h).backward()           # records (ids, row gradients) for the sparse optimizer
    opt.step()                   # gpart.runtime.embedding.optim.SparseAdam / SparseAdagrad

Rows are sharded under gpart.formats.sharding.policies's policies (SPEC.md section 2): `remainder`
as DGL's NodeEmbedding (row g on rank g % W at local row g // W) or `range`
with WholeGraph's boundaries. Lookups and optimizer steps are collectives when
torch.distributed is initialised: every rank must call them the same number of
times, in the same order (as with DGL's NodeEmbedding under NCCL). Backward
does no communication; it only records gradients, as DGL's trace does, so no
dense gradient of the table is ever formed.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import numpy as np
import torch

from gpart.collectives.agreement import check_same_across_ranks
from gpart.collectives.all_to_all import all_to_all_rows, all_to_all_variable, group_by_owner
from gpart.collectives.process_group import world
from gpart.formats.checkpoint.entries import NAME_RE
from gpart.formats.sharding.policies import ShardPolicy, make_policy
from gpart.runtime.embedding.initializers import Initializer, iter_init_chunks, uniform

TABLE_DTYPES = (torch.float32, torch.float16)
# How long ranks may arrive apart at a construction or a save before it is an error rather than
# a slow rank (torch.distributed's own default timeout): rank 0 may evaluate or log before saving.
RANK_SYNC_TIMEOUT_S = 1800.0


class ShardedEmbedding:
    """A [num_embeddings, dim] table sharded over the ranks of the default process group.

    `weight` is this rank's shard, rows in local order (policy.global_ids(rank)).
    The initial table depends only on (num_embeddings, dim, name, seed, init),
    never on the world size or policy (see gpart.runtime.embedding.initializers).
    """

    def __init__(
        self,
        num_embeddings: int,
        dim: int,
        name: str,
        policy: Union[str, ShardPolicy] = "remainder",
        device: Union[str, torch.device, None] = None,
        dtype: torch.dtype = torch.float32,
        init: Optional[Initializer] = None,
        seed: int = 0,
    ):
        if int(num_embeddings) < 0 or int(dim) < 1:
            raise ValueError(f"embedding {name!r}: need num_embeddings >= 0 and dim >= 1, got {num_embeddings}, {dim}")
        if not isinstance(name, str) or not NAME_RE.match(name):
            # checkpoints name files after the embedding (SPEC.md section 6), hence the restricted alphabet
            raise ValueError(f"embedding name must match {NAME_RE.pattern} (letters, digits, _ and -), got {name!r}")
        if dtype not in TABLE_DTYPES:
            raise ValueError(f"embedding {name!r}: dtype must be torch.float32 or torch.float16, got {dtype}")
        self.num_embeddings = int(num_embeddings)
        self.dim = int(dim)
        self.name = name
        self.dtype = dtype
        self.seed = int(seed)
        self.rank, self.world_size = world()
        self.policy = self._make_policy(policy)
        if self.world_size > 1:
            # ranks that disagree here would hang in the first lookup; fail now, naming both sides
            config = f"{self.num_embeddings}x{self.dim} {dtype} seed={self.seed} policy={self.policy.to_json()}"
            check_same_across_ranks(config, f"embedding {name!r} (rows x dim, dtype, seed, policy)", timeout_s=RANK_SYNC_TIMEOUT_S)
        self.device = torch.device(device) if device is not None else _default_device()
        # contiguous policies look owners up in their row boundaries; interleaved ones compute them (remainder rule)
        self._bounds = torch.as_tensor(self.policy.row_bounds(), device=self.device) if self.policy.is_contiguous else None
        self.weight = torch.empty((self.num_rows_local, self.dim), dtype=dtype, device=self.device)
        self._initialise(init if init is not None else uniform(-0.1, 0.1))
        # gradients flow into the table through this empty leaf: autograd calls our backward
        # only if some input of the lookup requires grad
        self._anchor = torch.zeros(0, requires_grad=True)
        self._trace: list[tuple[torch.Tensor, torch.Tensor]] = []

    # ---- layout -------------------------------------------------------------------------

    def _make_policy(self, policy: Union[str, ShardPolicy]) -> ShardPolicy:
        """A policy name (range: WholeGraph boundaries), or a gpart.formats.sharding.policies policy object for this table and world."""
        if isinstance(policy, str):
            return make_policy(policy, self.num_embeddings, self.world_size)
        if not isinstance(policy, ShardPolicy):
            raise TypeError(f"policy must be 'remainder', 'range' or a gpart.formats.sharding.policies policy, got {type(policy).__name__}")
        if policy.num_rows != self.num_embeddings or policy.world_size != self.world_size:
            raise ValueError(
                f"embedding {self.name!r}: policy is for {policy.num_rows} rows on {policy.world_size} ranks, "
                f"the table has {self.num_embeddings} rows on {self.world_size} ranks"
            )
        return policy

    @property
    def num_rows_local(self) -> int:
        return int(self.policy.count(self.rank))

    @property
    def shape(self) -> tuple[int, int]:
        return (self.num_embeddings, self.dim)

    def local_global_ids(self) -> np.ndarray:
        """Global ids of this rank's rows, in local order."""
        return self.policy.global_ids(self.rank)

    def owner(self, ids: torch.Tensor) -> torch.Tensor:
        """Rank owning each global id (int64, on the ids' device)."""
        if self._bounds is None:
            return torch.remainder(ids, self.policy.stride)
        bounds = self._bounds.to(ids.device)
        return torch.searchsorted(bounds, ids, right=True) - 1

    def to_local(self, ids: torch.Tensor) -> torch.Tensor:
        """Local row of each global id on its owner."""
        if self._bounds is None:
            return torch.div(ids, self.policy.stride, rounding_mode="floor")
        bounds = self._bounds.to(ids.device)
        return ids - bounds[torch.searchsorted(bounds, ids, right=True) - 1]

    def _initialise(self, init: Initializer) -> None:
        """This rank's rows of the global table's chunks: local row k is global row first + k * stride."""
        first, stride, count = self.policy.first_row(self.rank), self.policy.stride, self.num_rows_local
        if count == 0:
            return
        stop = first + (count - 1) * stride + 1  # past this rank's last row
        for start, rows in iter_init_chunks(self.num_embeddings, self.dim, self.name, self.seed, init, first, stop):
            k0 = max(0, -(-(start - first) // stride))  # this rank's first local row inside the chunk
            g0, g1 = first + k0 * stride, min(stop, start + rows.shape[0])
            if g0 < g1:
                mine = rows[g0 - start : g1 - start : stride]
                self.weight[k0 : k0 + mine.shape[0]] = mine.to(self.device, self.dtype)

    # ---- lookup -------------------------------------------------------------------------

    def __call__(self, ids: Union[torch.Tensor, np.ndarray], device: Union[str, torch.device, None] = None) -> torch.Tensor:
        """Rows of `ids` (any integer tensor/array of global ids) in request order, shape [*ids.shape, dim].

        `device` moves the result (as DGL's `emb(ids, device)`), e.g. a CPU table feeding a GPU model;
        gradients flow back through the move.
        """
        try:
            ids_t = self._check_ids(ids)
        except (TypeError, IndexError):
            if self.world_size > 1:
                # The other ranks are about to exchange rows with this one: take part
                # with an empty request so they finish this lookup rather than wait for
                # the process group's timeout, then report the bad ids here.
                self.fetch(torch.zeros(0, dtype=torch.int64, device=self.device))
            raise
        flat = ids_t.reshape(-1)
        rows = _Lookup.apply(self._anchor, flat, self).reshape(*ids_t.shape, self.dim)
        return rows if device is None else rows.to(device)

    def _check_ids(self, ids: Union[torch.Tensor, np.ndarray]) -> torch.Tensor:
        ids_t = torch.as_tensor(ids)
        if ids_t.dtype.is_floating_point or ids_t.dtype == torch.bool or ids_t.is_complex():
            raise TypeError(f"embedding {self.name!r}: ids must be integers, got {ids_t.dtype}")
        ids_t = ids_t.to(device=self.device, dtype=torch.int64)
        if ids_t.numel():
            lo, hi = torch.stack([ids_t.min(), ids_t.max()]).tolist()  # one device sync, not two
            if lo < 0 or hi >= self.num_embeddings:
                bad = lo if lo < 0 else hi
                raise IndexError(f"embedding {self.name!r}: id {bad} out of range [0, {self.num_embeddings})")
        return ids_t

    def fetch(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows of flat int64 global ids without autograd (a collective when world_size > 1)."""
        if self.world_size == 1:
            return self.weight.index_select(0, ids)
        unique_ids, inverse = torch.unique(ids, return_inverse=True)
        rows = self._fetch_unique(unique_ids)
        return rows[inverse]

    def _fetch_unique(self, ids: torch.Tensor) -> torch.Tensor:
        sorted_ids, counts, order = group_by_owner(ids, self.owner(ids), self.world_size)
        asked = _as_list(counts)
        requested = all_to_all_variable(list(torch.split(sorted_ids, asked)))
        wanted = torch.cat(requested) if requested else sorted_ids[:0]
        served = self.weight.index_select(0, self.to_local(wanted))
        # both sides know the reply sizes already: no second exchange of counts
        received = all_to_all_rows(served, [int(r.shape[0]) for r in requested], asked)  # rows for sorted_ids
        out = torch.empty_like(received)
        out[order] = received
        return out

    # ---- gradient trace -----------------------------------------------------------------

    def _record(self, ids: torch.Tensor, grad: torch.Tensor) -> None:
        self._trace.append((ids, grad.detach().to(torch.float32).reshape(-1, self.dim)))

    def trace(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, row gradients) recorded by backward since the last reset, concatenated."""
        if not self._trace:
            return (
                torch.zeros(0, dtype=torch.int64, device=self.device),
                torch.zeros((0, self.dim), dtype=torch.float32, device=self.device),
            )
        if len(self._trace) == 1:
            return self._trace[0][0], self._trace[0][1].to(self._trace[0][0].device)
        ids = torch.cat([i for i, _ in self._trace])
        grads = torch.cat([g.to(ids.device) for _, g in self._trace])
        return ids, grads

    def reset_trace(self) -> None:
        self._trace.clear()

    def __repr__(self) -> str:
        return (
            f"ShardedEmbedding({self.num_embeddings}, {self.dim}, {self.name!r}, policy={self.policy.name!r}, "
            f"rank={self.rank}/{self.world_size}, local_rows={self.num_rows_local}, dtype={self.dtype}, device={self.device})"
        )


class _Lookup(torch.autograd.Function):
    """Forward: fetch rows (local and remote). Backward: record (ids, grad rows) on the embedding."""

    @staticmethod
    def forward(ctx, anchor: torch.Tensor, ids: torch.Tensor, emb: ShardedEmbedding) -> torch.Tensor:
        ctx.emb = emb
        ctx.save_for_backward(ids)
        return emb.fetch(ids)

    @staticmethod
    def backward(ctx, grad_rows: torch.Tensor):
        (ids,) = ctx.saved_tensors
        ctx.emb._record(ids, grad_rows)
        return None, None, None


def check_embedding_group(embeddings: Sequence[Any], user: str) -> list["ShardedEmbedding"]:
    """`embeddings` as a list, checked to be ShardedEmbedding objects with distinct names in one
    process group (what an optimizer or a checkpoint handles together); `user` names the caller."""
    embeddings = list(embeddings)
    if not embeddings:
        raise ValueError(f"{user} got no embeddings")
    for emb in embeddings:
        if not isinstance(emb, ShardedEmbedding):
            raise TypeError(f"{user} handles ShardedEmbedding objects, got {type(emb).__name__}")
    names = [emb.name for emb in embeddings]
    if len(set(names)) != len(names):
        raise ValueError(f"embedding names must be unique in {user}, got {names}")
    if len({(emb.rank, emb.world_size) for emb in embeddings}) != 1:
        raise ValueError(f"all embeddings of {user} must belong to the same process group")
    return embeddings


def _default_device() -> torch.device:
    """CPU, or the current CUDA device when the process group talks NCCL (which needs CUDA tensors)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        if torch.distributed.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _as_list(counts: Union[torch.Tensor, np.ndarray, list]) -> list[int]:
    if isinstance(counts, torch.Tensor):
        return [int(c) for c in counts.tolist()]
    return [int(c) for c in counts]
