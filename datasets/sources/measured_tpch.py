"""TPC-H on DuckDB measured here for the `query` task: `measured-cpu-tpch-sweep`.

All 22 queries at scale factors 0.1, 0.3 and 1 (`tpchgen-cli` data in an in-memory DuckDB
database), 1 and 2 threads, a 512 MB memory limit and DuckDB's default (80% of RAM), 3 runs
each after a warm-up run: 792 plans with per-operator cardinalities and the end-to-end time.
Measured 2026-11-30 19:14-19:17 UTC on the 2-core development VM with nothing else running
(load average ~1): repeats of one setting differ by 6% (median coefficient of variation).
The sweep first measured on 2026-11-22 ran beside other jobs (load 7-40) and was 4-19x slower
than this one, more so at larger scales; it is in the repository's history, not used.
Regenerate with, for each scale S and with and without `--memory-limits 512`:
`perfcast profile query --queries 1,...,22 --scale S --threads 1,2 --repeats 3 --out F`.
"""

from __future__ import annotations

import pandas as pd

from perfcast.datasets.io import read_table
from perfcast.datasets.registry import dataset
from perfcast.datasets.sources.measured import LICENSE, MEASURED_DIR

SWEEP = MEASURED_DIR / "cpu" / "tpch_sweep.csv"


@dataset(
    "measured-cpu-tpch-sweep",
    "plan",
    description="DuckDB plans of all 22 TPC-H queries at scale 0.1/0.3/1, 1-2 threads, 512 MB "
    "or default memory, 3 repeats; measured on a quiet 2-core VM (perfcast profile query)",
    source="measured:vm",
    files=(str(SWEEP),),
    license=LICENSE,
    measured=True,
)
def load_sweep() -> pd.DataFrame:
    return read_table(SWEEP)
