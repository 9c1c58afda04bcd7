"""How many scaling answers break a law of data parallelism, on random rows one at a time:
each row against its physical variants (`predictor.scaling_invariants`), in one batch, and a
sample of rows alone. Writes the section `scaling-physics` of docs/BENCHMARKS.md.

    .venv/bin/python -m benchmarks.scaling_physics [--rows 100000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from benchmarks.accuracy import SCALING_DATA, _scaling_rows
from benchmarks.report import write_section
from perfcast.predictor import make_predictor
from perfcast.predictor.scaling_invariants import LAWS, random_rows, violations

CHUNK = 10_000  # rows checked per batch (each with its six variants: 70,000 predicted at once)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="random rows per family")
    parser.add_argument("--alone", type=int, default=200, help="rows also predicted alone")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    training = _scaling_rows()
    jobs = sorted(training["job"].unique())
    results = []
    for family in ("gbm", "fcn"):
        model = make_predictor("scaling", family).fit(training)
        rng = np.random.default_rng(0)
        found = dict.fromkeys(LAWS, 0)
        start = time.perf_counter()
        for done in range(0, args.rows, CHUNK):
            size = min(CHUNK, args.rows - done)
            alone = args.alone * size // args.rows
            for law, count in violations(model, random_rows(jobs, size, rng), rng, alone).items():
                found[law] += count
        seconds = time.perf_counter() - start
        results.append({"family": family, **found, "seconds": round(seconds, 1)})
        print(family, found, f"{seconds:.1f} s", flush=True)
    table = pd.DataFrame(results).set_index("family").T
    body = (
        f"Models fitted on {', '.join(SCALING_DATA)} ({len(training):,} rows). {args.rows:,} "
        f"random rows per family (`random_rows`: every job of the data and one never seen, "
        "every GPU type with a datasheet, 1-128 GPUs on 1-16 nodes, local batches 1-4096, links "
        "0.5-900 GB/s), each with one variant per law, all predicted in batches of "
        f"{CHUNK:,} rows with their variants; {args.alone} of them also predicted alone. A "
        "faster GPU counts as slower only where the job was not measured on both types, or "
        "measured against the datasheet order on two of its types. Violations (rows):\n\n"
        + _markdown(table)
    )
    print(table.to_string())
    if not args.no_write:
        write_section(
            "scaling-physics",
            "Scaling answers against the laws of data parallelism",
            f"python -m benchmarks.scaling_physics --rows {args.rows}",
            body,
        )


def _markdown(table: pd.DataFrame) -> str:
    lines = [
        "| law | " + " | ".join(table.columns) + " |",
        "|---" + "|---:" * len(table.columns) + "|",
    ]
    for law, row in table.iterrows():
        lines.append(
            f"| {law} | "
            + " | ".join(f"{v:.1f}" if law == "seconds" else f"{int(v):,}" for v in row)
            + " |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
