"""Each rank's share of a node or edge set: equal sizes across ranks, ids the rank owns first.

    train_ids = node_split(part, "train_mask")     # this rank's seeds
    eids = edge_split(part, "edge_train_mask")

As DGL's distributed node_split / edge_split with force_even: the selected
ids (a boolean array's True entries, or an id list) are shared so that rank
sizes differ by at most one, which gives every rank the same number of
mini-batches. Unlike DGL's contiguous cut of the id list, each rank keeps
the selected ids it owns up to its quota (the larger quotas go to the ranks
owning the most selected ids), and the surplus of the others fills the
remaining quotas in (rank, id) order. Ownership: a node belongs to its
partition, an edge to the partition that stores it (its destination's).
The result is sorted and deterministic. This is a collective when
torch.distributed is initialised; each rank reads only the entries it owns,
so a full-size array need not be the same object on every rank. With L
trainers per partition (gpart.runtime.partition.trainers) the selection is divided
over all of them: the L trainers of a partition start from equal slices of
its owned selection, then quotas even out across every rank.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from gpart.collectives.agreement import agree_or_raise
from gpart.collectives.all_to_all import all_to_all_rows, exchange_counts
from gpart.collectives.process_group import world
from gpart.runtime.partition.interface import Partition
from gpart.runtime.partition.trainers import layout_problem, wrong_partition


def node_split(part: Partition, nodes: Any, *, timeout_s: Optional[float] = None) -> torch.Tensor:
    """This rank's share of the selected nodes (sorted global ids, int64 on the partition's device).

    nodes: the name of a boolean node data array of the partition
    ("train_mask"), a boolean array of num_nodes entries, or global node ids.
    """
    owned_ids = part.node_ids[: part.num_owned]  # erased ids: a typed partition's selections are erased ids
    owned, problem = _owned_selection(nodes, "node", part.num_nodes, owned_ids, part.node_data, part.num_owned)
    return _even_share(part, owned, problem, "node_split", timeout_s)


def edge_split(part: Partition, edges: Any, *, timeout_s: Optional[float] = None) -> torch.Tensor:
    """This rank's share of the selected edges (sorted global edge ids, the input's numbering).

    edges: the name of a boolean edge data array of the partition, a boolean
    array of num_edges entries (input edge order), or global edge ids.
    """
    stored = part.edge_ids
    owned, problem = _owned_selection(edges, "edge", part.num_edges, stored, part.edge_data, stored.numel())
    return _even_share(part, owned, problem, "edge_split", timeout_s)


def _owned_selection(selection: Any, kind: str, total: int, owned_ids: torch.Tensor, data: dict,
                     rows: int) -> tuple[torch.Tensor, Optional[str]]:
    """(the selected ids this rank owns, sorted; or an empty tensor and the problem with `selection`)."""
    none = owned_ids[:0]
    if isinstance(selection, str):
        if selection not in data:
            return none, f"no {kind} data {selection!r} loaded (loaded: {', '.join(map(_key_text, data)) or 'none'})"
        mask = data[selection][:rows].to(owned_ids.device)
        if mask.dtype != torch.bool:
            return none, f"{kind} data {selection!r} has dtype {mask.dtype}, a {kind} mask must be bool"
        return torch.sort(owned_ids[mask]).values, None
    sel = torch.from_numpy(np.ascontiguousarray(selection)) if isinstance(selection, np.ndarray) else torch.as_tensor(selection)
    sel = sel.reshape(-1).to(owned_ids.device)
    if sel.dtype == torch.bool:
        if sel.numel() != total:
            return none, f"a boolean {kind} mask needs {total} entries (one per {kind}), got {sel.numel()}"
        return torch.sort(owned_ids[sel[owned_ids]]).values, None
    if sel.dtype.is_floating_point or sel.dtype.is_complex:
        return none, f"{kind} ids must be integers, got dtype {sel.dtype}"
    sel = sel.to(torch.int64)
    if sel.numel():
        lo, hi = (int(v) for v in torch.aminmax(sel))
        if lo < 0 or hi >= total:
            return none, f"{kind} ids outside 0..{total - 1} (min {lo}, max {hi})"
    known = torch.sort(owned_ids).values
    sel = torch.unique(sel)
    if known.numel() == 0:
        return none, None
    at = torch.searchsorted(known, sel).clamp_(max=known.numel() - 1)
    return sel[known[at] == sel], None


def _key_text(key: Any) -> str:
    """A data key as the user names it: "name", "ntype/name" or "s:r:d/name" (typed partitions)."""
    if isinstance(key, tuple):
        kind, name = key
        return f"{':'.join(kind) if isinstance(kind, tuple) else kind}/{name}"
    return str(key)


def _quotas(counts: list[int]) -> list[int]:
    """Sizes differing by at most one; the larger ones go to the ranks with the most ids (ties: lower rank)."""
    world_size = len(counts)
    base, extra = divmod(sum(counts), world_size)
    quotas = [base] * world_size
    for r in sorted(range(world_size), key=lambda r: (-counts[r], r))[:extra]:
        quotas[r] += 1
    return quotas


def _overlap(a0: int, a1: int, b0: int, b1: int) -> int:
    return max(0, min(a1, b1) - max(a0, b0))


def _even_share(part: Partition, owned: torch.Tensor, problem: Optional[str], what: str, timeout_s: Optional[float]) -> torch.Tensor:
    rank, world_size = world()
    per_part = world_size // part.num_parts if world_size > 1 else 1
    problem = problem or _layout_problem(part, rank, world_size, what)
    wait = timeout_s if timeout_s is not None else part.timeout_s
    agree_or_raise(problem, f"{what} of {part.digest}", what, wait, path=part.directory)
    if world_size == 1:
        return owned
    if per_part > 1:  # the L trainers of a partition start from equal contiguous slices of its selection
        bounds = [owned.numel() * i // per_part for i in range(per_part + 1)]
        owned = owned[bounds[rank % per_part]:bounds[rank % per_part + 1]]
    counts = exchange_counts([owned.numel()] * world_size, timeout_s=wait)
    quotas = _quotas(counts)
    keep = [min(c, q) for c, q in zip(counts, quotas)]
    surplus_at = np.concatenate([[0], np.cumsum([c - k for c, k in zip(counts, keep)])]).tolist()
    deficit_at = np.concatenate([[0], np.cumsum([q - k for q, k in zip(quotas, keep)])]).tolist()
    # Surplus ids form one pool in (rank, id) order; rank d takes the pool's slice [deficit_at[d], deficit_at[d+1]).
    send = [_overlap(surplus_at[rank], surplus_at[rank + 1], deficit_at[d], deficit_at[d + 1]) for d in range(world_size)]
    recv = [_overlap(surplus_at[s], surplus_at[s + 1], deficit_at[rank], deficit_at[rank + 1]) for s in range(world_size)]
    got = all_to_all_rows(owned[keep[rank]:], send, recv, timeout_s=wait)
    return torch.sort(torch.cat([owned[: keep[rank]], got.to(owned.device)])).values


def _layout_problem(part: Partition, rank: int, world_size: int, what: str) -> Optional[str]:
    """Whether this rank trains on the partition it loaded (rank r on partition r // L, L trainers per partition)."""
    if world_size == 1:
        return f"has {part.num_parts} partitions: {what} needs torch.distributed with one rank per partition" \
            if part.num_parts > 1 else None
    problem = layout_problem(part.num_parts, world_size)
    if problem is None and rank // (world_size // part.num_parts) != part.rank:
        problem = wrong_partition(rank, world_size, part.num_parts, part.rank, what)
    return problem
