"""The files every format is made of: flat arrays, JSON manifests, staged commits, scratch files,
the path-name alphabet and dtype names (SPEC.md sections 1-2, 9)."""
