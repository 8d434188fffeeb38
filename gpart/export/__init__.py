"""`gpart export-feat`: arrays and graph structure as WholeGraph-style file lists (SPEC.md section 5)."""
