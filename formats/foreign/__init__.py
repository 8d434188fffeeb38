"""Other systems' partition layouts (SPEC.md section 7): PyG, GraphLearn-for-PyTorch, DGL."""
