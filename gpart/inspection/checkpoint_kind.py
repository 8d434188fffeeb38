"""`gpart info` and `gpart verify` of an embedding checkpoint (SPEC.md 6): gpart.ckpt's summary and
checks, drawn as a head, an embeddings table and a tensors table."""

from __future__ import annotations

from typing import Any, Optional

from gpart.ckpt import checkpoint_info, verify_checkpoint
from gpart.formats.checkpoint.entries import FORMAT as CHECKPOINT_FORMAT
from gpart.inspection.kind import InspectedKind, PathLike, VerifyRequest
from gpart.inspection.view import Block, Column, Grid, Size, Table


class CheckpointKind(InspectedKind):
    """A sharded or gathered embedding checkpoint (gather-ckpt / scatter-ckpt / import-ckpt results)."""

    formats = (CHECKPOINT_FORMAT,)

    def info(self, directory: PathLike) -> dict[str, Any]:
        return checkpoint_info(directory)

    def info_view(self, summary: dict[str, Any]) -> list[Block]:
        return checkpoint_view(summary)

    def verify(self, directory: PathLike, request: VerifyRequest) -> dict[str, Any]:
        request.refuse_input(directory, "is a checkpoint")
        return verify_checkpoint(directory)


def _policy_text(policy: Optional[dict[str, Any]]) -> str:
    if not policy:
        return "-"
    b = policy.get("boundaries")  # the policies that split rows at boundaries (range) show where
    if b is None:
        return str(policy.get("name"))
    shown = ",".join(map(str, b[:6])) + (",..." if len(b) > 6 else "")
    return f"{policy.get('name')} [{shown}]"


def checkpoint_view(info: dict[str, Any]) -> list[Block]:
    """The head, embeddings and tensors of `gpart.ckpt.checkpoint_info(...)`."""
    opt = info["optimizer"]
    params = ", ".join(f"{k}={v}" for k, v in opt.items() if k != "type")
    head: list[tuple[str, Any]] = [
        ("checkpoint", str(info["path"])),
        ("layout", f"{info['layout']}" + (f", world size {info['world_size']}" if info["layout"] == "sharded" else "")),
        ("optimizer", opt["type"] + (f" ({params})" if params else "")),
        ("size", (Size(info["total_bytes"]), f" in {info['num_files']} files")),
    ] + ([("created by", str(info["created_by"]))] if info.get("created_by") else [])

    emb_columns = [Column(c, "right" if c in ("rows", "size") else "left", fold=True)
                   for c in ("name", "rows", "row shape", "dtype", "policy", "states", "size")]
    emb_rows = [[e["name"], f"{e['num_rows']:,}", str(e["row_shape"]), e["dtype"],
                 _policy_text(e["policy"]) if e["policy"] else f"global (from {_policy_text(e.get('source_policy'))})",
                 ", ".join(e["states"]) or "-", Size(e["bytes"])] for e in info["embeddings"]]
    # tensor names are what users type into other tools: never break them
    tensor_columns = [Column(c, "right" if c == "size" else "left", fold=True, no_wrap=c == "tensor")
                      for c in ("tensor", "role", "dtype", "row shape", "rows per shard", "size")]
    tensor_rows = [[t["name"], t["role"] if t["role"] == "embedding" else f"state {t['state']}", t["dtype"], str(t["row_shape"]),
                    ", ".join(f"{r:,}" for r in t["shard_rows"][:8]) + (", ..." if len(t["shard_rows"]) > 8 else ""), Size(t["bytes"])]
                   for t in info["tensors"]]
    return [Grid(head), Table(emb_columns, emb_rows, title="embeddings", title_align="left"),
            Table(tensor_columns, tensor_rows, title="tensors", title_align="left")]
