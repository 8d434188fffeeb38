"""The rule that makes a loader's batches a function of (seed, epoch, rank), and the batch count every rank runs.

    epochs = EpochStreams(seed=0, rank=rank, device=part.device, salts=NODE_SALTS)
    order, gen = epochs.begin(num_seeds, shuffle=True)   # this epoch's seed order and sampling generator
    # ... sample every batch with `gen`; the next begin() is the next epoch (set_epoch chooses one)

Every random draw of an epoch comes from generators seeded by (seed, epoch,
rank, salt): one salt for the order of the seeds, one for everything the
batches draw (neighbours, negatives), in batch order. Two loaders with
different salts (the node loader's and the link loader's) draw independent
streams from the same seed. What this fixes, and across which paths the
batches are the same, is stated in gpart.runtime.loaders.node.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from gpart.collectives.all_to_all import exchange_counts

NODE_SALTS = (0, 1)  # the node loader's (shuffle, sampling) streams
LINK_SALTS = (2, 3)  # the link loader's


def epoch_generator(seed: int, epoch: int, rank: int, salt: int, device: Any) -> torch.Generator:
    """The generator of the `salt`-th random stream of `epoch` on `rank` for a loader seeded with `seed`."""
    gen = torch.Generator(device=device)
    gen.manual_seed(hash((seed, epoch, rank, salt)) & 0x7FFF_FFFF_FFFF_FFFF)
    return gen


class EpochStreams:
    """A loader's epochs: the epoch counter and the generators each epoch draws from."""

    def __init__(self, seed: int, rank: int, device: Any, salts: Sequence[int] = NODE_SALTS):
        self.seed, self.rank, self.device = int(seed), int(rank), device
        self.shuffle_salt, self.sample_salt = salts
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use `epoch` for the next begin() (begin advances it by one)."""
        self.epoch = int(epoch)

    def generator(self, salt: int) -> torch.Generator:
        """The current epoch's `salt`-th stream."""
        return epoch_generator(self.seed, self.epoch, self.rank, salt, self.device)

    def begin(self, count: int, shuffle: bool) -> tuple[torch.Tensor, torch.Generator]:
        """(the order of this rank's `count` seeds for this epoch, its sampling generator); the epoch advances."""
        if shuffle and count:
            order = torch.randperm(count, generator=self.generator(self.shuffle_salt), device=self.device)
        else:
            order = torch.arange(count, device=self.device)
        gen = self.generator(self.sample_salt)
        self.epoch += 1
        return order, gen


def batches_for(count: int, batch_size: int, drop_last: bool) -> int:
    """Batches of `batch_size` that `count` seeds make (the last partial one dropped with drop_last)."""
    return count // batch_size if drop_last else math.ceil(count / batch_size)


def agreed_batch_count(count: int, batch_size: int, drop_last: bool, world_size: int, timeout_s: float) -> int:
    """The batch count every rank runs: the most any rank's `count` seeds make (one collective when distributed),
    so a rank out of seeds keeps serving its peers with empty batches."""
    counts = exchange_counts([count] * world_size, timeout_s=timeout_s)
    return max(batches_for(c, batch_size, drop_last) for c in counts)
