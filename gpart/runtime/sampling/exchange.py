"""The loader's collectives (`Exchange`): they live in gpart.runtime.partition.exchange, beside the trainer
layout they route by, so that a partition's own gather is built on them too (the layer test ranks
runtime.partition below runtime.sampling); the samplers and loaders import them from here or from there."""

from gpart.runtime.partition.exchange import Exchange

__all__ = ["Exchange"]
