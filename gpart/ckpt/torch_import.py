"""Import per-rank torch.save files (gpart's own, DistDGL's sparse optimizer states) as a gpart checkpoint (SPEC.md 6.6)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from gpart.base.errors import InputError
from gpart.base.progress import Progress, or_null
from gpart.bytes.sink import preallocate
from gpart.bytes.torch_bridge import tensor_dtype_name, tensor_to_numpy
from gpart.ckpt.import_source import ImportOptions, ImportSource, PathLike
from gpart.ckpt.reshard import target_policy
from gpart.formats.checkpoint import entries as ck
from gpart.formats.checkpoint.foreign import DISTDGL_PARAMS, DISTDGL_STATES
from gpart.formats.checkpoint.writer import write_checkpoint_manifest, write_shard
from gpart.formats.files.commit import staged_output
from gpart.formats.files.dtypes import STORAGE_DTYPES, storage_dtype
from gpart.formats.input.checks import check_input_file
from gpart.formats.sharding.policies import POLICIES, ShardPolicy, make_policy

# DistDGL sparse optimizer state-name suffixes -> (optimizer type, gpart state)
DISTDGL_STATE_SUFFIXES = {suffix: (opt, state) for opt, states in DISTDGL_STATES.items() for state, suffix in states.items()}


def expand_rank_files(inputs: Sequence[PathLike], world_size: Optional[int] = None) -> list[list[Path]]:
    """Per-rank lists of files: each input is one rank's file, or (all of them) `{rank}` patterns with world_size."""
    texts = [os.fspath(p) for p in inputs]
    if not texts:
        raise InputError(None, "no input files")
    patterned = ["{rank}" in s for s in texts]
    if any(patterned):
        if not all(patterned):
            raise InputError(texts[patterned.index(False)], "mixes a {rank} pattern with plain files")
        if not world_size:
            raise InputError(texts[0], "a {rank} pattern needs --world-size")
        return [[Path(s.replace("{rank}", str(r))) for s in texts] for r in range(world_size)]
    if world_size is not None and world_size != len(texts):
        raise InputError(texts[0], f"{len(texts)} files given for world size {world_size}")
    return [[Path(s)] for s in texts]


def _load_torch(path: Path) -> Any:
    import torch  # here, not at the top: `gpart.ckpt` (and so the CLI) imports without torch

    check_input_file(path)  # exists, readable, and a regular file (a FIFO would block torch.load)
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # torch raises many types for bad files; all are input problems
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception:
            pass
        raise InputError(path, f"cannot read as a torch.save file with weights_only=True: {' '.join(str(exc).split())[:300]}") from None


def _to_numpy(value: Any, path: Path, key: str) -> tuple[np.ndarray, str]:
    import torch  # see _load_torch

    if not isinstance(value, torch.Tensor):
        raise InputError(path, f"{key!r} is a {type(value).__name__}, expected a tensor")
    name = tensor_dtype_name(value.dtype)
    if name not in STORAGE_DTYPES:
        raise InputError(path, f"{key!r} has unsupported dtype {value.dtype}")
    return tensor_to_numpy(value), name


def _jsonable(obj: Any) -> Any:
    """Optimizer hyper-parameters from a torch file, as JSON (tensors become numbers/lists; others dropped)."""
    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return obj
    if isinstance(obj, (list, tuple)):
        return [_jsonable(x) for x in obj]
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)


# DistDGL's saved names (`_lr`, `_eps`, and `num_clients`, the job's world size) -> gpart's names
DISTDGL_HYPER_PARAMS = {**DISTDGL_PARAMS, "num_clients": "world_size"}


def _distdgl_params(raw: dict[str, Any]) -> dict[str, Any]:
    """DistDGL's saved optimizer params with gpart's names: lr, eps, betas = [beta1, beta2]."""
    params = {DISTDGL_HYPER_PARAMS.get(k, k): v for k, v in raw.items() if k not in ("_beta1", "_beta2")}
    if "_beta1" in raw and "_beta2" in raw:
        params["betas"] = [raw["_beta1"], raw["_beta2"]]
    else:  # only one of the two: keep it under its own name rather than guess the other
        params.update({k[1:]: raw[k] for k in ("_beta1", "_beta2") if k in raw})
    return params


def _step_as_int32(value: Any, path: Path, key: str) -> Any:
    """A floating step-count state (DistDGL and dgl.optim keep Adam's step as float32) as int32.

    Exact when every count is a whole number in 0..2^31-1; anything else is refused.
    """
    import torch  # see _load_torch

    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return value
    wide = value.detach().to(torch.float64)
    whole = torch.isfinite(wide) & (wide >= 0) & (wide < 2**31) & (wide == torch.floor(wide))
    if not bool(whole.all()):
        bad = wide[~whole][0].item()
        raise InputError(path, f"{key!r}: step count {bad!r} is not a whole number in 0..2147483647, so it cannot be stored as int32")
    return wide.to(torch.int32)


def _normalise_rank_dict(obj: Any, path: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(tensors by gpart name, ids by embedding or "" for all, optimizer params) of one file."""
    if not isinstance(obj, Mapping):
        raise InputError(path, f"holds a {type(obj).__name__}, expected a dict of tensors")
    tensors: dict[str, Any] = {}
    ids: dict[str, Any] = {}
    params: dict[str, Any] = {}
    if "emb_states" in obj:  # DistDGL DistSparseGradOptimizer.save
        params = _distdgl_params(dict(_jsonable(obj.get("params") or {})))
        if "world_size" in obj:
            params.setdefault("world_size", _jsonable(obj["world_size"]))
        for emb, d in dict(obj["emb_states"]).items():
            ck.check_embedding_name(emb, path)
            if not isinstance(d, Mapping) or "states" not in d:
                raise InputError(path, f"emb_states[{emb!r}] lacks 'states'")
            if "ids" in d:
                ids[emb] = d["ids"]
            for key, value in dict(d["states"]).items():
                state = next((s for suf, (_, s) in DISTDGL_STATE_SUFFIXES.items() if str(key).endswith(suf)), None)
                if state is None:
                    raise InputError(path, f"emb_states[{emb!r}] state {key!r}: unknown suffix (expected {', '.join(DISTDGL_STATE_SUFFIXES)})")
                tensors[ck.tensor_name(emb, state)] = value
        rest = {k: v for k, v in obj.items() if k not in ("emb_states", "params", "world_size")}
    else:
        rest = dict(obj)
    for key, value in rest.items():
        key = str(key)
        if key == "ids":
            ids[""] = value
        elif key.endswith(".ids"):
            ids[key[: -len(".ids")]] = value
        elif key in ("params", "optimizer"):
            params.update(_jsonable(value) if isinstance(value, Mapping) else {})
        else:
            emb, state = ck.split_tensor_name(key)
            ck.check_embedding_name(emb, path)
            tensors[key] = value
    return tensors, ids, params


def import_torch(
    inputs: Sequence[PathLike],
    out_dir: PathLike,
    *,
    world_size: Optional[int] = None,
    layout: str = "remainder",
    policy: str = "remainder",
    hyper_params: Optional[Mapping[str, Any]] = None,
    force: bool = False,
    progress=None,
) -> dict[str, Any]:
    """Import per-rank torch.save files (SPEC.md 6.6) as a sharded gpart checkpoint with one shard per rank file."""
    groups = expand_rank_files(inputs, world_size)
    world = len(groups)
    ranks = []  # per rank: (tensors, ids, file of each tensor)
    params: dict[str, Any] = {}
    for r, files in enumerate(groups):
        tensors: dict[str, tuple[np.ndarray, str, Path]] = {}
        ids: dict[str, tuple[np.ndarray, Path]] = {}
        for path in files:
            t, i, p = _normalise_rank_dict(_load_torch(path), path)
            for key, value in t.items():
                if key in tensors:
                    raise InputError(path, f"tensor {key!r} also in {tensors[key][2]}")
                if ck.split_tensor_name(key)[1] == "step":
                    value = _step_as_int32(value, path, key)
                arr, dname = _to_numpy(value, path, key)
                tensors[key] = (arr, dname, path)
            for key, value in i.items():
                arr, _ = _to_numpy(value, path, f"{key}.ids" if key else "ids")
                if arr.ndim != 1 or arr.dtype.kind not in "iu":
                    raise InputError(path, f"ids must be a 1-D integer tensor, got {arr.dtype} {list(arr.shape)}")
                ids[key] = (arr, path)
            saved_world = p.pop("world_size", None)
            if saved_world is not None and saved_world != world:
                raise InputError(path, f"was saved by a job of world size {saved_world}, but {world} rank files are given")
            if r == 0:
                params.update(p)
        ranks.append((tensors, ids))
    names0 = sorted(ranks[0][0])
    if not names0:
        raise InputError(groups[0][0], "holds no tensors")
    for r, (tensors, _) in enumerate(ranks):
        if sorted(tensors) != names0:
            raise InputError(groups[r][0], f"tensors {sorted(tensors)} differ from rank 0's {names0}")
    embeddings = sorted({ck.split_tensor_name(n)[0] for n in names0})
    opt_type = _infer_optimizer(embeddings, names0, groups[0][0])
    opt = {"type": opt_type, **params, **dict(hyper_params or {}), "imported_from": "torch"}
    progress = or_null(progress)
    with staged_output(out_dir, force=force, inputs=[]) as stage:
        entries, specs = [], []
        with progress.stage("importing", total=len(names0) * world) as bar:
            for emb in embeddings:
                spec, ents = _import_embedding(emb, ranks, groups, stage, opt_type, layout, policy, bar)
                specs.append(spec)
                entries += ents
        manifest = ck.build_checkpoint_manifest(specs, entries, world, opt)
        write_checkpoint_manifest(stage, manifest)
    return manifest


class TorchImport(ImportSource):
    """`--from torch FILE...`: per-rank torch.save files, one per rank or `{rank}` patterns with options.world_size."""

    name = "torch"

    def run(self, inputs: Sequence[PathLike], out_dir: PathLike, options: ImportOptions, *, force: bool = False,
            progress: Optional[Progress] = None) -> dict[str, Any]:
        # the files carry their optimizer's hyper-parameters: options.hyper_params (for header-less files) is not read
        return import_torch(inputs, out_dir, world_size=options.world_size, layout=options.layout, policy=options.policy, force=force,
                            progress=progress)


def _infer_optimizer(embeddings: list[str], names: list[str], where: Path) -> str:
    for emb in embeddings:
        if emb not in names:
            raise InputError(where, f"embedding {emb!r} has states but no table (tensor {emb!r}); add the table's files")
    found = {ck.split_tensor_name(n)[1] for n in names} - {None}
    for kind, states in ck.OPTIMIZER_STATES.items():
        if found == set(states):
            for emb in embeddings:
                have = {ck.split_tensor_name(n)[1] for n in names if ck.split_tensor_name(n)[0] == emb} - {None}
                if have != found:
                    raise InputError(where, f"embedding {emb!r} has states {sorted(have)}, others {sorted(found)}")
            return kind
    raise InputError(where, f"states {sorted(found)} match no optimizer ({'; '.join(f'{k}: {sorted(v)}' for k, v in ck.OPTIMIZER_STATES.items())})")


def _import_embedding(emb, ranks, groups, stage, opt_type, layout, policy_name, bar):
    world = len(ranks)
    names = [emb] + [ck.tensor_name(emb, s) for s in ck.OPTIMIZER_STATES[opt_type]]
    # per tensor: dtype and row shape equal across ranks; per rank: equal row counts
    meta = {}
    for name in names:
        arr0, dt0, p0 = ranks[0][0][name]
        for r in range(world):
            arr, dt, path = ranks[r][0][name]
            if arr.ndim == 0:
                raise InputError(path, f"tensor {name!r} is a scalar, expected rows")
            if dt != dt0 or arr.shape[1:] != arr0.shape[1:]:
                raise InputError(path, f"tensor {name!r} is {dt} rows {list(arr.shape[1:])}, rank 0 ({p0}) has {dt0} rows {list(arr0.shape[1:])}")
        meta[name] = (dt0, tuple(int(s) for s in arr0.shape[1:]))
    rows = []
    for r in range(world):
        counts = {ranks[r][0][n][0].shape[0] for n in names}
        if len(counts) != 1:
            raise InputError(ranks[r][0][emb][2], f"tensors of embedding {emb!r} have different row counts {sorted(counts)}")
        rows.append(counts.pop())
    n = int(sum(rows))
    ids = [ranks[r][1].get(emb, ranks[r][1].get("")) for r in range(world)]
    if any(i is not None for i in ids):
        missing = next(r for r in range(world) if ids[r] is None) if any(i is None for i in ids) else None
        if missing is not None:
            raise InputError(groups[missing][0], f"has no ids for embedding {emb!r} while other ranks do")
        target = target_policy(policy_name, n, world)
        _check_ids(ids, rows, n, emb)
        entries = _place_by_ids(emb, names, meta, ranks, ids, target, stage, bar)
    else:
        if layout not in POLICIES:
            raise InputError(None, f"unknown layout {layout!r}")
        target = make_policy(layout, n, world)
        for r in range(world):
            if rows[r] != target.count(r):
                raise InputError(
                    ranks[r][0][emb][2],
                    f"{rows[r]} rows, but rank {r} of {world} holds {target.count(r)} of {n} rows under the {layout} layout "
                    "(wrong rank order or layout, or a rank's rows are missing; save the ids to import any layout)",
                )
        entries = []
        for name in names:
            for r in range(world):
                entries.append(write_shard(stage, name, r, world, ranks[r][0][name][0], dtype=meta[name][0], row_shape=meta[name][1]))
                bar.advance(1)
    dt, shape = meta[emb]
    return ck.EmbeddingSpec(emb, n, shape, dt, target), entries


def _check_ids(ids: list, rows: list[int], n: int, emb: str) -> None:
    seen = np.zeros(n, dtype=bool)
    for r, (arr, path) in enumerate(ids):
        if arr.shape[0] != rows[r]:
            raise InputError(path, f"{arr.shape[0]} ids for {rows[r]} rows of embedding {emb!r}")
        if arr.size == 0:
            continue
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= n:
            bad = lo if lo < 0 else hi
            raise InputError(path, f"id {bad} of embedding {emb!r} outside 0..{n - 1} (all files hold {n} rows): ids must cover 0..N-1 exactly once, so some id is missing")
        uniq, counts = np.unique(arr, return_counts=True)
        if (counts > 1).any():
            raise InputError(path, f"id {int(uniq[counts > 1][0])} of embedding {emb!r} appears {int(counts.max())} times")
        dup = arr[seen[arr]]
        if dup.size:
            raise InputError(path, f"id {int(dup[0])} of embedding {emb!r} is also in an earlier rank's file")
        seen[arr] = True
    if not seen.all():  # unreachable when counts add up, kept as a guard
        raise InputError(ids[0][1], f"id {int(np.flatnonzero(~seen)[0])} of embedding {emb!r} is in no file")


def _place_by_ids(emb, names, meta, ranks, ids, target: ShardPolicy, stage: Path, bar) -> list[dict[str, Any]]:
    """Write each tensor's shards under `target` by scattering every rank file's rows to their ids."""
    world = target.world_size
    entries = []
    owners = [target.owner(arr.astype(np.int64)) for arr, _ in ids]
    locals_ = [target.local(arr.astype(np.int64)) for arr, _ in ids]
    for name in names:
        dt, shape = meta[name]
        sdt = storage_dtype(dt)
        row_bytes = ck.tensor_row_bytes(dt, shape)
        for out_rank in range(world):
            rows = target.count(out_rank)
            fname = ck.shard_file_name(name, out_rank, world)
            path = stage / fname
            if rows == 0 or row_bytes == 0:
                path.touch()
            else:
                preallocate(path, rows * row_bytes)  # a full disk is an error here, not a SIGBUS below
                out = np.memmap(path, dtype=sdt, mode="r+", shape=(rows, *shape))
                for r in range(len(ranks)):
                    sel = owners[r] == out_rank
                    if sel.any():
                        out[locals_[r][sel]] = ranks[r][0][name][0][sel]
                out.flush()
                del out
            crc = ck.data_crc32(path) if rows and row_bytes else 0
            with open(path, "rb+") as fh:
                os.fsync(fh.fileno())
            entries.append(ck.shard_entry(name, out_rank, fname, rows, rows * row_bytes, crc, dt, shape))
        bar.advance(len(ranks))
    return entries
