"""Memory of a training job, split as in Salus: persistent (weights, gradients, optimizer
state) and ephemeral (activations and workspace, live only within an iteration)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import torch
from torch import Tensor, nn

MB = 2**20


def _storage_key(t: Tensor) -> tuple[str, int]:
    storage = t.untyped_storage()
    return (str(t.device), storage.data_ptr())


def persistent_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None) -> int:
    """Bytes of the distinct storages behind parameters, buffers, gradients and optimizer
    state. Counted from the tensors themselves: exact, unlike process RSS."""
    seen: dict[tuple[str, int], int] = {}

    def add(t: object) -> None:
        if isinstance(t, Tensor) and t.numel() > 0:
            seen.setdefault(_storage_key(t), t.untyped_storage().nbytes())

    for p in model.parameters():
        add(p)
        add(p.grad)
    for b in model.buffers():
        add(b)
    if optimizer is not None:
        for state in optimizer.state.values():
            for value in state.values():
                add(value)
    return sum(seen.values())


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@contextmanager
def saved_activation_bytes(model: nn.Module) -> Iterator[list[int]]:
    """Measure the bytes autograd saves for the backward pass (the activations) while the
    block runs forward; yields a one-item list holding the total once the block ends.
    Saved parameters, and views of them such as a transposed weight, are persistent: skipped."""
    persistent = {_storage_key(p) for p in model.parameters()}
    seen: dict[tuple[str, int], int] = {}
    total = [0]

    def pack(t: Tensor) -> Tensor:
        key = _storage_key(t)
        if key not in persistent and t.numel() > 0:
            seen.setdefault(key, t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield total
    total[0] = sum(seen.values())


def rss_bytes() -> int:
    """Resident set size of this process (noisy: includes the interpreter and libraries)."""
    return psutil.Process().memory_info().rss
