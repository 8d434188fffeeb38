"""The distributed sampling protocol's pieces: local sampling kernels, the owner's sampler, the
exchange between partitions and the row fetcher."""
