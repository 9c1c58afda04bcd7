"""CPU cost of one scaling prediction of a few rows (what a service call or a scheduler's
question asks), through the few-row path and through the general path it replaces. Writes the
`scaling-few-rows` section of docs/BENCHMARKS.md.

    .venv/bin/python -m benchmarks.scaling_few_rows

CPU time (time.process_time) rather than wall time: on a shared machine it is what the call
costs, not how long it waited for a core. Each figure is the median of repeated calls on a
gbm model fitted on every scaling dataset; the rows are multi-GPU rows of the data with the
columns a request carries (a different draw per size). Contract validation, which both paths
do first, is timed on its own.
"""

from __future__ import annotations

import os
import time

import numpy as np

from benchmarks.accuracy import _scaling_rows
from benchmarks.report import write_section
from perfcast.predictor import make_predictor

SIZES = (1, 10)
REPEATS = 200
REQUEST_COLUMNS = [
    "job", "gpu_type", "num_nodes", "num_gpus", "placement", "local_batch_size", "cluster"
]  # fmt: skip


def cpu_ms(call, repeats: int = REPEATS) -> float:
    """Median CPU milliseconds of `call()` over `repeats` calls (after two warm-up calls)."""
    call(), call()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        call()
        times.append(time.process_time() - start)
    return 1e3 * float(np.median(times))


def main() -> None:
    rows = _scaling_rows()
    model = make_predictor("scaling", "gbm").fit(rows)
    multi = rows.loc[rows["num_gpus"] > 1, REQUEST_COLUMNS]
    lines = [
        "| rows per call | contract validation | few-row path | general path | whole call, "
        "few-row path | same answer |",
        "|---:|---:|---:|---:|---:|---|",
    ]
    load = os.getloadavg()[0]
    for size in SIZES:
        batch = multi.sample(size, random_state=size).reset_index(drop=True)
        checked = model._check_rows(batch)
        validation = cpu_ms(lambda b=batch: model._check_rows(b))
        fast = cpu_ms(lambda c=checked: model._predict_interval(c, fast=True))
        general = cpu_ms(lambda c=checked: model._predict_interval(c, fast=False))
        whole = cpu_ms(lambda b=batch: model.predict_interval(b))
        same = model.predict_interval(batch).equals(model._predict_interval(checked, fast=False))
        lines.append(
            f"| {size} | {validation:.2f} | {fast:.2f} | {general:.2f} | {whole:.2f} "
            f"| {'yes' if same else 'NO'} |"
        )
    body = (
        "CPU milliseconds per `ScalingPredictor.predict_interval` call, gbm fitted on every "
        f"scaling dataset ({len(rows):,} rows), request columns {', '.join(REQUEST_COLUMNS)}; "
        f"median of {REPEATS} calls, load average {load:.1f} on the 2 shared cores when it "
        "started. The paths' columns exclude contract validation, the whole call includes "
        "it.\n\n" + "\n".join(lines)
    )
    print(body)
    write_section(
        "scaling-few-rows",
        "Scaling prediction of a few rows: CPU cost",
        "python -m benchmarks.scaling_few_rows",
        body,
    )


if __name__ == "__main__":
    main()
