"""Gradients that do not depend on the number of workers: a job resized 2 -> 1 -> 2 at the same
global batch ends bit-identical to a plain run at any size.

Plain data parallelism is not: each worker's backward sums its samples' contributions in an
order set by its share's size, and the all-reduce adds the workers' sums in an order set by
the backend, so two half-batch gradients averaged differ from one full-batch gradient in the
last bits, and the runs drift apart. Here the global batch is cut into a fixed number of
micro-shards (the spec's `grad_shards`, whatever the world size): shard `k` is the same
samples at any size, each worker computes the gradients of its consecutive shards one by one
(the same shapes, so the same floating-point operations), every worker gathers all of them
and adds them in shard order, 0 first. The sum is then one fixed sequence of additions.

The cost: a backward per shard rather than per worker, and an all-gather of `grad_shards`
gradients rather than one all-reduce (communication `grad_shards / world_size` times that of
an all-reduce). Worth it for small jobs that must reproduce exactly; off (plain DDP) unless
the spec asks for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch import nn

from perfcast.scheduler.live.spec import check_shards


class ShardedGradients:
    """The gradient of the global batch's mean loss, the same bits at any world size.

        grads = ShardedGradients(model, shards, rank, world_size, global_batch)
        loss = grads.backward(loss_of, x, y)     # x, y: this rank's share of the batch
        optimizer.step()                          # every rank: the same gradient

    `loss_of(*shard)` is the mean loss of one shard. Do not wrap the model in
    `DistributedDataParallel`: the gradients are combined here, and nothing is broadcast, so
    every rank must start from the same parameters (a seeded build, or a restore)."""

    def __init__(
        self, model: nn.Module, shards: int, rank: int, world_size: int, global_batch: int
    ) -> None:
        check_shards(shards, global_batch, world_size)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.shards, self.world_size = shards, world_size
        self.local = shards // world_size
        self.first = rank * self.local  # the index of this rank's first shard
        self.shard_size = global_batch // shards

    def split(self, *share: torch.Tensor) -> Iterator[tuple[torch.Tensor, ...]]:
        """This rank's shards of its share of the batch, in shard order."""
        for j in range(self.local):
            rows = slice(j * self.shard_size, (j + 1) * self.shard_size)
            yield tuple(t[rows] for t in share)

    def backward(self, loss_of: Callable[..., torch.Tensor], *share: torch.Tensor) -> torch.Tensor:
        """Set every parameter's `.grad` to the global batch's gradient; return the mean loss
        of this rank's shards (detached)."""
        rows, losses = [], []
        for shard in self.split(*share):
            loss = loss_of(*shard)
            grads = torch.autograd.grad(loss, self.params)
            rows.append(torch.cat([g.reshape(-1) for g in grads]))
            losses.append(loss.detach())
        local = torch.stack(rows)
        if self.world_size > 1:
            gathered = [torch.empty_like(local) for _ in range(self.world_size)]
            dist.all_gather(gathered, local)  # rank r holds shards r*local .. (r+1)*local - 1
            local = torch.cat(gathered)
        total = local[0].clone()
        for k in range(1, self.shards):  # one fixed order of additions, whatever the size
            total += local[k]
        total /= self.shards
        offset = 0
        for p in self.params:
            p.grad = total[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()
        return torch.stack(losses).mean()
