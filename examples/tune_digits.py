"""A Ray Tune search that switches from ASHA to perfcast's HyperSched (docs/tune.md).

Run (needs a scaling champion: `perfcast train --task scaling --data pollux-scaling`):
    .venv/bin/python examples/tune_digits.py --deadline 120
Prints the best validation accuracy the search reached by the deadline.
"""

from __future__ import annotations

import argparse
import time

import ray
from ray import tune

from perfcast.scheduler.tune import HyperSched
from perfcast.scheduler.tune.digits import DigitsTrainable, search_space
from perfcast.training.inprocess import InProcessBackend


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deadline", type=float, default=120.0, help="seconds")
    parser.add_argument("--gpus", type=int, default=4, help="logical GPUs on a CPU machine")
    args = parser.parse_args()
    ray.init(address="local", num_cpus=args.gpus, num_gpus=args.gpus, include_dashboard=False)

    # was: scheduler = ASHAScheduler(max_t=27, grace_period=1, reduction_factor=3)
    scheduler = HyperSched(
        deadline_s=args.deadline,
        num_gpus=args.gpus,
        max_t=27,
        grace_period=1,
        reduction_factor=3,
        backend=InProcessBackend(("scaling",)),  # or PerfcastClient("http://host:8000")
        job={"job": "resnet18-cifar10", "gpu_type": "t4", "local_batch_size": 64},
        clock_start=time.monotonic(),  # count from now, as Tune's time_budget_s does
    )
    tuner = tune.Tuner(
        tune.with_resources(DigitsTrainable, {"cpu": 1, "gpu": 1}),
        param_space=search_space(),
        tune_config=tune.TuneConfig(
            metric="accuracy",
            mode="max",
            num_samples=48,
            scheduler=scheduler,
            time_budget_s=args.deadline,
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(stop={"training_iteration": 27}, verbose=1),
    )
    best = tuner.fit().get_best_result()
    print(f"best validation accuracy {best.metrics['accuracy']:.3f} with {best.config}")


if __name__ == "__main__":
    main()
