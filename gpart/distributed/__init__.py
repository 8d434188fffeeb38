"""Graph preparation on torch.distributed ranks, launched by torchrun (SPEC.md 10.2).

    torchrun --nproc-per-node 4 -m gpart.distributed partition chunks/ --parts 8 -o parts/

`partition_chunks` (gpart.distributed.partition_chunks) runs on every rank of a gloo
job: each rank reads its share of a chunked graph (gpart chunk), edges and
node rows move to the rank writing their partition in bounded all_to_all
rounds, and rank 0 commits the manifest once every rank has succeeded.
The collectives are gpart.collectives' (`init_from_env` joins the job).

This package's __init__ imports nothing: `python -m gpart.distributed --help`
runs it before the command line, and must not wait for torch.
"""
