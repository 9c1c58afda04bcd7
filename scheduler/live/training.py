"""The reference training loop: a plain PyTorch loop with the hook at each mini-batch boundary.

A user's own loop has the same shape; name it in the job's `entrypoint`."""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from perfcast.scheduler.live.hook import TrainingHook
from perfcast.scheduler.live.models import build_model, synthetic_batch
from perfcast.scheduler.live.spec import JobSpec


def train(job_id: str, spec: JobSpec, hook: TrainingHook) -> None:
    model = build_model(spec).to(hook.device)
    if hook.world_size > 1:
        model = DistributedDataParallel(model)  # averages gradients across workers
    optimizer = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum)
    start = hook.restore(model, optimizer)
    for iteration in itertools.count(start):
        x, y = synthetic_batch(spec, iteration, hook.global_batch, hook.rank, hook.world_size)
        x, y = x.to(hook.device), y.to(hook.device)
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        if not hook.step(iteration + 1):
            break
