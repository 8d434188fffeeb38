"""The distributed sampling protocol (protocol.DistSampler) and its pieces: local sampling kernels, the owner's
sampler, the exchange between partitions, the row fetcher and the row source it reads, the epoch streams."""
