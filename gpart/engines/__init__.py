"""Partitioning engines: the algorithms that compute an owner for every node (METIS, KaMinPar,
the streaming partitioner, refinement), the balance they are measured by, and their scratch sorts.

The partition methods (gpart.partition_methods) wrap them; nothing here knows a file layout."""
