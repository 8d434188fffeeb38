"""A training script's start with one mistake (argv[2]), run under torchrun by tests/test_rank_errors.py.

    torchrun --nproc-per-node W tests/support/torchrun_errors.py PARTS CASE [record|hook]

`record`: the entry point is decorated with gr.record (as the examples' are); `hook`: it is not, and the
uncaught error meets the hook importing gpart.runtime installs under torchrun.
"""

from __future__ import annotations

import sys

import torch.distributed as dist

import gpart.runtime as gr


def main() -> None:
    parts, case = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    part = gr.load_partition(parts)  # CASE ranks: more ranks than partitions x trainers allow
    seeds = gr.node_split(part, "train_mask")
    options = {"fanout": {"fanouts": [5, 0]}, "batch": {"batch_size": 0}, "key": {"node_data": ["features"]}}.get(case, {})
    loader = gr.DistNeighborLoader(part, seeds, **{"fanouts": [5, 5], "batch_size": 16, **options})
    for _ in loader:
        pass
    dist.destroy_process_group()


if __name__ == "__main__":
    (gr.record(main) if sys.argv[3] == "record" else main)()
