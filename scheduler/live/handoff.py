"""A training state on its way through Ray's object store (migration without the disk).

Ray pickles a torch tensor through `torch.save`, i.e. several copies of every byte, while a
NumPy array goes out-of-band: one copy into the object store, and the reader maps it without
copying. `pack` turns the state's CPU tensors into NumPy views (no copy); `unpack` turns them
back into tensors of their own (one copy: the object store's buffers are read-only and go
away with the object), and copies the state's own arrays for the same reason. Tensors NumPy
cannot hold (bfloat16, ...) travel as they are.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

_ARRAY_DTYPES = {torch.float64, torch.float32, torch.float16, torch.int64, torch.int32,
                 torch.int16, torch.int8, torch.uint8, torch.bool}  # fmt: skip


class _Tensor:
    """A tensor packed as an array, told apart from an array the user's state holds."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __reduce__(self) -> tuple[Any, ...]:
        return _Tensor, (self.array,)


def pack(state: Any) -> Any:
    """`state` with every CPU tensor NumPy can hold replaced by a view of its data."""
    if isinstance(state, torch.Tensor) and state.device.type == "cpu":
        if state.dtype in _ARRAY_DTYPES:
            return _Tensor(state.detach().numpy())
        return state
    if isinstance(state, dict):
        return {k: pack(v) for k, v in state.items()}
    if isinstance(state, list | tuple):
        items = [pack(v) for v in state]
        return type(state)(*items) if hasattr(state, "_fields") else type(state)(items)
    return state


def unpack(state: Any) -> Any:
    """The state `pack` was given, every packed tensor a tensor of its own again."""
    if isinstance(state, _Tensor):
        return torch.from_numpy(np.array(state.array))  # the copy: a writable, owned buffer
    if isinstance(state, np.ndarray):  # the state's own arrays (NumPy's RNG state): owned too
        return np.array(state)
    if isinstance(state, dict):
        return {k: unpack(v) for k, v in state.items()}
    if isinstance(state, list | tuple):
        items = [unpack(v) for v in state]
        return type(state)(*items) if hasattr(state, "_fields") else type(state)(items)
    return state
