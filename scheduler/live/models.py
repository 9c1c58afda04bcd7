"""The models live jobs train and their synthetic data.

The data is synthetic (random inputs labelled by a fixed random teacher), generated from
(seed, iteration) alone, so a batch does not depend on which worker, node or attempt asks for
it: that is what lets a resumed or migrated run reproduce an uninterrupted one bit for bit.
"""

from __future__ import annotations

import torch
from torch import nn

from perfcast.scheduler.live.spec import JobSpec

_IMAGE_SIDE = 8  # cnn inputs are 3 x 8 x 8


def build_model(spec: JobSpec) -> nn.Module:
    """The job's model, initialised from its seed."""
    torch.manual_seed(spec.seed)
    if spec.model == "mlp":
        layers: list[nn.Module] = []
        width_in = spec.input_dim
        for _ in range(spec.depth):
            layers += [nn.Linear(width_in, spec.width), nn.ReLU()]
            width_in = spec.width
        layers.append(nn.Linear(width_in, spec.num_classes))
        return nn.Sequential(*layers)
    layers = []
    channels_in = 3
    for _ in range(spec.depth):
        layers += [nn.Conv2d(channels_in, spec.width, 3, padding=1), nn.ReLU()]
        channels_in = spec.width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels_in, spec.num_classes)]
    return nn.Sequential(*layers)


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def synthetic_batch(
    spec: JobSpec, iteration: int, global_batch: int, rank: int, world_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s share of the global batch for `iteration` (synthetic data)."""
    gen = torch.Generator().manual_seed(spec.seed * 1_000_003 + iteration)
    shape = (global_batch, spec.input_dim) if spec.model == "mlp" else (global_batch, 3 * 64)
    x = torch.randn(shape, generator=gen)
    teacher = torch.Generator().manual_seed(spec.seed + 7)
    w = torch.randn(shape[1], spec.num_classes, generator=teacher)
    y = (x @ w).argmax(dim=1)
    if spec.model == "cnn":
        x = x.view(global_batch, 3, _IMAGE_SIDE, _IMAGE_SIDE)
    share = global_batch // world_size
    return x[rank * share : (rank + 1) * share], y[rank * share : (rank + 1) * share]
