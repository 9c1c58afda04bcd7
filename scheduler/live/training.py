"""The reference training loop: a plain PyTorch loop (model, optimizer, StepLR, a shuffling
DataLoader, random input dropout) with the hook at each mini-batch boundary.

A user's own loop has the same shape; name it in the job's `entrypoint`. Its settings come from
the spec's `config`: `lr_step_every` and `lr_gamma` (StepLR), `input_dropout`, `dataset_size`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader

from perfcast.scheduler.live.data import ResumableBatchSampler
from perfcast.scheduler.live.hook import TrainingHook
from perfcast.scheduler.live.models import build_model, synthetic_dataset
from perfcast.scheduler.live.shards import ShardedGradients
from perfcast.scheduler.live.spec import JobSpec
from perfcast.scheduler.live.state import RngState

_REPORT_EVERY = 10  # iterations: `loss.item()` waits for the device


def train(job_id: str, spec: JobSpec, hook: TrainingHook) -> None:
    data = synthetic_dataset(spec)
    # a generator of its own: else creating the loader's iterator (after `restore`) draws from
    # the global RNG the checkpoint restored, and the resumed run's draws drift by one
    loader = DataLoader(
        data,
        batch_sampler=ResumableBatchSampler(len(data), hook, seed=spec.seed),
        generator=torch.Generator(),
    )
    model = build_model(spec).to(hook.device)
    sharded = None
    if spec.grad_shards:  # the same gradient bits at any worker count (see shards.py)
        sharded = ShardedGradients(
            model, spec.grad_shards, hook.rank, hook.world_size, hook.global_batch
        )
    elif hook.world_size > 1:
        model = DistributedDataParallel(model)  # averages gradients across workers
    optimizer = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum)
    scheduler = StepLR(
        optimizer, hook.config.get("lr_step_every", 50), hook.config.get("lr_gamma", 0.5)
    )
    counters = {"batches_seen_by_this_rank": 0}
    hook.restore(
        model, optimizer, lr_scheduler=scheduler, rng=RngState(spec.seed), counters=counters
    )
    dropout = hook.config.get("input_dropout", 0.1)
    share = hook.global_batch // hook.world_size

    def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(x), y)

    for x, y in loader:  # endless: `step` says when the job is done
        # the dropout mask of the whole global batch, drawn on every rank, each using its
        # rows: the random draws (and the RNG state saved) are the same at any worker count
        keep = torch.rand(hook.global_batch, *x.shape[1:]) >= dropout
        mine = keep[hook.rank * share : (hook.rank + 1) * share]
        x = x * mine / (1.0 - dropout) if dropout < 1 else torch.zeros_like(x)
        x, y = x.to(hook.device), y.to(hook.device)
        optimizer.zero_grad(set_to_none=True)
        if sharded:
            loss = sharded.backward(loss_of, x, y)
        else:
            loss = loss_of(x, y)
            loss.backward()
        optimizer.step()
        scheduler.step()
        counters["batches_seen_by_this_rank"] += 1
        if hook.status.iteration % _REPORT_EVERY == 0:
            hook.report(loss=loss.item(), lr=scheduler.get_last_lr()[0])
        if not hook.step():
            break
