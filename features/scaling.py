"""What the `scaling` task knows of a job before it has been measured: the bytes its gradient
synchronization moves (its parameter count, fp32 gradients as data-parallel frameworks
all-reduce them). The throughput model itself is `predictor.throughput`."""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfcast.features.model_sizes import PARAMS_M

GRADIENT_BYTES_PER_PARAM = 4  # data-parallel frameworks all-reduce fp32 gradients


def nominal_gradient_bytes(jobs: np.ndarray, params_m: np.ndarray) -> np.ndarray:
    """Parameters x 4 bytes per row: the row's `params_m` where positive, else its job's
    reference count (`features.model_sizes.PARAMS_M`); NaN where neither is known."""
    if len(jobs) <= 64:  # a few rows: no pandas call
        names = list(dict.fromkeys(jobs))
        codes = np.array([names.index(job) for job in jobs], dtype=np.int64)
    else:  # 10^5 candidates, a few jobs
        codes, names = pd.factorize(np.asarray(jobs, dtype=object))
    known = np.array([PARAMS_M.get(job, np.nan) for job in names], dtype=float)[codes]
    params = np.where(np.asarray(params_m, dtype=float) > 0, params_m, known)
    return params * 1e6 * GRADIENT_BYTES_PER_PARAM
