"""Features for the `scaling` task: a job's step time for a placement, batch size and GPU.

The structure follows Pollux's throughput model, step = compute(local batch) + overhead
(gradient synchronization, partly overlapped), so the models learn corrections to a physical
estimate instead of raw times, and can be trusted on a GPU type they only saw on one GPU:
- `t1`: the job's one-GPU step time on this GPU type at this local batch size, looked up in the
  reference rows seen at fit time, or interpolated linearly in batch size from that job's other
  one-GPU rows on this GPU (compute time is close to affine in batch size).
- `overhead`: the job's measured (step - t1) for the same GPU count and node spread, taken from
  reference rows on other GPU types or other batch sizes (synchronization depends on model size
  and network, little on batch size or compute speed).
The base estimate is `t1 + overhead` (or `t1` alone); models predict log(step / base). A row
without a `t1` falls back to a second, direct model of log(step).

Every lookup excludes the row's own (gpu_type, local_batch_size), so training rows see exactly
what an unseen row would see.
"""

from __future__ import annotations

from typing import Self

import numpy as np
import pandas as pd

from features.devices import SPEC_COLUMNS, fill_specs

_KEY = ["job", "gpu_type"]
_CONFIG = ["job", "num_gpus", "num_nodes", "gpus_per_node"]


def _gpus_per_node(rows: pd.DataFrame) -> pd.Series:
    """Largest number of GPUs on one node (from `placement` when given, else even spread)."""
    even = np.ceil(rows["num_gpus"] / rows["num_nodes"])
    if "placement" not in rows.columns:
        return even.astype("int64")
    placements = rows["placement"]
    biggest = placements.map(
        {
            p: max(int(c) for c in p) if isinstance(p, str) and p.isdigit() else np.nan
            for p in placements.dropna().unique()
        }
    )
    return biggest.fillna(even).astype("int64")


class ScalingFeatures:
    """fit(reference rows) then transform(rows) -> (features, log_base)."""

    def fit(self, rows: pd.DataFrame) -> Self:
        ref = rows.assign(gpus_per_node=_gpus_per_node(rows))
        self.single_ = ref.loc[ref["num_gpus"] == 1, [*_KEY, "local_batch_size", "step_time_s"]]
        self.single_ = self.single_.groupby([*_KEY, "local_batch_size"], as_index=False).median()
        t1 = self._t1(ref)
        ref = ref.assign(overhead=ref["step_time_s"] - t1)
        self.overhead_ = ref.loc[
            t1.notna() & (ref["num_gpus"] > 1),
            [*_CONFIG, "gpu_type", "local_batch_size", "overhead"],
        ]
        self.jobs_ = pd.Index(sorted(ref["job"].unique()))
        return self

    def _t1(self, rows: pd.DataFrame) -> pd.Series:
        """One-GPU step time for each row, leave-own-(gpu, batch)-out, interpolated in batch."""
        out = pd.Series(np.nan, index=rows.index)
        groups = dict(list(self.single_.groupby(_KEY, sort=False)))
        for key, part in rows.groupby(_KEY, sort=False):
            ref = groups.get(key)
            if ref is None:
                continue
            bsz_ref = ref["local_batch_size"].to_numpy(dtype=float)
            t_ref = ref["step_time_s"].to_numpy(dtype=float)
            single = part["num_gpus"] == 1
            for (bsz, is_single), idx in part.groupby(["local_batch_size", single]).groups.items():
                exact = bsz_ref == bsz
                if exact.any() and not is_single:
                    out[idx] = t_ref[exact][0]
                else:  # a one-GPU row never sees its own time: interpolate from the others
                    out[idx] = _affine_at(bsz_ref[~exact], t_ref[~exact], float(bsz))
        return out

    def _overhead(self, rows: pd.DataFrame) -> pd.Series:
        """Median measured overhead of the same job and GPU spread, excluding rows with the
        same (gpu_type, local_batch_size) as the row itself."""
        if self.overhead_.empty:
            return pd.Series(np.nan, index=rows.index)
        keys = [*_CONFIG, "gpu_type", "local_batch_size"]
        # work on the distinct keys only: a batch of 10^5 rows has few distinct configurations
        unique = rows[keys].drop_duplicates()
        merged = unique.merge(self.overhead_, on=_CONFIG, how="inner", suffixes=("", "_ref"))
        same = (merged["gpu_type"] == merged["gpu_type_ref"]) & (
            merged["local_batch_size"] == merged["local_batch_size_ref"]
        )
        medians = merged[~same].groupby(keys, as_index=False)["overhead"].median()
        looked_up = rows[keys].merge(medians, on=keys, how="left")["overhead"]
        return pd.Series(looked_up.to_numpy(), index=rows.index)

    def transform(self, rows: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
        rows = fill_specs(rows.assign(gpus_per_node=_gpus_per_node(rows)), "gpu_type")
        t1 = self._t1(rows)
        overhead = self._overhead(rows).clip(lower=0)
        base = t1 + overhead.fillna(0)
        X = pd.DataFrame(index=rows.index)
        X["log_num_gpus"] = np.log2(rows["num_gpus"])
        X["num_nodes"] = rows["num_nodes"].astype(float)
        X["gpus_per_node"] = rows["gpus_per_node"].astype(float)
        X["multi_node"] = (rows["num_nodes"] > 1).astype(float)
        X["log_local_bsz"] = np.log2(rows["local_batch_size"])
        X["log_global_bsz"] = np.log2(rows["local_batch_size"] * rows["num_gpus"])
        X["log_t1"] = np.log(t1)
        X["log_overhead_ratio"] = np.log1p(overhead / t1)
        X["has_overhead"] = overhead.notna().astype(float)
        for column in SPEC_COLUMNS:
            X[column] = np.log(rows[column].astype(float))
        X["amp"] = rows["amp"].astype("Float64").astype(float) if "amp" in rows else np.nan
        for column in ("params_m", "gflops_per_sample"):
            X[f"log_{column}"] = np.log1p(rows[column].astype(float)) if column in rows else np.nan
        X["job"] = pd.Categorical(rows["job"], categories=self.jobs_)
        return X, np.log(base.to_numpy(dtype=float))


def _affine_at(x: np.ndarray, y: np.ndarray, at: float) -> float:
    """Step time at batch `at` from one-GPU rows (x=batch, y=time): a least-squares line
    through two or more points (never below half the smallest time), a proportional scaling
    from a single point, NaN with none."""
    if len(x) == 0:
        return float("nan")
    if len(np.unique(x)) == 1:
        return float(np.median(y) * at / x[0]) if x[0] > 0 else float("nan")
    slope, intercept = np.polyfit(x, y, 1)
    value = intercept + slope * at
    return float(max(value, 0.5 * y.min() * min(1.0, at / x.min())))
