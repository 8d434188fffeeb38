"""The reader of embedding checkpoints (SPEC.md section 6): the manifest parsed and checked
against the format's definition (gpart.formats.checkpoint.entries), then shards mapped.

`read_checkpoint(d)` returns a `Checkpoint`; see gpart.formats.checkpoint.entries's docstring.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Union

import numpy as np

from gpart.base.errors import GpartError, InputError, IntegrityError, short_repr
from gpart.formats.checkpoint.entries import (
    FORMAT,
    LAYOUTS,
    OPTIMIZER_STATES,
    OPTIMIZER_STATES_BY_STATE,
    VERSION,
    EmbeddingSpec,
    StateSpec,
    check_embedding_name,
    check_optimizer,
    data_crc32,
    split_tensor_name,
    tensor_name,
    tensor_row_bytes,
)
from gpart.formats.filelist.layout import json_file_name
from gpart.formats.filelist.reader import open_filelist
from gpart.formats.files.arrays import inside
from gpart.formats.files.dtypes import storage_dtype
from gpart.formats.files.manifest import MANIFEST_NAME, read_manifest
from gpart.formats.files.names import safe_name
from gpart.formats.sharding.policies import RangePolicy, ShardPolicy, policy_from_json


@dataclass(frozen=True)
class ShardInfo:
    rank: int
    file: str
    rows: int
    bytes: int
    crc32: Optional[int]
    offset: int = 0  # data offset inside the file (the .npy header length; 0 for flat files)


@dataclass(frozen=True)
class TensorInfo:
    name: str
    embedding: str
    role: str  # "embedding" or "state"
    state: Optional[str]
    dtype: str
    row_shape: tuple[int, ...]
    num_rows: int
    shards: tuple[ShardInfo, ...]
    storage: str = "flat"  # "flat" or "npy" (global layout only)

    @property
    def np_dtype(self) -> np.dtype:
        return storage_dtype(self.dtype)

    @property
    def row_bytes(self) -> int:
        return tensor_row_bytes(self.dtype, self.row_shape)

    @property
    def nbytes(self) -> int:
        return self.num_rows * self.row_bytes

    def describe(self) -> dict[str, Any]:
        """What the tensor is, as manifests and `gpart info` show it (without its files)."""
        return {
            "name": self.name,
            "embedding": self.embedding,
            "role": self.role,
            "state": self.state,
            "dtype": self.dtype,
            "row_shape": list(self.row_shape),
            "num_rows": self.num_rows,
        }


@dataclass(frozen=True)
class EmbeddingInfo(EmbeddingSpec):
    """An embedding as a read manifest declares it: the spec (its `policy` is how the files are
    sharded; global layout: one range shard) plus its states."""

    states: tuple[str, ...] = ()
    source_policy: Optional[dict[str, Any]] = None  # global layout: the policy of the run it was gathered from


@dataclass
class Checkpoint:
    """A validated checkpoint directory (sharded or global layout)."""

    directory: Path
    manifest: dict[str, Any]
    layout: str
    world_size: int
    optimizer: dict[str, Any]
    embeddings: dict[str, EmbeddingInfo]
    tensors: dict[str, TensorInfo]
    _maps: dict[tuple[str, int], np.ndarray] = field(default_factory=dict, repr=False)

    def tensor(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise InputError(self.directory, f"checkpoint has no tensor {name!r} (has {', '.join(self.tensors)})") from None

    def policy(self, name: str) -> ShardPolicy:
        """Sharding policy of a tensor or embedding name."""
        emb = split_tensor_name(name)[0]
        if emb not in self.embeddings:
            raise InputError(self.directory, f"checkpoint has no embedding {emb!r}")
        return self.embeddings[emb].policy

    def tensor_names(self, embedding: Optional[str] = None) -> list[str]:
        return [n for n, t in self.tensors.items() if embedding is None or t.embedding == embedding]

    def shard_path(self, name: str, rank: int) -> Path:
        return self.directory / self.tensor(name).shards[rank].file

    def shard(self, name: str, rank: int) -> np.ndarray:
        """Rank `rank`'s rows of tensor `name` in local order, as a read-only memmap."""
        key = (name, rank)
        if key not in self._maps:
            t = self.tensor(name)
            if not 0 <= rank < len(t.shards):
                raise InputError(self.directory, f"tensor {name}: no rank {rank} (world size {len(t.shards)})")
            s = t.shards[rank]
            shape = (s.rows, *t.row_shape)
            if s.rows == 0 or t.row_bytes == 0:
                self._maps[key] = np.zeros(shape, dtype=t.np_dtype)
            else:
                self._maps[key] = np.memmap(self.directory / s.file, dtype=t.np_dtype, mode="r", offset=s.offset, shape=shape)
        return self._maps[key]

    def read_rows(self, name: str, global_ids: Any) -> np.ndarray:
        """Rows `global_ids` (any order, repeats allowed) of tensor `name`, gathered from the shards."""
        t = self.tensor(name)
        ids = np.asarray(global_ids).reshape(-1)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise InputError(self.directory, f"row ids must be integers, got {ids.dtype}")
        ids = ids.astype(np.int64, copy=False)
        out = np.empty((ids.size, *t.row_shape), dtype=t.np_dtype)
        if ids.size == 0:
            return out
        if ids.min() < 0 or ids.max() >= t.num_rows:
            raise InputError(self.directory, f"tensor {name}: row ids outside 0..{t.num_rows - 1}")
        policy = self.policy(name)
        owner = policy.owner(ids)
        local = policy.local(ids)
        order = np.argsort(owner, kind="stable")
        counts = np.bincount(owner, minlength=policy.world_size)
        start = 0
        for rank in np.flatnonzero(counts):  # one vectorised gather per shard
            sel = order[start : start + counts[rank]]
            start += counts[rank]
            loc = local[sel]
            sort = np.argsort(loc, kind="stable")  # ascending offsets: sequential reads
            out[sel[sort]] = self.shard(name, int(rank))[loc[sort]]
        return out

    def read_owned(self, name: str, policy: ShardPolicy, rank: int) -> np.ndarray:
        """The rows that rank `rank` owns under `policy` (e.g. a new job's), in its local order."""
        t = self.tensor(name)
        if policy.num_rows != t.num_rows:
            raise InputError(self.directory, f"tensor {name} has {t.num_rows} rows, policy is for {policy.num_rows}")
        return self.read_rows(name, policy.global_ids(rank))

    def verify(self) -> list[str]:
        """Problems found by checking every file's size and CRC-32, and (global layout) every
        tensor's `<tensor>.json` against the manifest (empty when intact)."""
        return [f"{path}: {problem}" for path, problem, _ in _check_files(self, verify=True)] + _sidecar_problems(self)


def read_checkpoint(directory: Union[str, os.PathLike], verify: bool = False) -> Checkpoint:
    """Open a checkpoint: manifest checked, every file's size checked (and CRC-32 with verify)."""
    directory = Path(directory)
    obj = read_manifest(directory, expected_format=FORMAT)
    return parse_checkpoint(obj, directory, directory / MANIFEST_NAME, check_files=True, verify=verify)


def _need(obj: Mapping[str, Any], key: str, kind: Any, where: Path, what: str) -> Any:
    if not isinstance(obj, Mapping) or key not in obj:
        raise InputError(where, f"{what} lacks {key!r}")
    value = obj[key]
    if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
        raise InputError(where, f"{what}: {key!r} has the wrong type ({type(value).__name__})")
    return value


def parse_checkpoint(obj: dict[str, Any], directory: Path, where: Path, check_files: bool, verify: bool) -> Checkpoint:
    """A parsed manifest `obj` of the checkpoint in `directory` (InputError naming `where` when malformed);
    `check_files`: every file's size too (and its CRC-32 with `verify`)."""
    if obj.get("format") != FORMAT or obj.get("version") != VERSION:
        raise InputError(where, f"not a {FORMAT} version {VERSION} manifest")
    layout = obj.get("layout", "sharded")
    if layout not in LAYOUTS:
        raise InputError(where, f"layout {layout!r} unknown (expected sharded or global)")
    world = 1 if layout == "global" else _need(obj, "world_size", int, where, "manifest")
    if world < 1:
        raise InputError(where, f"world_size {world} must be at least 1")
    opt = check_optimizer(dict(_need(obj, "optimizer", dict, where, "manifest")), where)
    states_of = OPTIMIZER_STATES[opt["type"]]
    embeddings: dict[str, EmbeddingInfo] = _by_name(
        (_parse_embedding(e, layout, world, states_of, where) for e in _need(obj, "embeddings", list, where, "manifest")), "embedding", where)
    tensors: dict[str, TensorInfo] = _by_name(
        (_parse_tensor(t, layout, world, embeddings, where) for t in _need(obj, "tensors", list, where, "manifest")), "tensor", where)
    for emb in embeddings.values():
        for state in (None, *emb.states):
            if tensor_name(emb.name, state) not in tensors:
                raise InputError(where, f"embedding {emb.name}: tensor {tensor_name(emb.name, state)!r} is not listed")
    ckpt = Checkpoint(directory, obj, layout, int(world), opt, embeddings, tensors)
    if check_files:
        problems = _check_files(ckpt, verify)
        if problems:
            path, problem, damaged = problems[0]
            raise (IntegrityError if damaged else InputError)(path, problem)
    return ckpt


def _by_name(items: Any, what: str, where: Path) -> dict[str, Any]:
    """{item.name: item} of parsed manifest items, refusing a name listed twice."""
    out: dict[str, Any] = {}
    for item in items:
        if item.name in out:
            raise InputError(where, f"{what} {item.name!r} listed twice")
        out[item.name] = item
    return out


def _parse_embedding(e: Any, layout: str, world: int, states_of: Mapping[str, StateSpec], where: Path) -> EmbeddingInfo:
    what = "embedding entry"
    name = check_embedding_name(_need(e, "name", str, where, what), where)
    what = f"embedding {name}"
    n = _need(e, "num_rows", int, where, what)
    row_shape = tuple(_need(e, "row_shape", list, where, what))
    if n < 0 or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in row_shape):
        raise InputError(where, f"{what}: bad num_rows {n} or row_shape {list(row_shape)}")
    dtype = _need(e, "dtype", str, where, what)
    storage_dtype(dtype, where)
    states = tuple(_need(e, "states", list, where, what))
    if not all(isinstance(s, str) for s in states) or sorted(states) != sorted(states_of):
        raise InputError(where, f"{what}: states {list(states)}, the optimizer needs {list(states_of)}")
    source = None
    if layout == "global":
        policy: ShardPolicy = RangePolicy(n, 1, (0, n))
        source = e.get("source_policy")
        if source is not None:  # where the rows came from: described, so it must be a policy of these rows
            if not isinstance(source, dict) or policy_from_json(source, where).num_rows != n:
                raise InputError(where, f"{what}: source_policy {short_repr(source)} is not a sharding policy of {n} rows")
    else:
        policy = policy_from_json(_need(e, "policy", dict, where, what), where)
        if policy.num_rows != n or policy.world_size != world:
            raise InputError(where, f"{what}: policy is for N={policy.num_rows}, W={policy.world_size}; expected N={n}, W={world}")
    return EmbeddingInfo(name, n, row_shape, dtype, policy, states, source)


def _parse_tensor(t: Any, layout: str, world: int, embeddings: Mapping[str, EmbeddingInfo], where: Path) -> TensorInfo:
    name = _need(t, "name", str, where, "tensor entry")
    what = f"tensor {name}"
    emb_name = _need(t, "embedding", str, where, what)
    if emb_name not in embeddings:
        raise InputError(where, f"{what}: embedding {emb_name!r} is not declared")
    emb = embeddings[emb_name]
    role = _need(t, "role", str, where, what)
    state = t.get("state")
    if (role, state is None) not in (("embedding", True), ("state", False)) or tensor_name(emb_name, state) != name:
        raise InputError(where, f"{what}: role {role!r} / state {state!r} do not match its name")
    dtype = _need(t, "dtype", str, where, what)
    storage_dtype(dtype, where)
    row_shape = tuple(_need(t, "row_shape", list, where, what))
    n = _need(t, "num_rows", int, where, what)
    if n != emb.num_rows:
        raise InputError(where, f"{what}: {n} rows, embedding {emb_name} has {emb.num_rows}")
    if state is None:
        if dtype != emb.dtype or row_shape != emb.row_shape:
            raise InputError(where, f"{what}: {dtype} {list(row_shape)} differs from the embedding's {emb.dtype} {list(emb.row_shape)}")
    else:
        if state not in emb.states:
            raise InputError(where, f"{what}: state {state!r} not among the embedding's states {list(emb.states)}")
        spec = OPTIMIZER_STATES_BY_STATE[state]
        if dtype not in spec.dtypes or row_shape != spec.shape_for(emb.row_shape):
            raise InputError(where, f"{what}: {dtype} {list(row_shape)}, expected one of {list(spec.dtypes)} with rows {list(spec.shape_for(emb.row_shape))}")
    row_bytes = tensor_row_bytes(dtype, row_shape)
    storage = "flat"
    if layout == "global":
        storage = _need(t, "storage", str, where, what)
        if storage not in ("flat", "npy"):
            raise InputError(where, f"{what}: storage {storage!r} unknown")
        f = _need(t, "file", dict, where, what)
        raw = [{"rank": 0, "file": f.get("file"), "rows": n, "bytes": f.get("bytes"), "crc32": f.get("crc32"), "offset": f.get("offset", 0)}]
    else:
        raw = _need(t, "shards", list, where, what)
    shards = []
    for i, s in enumerate(raw):
        shard = _parse_shard(s, where, what)
        if shard.rank != i:
            raise InputError(where, f"{what}: shard {i} is listed as rank {shard.rank}")
        if shard.rows != emb.policy.count(i):
            raise InputError(where, f"{what} rank {i}: {shard.rows} rows, the {emb.policy.name} policy gives {emb.policy.count(i)}")
        if shard.bytes != shard.offset + shard.rows * row_bytes:
            raise InputError(where, f"{what} rank {i}: {shard.bytes} bytes disagree with {shard.rows} rows of {dtype} {list(row_shape)}")
        shards.append(shard)
    if len(shards) != world:
        raise InputError(where, f"{what}: {len(shards)} shards listed, world size is {world}")
    return TensorInfo(name, emb_name, role, state, dtype, row_shape, n, tuple(shards), storage)


def _parse_shard(s: Any, where: Path, what: str) -> ShardInfo:
    try:
        rank, file, rows, nbytes, offset = int(s["rank"]), str(s["file"]), int(s["rows"]), int(s["bytes"]), int(s.get("offset", 0))
        # Every writer records a CRC-32; an entry without one could hide flipped data from verify.
        crc_val = int(s["crc32"], 16)
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as exc:
        raise InputError(where, f"{what}: malformed shard entry {short_repr(s)}: {exc!r}") from None
    safe_name(file, f"{what}: shard file", where)
    if rows < 0 or nbytes < 0 or offset < 0:
        raise InputError(where, f"{what}: negative size in shard entry {s!r}")
    return ShardInfo(rank, file, rows, nbytes, crc_val, offset)


def _check_files(ckpt: Checkpoint, verify: bool) -> list[tuple[Path, str, bool]]:
    """(path, problem, is_damage) for every file that is missing, mis-sized or (verify) mis-checksummed."""
    problems: list[tuple[Path, str, bool]] = []
    for t in ckpt.tensors.values():
        for s in t.shards:
            try:
                path = inside(ckpt.directory, s.file)
                size = path.stat().st_size
            except IntegrityError as exc:  # a file name leading outside the directory
                problems.append((Path(exc.path or ckpt.directory), exc.problem, True))
                continue
            except FileNotFoundError:
                problems.append((path, f"shard file of tensor {t.name} rank {s.rank} is missing", True))
                continue
            except OSError as exc:
                problems.append((path, f"cannot read: {exc.strerror or exc}", False))
                continue
            if size != s.bytes:
                problems.append((path, f"size {size} bytes, manifest says {s.bytes} ({s.rows} rows of {t.dtype} {list(t.row_shape)})", True))
                continue
            if t.storage == "npy":
                problem = _check_npy_header(path, t, s)
                if problem:
                    problems.append((path, problem, False))
                    continue
            if verify and s.crc32 is not None:
                actual = data_crc32(path, s.offset)
                if actual != s.crc32:
                    problems.append((path, f"checksum mismatch: crc32 {actual:08x}, manifest says {s.crc32:08x}", True))
    return problems


def _sidecar_problems(ckpt: Checkpoint) -> list[str]:
    """A gathered flat tensor is also a file-list export (`<tensor>.json`, SPEC.md 6.5): check that it
    is one, and that it describes the same file, dtype, shape and CRC-32 as the manifest."""
    problems = []
    for t in ckpt.tensors.values():
        if ckpt.layout != "global" or t.storage != "flat":
            continue
        path = ckpt.directory / json_file_name(t.name)
        try:
            fl = open_filelist(path)
        except GpartError as exc:
            problems.append(exc.one_line())
            continue
        entry, shard = fl.entries[0], t.shards[0]
        same = (fl.name, fl.dtype, fl.shape, len(fl.entries), entry.file, entry.crc32) == (
            t.name, t.dtype, (t.num_rows, *t.row_shape), 1, shard.file, shard.crc32)
        if not same:
            problems.append(f"{path}: disagrees with {MANIFEST_NAME} about tensor {t.name} (name, dtype, shape, file or crc32)")
    return problems


def _check_npy_header(path: Path, t: TensorInfo, s: ShardInfo) -> Optional[str]:
    try:
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            else:
                return f".npy format version {version} not supported (expected 1.0 or 2.0)"
            offset = fh.tell()
    except (OSError, ValueError, OverflowError) as exc:
        return f"not a valid .npy file: {exc}"
    if fortran or tuple(shape) != (t.num_rows, *t.row_shape) or dtype != t.np_dtype or offset != s.offset:
        return f".npy header says {dtype} {list(shape)} (offset {offset}), manifest says {t.dtype} {[t.num_rows, *t.row_shape]} (offset {s.offset})"
    return None
