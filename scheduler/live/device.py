"""Which device a worker trains on, and which collective backend goes with it.

One process per GPU: worker rank `r` of a job placed on `(node, gpu)` binds `cuda:<gpu>` as
its current device (`torch.cuda.set_device`), and the gang's process group is NCCL, whose
collectives take CUDA tensors only; CPU jobs use gloo with CPU tensors. The job spec says
which device it needs, and a worker that cannot give it refuses: a CUDA job silently trained
on CPU would be slower by orders of magnitude and would mislead every measurement.
"""

from __future__ import annotations

import os
from typing import Literal

import torch

from perfcast.errors import PerfcastError

Device = Literal["cpu", "cuda"]


class DeviceUnavailable(PerfcastError):
    """The job needs a device this worker does not have."""


def worker_device(requested: Device, gpu_index: int | None, cuda_devices: int) -> torch.device:
    """The device for a worker told to use GPU `gpu_index` of its node, given the number of
    CUDA devices it sees. Refuses (`DeviceUnavailable`) rather than fall back to the CPU."""
    if requested == "cpu":
        return torch.device("cpu")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    seen = f"CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else "no CUDA_VISIBLE_DEVICES"
    if gpu_index is None:
        raise DeviceUnavailable("the job needs CUDA but its worker was given no GPU index")
    if cuda_devices == 0:
        raise DeviceUnavailable(f"the job needs CUDA; this worker sees no CUDA device ({seen})")
    if not 0 <= gpu_index < cuda_devices:
        raise DeviceUnavailable(
            f"the job needs cuda:{gpu_index}; this worker sees {cuda_devices} CUDA devices ({seen})"
        )
    return torch.device("cuda", gpu_index)


def bind(device: torch.device) -> None:
    """Make `device` the process's current CUDA device (NCCL and default allocations use it)."""
    if device.type == "cuda":
        torch.cuda.set_device(device)


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def collective_device(backend: str, device: torch.device) -> torch.device:
    """Where a tensor for a collective of `backend` must live: NCCL takes CUDA tensors only."""
    return device if backend == "nccl" else torch.device("cpu")
