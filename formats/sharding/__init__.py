"""Row-sharding policies shared by partition books, exports and checkpoints (SPEC.md, "Sharding policies")."""
