"""Training state a job declares beyond its model and optimizer: random number generators.

`TrainingHook.restore(model, optimizer, **objects)` saves and restores any object with
`state_dict()`/`load_state_dict()` (an LR scheduler, a sampler, a user's own class) and plain
dicts of counters; `RngState` makes the process's random number generators one such object.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


class RngState:
    """Python's, NumPy's and torch's global generators (and the current CUDA device's), seeded
    from `seed` at construction, so a fresh start does not depend on the process's history."""

    def __init__(self, seed: int) -> None:
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)

    def state_dict(self) -> dict[str, Any]:
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state = {
            "python": random.getstate(),
            # as plain numbers: checkpoints load with `weights_only`, which refuses NumPy arrays
            "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached),
            "torch": torch.get_rng_state(),
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # `.cpu()`: a CUDA job's checkpoint loads with map_location=cuda, which moves these
        # tensors too, but generators take their state from host memory only
        random.setstate(state["python"])
        kind, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, keys.cpu().numpy().astype(np.uint32), pos, has_gauss, cached))
        torch.set_rng_state(state["torch"].cpu())
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state(state["cuda"].cpu())
