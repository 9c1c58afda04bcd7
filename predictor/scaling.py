"""Step time of a job for a placement, batch size and GPU type (task `scaling`).

Every answer is `predictor.throughput`'s physical form evaluated at the row's own parameters,
so the laws of data parallelism hold row by row, alone or in any request (see that module).
The parameters come from measurements where they exist and from learned priors where they do
not:
- compute, T_c(b) on a GPU type: the job's one-GPU step times on that type (a monotone curve
  in the local batch through their medians); on a type it was not measured on, its curves on
  the types it was, scaled by a datasheet speed index (FP32 peak and memory bandwidth, with
  exponents fitted on the jobs measured on several types) and kept between the types that are
  at least as fast and at most as fast by datasheet (`_ordered`); for a job never measured,
  a prior per-sample time from its features (`family`'s regressor) over the speed index;
- synchronization, B: the job's effective gradient bytes fitted on its multi-GPU step times at
  its place (cluster, GPU type) and spread (one node or several); elsewhere the median over
  the places it was measured; for a job never measured at scale, the prior regressor's answer
  from its features (parameter bytes, compute per sample);
  and its latency (fixed seconds of a synchronizing step), fitted with the bytes;
- the law (overlap gamma, growth per spread): chosen on every job's rows at once.

Intervals: p50 times the spread of log errors seen on held-out data of the same kind (each
training cluster's multi-GPU rows predicted without them, each job's compute on a GPU type
it was not measured on, each job's compute from the prior), so p10 < p50 < p90 on every row.
`observe(rows)` adds measured step times: the next answer for that job uses them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Self

import numpy as np
import pandas as pd
from sklearn.isotonic import IsotonicRegression
from sklearn.model_selection import GroupKFold

from perfcast.datasets.contract import few_row_columns, validate
from perfcast.errors import ContractError
from perfcast.features.devices import DEVICES, canonical_device, interconnect_of
from perfcast.features.scaling import nominal_gradient_bytes
from perfcast.predictor.base import (
    CheckedRows,
    Columns,
    PredictionRows,
    TaskPredictor,
    flags_categorical,
    flags_column,
    interval_columns,
)
from perfcast.predictor.regressors import make_regressor
from perfcast.predictor.throughput import (
    ETHERNET_10G_GBPS,
    GAMMAS,
    GROWTHS,
    PCIE3_GBPS,
    SyncLaw,
    fit_sync,
)

FEW_ROWS = 32  # up to this many records are read without a DataFrame
DISTINCT_BATCHES_FROM = 1024  # rows of one (job, GPU type) from which T_c is taken per batch
MIN_SPREAD = 0.03  # the narrowest half-width of an interval in log terms (3%)
PRIOR_FEATURES = ["spread", "log_nominal_bytes", "log_per_sample_ref", "log_fixed_ref"]


@dataclass(frozen=True)
class Rows:
    """The columns the model reads, as arrays (from a frame or a few records alike); each
    text column also as integer codes, so that 10^5 candidates are grouped without hashing
    a string per row."""

    job: np.ndarray  # object
    gpu: np.ndarray  # object, canonical device names
    cluster: np.ndarray  # object, "" where none
    gpus: np.ndarray
    nodes: np.ndarray
    batch: np.ndarray
    intra: np.ndarray  # GB/s, NaN where unknown
    inter: np.ndarray
    params_m: np.ndarray  # NaN where not given
    codes: dict[str, np.ndarray]  # "job", "gpu", "cluster": codes of the text columns

    @classmethod
    def of(cls, rows: pd.DataFrame | Mapping[str, list]) -> Rows:
        n = len(rows["job"])

        def text(name: str) -> tuple[np.ndarray, np.ndarray]:
            if name not in rows:
                return np.zeros(n, dtype=np.int64), np.array([""], dtype=object)
            values = rows[name]
            if isinstance(values, pd.Series) and isinstance(values.dtype, pd.CategoricalDtype):
                # (10^5 candidates: their codes as they are, every category a name)
                codes, uniques = values.cat.codes.to_numpy(), values.cat.categories
            elif isinstance(values, pd.Series):
                codes, uniques = pd.factorize(values, use_na_sentinel=True)
            else:  # a few records: no pandas call (most of a one-row answer's time)
                codes, uniques = small_factorize([None if v != v else v for v in values])
            names = np.array([str(u) for u in uniques] + [""], dtype=object)
            return np.where(codes < 0, len(uniques), codes).astype(np.int64), names

        def number(name: str) -> np.ndarray:
            if name not in rows:
                return np.full(n, np.nan)
            values = rows[name]
            if isinstance(values, pd.Series):
                if values.dtype.kind in "iuf":  # numbers already: nothing to coerce
                    return values.to_numpy(dtype=float)
                return pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
            return np.array([np.nan if v is None else v for v in values], dtype=float)

        job_code, job_names = text("job")
        gpu_code, gpu_names = text("gpu_type")
        gpu_names = np.array([canonical_device(g) for g in gpu_names], dtype=object)
        cluster_code, cluster_names = text("cluster")
        intra, inter = number("intra_node_bw_gbps"), number("inter_node_bw_gbps")
        group, first = _groups(gpu_code, cluster_code)
        facts = np.array(
            [
                interconnect_of(gpu_names[gpu_code[i]], cluster_names[cluster_code[i]])
                for i in first
            ],
            dtype=float,
        ).reshape(-1, 2)
        if len(facts) > 1:  # (one group's row broadcasts as it is)
            facts = facts[group]
        return cls(
            job=job_names[job_code],
            gpu=gpu_names[gpu_code],
            cluster=cluster_names[cluster_code],
            gpus=number("num_gpus"),
            nodes=number("num_nodes"),
            batch=number("local_batch_size"),
            intra=np.where(intra > 0, intra, facts[:, 0]),
            inter=np.where(inter > 0, inter, facts[:, 1]),
            params_m=number("params_m"),
            codes={"job": job_code, "gpu": gpu_code, "cluster": cluster_code},
        )


def small_factorize(values: Sequence) -> tuple[np.ndarray, list]:
    """pd.factorize of a few hashable values in plain Python (codes, uniques in order of
    first appearance; None is -1), without pandas' per-call cost."""
    index: dict = {}
    codes = [-1 if v is None else index.setdefault(v, len(index)) for v in values]
    return np.array(codes, dtype=np.int64), list(index)


def _groups(*codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(group of each row, first row of each group) of the combinations of integer codes,
    groups numbered in the order of their keys; by a table of every key where the keys are
    few (10^5 candidates: a few jobs, GPU types and clusters), else by sorting."""
    n = len(codes[0])
    # a code the same on every row tells no rows apart (10^5 candidates: one job, one
    # cluster, often one GPU type), and leaves the groups' order as it is
    codes = tuple(c for c in codes if n > 1 and c.min() != c.max())
    if not codes:  # one group
        return np.zeros(n, dtype=np.int64), np.zeros(min(n, 1), dtype=np.int64)
    key = np.zeros(n, dtype=np.int64)
    for code in codes:
        code = np.asarray(code, dtype=np.int64)
        key = key * (int(code.max(initial=0)) + 1) + code
    size = int(key.max(initial=0)) + 1
    if size > 4 * len(key) + 64:
        _, first, group = np.unique(key, return_index=True, return_inverse=True)
        return group.reshape(-1), first
    present = np.zeros(size, dtype=bool)
    present[key] = True
    group = (np.cumsum(present) - 1)[key]
    first = np.empty(int(present.sum()), dtype=np.int64)
    first[group[::-1]] = np.arange(len(key) - 1, -1, -1)  # the last write: the first row
    return group, first


def _members(group: np.ndarray) -> list[np.ndarray]:
    """The rows of each group, in group order (a radix sort of the small group numbers)."""
    if not group.any():  # one group (a request's rows of one job on one GPU type)
        return [np.arange(len(group))]
    small = group.astype(np.int16) if group.max(initial=0) < 2**15 else group
    order = np.argsort(small, kind="stable")
    return np.split(order, np.cumsum(np.bincount(group))[:-1])


class ScalingPredictor(TaskPredictor):
    """The physical throughput model with measured parameters and learned priors; `model`
    (gbm or fcn) is the family of the prior regressors."""

    task = "scaling"
    rows_independent = True
    epochs: int | None = None  # also what a model saved before `epochs` existed reads

    def __init__(
        self, model: str = "gbm", random_state: int = 0, epochs: int | None = None
    ) -> None:
        self.model = model
        self.random_state = random_state
        # fcn only: the prior networks' epochs (None: the default 300); a test of a property,
        # not of accuracy, trains fewer
        self.epochs = epochs

    def _prior_regressor(self):
        """The family's regressor of the prior (fcn for `epochs` where set)."""
        epochs = {} if self.model != "fcn" or self.epochs is None else {"epochs": self.epochs}
        return make_regressor(self.model, random_state=self.random_state, **epochs)

    # -- fitting ----------------------------------------------------------------------------

    def _fit(self, rows: pd.DataFrame) -> Self:
        self.rows_ = rows.reset_index(drop=True)
        self.prior_, self.prior_kind_, self.prior_errors_ = None, "per_compute", {}
        self.prior_medians_ = {
            (k, s): 0.0 for k in ("per_compute", "per_parameter") for s in (0, 1)
        }
        self.prior_latency_, self.prior_step_ = {0: 0.0, 1: 0.0}, 0.0
        one = Rows.of(self.rows_)
        self._fit_compute(self.rows_, one)
        self.speed_exponents_ = _speed_exponents(self.curves_)
        self._fit_compute_prior()
        self.law_ = self._choose_law(one)
        self._fit_bytes(one)
        self._fit_priors()
        self._calibrate(one)
        self.fitted_ = True
        return self

    def observe(self, rows: pd.DataFrame) -> Self:
        """Add measured step times (contract rows) and refit the measured parameters (the
        jobs' compute curves and gradient bytes) under the same law and priors: the next
        answer for these jobs on these GPU types and places uses them."""
        self._require_fitted()
        rows = validate(rows, self.kind, source="observed scaling rows")
        self.rows_ = pd.concat([self.rows_, rows], ignore_index=True)
        one = Rows.of(self.rows_)
        self._fit_compute(self.rows_, one)
        self._fit_bytes(one)
        return self

    def _fit_compute(self, rows: pd.DataFrame, arrays: Rows) -> None:
        """Each measured (job, GPU type)'s compute curve from its one-GPU rows."""
        single = arrays.gpus == 1
        table = pd.DataFrame(
            {
                "job": arrays.job[single],
                "gpu": arrays.gpu[single],
                "batch": arrays.batch[single],
                "step": rows["step_time_s"].to_numpy(dtype=float)[single],
            }
        )
        medians = table.groupby(["job", "gpu", "batch"], sort=True)["step"].median()
        shares = []
        knots: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
        for (job, gpu), part in medians.groupby(level=[0, 1], sort=False):
            batch = part.index.get_level_values(2).to_numpy(dtype=float)
            step = IsotonicRegression().fit_transform(batch, part.to_numpy(dtype=float))
            knots[(job, gpu)] = (batch, step)
            if len(batch) >= 2:  # the fixed share of a step at its smallest batch
                slope = (step[-1] - step[0]) / (batch[-1] - batch[0])
                shares.append(np.clip((step[0] - slope * batch[0]) / step[0], 0.0, 1.0))
        self.fixed_share_ = float(np.median(shares)) if shares else 0.5
        knots.update(self._compute_from_multi(rows, arrays, knots))
        self.curves_ = {key: _Curve(b, s, self.fixed_share_) for key, (b, s) in knots.items()}
        self.job_gpus_: dict[str, list[str]] = {}
        for job, gpu in self.curves_:
            self.job_gpus_.setdefault(job, []).append(gpu)
        multi = arrays.gpus > 1
        self.max_gpus_ = pd.Series(arrays.gpus).groupby(arrays.job).max().to_dict()
        self.measured_places_ = set(
            zip(arrays.job[multi], arrays.cluster[multi], arrays.gpu[multi],
                arrays.nodes[multi] > 1, strict=True)
        )  # fmt: skip
        self.measured_anywhere_ = {(j, g, x) for j, _, g, x in self.measured_places_}

    def _compute_from_multi(
        self, rows: pd.DataFrame, arrays: Rows, knots: dict
    ) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
        """Compute knots of the (job, GPU type)s measured on several GPUs only (a job a live
        cluster reports at scale, never on one GPU): at each batch, the fastest measured step
        at the fewest GPUs times the median share of such a step the other jobs' one-GPU
        time is (a step is never faster than its compute, so compute is below it)."""
        multi = arrays.gpus > 1
        table = pd.DataFrame(
            {
                "job": arrays.job[multi],
                "gpu": arrays.gpu[multi],
                "gpus": arrays.gpus[multi],
                "batch": arrays.batch[multi],
                "step": rows["step_time_s"].to_numpy(dtype=float)[multi],
            }
        )
        if table.empty:
            return {}
        fewest = table[table["gpus"] == table.groupby(["job", "gpu"])["gpus"].transform("min")]
        steps = fewest.groupby(["job", "gpu", "batch"], sort=True)["step"].min()
        shares = [
            float(np.median(np.interp(part.index.get_level_values(2), *knots[key]) / part))
            for key, part in steps.groupby(level=[0, 1], sort=False)
            if key in knots
        ]
        share = float(np.clip(np.median(shares), 0.05, 1.0)) if shares else 0.8
        found = {}
        for (job, gpu), part in steps.groupby(level=[0, 1], sort=False):
            if (job, gpu) not in knots:
                batch = part.index.get_level_values(2).to_numpy(dtype=float)
                step = IsotonicRegression().fit_transform(batch, part.to_numpy(dtype=float))
                found[(job, gpu)] = (batch, step * share)
        return found

    def _speed(self, gpu: str) -> float:
        """log speed index of a GPU type: kf log FP32 peak + kb log memory bandwidth (the
        slowest datasheet's where the type has none)."""
        spec = DEVICES.get(gpu)
        kf, kb = self.speed_exponents_
        if spec is None:
            return min(self._speed(g) for g in DEVICES)
        return kf * np.log(spec.peak_tflops_fp32) + kb * np.log(spec.mem_bw_gbps)

    def compute_seconds(self, job: str, gpu: str, batch: np.ndarray) -> tuple[np.ndarray, int]:
        """(T_c of `job` on `gpu` at each batch, its source: 0 measured on this type, 1 scaled
        from other types, 2 the prior)."""
        batch = np.asarray(batch, dtype=float)
        if len(batch) > DISTINCT_BATCHES_FROM:
            # 10^5 candidates hold a few local batches: T_c is worked out once for each (it
            # is elementwise in the batch, so the numbers are the same)
            codes, distinct = pd.factorize(batch, use_na_sentinel=False)
            if len(distinct) * 4 < len(batch):
                values, source = self._compute_seconds(job, gpu, np.asarray(distinct, float))
                return values[codes], source
        return self._compute_seconds(job, gpu, batch)

    def _compute_seconds(self, job: str, gpu: str, batch: np.ndarray) -> tuple[np.ndarray, int]:
        gpus = self.job_gpus_.get(job)
        if not gpus:
            per_sample, fixed = self.compute_prior_
            scale = np.exp(-self._speed(gpu))
            return (fixed + per_sample * batch) * scale, 2
        if gpu in gpus:
            return self.curves_[(job, gpu)](batch), 0
        return self._ordered(job, gpu, gpus, batch), 1

    def _ordered(self, job: str, gpu: str, gpus: list[str], batch: np.ndarray) -> np.ndarray:
        """T_c on an unmeasured type: the geometric mean of the measured types' curves scaled
        by speed, then clipped between the measured types at least as fast (a lower bound)
        and at most as fast (an upper bound), so no datasheet order is broken."""
        speed = self._speed(gpu)
        logs = [np.log(self.curves_[(job, g)](batch)) + self._speed(g) - speed for g in gpus]
        estimate = np.exp(np.mean(logs, axis=0))
        spec = DEVICES.get(gpu)
        if spec is None:
            return estimate
        lower, upper = np.zeros_like(batch), np.full_like(batch, np.inf)
        for g in gpus:
            other = DEVICES.get(g)
            if other is None:
                continue
            curve = self.curves_[(job, g)](batch)
            if _at_least_as_fast(other, spec):
                lower = np.fmax(lower, curve)
            if _at_least_as_fast(spec, other):
                upper = np.fmin(upper, curve)
        return np.fmin(np.fmax(estimate, lower), upper)

    def measured_against_datasheet(self, job: str, batch: float) -> bool:
        """Whether `job` was measured slower on a GPU type than on one it is at least as fast
        as by datasheet, at this batch: measurements beat the datasheet order, and a type
        between two such types cannot be ordered against both."""
        gpus = [g for g in self.job_gpus_.get(job, ()) if g in DEVICES]
        at = np.array([float(batch)])
        times = {g: self.curves_[(job, g)](at)[0] for g in gpus}
        return any(
            _at_least_as_fast(DEVICES[a], DEVICES[b]) and times[a] > times[b]
            for a in gpus
            for b in gpus
            if a != b
        )

    def _multi_table(self, arrays: Rows, steps: np.ndarray) -> pd.DataFrame:
        """The multi-GPU rows with known links, their compute time and sync per byte."""
        multi = (arrays.gpus > 1) & np.isfinite(arrays.intra) & np.isfinite(arrays.inter)
        idx = np.flatnonzero(multi)
        compute = np.empty(len(idx))
        frame = pd.DataFrame({"job": arrays.job[idx], "gpu": arrays.gpu[idx]})
        for (job, gpu), where in frame.groupby(["job", "gpu"], sort=False).indices.items():
            compute[where] = self.compute_seconds(job, gpu, arrays.batch[idx[where]])[0]
        spread = (arrays.nodes[idx] > 1).astype(int)
        return pd.DataFrame(
            {
                "job": arrays.job[idx],
                "cluster": arrays.cluster[idx],
                "gpu": arrays.gpu[idx],
                "spread": spread,
                "gpus": arrays.gpus[idx],
                "intra": arrays.intra[idx],
                "slowest": np.fmin(arrays.intra[idx], arrays.inter[idx]),
                "compute": compute,
                "log_step": np.log(steps[idx]),
            }
        )

    def _choose_law(self, arrays: Rows) -> SyncLaw:
        """The law (gamma, growth per spread) whose fitted job terms explain the multi-GPU
        rows best: one node first (gamma and its growth), then across nodes with gamma kept."""
        table = self._multi_table(arrays, self.rows_["step_time_s"].to_numpy(dtype=float))
        best = SyncLaw()
        for spread in (0, 1):
            part = table[table["spread"] == spread]
            if part.empty:
                continue
            groups = part.groupby(["job", "cluster"], sort=False).ngroup().to_numpy()
            floor = self._floor(part, best) if spread else None
            link = part["intra" if spread == 0 else "slowest"].to_numpy()
            scores = {}
            for gamma in GAMMAS if spread == 0 else (best.gamma,):
                for growth in GROWTHS:
                    law = _with(best, spread, gamma, growth)
                    per_byte = law.seconds_per_byte(part["gpus"].to_numpy(), link, spread)
                    scores[(gamma, growth)] = fit_sync(
                        groups, part["log_step"].to_numpy(), part["compute"].to_numpy(),
                        per_byte, law, floor,
                    )[2]  # fmt: skip
            best = _with(best, spread, *min(scores, key=scores.get))
        return best

    def _floor(self, part: pd.DataFrame, law: SyncLaw) -> np.ndarray | None:
        """S_1 of rows across nodes (their sync on one node, the least they have), where the
        one-node terms are already fitted; None before."""
        if not hasattr(self, "bytes_"):
            return None
        b_one, latency, _ = self._sync_terms(part["job"].to_numpy(), part["cluster"].to_numpy(), 0)
        return latency + b_one * law.seconds_per_byte(
            part["gpus"].to_numpy(), part["intra"].to_numpy(), 0
        )

    def _fit_bytes(self, arrays: Rows) -> None:
        """Each (job, cluster, spread)'s sync terms under the law, (log effective bytes,
        latency s); their medians per (job, spread); the median log ratio of across-node to
        one-node bytes."""
        table = self._multi_table(arrays, self.rows_["step_time_s"].to_numpy(dtype=float))
        self.bytes_: dict[tuple, tuple[float, float]] = {}
        self.job_bytes_: dict[tuple[str, int], tuple[float, float]] = {}
        for spread in (0, 1):
            part = table[table["spread"] == spread]
            if part.empty:
                continue
            keys = part.groupby(["job", "cluster"], sort=False)
            groups = keys.ngroup().to_numpy()
            link = part["intra" if spread == 0 else "slowest"].to_numpy()
            per_byte = self.law_.seconds_per_byte(part["gpus"].to_numpy(), link, spread)
            floor = self._floor(part, self.law_) if spread else None
            log_bytes, latency, _ = fit_sync(
                groups, part["log_step"].to_numpy(), part["compute"].to_numpy(), per_byte,
                self.law_, floor,
            )  # fmt: skip
            for key, b, a in zip(keys.groups, log_bytes, latency, strict=True):
                self.bytes_[(*key, spread)] = (float(b), float(a))
        by_job: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for (job, _, spread), value in self.bytes_.items():
            by_job.setdefault((job, spread), []).append(value)
        self.job_bytes_ = {
            key: (float(np.median([b for b, _ in v])), float(np.median([a for _, a in v])))
            for key, v in by_job.items()
        }
        ratios = [
            self.job_bytes_[(job, 1)][0] - value[0]
            for (job, spread), value in self.job_bytes_.items()
            if spread == 0 and (job, 1) in self.job_bytes_
        ]
        self.across_ratio_ = float(np.median(ratios)) if ratios else 0.0

    def _job_features(self, jobs: np.ndarray, nominal: np.ndarray) -> pd.DataFrame:
        """The prior regressors' job features: parameter bytes and the job's compute per
        sample and fixed time at speed index 1 (NaN for a job never measured)."""
        per_sample, fixed, step = [], [], []
        for job in jobs:
            gpus = self.job_gpus_.get(job, [])
            if not gpus:
                per_sample.append(np.nan)
                fixed.append(np.nan)
                step.append(np.nan)
                continue
            refs = [self.curves_[(job, g)].reference() for g in gpus]
            speeds = [self._speed(g) for g in gpus]
            steps = [self.curves_[(job, g)].middle_step() for g in gpus]
            per_sample.append(
                np.median([np.log(r[0]) + s for r, s in zip(refs, speeds, strict=True)])
            )
            fixed.append(np.median([np.log(r[1]) + s for r, s in zip(refs, speeds, strict=True)]))
            step.append(np.median([np.log(t) + s for t, s in zip(steps, speeds, strict=True)]))
        return pd.DataFrame(
            {
                "log_nominal_bytes": np.log(nominal),
                "log_per_sample_ref": per_sample,
                "log_fixed_ref": fixed,
                "log_step_ref": step,
            }
        )

    def _fit_priors(self, choose: bool = True) -> None:
        """The prior of a job's gradient bytes (per spread) from its features, `family`'s
        regressor on the (job, spread) medians; and the prior compute of a job never measured
        (the median per-sample and fixed time at speed index 1)."""
        keys = list(self.job_bytes_)
        jobs = np.array([job for job, _ in keys], dtype=object)
        nominal = nominal_gradient_bytes(jobs, np.full(len(jobs), np.nan))
        X = self._job_features(jobs, nominal)
        X.insert(0, "spread", [float(s) for _, s in keys])
        # bytes per second of the job's compute (at speed 1): a job that computes little
        # has little to synchronize (ncf: 100 MB; as bytes alone the prior gave it 485 MB)
        self.prior_step_ = float(np.nanmedian(X["log_step_ref"])) if len(X) else 0.0
        y = np.array([self.job_bytes_[k][0] for k in keys]) - self._step_ref(X)
        spread = X["spread"].to_numpy()
        per_parameter = y + self._step_ref(X) - np.log(nominal)
        self.prior_medians_ = {
            (kind, s): float(np.nanmedian(values[spread == s]))
            if (spread == s).any() and np.isfinite(values[spread == s]).any()
            else 0.0
            for kind, values in (("per_compute", y), ("per_parameter", per_parameter))
            for s in (0, 1)
        }
        self.prior_ = None
        self.prior_latency_ = {
            s: float(
                np.median([a for (_, t), (_, a) in self.job_bytes_.items() if t == s] or [0.0])
            )
            for s in (0, 1)
        }
        if choose:
            self.prior_errors_ = self._prior_errors(X, y, jobs, nominal) if len(y) >= 8 else {}
            self.prior_kind_ = min(
                self.prior_errors_, key=self.prior_errors_.get, default="per_compute"
            )
        if self.prior_kind_ == self.model and len(y) >= 8:  # (fewer: the median's)
            self.prior_ = self._prior_regressor()
            self.prior_.fit(X[PRIOR_FEATURES], y)

    def _prior_errors(
        self, X: pd.DataFrame, y: np.ndarray, jobs: np.ndarray, nominal: np.ndarray
    ) -> dict[str, float]:
        """Mean absolute log error of the multi-GPU step times of jobs held out (5 groups of
        jobs; the mean of each job and spread's), its rows with that spread's bytes from each
        candidate prior: the
        family's regressor, the median bytes per compute-second, the median bytes per
        parameter byte (where the job's parameter count is known); the prior is the one with
        the least. Some 30 (job, spread) points teach a regressor little, and its misses are
        costly (a new job's error: 112% with gbm's prior, 25% with the medians')."""
        table = self._multi_table(
            Rows.of(self.rows_), self.rows_["step_time_s"].to_numpy(dtype=float)
        )
        link = np.where(table["spread"] == 0, table["intra"], table["slowest"])
        per_byte = np.where(
            table["spread"] == 0,
            self.law_.seconds_per_byte(table["gpus"].to_numpy(), link, 0),
            self.law_.seconds_per_byte(table["gpus"].to_numpy(), link, 1),
        )
        spread = X["spread"].to_numpy()
        errors: dict[str, list[float]] = {self.model: [], "per_compute": [], "per_parameter": []}
        for train, test in GroupKFold(min(5, len(np.unique(jobs)))).split(X, y, jobs):
            model = self._prior_regressor()
            model.fit(X[PRIOR_FEATURES].iloc[train], y[train])
            step_ref = self._step_ref(X.iloc[test])
            held = np.zeros(len(y), dtype=bool)
            held[train] = True
            medians = {
                s: (np.median(y[held & (spread == s)]) if (held & (spread == s)).any() else 0.0,
                    np.nanmedian((y + self._step_ref(X) - np.log(nominal))[held & (spread == s)])
                    if np.isfinite(np.log(nominal)[held & (spread == s)]).any() else 0.0)
                for s in (0, 1)
            }  # fmt: skip
            s_test = spread[test]
            per_compute = np.array([medians[s][0] for s in s_test]) + step_ref
            per_parameter = np.array([medians[s][1] for s in s_test]) + np.log(nominal[test])
            guesses = {
                self.model: model.predict_quantiles(X[PRIOR_FEATURES].iloc[test])[1] + step_ref,
                "per_compute": per_compute,
                "per_parameter": np.where(np.isfinite(per_parameter), per_parameter, per_compute),
            }
            for k, (job, s) in enumerate(zip(jobs[test], s_test, strict=True)):
                rows = ((table["job"] == job) & (table["spread"] == s)).to_numpy()
                if not rows.any():
                    continue
                for name, log_bytes in guesses.items():
                    sync = self.prior_latency_[s] + np.exp(log_bytes[k]) * per_byte[rows]
                    step = self.law_.step_seconds(table["compute"].to_numpy()[rows], sync)
                    error = np.abs(np.log(step) - table["log_step"].to_numpy()[rows])
                    errors[name].append(float(error.mean()))  # each (job, spread) weighs the same
        return {name: float(np.mean(v)) for name, v in errors.items() if v}

    def _measured_at(self, job: str, cluster: str, gpu: str, across: bool) -> bool:
        """Whether the job's multi-GPU steps were measured on this GPU type with this spread,
        on this cluster (or on any, for a row naming none)."""
        if cluster:
            return (job, cluster, gpu, across) in self.measured_places_
        return (job, gpu, across) in self.measured_anywhere_

    def _fit_compute_prior(self) -> None:
        """The compute of a job never measured: the median per-sample and fixed seconds of
        the measured jobs at speed index 1 (no job feature has told them apart better on
        so few jobs)."""
        refs = np.array([c.reference() for c in self.curves_.values()]).reshape(-1, 2)
        speeds = np.array([self._speed(g) for _, g in self.curves_])
        if not len(refs):
            raise ContractError("scaling training rows need one-GPU rows of at least one job")
        self.compute_prior_ = (
            float(np.exp(np.median(np.log(refs[:, 0]) + speeds))),
            float(np.exp(np.median(np.log(refs[:, 1]) + speeds))),
        )

    def _prior_bytes(self, jobs: np.ndarray, nominal: np.ndarray, spread: int) -> np.ndarray:
        X = self._job_features(jobs, nominal)
        X.insert(0, "spread", float(spread))
        per_compute = self.prior_medians_[("per_compute", spread)] + self._step_ref(X)
        if self.prior_kind_ == "per_parameter":
            per_parameter = self.prior_medians_[("per_parameter", spread)] + np.log(nominal)
            return np.where(np.isfinite(per_parameter), per_parameter, per_compute)
        if self.prior_ is None:
            return per_compute
        return self.prior_.predict_quantiles(X[PRIOR_FEATURES])[1] + self._step_ref(X)

    def _step_ref(self, X: pd.DataFrame) -> np.ndarray:
        """Each job's log one-GPU step at its middle batch and speed 1 (the median job's for
        a job never measured)."""
        return np.nan_to_num(X["log_step_ref"].to_numpy(dtype=float), nan=self.prior_step_)

    def _sync_terms(
        self, job: np.ndarray, cluster: np.ndarray, spread: int, params_m: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(effective bytes, latency s, source) per row for `spread`: 0 fitted on the row's
        cluster, 1 the job's median over the clusters it was measured on (or its other
        spread's, bytes rescaled), 2 the prior (from the nominal gradient bytes of the rows'
        `params_m`, none where not given). Never the GPU type's: a job moves the same bytes
        on any GPU, so a faster GPU at the same links is never slower."""
        n = len(job)
        codes, distinct = small_factorize(list(zip(job, cluster, strict=True)))  # a few rows
        values, sources, need = [], [], []
        for i, (j, c) in enumerate(distinct):
            found = self.bytes_.get((j, c, spread)) if c else self.job_bytes_.get((j, spread))
            if found is not None:  # (a row naming no cluster: the job's median, as measured)
                values.append(found)
                sources.append(0)
                continue
            found = self.job_bytes_.get((j, spread))
            if found is None and (j, 1 - spread) in self.job_bytes_:
                sign = 1.0 if spread == 1 else -1.0
                other = self.job_bytes_[(j, 1 - spread)]
                found = (other[0] + sign * self.across_ratio_, other[1])
            values.append((np.nan, self.prior_latency_[spread]) if found is None else found)
            sources.append(1 if found is not None else 2)
            if found is None:
                need.append(i)
        values, sources = np.array(values, dtype=float).reshape(-1, 2), np.array(sources)
        if need:
            need = np.array(need)
            jobs_d = np.array([d[0] for d in distinct], dtype=object)
            nominal_d = np.full(len(distinct), np.nan)
            if params_m is not None:
                first = np.zeros(len(distinct), dtype=int)
                first[codes[::-1]] = np.arange(n)[::-1]
                nominal_d = nominal_gradient_bytes(jobs_d, params_m[first])
            values[need, 0] = self._prior_bytes(jobs_d[need], nominal_d[need], spread)
        return np.exp(values[codes, 0]), values[codes, 1], sources[codes]

    # -- intervals --------------------------------------------------------------------------

    def _calibrate(self, arrays: Rows) -> None:
        """Log-error quantiles (p10, p90) per source of each term: compute measured (in
        sample), scaled from other types (each job's measured types left out in turn), from
        the prior (each job's per-sample time against the others' median); sync fitted here
        (in sample), from the job elsewhere (each training cluster's multi-GPU rows predicted
        without them), from the prior (each group of jobs' multi-GPU rows predicted without
        them)."""
        steps = self.rows_["step_time_s"].to_numpy(dtype=float)
        single = arrays.gpus == 1
        errors: dict[str, list[np.ndarray]] = {k: [] for k in
                                               ("c0", "c1", "c2", "s0", "s1", "s2")}  # fmt: skip
        own, _, sync_src = self._predict_log(arrays)
        errors["c0"].append((np.log(steps) - own)[single])
        multi_rows = ~single & np.isfinite(own)
        errors["s0"].append((np.log(steps) - own)[multi_rows & (sync_src == 0)])
        # compute on a type the job was not measured on
        for job, gpus in self.job_gpus_.items():
            if len(gpus) < 2:
                continue
            for gpu in gpus:
                rows = single & (arrays.job == job) & (arrays.gpu == gpu)
                saved = self.job_gpus_[job]
                self.job_gpus_[job] = [g for g in saved if g != gpu]
                guess = self._ordered(job, gpu, self.job_gpus_[job], arrays.batch[rows])
                self.job_gpus_[job] = saved
                errors["c1"].append(np.log(steps[rows]) - np.log(guess))
        refs = np.array(
            [np.log(c.reference()[0]) + self._speed(g) for (_, g), c in self.curves_.items()]
        )
        errors["c2"].append(refs - np.median(refs))
        saved = (self.bytes_, self.job_bytes_, self.across_ratio_, self.prior_,
                 self.prior_latency_, self.prior_medians_, self.prior_step_)  # fmt: skip
        # synchronization of a cluster not seen at scale: a cluster's rows not fitted there,
        # whatever stood in for them; each cluster weighs the same, as the next cluster is one
        # more of them
        clusters = np.where(arrays.cluster == "", arrays.gpu, arrays.cluster)
        for cluster in np.unique(clusters[~single]):
            errors["s1"].append(self._sync_held_out(arrays, steps, ~single & (clusters == cluster)))
        # synchronization of a job never measured at scale (its bytes from the prior): the
        # multi-GPU rows of 5 groups of jobs held out in turn; each group weighs the same
        # (each job the same: the jobs with many configurations err more, coverage 63% of
        # the rows of new jobs with fcn, against 87% so)
        jobs = np.unique(arrays.job[~single])
        if len(jobs) >= 2:
            for _, test in GroupKFold(min(5, len(jobs))).split(jobs, groups=jobs):
                held = ~single & np.isin(arrays.job, jobs[test])
                errors["s2"].append(self._sync_held_out(arrays, steps, held))
        (self.bytes_, self.job_bytes_, self.across_ratio_, self.prior_, self.prior_latency_,
         self.prior_medians_, self.prior_step_) = saved  # fmt: skip
        self.spread_ = {}
        for key, parts in errors.items():
            parts = [p[np.isfinite(p)] for p in parts if np.isfinite(p).any()]
            if sum(len(p) for p in parts) >= 10:
                values = np.concatenate(parts)
                weights = np.concatenate([np.full(len(p), 1.0 / len(p)) for p in parts])
                lo, hi = _weighted_quantiles(values, weights, (0.1, 0.9))
            else:
                lo, hi = -np.log(2.0), np.log(2.0)
            self.spread_[key] = (max(-lo, MIN_SPREAD), max(hi, MIN_SPREAD))
        for later, earlier in (("s2", "s1"), ("c2", "c1")):  # less known: never narrower
            self.spread_[later] = tuple(
                np.fmax(self.spread_[later], self.spread_[earlier]).tolist()
            )

    def _sync_held_out(self, arrays: Rows, steps: np.ndarray, held: np.ndarray) -> np.ndarray:
        """The log errors of the rows `held` whose synchronization was predicted with the sync
        terms and priors refitted without them (the caller restores the fitted ones)."""
        rows_ = self.rows_
        self.rows_ = rows_[~held].reset_index(drop=True)
        self._fit_bytes(Rows.of(self.rows_))
        self._fit_priors(choose=False)  # the family or the median, as chosen on every job
        self.rows_ = rows_
        log_pred, _, sync = self._predict_log(arrays, held)
        error = np.log(steps[held]) - log_pred
        return error[(sync > 0) & np.isfinite(error)]

    # -- prediction -------------------------------------------------------------------------

    def _predict_log(
        self, arrays: Rows, where: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(log step, compute source, sync source: -1 on one GPU) of the rows `where`."""
        idx = None if where is None else np.flatnonzero(where)

        def take(values: np.ndarray) -> np.ndarray:  # (10^5 candidates: no copies)
            return values if idx is None else values[idx]

        job, gpu, batch = take(arrays.job), take(arrays.gpu), take(arrays.batch)
        codes = {name: take(code) for name, code in arrays.codes.items()}
        compute = np.empty(len(job))
        compute_src = np.empty(len(job), dtype=int)
        group, first = _groups(codes["job"], codes["gpu"])
        for i, rows in zip(first, _members(group), strict=True):
            compute[rows], compute_src[rows] = self.compute_seconds(job[i], gpu[i], batch[rows])
        gpus, nodes = take(arrays.gpus), take(arrays.nodes)
        intra = np.where(np.isfinite(take(arrays.intra)), take(arrays.intra), PCIE3_GBPS)
        inter = np.where(np.isfinite(take(arrays.inter)), take(arrays.inter), ETHERNET_10G_GBPS)
        cluster = take(arrays.cluster)
        sync_src = np.full(len(job), -1)
        sync = np.zeros(len(job))
        multi = gpus > 1
        if multi.any():
            at = np.flatnonzero(multi)
            job_code, cluster_code = codes["job"][at], codes["cluster"][at]
            group, first = _groups(job_code, cluster_code)
            ones = at[first]  # one row of each (job, cluster)
            named = (job[ones], cluster[ones])
            params_m = take(arrays.params_m)[ones]
            b_one, a_one, source = (v[group] for v in self._sync_terms(*named, 0, params_m))
            across = nodes[multi] > 1
            terms_x = None  # the across-nodes terms, worked out where a row spans nodes
            if across.any():
                b_x, a_x, src_x = (v[group] for v in self._sync_terms(*named, 1, params_m))
                terms_x = (b_x, a_x)
                source = np.where(across, np.fmax(source, src_x), source)
            sync[multi] = self.law_.sync_seconds(
                gpus[multi], nodes[multi], intra[multi], inter[multi], (b_one, a_one), terms_x
            )
            # bytes fitted on this cluster but never on this GPU type there: not measured
            group, first = _groups(job_code, cluster_code, codes["gpu"][at], across)
            ones = at[first]
            places = zip(job[ones], cluster[ones], gpu[ones], across[first], strict=True)
            seen = np.array([self._measured_at(*p) for p in places], dtype=bool)[group]
            sync_src[multi] = np.where((source == 0) & ~seen, 1, source)
        step = self.law_.step_seconds(compute, sync)
        return np.log(step), compute_src, sync_src

    def _answer(self, rows: PredictionRows, columns: bool) -> pd.DataFrame | Columns:
        """`TaskPredictor._answer` without the frames it does not need: up to FEW_ROWS records
        whose values already have the contract's types are read as they are
        (`few_row_columns`), and a `columns` answer is the columns as made."""
        table = None
        if not isinstance(rows, pd.DataFrame) and len(rows) <= FEW_ROWS:
            table = few_row_columns(rows, self.kind, exclude=self.targets)
        if table is None:
            table = self._checked(rows)
            if not columns:
                return self._predict_interval(table)
        answer = self._interval_columns(table)
        return answer if columns else pd.DataFrame(answer)

    def _predict_interval(self, rows: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame(self._interval_columns(rows), index=rows.index)

    def _interval_columns(self, table: pd.DataFrame | Mapping[str, list]) -> Columns:
        """The answer's columns for checked rows (a frame, or `few_row_columns`' columns);
        `flags` a categorical for `CheckedRows`."""
        arrays = Rows.of(table)
        log_step, compute_src, sync_src = self._predict_log(arrays)
        mid = np.exp(log_step)
        # the interval's factors per (compute source, sync source): 12 pairs, not 10^5 rows
        # (lo, hi) of each compute source, and of each sync source (one GPU: none)
        compute = np.array([self.spread_[f"c{c}"] for c in range(3)])
        sync = np.array([(0.0, 0.0)] + [self.spread_[f"s{s}"] for s in range(3)])
        low = np.exp(-np.hypot(compute[:, None, 0], sync[None, :, 0]))
        high = np.exp(np.hypot(compute[:, None, 1], sync[None, :, 1]))
        lo = mid * low[compute_src, sync_src + 1]
        hi = mid * high[compute_src, sync_src + 1]
        answer = interval_columns(self.targets, [(lo, mid, hi)])
        flags = self._flags(arrays, compute_src, sync_src)
        spell = flags_categorical if isinstance(table, CheckedRows) else flags_column
        answer["flags"] = spell(flags, len(mid))
        return answer

    def _flags(self, arrays: Rows, compute_src: np.ndarray, sync_src: np.ndarray) -> dict:
        multi = arrays.gpus > 1
        known_gpus = {g for _, g in self.curves_}
        group, first = _groups(arrays.codes["job"])
        max_gpus = np.array([self.max_gpus_.get(j, 1) for j in arrays.job[first]], float)[group]
        group, first = _groups(arrays.codes["job"], arrays.codes["gpu"])
        pairs = zip(arrays.job[first], arrays.gpu[first], strict=True)
        ranges = np.array(
            [self.curves_[p].range if p in self.curves_ else (np.nan, np.nan) for p in pairs],
            dtype=float,
        ).reshape(-1, 2)[group]
        group, first = _groups(arrays.codes["gpu"])
        new_gpu = np.array([g not in known_gpus for g in arrays.gpu[first]], dtype=bool)[group]
        return {
            "new_job": compute_src == 2,
            "new_gpu_type": new_gpu,
            "unmeasured_config": multi & (sync_src > 0),
            "extrapolated_gpus": arrays.gpus > max_gpus,
            "extrapolated_batch": (arrays.batch < ranges[:, 0]) | (arrays.batch > ranges[:, 1]),
            "no_interconnect_facts": multi
            & ~(np.isfinite(arrays.intra) & np.isfinite(arrays.inter)),
        }


def one_gpu_seconds(train: pd.DataFrame, rows: pd.DataFrame) -> np.ndarray:
    """Perfect scaling, the napkin every scaling answer is judged against: each row's one-GPU
    step time on its GPU type at its local batch from `train`'s one-GPU rows (measured, or
    on the compute curve between the batches measured); NaN where the job was not measured
    on that type."""
    model = ScalingPredictor()
    model._fit_compute(train.reset_index(drop=True), Rows.of(train))
    arrays = Rows.of(rows)
    out = np.full(len(arrays.job), np.nan)
    for job, gpu in set(zip(arrays.job, arrays.gpu, strict=True)):
        if (job, gpu) in model.curves_:
            at = (arrays.job == job) & (arrays.gpu == gpu)
            out[at] = model.curves_[(job, gpu)](arrays.batch[at])
    return out


class _Curve:
    """A job's one-GPU step time on one GPU type against the local batch: linear through the
    isotonic medians of its measured batches; beyond the largest, growing at least as a
    step proportional to the batch's compute share; below the smallest, falling with the first
    segment's slope to no less than its fixed share. Non-decreasing in the batch everywhere."""

    def __init__(self, batch: np.ndarray, step: np.ndarray, fixed_share: float) -> None:
        self.batch, self.step = batch, step
        self.range = (float(batch[0]), float(batch[-1]))
        top = (1.0 - fixed_share) * step[-1] / batch[-1]
        bottom = (1.0 - fixed_share) * step[0] / batch[0]
        if len(batch) >= 2:
            top = max(top, (step[-1] - step[-2]) / (batch[-1] - batch[-2]))
            bottom = (step[1] - step[0]) / (batch[1] - batch[0])
        self.top, self.bottom = top, bottom
        self.floor = fixed_share * step[0]

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        batch = np.asarray(batch, dtype=float)
        inside = np.interp(batch, self.batch, self.step)
        above = self.step[-1] + self.top * (batch - self.batch[-1])
        below = np.fmax(self.step[0] - self.bottom * (self.batch[0] - batch), self.floor)
        return np.where(
            batch > self.batch[-1], above, np.where(batch < self.batch[0], below, inside)
        )

    def middle_step(self) -> float:
        """The step at the middle measured batch."""
        return float(self(np.array([float(np.median(self.batch))]))[0])

    def reference(self) -> tuple[float, float]:
        """(seconds per sample, fixed seconds) at the middle measured batch."""
        middle = float(np.median(self.batch))
        step = float(self(np.array([middle]))[0])
        fixed = max(step - self.top * middle, 0.05 * step) if len(self.batch) >= 2 else step / 2
        return max((step - fixed) / middle, 1e-12), fixed


def _weighted_quantiles(values: np.ndarray, weights: np.ndarray, levels) -> list[float]:
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order]) / weights.sum()
    return [float(values[order][np.searchsorted(cumulative, q)]) for q in levels]


def _at_least_as_fast(a, b) -> bool:
    return a.peak_tflops_fp32 >= b.peak_tflops_fp32 and a.mem_bw_gbps >= b.mem_bw_gbps


def _speed_exponents(curves: dict[tuple[str, str], _Curve]) -> tuple[float, float]:
    """(kf, kb) >= 0: how a job's one-GPU time scales with FP32 peak and memory bandwidth,
    fitted on the jobs measured on several GPU types at shared batches (least squares within
    each job); (0.5, 0.5) where none are."""
    from scipy.optimize import nnls

    rows, targets = [], []
    by_job: dict[str, list[str]] = {}
    for job, gpu in curves:
        if gpu in DEVICES:
            by_job.setdefault(job, []).append(gpu)
    for job, gpus in by_job.items():
        if len(gpus) < 2:
            continue
        batches = np.unique(np.concatenate([curves[(job, g)].batch for g in gpus]))
        for b in batches:
            logs = np.array([np.log(curves[(job, g)](np.array([b]))[0]) for g in gpus])
            x = np.array([[np.log(DEVICES[g].peak_tflops_fp32), np.log(DEVICES[g].mem_bw_gbps)]
                          for g in gpus])  # fmt: skip
            rows.append(-(x - x.mean(axis=0)))
            targets.append(logs - logs.mean())
    if not rows:
        return (0.5, 0.5)
    solution, _ = nnls(np.vstack(rows), np.concatenate(targets))
    return float(solution[0]), float(solution[1])


def _with(law: SyncLaw, spread: int, gamma: float, growth: float) -> SyncLaw:
    growths = list(law.growth)
    growths[spread] = growth
    return SyncLaw(gamma=gamma, growth=tuple(growths))
