"""Embedding checkpoints (SPEC.md section 6), and other systems' checkpoint files."""
