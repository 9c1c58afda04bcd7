"""A shuffling batch sampler that resumes where the job is, at any size.

The job's data is one endless stream of samples: epoch `e` is a permutation of the dataset
drawn from `(seed, e)`, and global mini-batch `k` is samples `k*B .. (k+1)*B` of the stream
(`B` the global batch), which rank `r` of `n` splits into its `B/n` share. The sampler starts
the stream at the samples the job has done (the hook's count, restored from the checkpoint),
so a resumed, migrated or resized job sees the data an uninterrupted run would, and a
`DataLoader` with worker processes that fetched batches ahead loses nothing on a restart.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from perfcast.scheduler.live.hook import TrainingHook


class ResumableBatchSampler:
    """For `DataLoader(dataset, batch_sampler=...)`: this rank's indices of each global
    mini-batch, endlessly (the hook's `step` says when the job is done)."""

    def __init__(
        self, num_samples: int, hook: TrainingHook, *, shuffle: bool = True, seed: int = 0
    ) -> None:
        if num_samples < 1:
            raise ValueError(f"a dataset of {num_samples} samples cannot be sampled")
        self.num_samples, self.hook, self.shuffle, self.seed = num_samples, hook, shuffle, seed

    def epoch_order(self, epoch: int) -> torch.Tensor:
        if not self.shuffle:
            return torch.arange(self.num_samples)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.num_samples, generator=gen)

    def __iter__(self) -> Iterator[list[int]]:
        hook = self.hook
        share = hook.global_batch // hook.world_size
        position = hook.status.samples_done  # read when the loader starts: after `restore`
        epoch, order = -1, torch.empty(0, dtype=torch.int64)
        while True:
            first = position + hook.rank * share
            indices = []
            for p in range(first, first + share):  # positions only grow: epochs go forward
                if p // self.num_samples != epoch:
                    epoch = p // self.num_samples
                    order = self.epoch_order(epoch)
                indices.append(int(order[p % self.num_samples]))
            position += hook.global_batch
            yield indices
