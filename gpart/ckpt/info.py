"""What `gpart info` and `gpart verify` show for an embedding checkpoint (SPEC.md section 6)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Union

from gpart.base.errors import InputError, IntegrityError
from gpart.ckpt.streaming import tensor_bytes
from gpart.formats.checkpoint import entries as ck
from gpart.formats.checkpoint.reader import parse_checkpoint, read_checkpoint
from gpart.formats.files.manifest import read_manifest

PathLike = Union[str, "os.PathLike[str]"]


def checkpoint_info(directory: PathLike) -> dict[str, Any]:
    """Summary of a checkpoint for `gpart info`: embeddings, states, world size, policy, sizes."""
    c = read_checkpoint(directory)
    embeddings = []
    for e in c.embeddings.values():
        names = c.tensor_names(e.name)
        embeddings.append(
            {
                "name": e.name,
                "num_rows": e.num_rows,
                "row_shape": list(e.row_shape),
                "dtype": e.dtype,
                "policy": e.policy.to_json() if c.layout == "sharded" else None,
                "source_policy": e.source_policy,
                "states": list(e.states),
                "bytes": sum(c.tensors[n].nbytes for n in names),
            }
        )
    tensors = [
        {
            **t.describe(),
            "bytes": t.nbytes,
            "storage": t.storage,
            "shard_rows": [s.rows for s in t.shards],
            "files": [s.file for s in t.shards],
        }
        for t in c.tensors.values()
    ]
    return {
        "path": os.fspath(directory),
        "directory": os.fspath(directory),
        "format": ck.FORMAT,
        "version": ck.VERSION,
        "layout": c.layout,
        "created_by": c.manifest.get("created_by"),
        "world_size": c.world_size,
        "optimizer": c.optimizer,
        "embeddings": embeddings,
        "tensors": tensors,
        "num_files": sum(len(t.shards) for t in c.tensors.values()),
        "total_bytes": tensor_bytes(c),
    }


def verify_checkpoint(directory: PathLike) -> dict[str, Any]:
    """Check a checkpoint for `gpart verify`: manifest structure, row counts against the policy,
    every shard's presence, size and CRC-32.

    Returns {"ok", "problems" (one line each), "notes", "checked", "files", "bytes"}.
    A directory without a readable manifest raises InputError; a manifest that is
    not a consistent checkpoint description raises IntegrityError (damage).
    """
    directory = Path(directory)
    obj = read_manifest(directory, expected_format=ck.FORMAT)
    try:
        c = parse_checkpoint(obj, directory, directory / "manifest.json", check_files=False, verify=False)
    except InputError as exc:
        raise IntegrityError(exc.path, f"manifest is invalid: {exc.problem}") from None
    problems = c.verify()
    files = sum(len(t.shards) for t in c.tensors.values())
    return {
        "path": os.fspath(directory),
        "directory": os.fspath(directory),
        "format": ck.FORMAT,
        "ok": not problems,
        "problems": problems,
        "notes": [],
        "checked": {"checksums": True, "invariants": True, "arrays": files},
        "files": files,
        "bytes": sum(s.bytes for t in c.tensors.values() for s in t.shards),
    }
