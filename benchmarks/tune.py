"""HyperSched against Ray Tune's ASHA and FIFO on one real search, at several deadlines.

The search: `num_samples` trials of an MLP on scikit-learn's digits (`scheduler/tune/digits.py`:
`search_space`, or with `--space slow` `slow_search_space`, which a deadline cuts short), the
same configurations for every scheduler at a given seed (BasicVariantGenerator with that random
state), each trial up to `max_t` iterations (4 epochs each, 64 in the slow space), on a Ray
cluster of 4 logical GPUs (1 per trial to start with). The deadline is Tune's `time_budget_s`
for all three; HyperSched also gets it as its own deadline, counted like Tune's from the
search's start (`clock_start`), plus perfcast's scaling predictions (the in-process champion)
for resizes, with the trials described as ResNet-18 on CIFAR-10 at batch 64 per T4 (the
workload HyperSched was shown on; a logical GPU here stands for one such T4).

Measured per run: the best validation accuracy reported by the deadline (HyperSched's measure),
trials started (reported at least once), GPU-seconds of training (each iteration's seconds x
the GPUs the trial held), resizes, trials trained to `max_t` and the search's wall time.
Writes section `tune` of docs/BENCHMARKS.md. Run:
    .venv/bin/python -m benchmarks.tune [--deadlines 90,150,210] [--seeds 0,1,2] [--space slow]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from typing import Any

import pandas as pd

from benchmarks.report import write_section

SCHEDULERS = ("fifo", "asha", "hypersched")
NUM_GPUS, MAX_T, GRACE, ETA = 4, 27, 1, 3
JOB = {"job": "resnet18-cifar10", "gpu_type": "t4", "local_batch_size": 64}
SPACES = {  # --space: the search space's function in scheduler/tune/digits.py, and its words
    "default": ("search_space", "iterations of 4 epochs, best reached within a few"),
    "slow": (
        "slow_search_space",
        "iterations of 64 epochs at low learning rates: 27 take minutes at one GPU",
    ),
}


def make_scheduler(name: str, deadline_s: float, backend: Any):
    import time

    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    from perfcast.scheduler.tune import HyperSched

    if name == "fifo":
        return FIFOScheduler()
    if name == "asha":
        return ASHAScheduler(max_t=MAX_T, grace_period=GRACE, reduction_factor=ETA)
    return HyperSched(
        deadline_s=deadline_s, num_gpus=NUM_GPUS, max_t=MAX_T, grace_period=GRACE,
        reduction_factor=ETA, backend=backend, job=JOB, clock_start=time.monotonic(),
    )  # fmt: skip


def run_search(
    name: str, deadline_s: float, seed: int, num_samples: int, backend: Any, space: str
) -> dict:
    from ray import tune
    from ray.tune.search import BasicVariantGenerator

    from perfcast.scheduler.tune import digits

    with tempfile.TemporaryDirectory(prefix="perfcast-tune-") as storage:
        tuner = tune.Tuner(
            tune.with_resources(digits.DigitsTrainable, {"cpu": 1, "gpu": 1}),
            param_space=getattr(digits, SPACES[space][0])(),
            tune_config=tune.TuneConfig(
                metric="accuracy", mode="max", num_samples=num_samples,
                scheduler=make_scheduler(name, deadline_s, backend),
                search_alg=BasicVariantGenerator(random_state=seed),
                time_budget_s=deadline_s, reuse_actors=True,
            ),
            run_config=tune.RunConfig(
                storage_path=storage, verbose=0, stop={"training_iteration": MAX_T}
            ),
        )  # fmt: skip
        start = time.time()
        results = tuner.fit()
        wall = time.time() - start
        frames = [r.metrics_dataframe for r in results if r.metrics_dataframe is not None]
    frames = [f for f in frames if len(f)]
    rows = pd.concat(frames, ignore_index=True) if frames else None
    if rows is None:
        return {"scheduler": name, "deadline_s": deadline_s, "seed": seed, "started": 0,
                "best": float("nan"), "gpu_s": 0.0, "resized": 0, "in_full": 0,
                "wall_s": wall}  # fmt: skip
    in_time = rows[rows["wall_time"] <= start + deadline_s]
    return {
        "scheduler": name,
        "deadline_s": deadline_s,
        "seed": seed,
        "started": int(rows["trial_id"].nunique()),
        "best": float(in_time["accuracy"].max()) if len(in_time) else float("nan"),
        "gpu_s": float((rows["time_this_iter_s"] * rows["gpus"]).sum()),
        "resized": int(rows.loc[rows["gpus"] > 1, "trial_id"].nunique()),
        "in_full": int((rows.groupby("trial_id")["training_iteration"].max() >= MAX_T).sum()),
        "iteration_s_by_gpus": rows.groupby("gpus")["time_this_iter_s"].median().to_dict(),
        "wall_s": wall,
    }


def spread(values: list[float]) -> str:
    values = [v for v in values if v == v]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def table(runs: list[dict]) -> str:
    frame = pd.DataFrame(runs)
    lines = [
        "| deadline | scheduler | runs | best val. accuracy by the deadline | trials started "
        "| GPU-s of training | trials resized | trials trained to max_t | search wall s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (deadline, name), g in frame.groupby(["deadline_s", "scheduler"], sort=True):
        lines.append(
            f"| {deadline:g} s | {name} | {len(g)} | {spread(list(g['best']))} "
            f"| {statistics.mean(g['started']):.1f} | {statistics.mean(g['gpu_s']):.0f} "
            f"| {statistics.mean(g['resized']):.1f} | {statistics.mean(g['in_full']):.1f} "
            f"| {statistics.mean(g['wall_s']):.0f} |"
        )
    wins = []
    for deadline, g in frame.groupby("deadline_s"):
        by = g.pivot_table(index="seed", columns="scheduler", values="best")
        if {"hypersched", "asha"} <= set(by.columns):
            diff = (by["hypersched"] - by["asha"]).dropna()
            wins.append(
                f"- {deadline:g} s: HyperSched minus ASHA, per seed: "
                + ", ".join(f"{d:+.3f}" for d in diff)
                + f" (HyperSched ahead on {int((diff > 0).sum())} of {len(diff)})"
            )
    return "\n".join(lines) + "\n\n" + "\n".join(wins)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deadlines", default="90,150,210")
    parser.add_argument("--schedulers", default=",".join(SCHEDULERS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--num-samples", type=int, default=48)
    parser.add_argument("--space", choices=sorted(SPACES), default="default")
    parser.add_argument("--notes", default="", help="text appended under the table")
    parser.add_argument("--print-only", action="store_true", help="do not write BENCHMARKS.md")
    args = parser.parse_args()
    deadlines = [float(d) for d in args.deadlines.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]

    import ray

    from perfcast.training.inprocess import InProcessBackend
    from perfcast.training.trainer import ensure_champions

    ensure_champions(["scaling"])  # the default model, trained here when there is none
    backend = InProcessBackend(("scaling",))
    backend.predict("scaling", pd.DataFrame([{**JOB, "num_gpus": 1, "num_nodes": 1}]))
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    ray.init(
        address="local",
        num_cpus=NUM_GPUS,
        num_gpus=NUM_GPUS,
        include_dashboard=False,
        logging_level="ERROR",
    )
    runs: list[dict] = []
    loads: list[float] = []
    command = (
        f"python -m benchmarks.tune --deadlines {args.deadlines} --seeds {args.seeds} "
        f"--schedulers {args.schedulers} "
        f"--num-samples {args.num_samples}"
        + (f" --space {args.space}" if args.space != "default" else "")
    )
    for seed in seeds:  # seed-major: every finished seed is written, in case of a cut-off
        for deadline in deadlines:
            for name in args.schedulers.split(","):
                run = run_search(name, deadline, seed, args.num_samples, backend, args.space)
                loads.append(os.getloadavg()[0])
                print(json.dumps(run, default=str), flush=True)
                runs.append(run)
        body = (
            f"{args.num_samples} trials of an MLP on scikit-learn's digits per search "
            f"(search space {args.space}: {SPACES[args.space][1]}), up to {MAX_T} iterations "
            f"each; {NUM_GPUS} logical GPUs on this CPU machine, 1 per trial at "
            f"start; ASHA and HyperSched with grace period {GRACE}, reduction factor {ETA}. "
            f"Seeds done: {sorted({r['seed'] for r in runs})}. Load average while measuring "
            f"(2 cores shared with other work): median {statistics.median(loads):.1f}, "
            f"max {max(loads):.1f}.\n\n" + table(runs) + "\n\n" + args.notes
        )
        print(body, flush=True)
        if not args.print_only:
            write_section(
                "tune", "Ray Tune: HyperSched vs ASHA vs FIFO by a deadline", command, body
            )
    ray.shutdown()


if __name__ == "__main__":
    main()
