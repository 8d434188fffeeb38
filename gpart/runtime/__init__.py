"""What a training script imports: load partitions and exports onto a device,
look up features across ranks, train sharded embeddings and checkpoint them.

    import gpart.runtime as gr
    part = gr.load_partition("parts/", rank=rank, device="cuda")
    x = part.gather("feat", global_ids)

Under torchrun, importing it also makes an uncaught GpartError one line on
stderr (gpart.runtime.rank_errors; `gr.record` for the script's entry point).

Importing this module imports torch and the runtime's modules (every name
below needs torch), but neither click, rich nor h5py (h5py only when an HDF5
artifact is opened).
"""

from gpart.collectives.agreement import named_barrier as barrier
from gpart.runtime.embedding import initializers as init
from gpart.runtime.embedding.checkpoint_load import load_checkpoint
from gpart.runtime.embedding.checkpoint_save import save_checkpoint
from gpart.runtime.embedding.optim import SparseAdagrad, SparseAdam
from gpart.runtime.embedding.table import ShardedEmbedding
from gpart.runtime.loaders.batch import Batch
from gpart.runtime.loaders.layerwise import layerwise_inference
from gpart.runtime.loaders.link import DistLinkNeighborLoader, HeteroLinkBatch, LinkBatch
from gpart.runtime.loaders.node import DistNeighborLoader
from gpart.runtime.loaders.typed_batch import HeteroBatch
from gpart.runtime.partition.filelist_slice import load_rows
from gpart.runtime.partition.load import load_partition
from gpart.runtime.partition.loaded import LoadedPartition
from gpart.runtime.partition.split import edge_split, node_split
from gpart.runtime.partition.typed import HeteroPartition
from gpart.runtime.rank_errors import install_under_torchrun, record
from gpart.runtime.sampling.row_source import RowSource

__all__ = [
    # loading partitions and exports
    "load_partition",
    "LoadedPartition",
    "load_rows",
    # sharded embeddings, optimizers and checkpoints
    "ShardedEmbedding",
    "SparseAdam",
    "SparseAdagrad",
    "save_checkpoint",
    "load_checkpoint",
    "init",
    # splits and distributed neighbour sampling
    "node_split",
    "edge_split",
    "DistNeighborLoader",
    "Batch",
    "DistLinkNeighborLoader",
    "LinkBatch",
    "HeteroLinkBatch",
    "layerwise_inference",
    # a user's own node data rows for the loaders (row_source=)
    "RowSource",
    # a named collective (a rank in another one fails both at once)
    "barrier",
    # heterogeneous graphs
    "HeteroPartition",
    "HeteroBatch",
    # a training script's entry point: a gpart error is one line per failing rank (torchrun's summary too)
    "record",
]

install_under_torchrun()  # scripts without gr.record: the same one line for an uncaught GpartError
