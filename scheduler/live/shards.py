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
        self.shard_size = global_batch // shards
        self._rows: torch.Tensor | None = None  # this rank's shard gradients, one per row
        self._gathered: list[torch.Tensor] = []  # every rank's rows (all-gather)

    def split(self, *share: torch.Tensor) -> Iterator[tuple[torch.Tensor, ...]]:
        """This rank's shards of its share of the batch, in shard order."""
        for j in range(self.local):
            rows = slice(j * self.shard_size, (j + 1) * self.shard_size)
            yield tuple(t[rows] for t in share)

    def backward(self, loss_of: Callable[..., torch.Tensor], *share: torch.Tensor) -> torch.Tensor:
        """Set every parameter's `.grad` to the global batch's gradient; return the mean loss
        of this rank's shards (detached). The gradients are views into buffers reused at the
        next call (allocated once: a fresh one per step costs page faults on large models)."""
        if self._rows is None:
            numel = sum(p.numel() for p in self.params)
            self._rows = self.params[0].new_empty((self.local, numel))
            if self.world_size > 1:
                self._gathered = [torch.empty_like(self._rows) for _ in range(self.world_size)]
        rows, losses = self._rows, []
        for j, shard in enumerate(self.split(*share)):
            loss = loss_of(*shard)
            grads = torch.autograd.grad(loss, self.params)
            torch.cat([g.reshape(-1) for g in grads], out=rows[j])
            losses.append(loss.detach())
        blocks = [rows]
        if self.world_size > 1:
            dist.all_gather(self._gathered, rows)  # rank r: shards r*local .. (r+1)*local - 1
            blocks = self._gathered
        in_order = [block[j] for block in blocks for j in range(self.local)]  # shard 0 first
        total = in_order[0]
        for gradient in in_order[1:]:  # one fixed order of additions, whatever the size
            total += gradient
        total /= self.shards
        offset = 0
        for p in self.params:
            p.grad = total[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
        return torch.stack(losses).mean()
