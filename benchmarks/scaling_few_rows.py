"""CPU cost of one scaling prediction of a few rows (what a service call or a scheduler's
question asks), by the kind of rows `predict_interval` is given: records as the service parses
them (read without a frame), rows already checked (`CheckedRows`), and a frame it checks first.
Writes the `scaling-few-rows` section of docs/BENCHMARKS.md.

    .venv/bin/python -m benchmarks.scaling_few_rows

CPU time (time.process_time) rather than wall time: on a shared machine it is what the call
costs, not how long it waited for a core. Each figure is the median of repeated calls on a
gbm model fitted on every scaling dataset; the rows are multi-GPU rows of the data with the
columns a request carries (a different draw per size). Contract validation, which a frame
gets first, is timed on its own.
"""

from __future__ import annotations

import os
import time

import numpy as np

from benchmarks.accuracy import _scaling_rows
from benchmarks.report import write_section
from perfcast.predictor import make_predictor
from perfcast.predictor.base import CheckedRows

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
        "| rows per call | contract validation | records (few-row path) | checked rows | "
        "a frame, checked | same answer |",
        "|---:|---:|---:|---:|---:|---|",
    ]
    load = os.getloadavg()[0]
    for size in SIZES:
        batch = multi.sample(size, random_state=size).reset_index(drop=True)
        records = batch.to_dict("records")
        checked = CheckedRows(model._check_rows(batch))
        validation = cpu_ms(lambda b=batch: model._check_rows(b))
        few = cpu_ms(lambda r=records: model.predict_interval(r, columns=True))
        trusted = cpu_ms(lambda c=checked: model.predict_interval(c))
        whole = cpu_ms(lambda b=batch: model.predict_interval(b))
        answer = model.predict_interval(batch)
        same = answer.equals(model.predict_interval(records)) and answer.drop(
            columns="flags"
        ).equals(model.predict_interval(checked).drop(columns="flags"))
        lines.append(
            f"| {size} | {validation:.2f} | {few:.2f} | {trusted:.2f} | {whole:.2f} "
            f"| {'yes' if same else 'NO'} |"
        )
    body = (
        "CPU milliseconds per `ScalingPredictor.predict_interval` call, gbm fitted on every "
        f"scaling dataset ({len(rows):,} rows), request columns {', '.join(REQUEST_COLUMNS)}; "
        f"median of {REPEATS} calls, load average {load:.1f} on the 2 shared cores when it "
        "started. Records of plain values are read without a frame; checked rows skip the "
        "contract check; a frame is checked first (the validation column).\n\n" + "\n".join(lines)
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
