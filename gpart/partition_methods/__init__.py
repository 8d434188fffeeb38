"""Partition methods: one module per method, registered in gpart.partition_methods.registry.

A method (gpart.partition_methods.method.PartitionMethod) is its name, its
options dataclass (gpart.partition_methods.options), its memory model, whether
it needs the edges or the whole adjacency, how typed graphs run it, and its
run. `gpart partition --method`, the bounded-memory planner (gpart.pipeline.memory_plan) and
the distributed runner (gpart.distributed) read the registry.
"""
