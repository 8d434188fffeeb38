"""Other systems' embedding-checkpoint files (SPEC.md 6.6 import, 6.7 export): names and layouts.

- WholeGraph: `WholeMemoryEmbedding.save(prefix)` writes, per rank `r` of `W`,
  `<prefix>_embedding_tensor_part_<r>_of_<W>` (the table) and
  `<prefix>_<state>_part_<r>_of_<W>` per optimizer state, raw rows of the
  rank's contiguous range. The file names are defined here once, for both
  directions.
- DistDGL: `DistSparseGradOptimizer.save(f)` (DGL 2.1; `save_state_to` later)
  writes `f_<rank>`, a torch.save of `{"emb_states": {E: {"ids", "states":
  {key: rows}}}, "params": {"world_size" (later "num_clients"), "_lr", "_eps",
  "_beta1", "_beta2"}}`, where each state key is the name of the optimizer's
  DistTensor (`node~_N~<E>_step`, ...).

Everything here is names and plain dict/tensor layouts; the streaming lives in
the gpart/ckpt/ package and gpart/ckpt/foreign_export.py.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

# gpart optimizer -> {gpart state -> WholeGraph optimizer-state name}
WHOLEGRAPH_STATE_FILES: dict[str, dict[str, str]] = {
    "none": {},
    "lazyadam": {"m": "m", "v": "v", "beta_powers": "beta12t"},
    "adagrad": {"state_sum": "state_sum"},
    "adam": {"step": "beta12t", "exp_avg": "m", "exp_avg_sq": "v"},  # as LazyAdam (SPEC.md 6.7)
}

# gpart optimizer -> the WholeGraph optimizer whose states the files are
WHOLEGRAPH_OPTIMIZER = {"none": "none", "lazyadam": "lazyadam", "adagrad": "adagrad", "adam": "lazyadam"}

# (gpart optimizer, state) WholeGraph keeps in another form -> (its file's dtype, row shape):
# Adam's step count t is LazyAdam's (beta1^t, beta2^t) in float32 (SPEC.md 6.8)
WHOLEGRAPH_CONVERTED: dict[tuple[str, str], tuple[str, tuple[int, ...]]] = {("adam", "step"): ("float32", (2,))}

# gpart optimizer -> {gpart state -> suffix DistDGL appends to the embedding name}
DISTDGL_STATES: dict[str, dict[str, str]] = {
    "none": {},
    "adam": {"step": "_step", "exp_avg": "_mem", "exp_avg_sq": "_power"},
    "adagrad": {"state_sum": "_sum"},
}

# DistDGL's saved hyper-parameter names -> gpart optimizer keys (betas are split in two)
DISTDGL_PARAMS = {"_lr": "lr", "_eps": "eps"}

# DistTensor names of a homogeneous graph's node data: "node" + "~" + node type + "~" + name
DISTDGL_NODE_POLICY = "node~{ntype}~"


def wholegraph_stem(prefix: str, optimizer: str, state: Optional[str]) -> str:
    """File-name stem of the table (state None) or a state of `WholeMemoryEmbedding.save(prefix)`."""
    if state is None:
        return f"{prefix}_embedding_tensor"
    return f"{prefix}_{WHOLEGRAPH_STATE_FILES[optimizer][state]}"


def distdgl_state_key(embedding: str, optimizer: str, state: str, ntype: str = "_N") -> str:
    """The key DistDGL's optimizer saves state `state` of `embedding` under (its DistTensor name)."""
    return DISTDGL_NODE_POLICY.format(ntype=ntype) + embedding + DISTDGL_STATES[optimizer][state]


def distdgl_params(optimizer: Mapping[str, Any], world_size: int) -> dict[str, Any]:
    """DistDGL's saved `params`: the job's size and the optimizer's `_lr`, `_eps`, `_beta1`, `_beta2`.

    The size goes under both names DGL has used: `world_size` (DGL 2.1, the release
    on PyPI, pops it in `load`) and `num_clients` (DGL's later `load_state_from`);
    each version keeps the other key as a harmless attribute.
    """
    params: dict[str, Any] = {"world_size": int(world_size), "num_clients": int(world_size)}
    for dgl_key, key in DISTDGL_PARAMS.items():
        if key in optimizer:
            params[dgl_key] = optimizer[key]
    betas = optimizer.get("betas")
    if isinstance(betas, (list, tuple)) and len(betas) == 2:
        params["_beta1"], params["_beta2"] = betas[0], betas[1]
    return params


def distdgl_optimizer_dict(emb_states: Mapping[str, tuple[Any, Mapping[str, Any]]], params: Mapping[str, Any]) -> dict[str, Any]:
    """`local_state_dict()` of DistDGL's optimizer: {"emb_states": {E: {"ids", "states"}}, "params"}."""
    return {
        "emb_states": {emb: {"ids": ids, "states": dict(states)} for emb, (ids, states) in emb_states.items()},
        "params": dict(params),
    }
