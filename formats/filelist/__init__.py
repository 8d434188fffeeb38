"""File-list exports (SPEC.md section 5): WholeGraph-style row-major binaries and their JSON."""
