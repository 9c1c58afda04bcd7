"""A real search to judge trial schedulers by: an MLP on scikit-learn's handwritten digits.

The data ship with scikit-learn (1,797 8x8 images, no download). A fixed stratified split keeps
30% for validation. Each Tune iteration is `epochs` epochs (4 in the search space: an
iteration long enough that Tune's per-result overhead does not dominate it); the trial reports
validation `accuracy`.
The trainable is resizable: with g GPUs it trains data-parallel in the synchronous-SGD sense,
g replicas of `local_batch` samples per step (one step over a g-times larger batch, learning
rate scaled by g as in Goyal et al.), so an epoch takes g times fewer steps. On a CPU machine
with logical GPUs that is where a larger trial's speed-up comes from (fewer, larger matrix
products), not from more devices. Checkpoints carry the model, optimizer and data order, so a
trial paused at a rung or resized resumes where it was.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import numpy as np
import torch
from ray import tune
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


@functools.cache  # once per process: a reused trial actor does not load it again
def digits_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x_train, y_train, x_val, y_val): the fixed 70/30 stratified split, pixels in 0..1."""
    x, y = load_digits(return_X_y=True)
    x_tr, x_va, y_tr, y_va = train_test_split(x, y, test_size=0.3, stratify=y, random_state=0)
    as_x = lambda a: torch.tensor(a / 16.0, dtype=torch.float32)  # noqa: E731
    return as_x(x_tr), torch.tensor(y_tr), as_x(x_va), torch.tensor(y_va)


def search_space() -> dict[str, Any]:
    """Learning rate, width, depth, batch, momentum and weight decay; many bad corners."""
    return {
        "lr": tune.loguniform(1e-4, 0.3),
        "hidden": tune.choice([16, 32, 64, 128]),
        "layers": tune.choice([1, 2]),
        "local_batch": tune.choice([16, 32, 64]),
        "momentum": tune.choice([0.0, 0.5, 0.9]),
        "weight_decay": tune.loguniform(1e-6, 1e-2),
        "seed": tune.randint(0, 10_000),
        "epochs": 4,
    }


def slow_search_space() -> dict[str, Any]:
    """A search a deadline cuts short: iterations of 64 epochs at learning rates 2e-5 to 2e-3
    with no or mild momentum and widths up to 64. One iteration costs 16x one of
    `search_space`, and even the fastest learners are still well short of their best after
    three, so at one GPU a trial's 27 iterations take longer than a deadline of a few minutes
    and the schedulers' choices show in the best accuracy. (`search_space` reaches its best in
    a few cheap iterations: by any deadline, every scheduler has trained a good trial in full.)"""
    return {
        "lr": tune.loguniform(2e-5, 2e-3),
        "hidden": tune.choice([16, 32, 64]),
        "layers": tune.choice([1, 2]),
        "local_batch": tune.choice([32, 64]),
        "momentum": tune.choice([0.0, 0.5]),
        "weight_decay": tune.loguniform(1e-6, 1e-2),
        "seed": tune.randint(0, 10_000),
        "epochs": 64,
    }


class DigitsTrainable(tune.Trainable):
    def setup(self, config: dict[str, Any]) -> None:
        torch.set_num_threads(1)  # trials share the machine's cores
        torch.manual_seed(int(config["seed"]))
        self.x_tr, self.y_tr, self.x_va, self.y_va = digits_split()
        width, layers = int(config["hidden"]), int(config["layers"])
        blocks: list[torch.nn.Module] = []
        for i in range(layers):
            blocks += [torch.nn.Linear(64 if i == 0 else width, width), torch.nn.ReLU()]
        self.model = torch.nn.Sequential(*blocks, torch.nn.Linear(width, 10))
        resources = self.trial_resources  # None outside a Tune run
        gpus = resources.required_resources.get("GPU", 1) if resources else 1
        self.gpus = max(int(gpus), 1)
        self.opt = torch.optim.SGD(
            self.model.parameters(),
            lr=float(config["lr"]) * self.gpus,
            momentum=float(config["momentum"]),
            weight_decay=float(config["weight_decay"]),
        )
        self.rng = np.random.default_rng(int(config["seed"]))

    def step(self) -> dict[str, Any]:
        batch = int(self.config["local_batch"]) * self.gpus
        self.model.train()
        for _ in range(int(self.config.get("epochs", 1))):
            order = torch.from_numpy(self.rng.permutation(len(self.y_tr)))
            for i in range(0, len(order), batch):
                idx = order[i : i + batch]
                self.opt.zero_grad()
                out = self.model(self.x_tr[idx])
                torch.nn.functional.cross_entropy(out, self.y_tr[idx]).backward()
                self.opt.step()
        self.model.eval()
        with torch.no_grad():
            predicted = self.model(self.x_va).argmax(dim=1)
        accuracy = float((predicted == self.y_va).float().mean())
        return {"accuracy": accuracy, "gpus": self.gpus, "wall_time": time.time()}

    def reset_config(self, new_config: dict[str, Any]) -> bool:
        """Reuse this actor for another trial (Tune's `reuse_actors`): setting up a trial
        process costs seconds of imports on a busy machine."""
        self.setup(new_config)
        return True

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        state = {
            "model": self.model.state_dict(),
            "opt": self.opt.state_dict(),
            "rng": self.rng.bit_generator.state,
            "gpus": self.gpus,
        }
        torch.save(state, os.path.join(checkpoint_dir, "state.pt"))

    def load_checkpoint(self, checkpoint_dir: str) -> None:
        state = torch.load(os.path.join(checkpoint_dir, "state.pt"), weights_only=False)
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.rng.bit_generator.state = state["rng"]
        # a resized trial keeps its per-replica learning rate: scale by the new replica count
        for group in self.opt.param_groups:
            group["lr"] = float(self.config["lr"]) * self.gpus
