"""Sharded trainable embeddings, their sparse optimizers, and their checkpoints (SPEC.md section 6)."""
