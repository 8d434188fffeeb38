"""What a training script imports: load partitions and exports onto a device,
look up features across ranks, train sharded embeddings and checkpoint them.

    import gpart.runtime as gr
    part = gr.load_partition("parts/", rank=rank, device="cuda")
    x = part.gather("feat", global_ids)

Importing this module imports neither click, rich nor h5py (h5py only when an
HDF5 artifact is opened). Names are resolved lazily from their submodules.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    # loading partitions and exports (issue 5)
    "load_partition": "gpart.runtime.loaded_partition",
    "LoadedPartition": "gpart.runtime.loaded_partition",
    "load_rows": "gpart.runtime.filelist_slice",
    # sharded embeddings, optimizers and checkpoints (issue 6)
    "ShardedEmbedding": "gpart.runtime.embedding",
    "SparseAdam": "gpart.runtime.optim",
    "SparseAdagrad": "gpart.runtime.optim",
    "save_checkpoint": "gpart.ckpt.runtime_save",
    "load_checkpoint": "gpart.ckpt.runtime_load",
    "init": "gpart.runtime.initializers",
    # splits and distributed neighbour sampling (issue 9)
    "node_split": "gpart.runtime.split",
    "edge_split": "gpart.runtime.split",
    "DistNeighborLoader": "gpart.runtime.loader",
    "Batch": "gpart.runtime.loader",
    # heterogeneous graphs (issue 13)
    "HeteroPartition": "gpart.runtime.hetero",
    "HeteroBatch": "gpart.runtime.hetero_loader",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gpart.runtime' has no attribute {name!r}")
    mod = importlib.import_module(module)
    value = mod if module.rsplit(".", 1)[-1] == name else getattr(mod, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
