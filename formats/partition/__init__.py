"""Partition results (SPEC.md section 4, typed 8.3-8.4): writer, reader, storage backends, books."""
