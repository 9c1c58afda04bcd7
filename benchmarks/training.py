"""Training time: every task's default model (gbm) on every shipped dataset of its table kind.

Run: `.venv/bin/python -m benchmarks.training` (writes section `training` of
docs/BENCHMARKS.md). Each training is `perfcast train --task T --data NAME --model gbm` run in
this process: load, hold out, fit, score, log to MLflow and register, into a fresh store in a
temporary PERFCAST_HOME, so nothing a user trained is touched. Also trains what `perfcast serve`
trains on first start (training.trainer.DEFAULT_DATA). Target: all of it under 10 minutes.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import textwrap
import time

from benchmarks.report import write_section
from perfcast.datasets.registry import registry
from perfcast.errors import PerfcastError
from perfcast.predictor.backend import TASK_TABLES
from perfcast.training.trainer import DEFAULT_DATA, load_rows, train

COMMAND = ".venv/bin/python -m benchmarks.training"
TARGET_S = 600.0


def plan() -> list[tuple[str, str]]:
    """(task, data) pairs: each shipped dataset of the task's kind, then serve's defaults."""
    kinds = {spec.name: spec.kind for spec in registry().values()}
    pairs = [
        (task, name)
        for task, (kind, _) in TASK_TABLES.items()
        for name in sorted(kinds)
        if kinds[name] == kind
    ]
    return pairs + [(task, data) for task, data in DEFAULT_DATA.items() if "," in data]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-write", action="store_true", help="print, do not write the doc")
    args = parser.parse_args()
    os.environ["PERFCAST_HOME"] = tempfile.mkdtemp(prefix="perfcast-bench-training-")
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    lines = [
        "| task | data | rows | seconds | held-out MAPE % | p10-p90 coverage |",
        "|---|---|---:|---:|---:|---:|",
    ]
    total = 0.0
    for task, data in plan():
        start = time.perf_counter()
        try:
            result = train(task, data, model="gbm")
        except PerfcastError as err:  # a dataset without the task's target: say so
            seconds = time.perf_counter() - start
            total += seconds
            why = textwrap.shorten(str(err), 110, placeholder=" …")  # `perfcast train` says all
            lines.append(f"| {task} | {data} | | {seconds:.1f} | not trainable: {why} | |")
            continue
        seconds = time.perf_counter() - start
        total += seconds
        m = result.metrics
        rows = f"{len(load_rows(task, data)):,}"  # cached by now: outside the timing
        lines.append(
            f"| {task} | {data} | {rows} | {seconds:.1f} | {m['mape']:.1f} "
            f"| {m['interval_coverage']:.0%} |"
        )
        print(lines[-1], flush=True)
    verdict = "met" if total < TARGET_S else "**missed**"
    body = (
        "Each row is one `perfcast train --task T --data NAME --model gbm` (load, hold out 20%, "
        "fit, score, log to MLflow, register) in a fresh store; rows with a `,` in `data` are "
        "what `perfcast serve` trains on first start. Load includes reading the dataset's "
        "cached Parquet (the first load of a dataset parses its source files once).\n\n"
        + "\n".join(lines)
        + f"\n\nTotal: {total:.0f} s for {len(lines) - 2} trainings (target: every default "
        f"model on every shipped dataset under {TARGET_S / 60:.0f} minutes: {verdict})."
    )
    print(body)
    if not args.no_write:
        write_section("training", "Training time", COMMAND, body)


if __name__ == "__main__":
    main()
