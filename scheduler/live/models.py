"""The models live jobs train and their synthetic data.

The data is synthetic (random inputs labelled by a fixed random teacher), generated from the
job's seed alone, so it does not depend on which worker, node or attempt asks for it; the
order it is read in is the sampler's (`data.ResumableBatchSampler`).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

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


def synthetic_dataset(spec: JobSpec) -> TensorDataset:
    """The job's dataset: `config["dataset_size"]` (default 1024) random inputs labelled by a
    fixed random teacher, all drawn from the job's seed (synthetic data)."""
    size = int(spec.config.get("dataset_size", 1024))
    gen = torch.Generator().manual_seed(spec.seed * 1_000_003)
    features = spec.input_dim if spec.model == "mlp" else 3 * _IMAGE_SIDE**2
    x = torch.randn(size, features, generator=gen)
    teacher = torch.randn(features, spec.num_classes, generator=gen)
    y = (x @ teacher).argmax(dim=1)
    if spec.model == "cnn":
        x = x.view(size, 3, _IMAGE_SIDE, _IMAGE_SIDE)
    return TensorDataset(x, y)
