"""Graph preparation on torch.distributed ranks, launched by torchrun (SPEC.md 10.2).

    torchrun --nproc-per-node 4 -m gpart.distributed partition chunks/ --parts 8 -o parts/

`partition_chunks` (gpart.distributed.partition_chunks) runs on every rank of a gloo
job: each rank reads its share of a chunked graph (gpart chunk), edges and
node rows move to the rank writing their partition in bounded all_to_all
rounds, and rank 0 commits the manifest once every rank has succeeded.
"""

from __future__ import annotations

from typing import Any

__all__ = ["partition_chunks", "init_from_env"]


def __getattr__(name: str) -> Any:
    if name == "partition_chunks":
        from gpart.distributed.partition_chunks import partition_chunks

        return partition_chunks
    if name == "init_from_env":
        from gpart.collectives.comm import init_from_env

        return init_from_env
    raise AttributeError(f"module 'gpart.distributed' has no attribute {name!r}")
