"""Embedding checkpoints (SPEC.md section 6): names, optimizer states, shard entries, manifest builders.

The format's definitions live here; the reader (read_checkpoint, Checkpoint) is
reader.py, the writer (write_shard, ShardWriter, write_checkpoint_manifest)
writer.py. Both import this module, never the other way round.

A *sharded* checkpoint (a training run's output) is a directory holding, per
embedding, the table and each optimizer state split over W ranks by a
sharding policy (gpart.formats.sharding.policies: remainder or range), one flat row-major file
per (tensor, rank) named WholeGraph-style, and a `manifest.json` written last.
A *global* checkpoint (what `gpart gather-ckpt` writes) holds one file per
tensor in global row order; it reads through the same `Checkpoint` API as a
sharded checkpoint of one rank.

Tensor names: the table of embedding `E` is the tensor `E`; its optimizer
state `S` is the tensor `E.S` (embedding names never contain a dot, so names
cannot collide). Shard files are `<tensor>_part_<r>_of_<W>`.

Writing from W training processes (no communication needed until the end)::

    from gpart.formats.checkpoint.entries import EmbeddingSpec, build_checkpoint_manifest
    from gpart.formats.checkpoint.writer import write_checkpoint_manifest, write_shard
    # every rank, into the same directory:
    entries = [write_shard(d, "node_emb", rank, W, local_table),
               write_shard(d, "node_emb.step", rank, W, local_step),
               write_shard(d, "node_emb.exp_avg", rank, W, local_m),
               write_shard(d, "node_emb.exp_avg_sq", rank, W, local_v)]
    all_entries = all_gather_object(entries)          # list of lists, any order
    if rank == 0:
        manifest = build_checkpoint_manifest(
            [EmbeddingSpec("node_emb", N, (128,), "float32", policy)],
            all_entries, W, optimizer={"type": "adam", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8})
        write_checkpoint_manifest(d, manifest)         # checks files, then commits atomically

`write_shard` accepts a numpy array, a torch tensor (any device, copied to the
host in bounded chunks; bfloat16 stored as its bit pattern) or an iterable of
numpy chunks (then pass dtype and row_shape). It fsyncs the file and returns
a JSON-able entry {tensor, rank, file, rows, bytes, crc32, dtype, row_shape}.

Reading::

    from gpart.formats.checkpoint.reader import read_checkpoint
    ckpt = read_checkpoint(d, verify=False)        # validates manifest and file sizes
    ckpt.world_size, ckpt.optimizer, ckpt.embeddings["node_emb"].policy
    ckpt.tensors["node_emb.exp_avg"].role / .state / .dtype / .row_shape / .num_rows
    ckpt.shard("node_emb", rank)                   # read-only memmap [rows, *row_shape]
    ckpt.read_rows("node_emb", global_ids)         # any ids, gathered across shards
    ckpt.read_owned("node_emb", my_policy, my_rank) # rows a rank of a new job owns

Every problem is a one-line gpart.base.errors.InputError naming the file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from gpart.base.errors import InputError
from gpart.base.version import __version__
from gpart.bytes.crc import CHUNK_BYTES, file_crc32
from gpart.formats.files.dtypes import storage_dtype
from gpart.formats.files.names import safe_name
from gpart.formats.sharding.policies import ShardPolicy, policy_from_json

FORMAT = "gpart.checkpoint"
VERSION = 1
LAYOUTS = ("sharded", "global")

# Embedding names: no dot (the state separator), no path characters.
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")

_MOMENT_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class StateSpec:
    """What an optimizer state looks like per row: its dtypes and row shape rule."""

    dtypes: tuple[str, ...]
    row_shape: str  # "embedding": same as the table's rows; "scalar": (); "pair": (2,)

    def shape_for(self, table_row_shape: tuple[int, ...]) -> tuple[int, ...]:
        return {"embedding": table_row_shape, "scalar": (), "pair": (2,)}[self.row_shape]


# Optimizer type -> its per-row states (SPEC.md 6.3).
OPTIMIZER_STATES: dict[str, dict[str, StateSpec]] = {
    "none": {},
    # DGL SparseAdam: per-row step count, first and second moments.
    "adam": {
        "step": StateSpec(("int32", "int64"), "scalar"),
        "exp_avg": StateSpec(_MOMENT_DTYPES, "embedding"),
        "exp_avg_sq": StateSpec(_MOMENT_DTYPES, "embedding"),
    },
    # DGL SparseAdagrad: running sum of squared gradients.
    "adagrad": {"state_sum": StateSpec(_MOMENT_DTYPES, "embedding")},
    # WholeGraph LazyAdam: moments plus per-row (beta1^t, beta2^t).
    "lazyadam": {
        "m": StateSpec(_MOMENT_DTYPES, "embedding"),
        "v": StateSpec(_MOMENT_DTYPES, "embedding"),
        "beta_powers": StateSpec(("float32",), "pair"),
    },
}


def tensor_name(embedding: str, state: Optional[str] = None) -> str:
    """`E` for the table of embedding E, `E.S` for its state S."""
    return embedding if state is None else f"{embedding}.{state}"


def split_tensor_name(name: str) -> tuple[str, Optional[str]]:
    """Inverse of tensor_name: (embedding, state or None)."""
    emb, _, state = name.partition(".")
    return emb, (state or None)


def shard_file_name(tensor: str, rank: int, world_size: int) -> str:
    """WholeGraph-style shard file name: `<tensor>_part_<rank>_of_<world_size>`."""
    return f"{tensor}_part_{rank}_of_{world_size}"


def tensor_row_bytes(dtype: str, row_shape: Sequence[int]) -> int:
    """Bytes of one row of a tensor of `dtype` (a manifest dtype name) with rows of `row_shape`."""
    return int(np.prod(row_shape, dtype=np.int64)) * storage_dtype(dtype).itemsize


def check_embedding_name(name: str, where: Any = None) -> str:
    safe_name(name, "embedding name", where)
    if "." in name:
        raise InputError(where, f"embedding name {name!r} must not contain '.' (it separates embedding and state)")
    return name


# --------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class EmbeddingSpec:
    """An embedding as the manifest declares it; `policy` is a gpart.formats.sharding.policies policy."""

    name: str
    num_rows: int
    row_shape: tuple[int, ...]
    dtype: str
    policy: ShardPolicy

    def to_json(self, states: Sequence[str]) -> dict[str, Any]:
        return {
            "name": self.name,
            "num_rows": int(self.num_rows),
            "row_shape": [int(s) for s in self.row_shape],
            "dtype": self.dtype,
            "policy": self.policy.to_json(),
            "states": list(states),
        }


def shard_entry(tensor: str, rank: int, file: str, rows: int, nbytes: int, crc32: int, dtype: str, row_shape: Sequence[int]) -> dict[str, Any]:
    """The one constructor of a shard entry for build_checkpoint_manifest (SPEC.md 6.2's `shards` items)."""
    return {
        "tensor": tensor,
        "rank": int(rank),
        "file": file,
        "rows": int(rows),
        "bytes": int(nbytes),
        "crc32": f"{crc32:08x}",
        "dtype": dtype,
        "row_shape": [int(s) for s in row_shape],
    }


def global_file_entry(file: str, nbytes: int, crc32: int, offset: int = 0) -> dict[str, Any]:
    """The `file` object of a gathered tensor (SPEC.md 6.3): its one file, total bytes, CRC-32 of the
    data after an `offset`-byte header (a .npy file's), the offset only when there is one."""
    out: dict[str, Any] = {"file": file, "bytes": int(nbytes), "crc32": f"{crc32:08x}"}
    if offset:
        out["offset"] = int(offset)
    return out


def _flatten_entries(shard_entries: Any) -> list[dict[str, Any]]:
    """Accept a flat list of entries, a list of per-rank lists, or {tensor: [entries]}."""
    if isinstance(shard_entries, Mapping):
        out = []
        for name, entries in shard_entries.items():
            for e in entries:
                out.append({**e, "tensor": e.get("tensor", name)})
        return out
    out = []
    for item in shard_entries:
        if isinstance(item, Mapping):
            out.append(dict(item))
        else:
            out.extend(dict(e) for e in item)
    return out


def build_checkpoint_manifest(
    embeddings: Sequence[Union[EmbeddingSpec, Mapping[str, Any]]],
    shard_entries: Any,
    world_size: int,
    optimizer: Optional[Mapping[str, Any]] = None,
    *,
    created_by: Optional[str] = None,
    extra: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """Assemble (and check) the manifest of a sharded checkpoint from all ranks' shard entries.

    `embeddings`: EmbeddingSpec objects or dicts {name, num_rows, row_shape, dtype, policy}
    (policy as a gpart.formats.sharding.policies policy or its JSON). `shard_entries`: what write_shard
    returned on every rank (flat list, list of per-rank lists, or {tensor: [entries]}).
    `optimizer`: {"type": none|adam|adagrad|lazyadam, hyper-parameters...}; None means "none".
    Raises ValueError when entries are missing, duplicated or inconsistent.
    """
    opt = check_optimizer(dict(optimizer or {"type": "none"}), None)
    specs = [_as_spec(e) for e in embeddings]
    entries = _flatten_entries(shard_entries)
    by_tensor: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        by_tensor.setdefault(str(e["tensor"]), []).append(e)
    known = {s.name for s in specs}
    for name in by_tensor:
        if split_tensor_name(name)[0] not in known:
            raise ValueError(f"shard entries for tensor {name!r} of an undeclared embedding")
    emb_json, tensors_json = [], []
    expected_states = OPTIMIZER_STATES[opt["type"]]
    for spec in specs:
        if spec.policy.world_size != world_size or spec.policy.num_rows != spec.num_rows:
            raise ValueError(f"embedding {spec.name}: policy {spec.policy.to_json()} does not match N={spec.num_rows}, W={world_size}")
        states = [s for s in expected_states]
        present = {split_tensor_name(n)[1] for n in by_tensor if split_tensor_name(n)[0] == spec.name}
        missing = ({None} | set(states)) - present
        unknown = present - ({None} | set(states))
        if missing or unknown:
            raise ValueError(
                f"embedding {spec.name}: optimizer {opt['type']!r} needs tensors "
                f"{[tensor_name(spec.name, s) for s in [None, *states]]}; missing {sorted(map(str, missing))}, unexpected {sorted(map(str, unknown))}"
            )
        emb_json.append(spec.to_json(states))
        for state in [None, *states]:
            name = tensor_name(spec.name, state)
            tensors_json.append(_tensor_json(spec, state, by_tensor[name], world_size))
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "layout": "sharded",
        "created_by": created_by or f"gpart {__version__}",
        "world_size": int(world_size),
        "optimizer": opt,
        "embeddings": emb_json,
        "tensors": tensors_json,
    }
    if extra:
        manifest["extra"] = dict(extra)
    return manifest


def _as_spec(obj: Union[EmbeddingSpec, Mapping[str, Any]]) -> EmbeddingSpec:
    if isinstance(obj, EmbeddingSpec):
        spec = obj
    else:
        pol = obj["policy"]
        pol = pol if hasattr(pol, "to_json") else policy_from_json(pol)
        spec = EmbeddingSpec(str(obj["name"]), int(obj["num_rows"]), tuple(int(s) for s in obj["row_shape"]), str(obj["dtype"]), pol)
    check_embedding_name(spec.name)
    storage_dtype(spec.dtype)
    return spec


def _tensor_json(spec: EmbeddingSpec, state: Optional[str], entries: list[dict[str, Any]], world_size: int) -> dict[str, Any]:
    name = tensor_name(spec.name, state)
    dtypes: tuple[str, ...]
    if state is None:
        dtypes, row_shape = (spec.dtype,), spec.row_shape
    else:
        sspec = OPTIMIZER_STATES_BY_STATE[state]
        dtypes, row_shape = sspec.dtypes, sspec.shape_for(spec.row_shape)
    ranks = sorted(int(e["rank"]) for e in entries)
    if ranks != list(range(world_size)):
        raise ValueError(f"tensor {name}: shard entries for ranks {ranks}, expected exactly 0..{world_size - 1}")
    found_dtypes = {str(e["dtype"]) for e in entries}
    if len(found_dtypes) != 1:
        raise ValueError(f"tensor {name}: shards have different dtypes {sorted(found_dtypes)}")
    dtype = found_dtypes.pop()
    if dtype not in dtypes:
        raise ValueError(f"tensor {name}: dtype {dtype} not allowed (expected one of {list(dtypes)})")
    shards = []
    row_bytes = tensor_row_bytes(dtype, row_shape)
    for e in sorted(entries, key=lambda e: int(e["rank"])):
        r = int(e["rank"])
        if tuple(int(s) for s in e["row_shape"]) != tuple(row_shape):
            raise ValueError(f"tensor {name} rank {r}: row shape {list(e['row_shape'])}, expected {list(row_shape)}")
        if int(e["rows"]) != spec.policy.count(r):
            raise ValueError(f"tensor {name} rank {r}: {e['rows']} rows, the {spec.policy.name} policy gives {spec.policy.count(r)}")
        if int(e["bytes"]) != int(e["rows"]) * row_bytes:
            raise ValueError(f"tensor {name} rank {r}: {e['bytes']} bytes for {e['rows']} rows of {row_bytes} bytes")
        if e["file"] != shard_file_name(name, r, world_size):
            raise ValueError(f"tensor {name} rank {r}: file {e['file']!r}, expected {shard_file_name(name, r, world_size)!r}")
        shards.append({"rank": r, "file": e["file"], "rows": int(e["rows"]), "bytes": int(e["bytes"]), "crc32": str(e["crc32"])})
    return {
        "name": name,
        "embedding": spec.name,
        "role": "embedding" if state is None else "state",
        "state": state,
        "dtype": dtype,
        "row_shape": list(row_shape),
        "num_rows": int(spec.num_rows),
        "shards": shards,
    }


OPTIMIZER_STATES_BY_STATE: dict[str, StateSpec] = {s: spec for states in OPTIMIZER_STATES.values() for s, spec in states.items()}


def build_global_manifest(src: Any, tensors: list[dict[str, Any]], source_directory: str) -> dict[str, Any]:
    """The manifest of a global checkpoint (gather-ckpt's output, SPEC.md 6.4) made from the checkpoint
    `src` (a Checkpoint): its embeddings and optimizer, and `tensors` (one entry per tensor file)."""
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "layout": "global",
        "created_by": f"gpart {__version__}",
        "world_size": 1,
        "optimizer": src.optimizer,
        "embeddings": [
            {
                "name": e.name,
                "num_rows": e.num_rows,
                "row_shape": list(e.row_shape),
                "dtype": e.dtype,
                "states": list(e.states),
                "source_policy": e.source_policy if src.layout == "global" else e.policy.to_json(),
            }
            for e in src.embeddings.values()
        ],
        "tensors": tensors,
        "source": {"directory": source_directory, "world_size": src.world_size},
    }
    if "extra" in src.manifest:
        manifest["extra"] = src.manifest["extra"]
    return manifest


def check_optimizer(opt: dict[str, Any], where: Any) -> dict[str, Any]:
    kind = opt.get("type")
    if not isinstance(kind, str) or kind not in OPTIMIZER_STATES:  # a list or dict is unhashable: one line, no traceback
        raise InputError(where, f"optimizer type {kind!r} unknown (expected one of {', '.join(OPTIMIZER_STATES)})")
    return opt


def data_crc32(path: Union[str, os.PathLike], offset: int = 0, chunk_bytes: int = CHUNK_BYTES) -> int:
    """CRC-32 of a file's bytes from `offset` on (the whole file for flat shards)."""
    return file_crc32(path, chunk_bytes, offset)


__all__ = [
    "FORMAT",
    "VERSION",
    "LAYOUTS",
    "NAME_RE",
    "OPTIMIZER_STATES",
    "OPTIMIZER_STATES_BY_STATE",
    "StateSpec",
    "EmbeddingSpec",
    "tensor_name",
    "split_tensor_name",
    "shard_file_name",
    "tensor_row_bytes",
    "check_embedding_name",
    "check_optimizer",
    "shard_entry",
    "build_checkpoint_manifest",
    "build_global_manifest",
    "data_crc32",
]
