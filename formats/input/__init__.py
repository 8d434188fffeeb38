"""Input graphs (SPEC.md section 3, typed 8.1, chunked 10.1) and assignment files."""
