"""Step time of a job for a placement, batch size and GPU type (task `scaling`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Self

import numpy as np
import pandas as pd
from sklearn.base import clone

from perfcast.datasets.contract import few_row_columns
from perfcast.features.devices import (
    INTERCONNECT_COLUMNS,
    at_least_as_fast,
    interconnect_frame,
    spec_frame,
)
from perfcast.features.scaling import (
    ScalingFeatures,
    distinct_groups,
    gpus_per_node_of,
    ring_link_gbps,
)
from perfcast.predictor.base import (
    TaskPredictor,
    flags_categorical,
    flags_column,
    interval_columns,
)
from perfcast.predictor.regressors import ConformalQuantiles, QuantileGBM, make_regressor
from perfcast.predictor.scaling_calibration import (
    HeldOutCluster,
    NewClusterBlend,
    calibrate_by_spread,
)
from perfcast.predictor.scaling_fast import (
    FEW_ROWS,
    FewRowFeatures,
    ManyRows,
    Table,
    few_row_design,
    few_row_flags,
    frame_table,
    gpus_per_node,
    integer_codes,
    many_row_design,
    many_row_flags,
    radix_groups,
    row_links,
)

# p90/p50 and p50/p10 at least this on rows of a job or GPU type never seen: nothing measured
# calibrates them, and a narrow interval there would claim knowledge the model lacks
UNSEEN_SPREAD = 2.0
_CONFIG = ["job", "num_gpus", "num_nodes", "gpus_per_node"]
JOB_FOLDS = 5  # groups of jobs held out to calibrate a new job's blend on a known cluster


class ScalingPredictor(TaskPredictor):
    """Predicts log(step / physical base) where a base exists (see features.scaling), and
    log(step) directly where it does not. `model` picks the regressor family (gbm or fcn).
    Rows whose scaling was never measured on their GPU type (a new cluster's) take the blend
    of perfect scaling, physics and that correction calibrated on held-out training clusters
    (`scaling_calibration`), with its interval; a new job on a cluster's GPU type where other
    jobs' scaling was measured takes a blend calibrated the same way on held-out jobs (with the
    new-cluster one, its interval covered 67% of such rows: new job split, gbm; now 86%)."""

    task = "scaling"
    kind = "scaling"
    targets = ("step_time_s",)

    def __init__(self, model: str = "gbm", random_state: int = 0) -> None:
        self.model = model
        self.random_state = random_state

    @property
    def family(self) -> str:  # type: ignore[override]
        return self.model

    def _fit(self, rows: pd.DataFrame) -> Self:
        self.features_ = ScalingFeatures().fit(rows)
        X, log_base, log_y = _design(self.features_, rows)
        has_base = np.isfinite(log_base)
        self.ratio_model_ = None
        self.new_cluster_blends_: dict[bool, NewClusterBlend] | None = None
        self.new_job_blends_: dict[bool, NewClusterBlend] | None = None
        self.charted_places_: frozenset[tuple[str, str]] = frozenset()
        if has_base.sum() >= 8:
            self.ratio_model_ = make_regressor(self.model, random_state=self.random_state)
            self.ratio_model_.fit(_unlinked(X[has_base]), log_y[has_base] - log_base[has_base])
            folds = self._held_out(rows, _cluster_groups(rows))
            self.new_cluster_blends_ = calibrate_by_spread(folds) if folds else None
            # a new job on a cluster's GPU type whose scaling other jobs measured: the model's
            # correction there was learned on the same links, so a blend of its own, from
            # held-out jobs
            places, keys = _places(rows)
            multi = np.unique(places[(rows["num_gpus"] > 1).to_numpy()])
            self.charted_places_ = frozenset(keys[code] for code in multi)
            folds = self._held_out(rows, self._job_chunks(rows), known=places)
            self.new_job_blends_ = calibrate_by_spread(folds) if folds else None
        self.direct_model_ = make_regressor(self.model, random_state=self.random_state)
        self.direct_model_.fit(X, log_y)
        self._fit_coverage(rows)
        self.fitted_ = True
        return self

    def _fit_coverage(self, rows: pd.DataFrame) -> None:
        """What the training rows cover, for the flags: GPU types, measured configurations
        (job, GPU, GPUs, nodes, GPUs per node, batch), each job's largest GPU count, each
        (job, GPU type)'s batch range, and the slowest ring link of the multi-GPU rows on one
        node and across nodes."""
        rows = rows.assign(gpus_per_node=gpus_per_node_of(rows))
        self.gpu_types_ = frozenset(rows["gpu_type"])
        measured = rows[[*_CONFIG, "gpu_type", "local_batch_size"]].drop_duplicates()
        self.measured_ = frozenset(measured.itertuples(index=False, name=None))
        self.max_gpus_ = rows.groupby("job")["num_gpus"].max().to_dict()
        self.max_gpus_any_ = int(rows["num_gpus"].max())
        batches = rows.groupby(["job", "gpu_type"])["local_batch_size"].agg(["min", "max"])
        self.batch_range_ = {key: (lo, hi) for key, lo, hi in batches.itertuples(name=None)}
        link, spread = _ring_link(rows), (rows["num_nodes"] > 1).to_numpy()
        multi = (rows["num_gpus"] > 1).to_numpy() & np.isfinite(link)
        self.slowest_link_gbps_ = {
            s: float(link[multi & (spread == s)].min()) if (multi & (spread == s)).any() else np.nan
            for s in (False, True)
        }

    def _job_chunks(self, rows: pd.DataFrame) -> np.ndarray:
        """Each row's group of jobs: the jobs shuffled into JOB_FOLDS groups."""
        jobs = rows["job"].astype(str).to_numpy()
        unique = np.random.default_rng(self.random_state).permutation(np.unique(jobs))
        chunk = {job: i % JOB_FOLDS for i, job in enumerate(unique)}
        return np.array([f"jobs-{chunk[job]}" for job in jobs])

    def _held_out(
        self, rows: pd.DataFrame, groups: np.ndarray, known: np.ndarray | None = None
    ) -> list[HeldOutCluster]:
        """The calibration folds of `scaling_calibration`, for the rows a new cluster, GPU or
        job presents (`ScalingFeatures.uncharted`): each group's multi-GPU rows held out in
        turn, their one-GPU rows kept, and predicted by an uncalibrated correction model
        fitted without them. `known` (each row's `_places` code): only held-out rows whose place
        kept other multi-GPU rows in training, as a new job on a known cluster's GPU type."""
        multi = (rows["num_gpus"] > 1).to_numpy()
        folds = []
        for group in pd.unique(groups):
            held = multi & (groups == group)
            if not held.any() or held.all():
                continue
            train, test = rows[~held], rows[held]
            features = ScalingFeatures().fit(train)
            X, log_base, log_y = _design(features, train)
            fit = np.isfinite(log_base)
            if fit.sum() < 8:
                continue
            X_test, base_test = features.transform(test, new_gpu=known is None)
            usable = np.isfinite(base_test) & features.uncharted(test)
            if known is not None:
                usable &= np.isin(known[held], known[multi & ~held])
            if not usable.any():
                continue
            model = clone(self.ratio_model_.regressor)
            model.fit(_unlinked(X[fit]), log_y[fit] - log_base[fit])
            folds.append(
                HeldOutCluster(
                    log_y=np.log(test["step_time_s"].to_numpy(dtype=float))[usable],
                    log_t1=X_test["log_t1"].to_numpy()[usable],
                    log_base=base_test[usable],
                    correction=model.predict_quantiles(_unlinked(X_test[usable]))[1],
                    multi_node=(test["num_nodes"].to_numpy() > 1)[usable],
                )
            )
        return folds

    def predict_columns(
        self, records: Sequence[Mapping[str, object]], groups: Sequence[int] | None = None
    ) -> dict[str, np.ndarray]:
        """A few records whose values already have the contract's types take the few-row
        path straight from them, with no frame at all (a single-row request's whole answer);
        any other records are checked and predicted as a frame. The monotonic guard compares
        rows of one group only, so several requests are answered in one call as each alone."""
        if not hasattr(self, "fitted_"):
            return super().predict_columns(records)  # refused there, as predict_interval does
        table = None
        if len(records) <= FEW_ROWS:
            table = few_row_columns(records, self.kind, exclude=self.targets)
        if table is None:
            rows = self._check_rows(pd.DataFrame.from_records(list(records)))
            if len(rows) <= FEW_ROWS:
                return self._answer(*self._few(frame_table(rows)), groups)
            return self._answer(*self._general(rows), groups)
        return self._answer(*self._few(table), groups)

    def predict_checked(self, rows: pd.DataFrame) -> pd.DataFrame:
        """`TaskPredictor.predict_checked`, the `flags` a categorical: each distinct set
        spelled once, not one string per row (10^5 candidates have a few sets)."""
        self._require_fitted()
        return self._predict_interval(rows, text_flags=False)

    def _predict_interval(
        self, rows: pd.DataFrame, fast: bool | None = None, text_flags: bool = True
    ) -> pd.DataFrame:
        """`fast` (default: up to FEW_ROWS rows) takes `scaling_fast`'s path to the same
        features and flags."""
        if fast if fast is not None else len(rows) <= FEW_ROWS:
            table, X, log_base, flags = self._few(frame_table(rows))
        else:
            table, X, log_base, flags = self._general(rows)
        answer = self._answer(table, X, log_base, flags, text_flags=text_flags)
        return pd.DataFrame(answer, index=rows.index)

    def _few(self, table: Table) -> tuple[Table, FewRowFeatures, np.ndarray, dict]:
        gpus, nodes = list(table["num_gpus"]), list(table["num_nodes"])
        per_node = gpus_per_node(gpus, nodes, table.get("placement"))
        flags = few_row_flags(self, table, per_node, row_links(table))
        if flags["slower_links"].any():
            slowest = self._slowest_links(np.asarray(nodes) > 1, flags)
            table = dict(table)
            for column, values in slowest.items():
                own = table.get(column) or [None] * len(values)
                pairs = zip(own, values.tolist(), strict=True)
                table[column] = [o if np.isnan(v) else v for o, v in pairs]
        X, log_base, _ = few_row_design(self.features_, table)
        return table, X, log_base, flags

    def _general(self, rows: pd.DataFrame) -> tuple[pd.DataFrame, FewRowFeatures, np.ndarray, dict]:
        """Flags and features of a checked frame of any size, each lookup once per distinct
        key (`scaling_fast.ManyRows`): what `_flags` and `features_.transform` answer."""
        many = ManyRows.of(rows)
        flags = many_row_flags(self, many)
        if flags["slower_links"].any():
            slowest = self._slowest_links(many.num_nodes > 1, flags)
            rows = rows.copy()
            for column, values in slowest.items():
                own = _numbers(rows, column)
                rows[column] = values if own is None else np.where(np.isnan(values), own, values)
            many = replace(many, rows=rows)  # the links the features read: the new columns
        X, log_base = many_row_design(self.features_, many)
        return rows, X, log_base, flags

    def _slowest_links(self, spread: np.ndarray, flags: dict) -> dict[str, np.ndarray]:
        """For the rows flagged `slower_links`, the slowest link of their spread the training
        rows crossed, as the link they state (the network across nodes, the intra-node link on
        one node); NaN elsewhere. Synchronization only grows as links slow down, so the step
        predicted there is a lower bound the communication model was checked on, between
        perfect scaling and its extrapolation to the slower links."""
        slow = flags["slower_links"]
        return {
            column: np.where(slow & (spread == across), self.slowest_link_gbps_[across], np.nan)
            for column, across in zip(INTERCONNECT_COLUMNS, (False, True), strict=True)
        }

    def _answer(
        self,
        rows: Table | pd.DataFrame,
        X: pd.DataFrame | FewRowFeatures,
        log_base: np.ndarray,
        flags: dict[str, np.ndarray],
        groups: Sequence[int] | None = None,
        text_flags: bool = True,
    ) -> dict[str, np.ndarray | pd.Categorical]:
        """The answer's columns (step time, p10, p90, flags) from the rows' features; the
        flags as text (`flags_column`) or as `flags_categorical`."""
        out = np.empty((3, len(log_base)))
        has_base = np.isfinite(log_base)
        if self.ratio_model_ is None:
            has_base[:] = False
        if has_base.any():
            mask = _ratio_rows(self.ratio_model_, has_base)
            based = slice(None) if mask.all() else mask  # (10^5 candidates: no masks)
            quantiles = _quantiles(self.ratio_model_, X, mask, linked=False)
            for row, values in zip(out, quantiles, strict=True):
                row[based] = values  # (no stacked copy of the three quantiles first)
            out[:, based] += log_base[based]
            multi_node = _column(X, "multi_node") > 0
            uncharted = has_base & flags["uncharted"]
            known = np.zeros(len(log_base), dtype=bool)
            if uncharted.any() and self.new_job_blends_ is not None:
                codes, keys = _places(rows)
                known = np.array([key in self.charted_places_ for key in keys])[codes]
            for blends, where in (
                (self.new_cluster_blends_, uncharted & ~known),
                (self.new_job_blends_, uncharted & known),
            ):
                # a job, cluster or GPU whose scaling was never measured: the blend of perfect
                # scaling, physics and correction that did best on held-out clusters (jobs)
                for spread, blend in (blends or {}).items():
                    new = where & (multi_node == spread)
                    if not new.any():
                        continue
                    correction = out[1, new] - log_base[new]
                    log_t1 = _column(X, "log_t1")[new]
                    out[:, new] = blend.interval(log_t1, log_base[new], correction)
        if (~has_base).any():
            out[:, ~has_base] = np.vstack(_quantiles(self.direct_model_, X, ~has_base))
        lo, mid, hi = np.exp(out)
        # no links and no measured scaling: the one-GPU time (perfect scaling) is the answer
        # never worse than it, with an interval up to twice it. Links slower than any the
        # training rows crossed were predicted at the slowest ones they did cross (`_few`,
        # `_general`: the communication model is not extrapolated, toward faster links its
        # overhead shrinks toward perfect scaling itself), never below the one-GPU time, with
        # the same wide interval.
        # (each step only where some row needs it: 10^5 candidates mostly do not)
        fallback, slower = flags["no_interconnect_facts"], flags["slower_links"]
        if fallback.any() or slower.any():
            t1 = np.exp(_column(X, "log_t1"))
            fallback, slower = fallback & np.isfinite(t1), slower & np.isfinite(t1)
            mid = np.where(fallback, t1, np.where(slower, np.fmax(mid, t1), mid))
            wide = fallback | slower
            lo = np.where(wide, np.fmin(lo, t1 / UNSEEN_SPREAD**0.5), lo)
            hi = np.where(wide, np.fmax(hi, t1 * UNSEEN_SPREAD), hi)
        unseen = flags["new_job"] | flags["new_gpu_type"]
        if unseen.any():
            lo = np.where(unseen, np.fmin(lo, mid / UNSEEN_SPREAD), lo)
            hi = np.where(unseen, np.fmax(hi, mid * UNSEEN_SPREAD), hi)
        per_node = _column(X, "gpus_per_node").astype("int64")
        raw = mid
        mid, flags["monotonic_guard"] = self._monotonic(
            rows, per_node, mid, flags["measured"], groups
        )
        if flags["monotonic_guard"].any():
            # a raised p50 carries its p90 up with it: the interval keeps its relative width
            hi = hi * np.where(flags["monotonic_guard"], mid / raw, 1.0)
        lo, hi = np.fmin(lo, mid), np.fmax(hi, mid)
        answer = interval_columns(self.targets, [(lo, mid, hi)])
        tokens = {k: v for k, v in flags.items() if k not in ("measured", "uncharted")}
        spell = flags_column if text_flags else flags_categorical
        answer["flags"] = spell(tokens, len(mid))
        return answer

    def _flags(self, rows: pd.DataFrame, per_node: np.ndarray) -> dict[str, np.ndarray]:
        """One boolean array per FLAGS token of the scaling task, and two for this class:
        `measured` (the row's configuration and batch are in the training rows) and
        `uncharted` (`ScalingFeatures.uncharted`). Each distinct key is looked up
        once: a batch of 10^5 candidates has few distinct jobs and GPU types."""
        keyed = rows.assign(gpus_per_node=per_node)
        measured = _member(keyed, [*_CONFIG, "gpu_type", "local_batch_size"], self.measured_)
        num_gpus = rows["num_gpus"].to_numpy()
        multi = num_gpus > 1
        jobs = rows["job"].astype(str)
        max_gpus = jobs.map(self.max_gpus_).fillna(self.max_gpus_any_).to_numpy(dtype=float)
        codes, first = distinct_groups([rows["job"], rows["gpu_type"]])
        pairs = zip(
            rows["job"].iloc[first].to_numpy(), rows["gpu_type"].iloc[first].to_numpy(), strict=True
        )
        ranges = np.array(
            [self.batch_range_.get(pair, (np.nan, np.nan)) for pair in pairs], dtype=float
        ).reshape(-1, 2)[codes]
        bsz = rows["local_batch_size"].to_numpy(dtype=float)
        uncharted = self.features_.uncharted(rows)
        links = interconnect_frame(rows)
        no_links = np.isnan(links.to_numpy()).all(axis=1)
        return {
            "measured": measured,
            "uncharted": uncharted,
            "new_job": ~rows["job"].isin(self.features_.jobs_).to_numpy(),
            "new_gpu_type": ~rows["gpu_type"].isin(self.gpu_types_).to_numpy(),
            "unmeasured_config": multi & ~measured & uncharted,
            "extrapolated_gpus": num_gpus > max_gpus,
            "extrapolated_batch": (bsz < ranges[:, 0]) | (bsz > ranges[:, 1]),
            "no_interconnect_facts": multi & no_links & uncharted,
            "slower_links": multi
            & uncharted
            & self.slower_links(
                _ring_link(rows, links),
                (rows["num_nodes"] > 1).to_numpy(),
                [_numbers(rows, column) for column in INTERCONNECT_COLUMNS],
            ),
        }

    def slower_links(
        self, link: np.ndarray, spread: np.ndarray, stated: list[np.ndarray | None]
    ) -> np.ndarray:
        """Whether each row's ring link (`link`, GB/s) is assumed from the interconnect table
        (not stated on the row) and slower than every multi-GPU training row's of the same
        spread (one node or several: `spread`). `stated`: the rows' own intra-node and
        inter-node bandwidths (NaN where not given; None: no row gives it). A link the row
        states is the caller's fact (a what-if on the network, say): the communication model
        answers it, so a slower stated link never predicts a faster step."""
        slowest = np.where(spread, self.slowest_link_gbps_[True], self.slowest_link_gbps_[False])
        own = np.zeros(len(link), dtype=bool)
        for values, where in zip(stated, (~spread, spread), strict=True):
            if values is not None:
                own |= where & (values > 0)
        return (link < slowest) & ~own

    @staticmethod
    def _monotonic(
        rows: Table | pd.DataFrame,
        per_node: np.ndarray,
        mid: np.ndarray,
        measured: np.ndarray,
        groups: Sequence[int] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Among the rows of one request (of one of `groups`) with the same job and
        configuration, a larger local batch is not predicted faster than a smaller one on the
        same GPU type, and a GPU at least as fast (datasheet FP32 peak and memory bandwidth
        both no lower) is not predicted slower at the same batch. Rows whose configuration and
        batch were measured keep their prediction: the measurement may say otherwise.
        `per_node` is each row's GPUs per node. Returns (p50, changed)."""
        unchanged = mid, np.zeros(len(mid), dtype=bool)
        columns = [rows["job"], rows["num_gpus"], rows["num_nodes"], per_node]
        if groups is not None:
            columns.append(np.asarray(groups))
        if len(mid) <= FEW_ROWS:  # a few rows: tell whether two share one without pandas
            configs = list(zip(*(np.asarray(c).tolist() for c in columns), strict=True))
            if len(set(configs)) == len(configs):
                return unchanged
        keys = [integer_codes(column) for column in columns]
        gpu, gpu_names = _type_codes(rows["gpu_type"])
        bsz = np.asarray(rows["local_batch_size"], dtype=float)
        # batch: the running maximum over increasing batch within (configuration, GPU type)
        floor, group = _batch_floor_in_runs([*keys, gpu], bsz, mid), None
        if floor is None:
            group, first = radix_groups(keys)
            if len(first) == len(mid):  # no two rows share a configuration: nothing to compare
                return unchanged
            floor = _batch_floor(group, gpu, bsz, mid)
        free = ~measured
        guarded = np.where(free, floor, mid)
        # GPU: the minimum over the GPU types this one is at least as fast as, same batch
        at_least = _at_least_as_fast(gpu_names)
        faster = np.flatnonzero(at_least.sum(axis=1) > 1)
        if not faster.size:  # no GPU type at least as fast as another: nothing to lower
            return guarded, guarded != mid
        if group is None:
            group = radix_groups(keys)[0]
        cell = radix_groups([group, bsz])[0]
        table = np.full((cell.max() + 1, len(gpu_names)), np.inf)
        np.minimum.at(table, (cell, gpu), guarded)
        for code in faster:
            these = np.flatnonzero((gpu == code) & free)
            ceiling = table[cell[these]][:, at_least[code]].min(axis=1)
            guarded[these] = np.minimum(guarded[these], ceiling)
        return guarded, guarded != mid


def _at_least_as_fast(gpu_names: pd.Index) -> np.ndarray:
    """[i, j]: GPU type i is at least as fast as type j (datasheet FP32 peak and memory
    bandwidth both no lower). One type: only itself (no datasheet read)."""
    if len(gpu_names) < 2:
        return np.ones((len(gpu_names), len(gpu_names)), dtype=bool)
    specs = spec_frame(pd.Series(gpu_names))
    return at_least_as_fast(specs["peak_tflops_fp32"], specs["mem_bw_gbps"])


def _type_codes(gpu_types: Sequence | pd.Series) -> tuple[np.ndarray, pd.Index]:
    """(code of each row's GPU type, the types) for the monotonic guard, which tells types
    apart by their codes only: a categorical's own codes where every row has one of its
    categories and each category is used, else `pd.factorize` (a Series' strings hashed as
    stored)."""
    if isinstance(gpu_types, pd.Series) and isinstance(gpu_types.dtype, pd.CategoricalDtype):
        codes = gpu_types.array.codes
        categories = gpu_types.cat.categories
        every_used = len(codes) and np.bincount(codes + 1, minlength=len(categories) + 1)
        if every_used is not False and not every_used[0] and every_used[1:].all():
            return codes.astype(np.int64), categories
    if not isinstance(gpu_types, pd.Series):
        gpu_types = np.asarray(gpu_types, dtype=object)
    return pd.factorize(gpu_types)


def _batch_floor(
    group: np.ndarray, gpu: np.ndarray, bsz: np.ndarray, values: np.ndarray
) -> np.ndarray:
    """Each row's running maximum of `values` (NaN skipped: NaN where its own is, as pandas'
    cummax) over the rows of its group and GPU type in order of increasing batch, ties in
    row order."""
    floor = _batch_floor_by_table(group, gpu, bsz, values)
    if floor is None:
        order = np.lexsort((bsz, gpu, group))
        floor = np.empty_like(values)
        grouped = pd.Series(values[order]).groupby([group[order], gpu[order]])
        floor[order] = grouped.cummax().to_numpy()
    return floor


def _batch_floor_in_runs(
    keys: list[np.ndarray], bsz: np.ndarray, values: np.ndarray
) -> np.ndarray | None:
    """`_batch_floor` where the rows of each combination of `keys` (configuration and GPU
    type, as integer codes) are one run of consecutive rows in increasing batch (ties in row
    order), as a candidate table lays them out: the running maximum along each run, with the
    runs' first rows grouped (10^4 configurations) instead of every row (10^5 candidates).
    None where the rows are not laid out so, where no run has two rows, or where a value is
    zero (as `_batch_floor_by_table`)."""
    n = len(values)
    if not n or np.count_nonzero(values) < n:
        return None
    starts = np.zeros(n, dtype=bool)  # whether each row starts a run
    starts[0] = True
    for key in keys:
        starts[1:] |= key[1:] != key[:-1]
    if not ((bsz[1:] >= bsz[:-1]) | starts[1:]).all():  # a batch out of order, or NaN
        return None
    first = np.flatnonzero(starts)
    if len(first) == n or len(radix_groups([key[first] for key in keys])[1]) < len(first):
        return None  # no run of two rows, or a combination in two runs
    lengths = np.diff(first, append=n)
    if (lengths == lengths[0]).all():  # every run as long (a candidate table's): a matrix
        running = np.fmax.accumulate(values.reshape(-1, lengths[0]), axis=1).reshape(-1)
    else:
        run = np.cumsum(starts) - 1
        place = np.arange(n) - first[run]
        table = np.full((len(first), int(lengths.max())), np.nan)
        table[run, place] = values
        running = np.fmax.accumulate(table, axis=1)[run, place]
    return np.where(np.isnan(values), np.nan, running)


def _batch_floor_by_table(
    group: np.ndarray, gpu: np.ndarray, bsz: np.ndarray, values: np.ndarray
) -> np.ndarray | None:
    """`_batch_floor` without sorting the rows, where no two rows of a group and GPU type
    share a batch (10^5 candidates of a few batch sizes): a table of (group and GPU type) x
    batch, in increasing batch, whose running maximum along each row is np.fmax.accumulate.
    None where that does not hold, where the batches are many or missing, or where a value
    is zero (whose sign pandas' cummax and fmax may keep differently)."""
    codes, sizes = pd.factorize(bsz)
    if np.isnan(sizes).any() or len(sizes) > 64 or np.count_nonzero(values) < len(values):
        return None
    rank = np.empty(len(sizes), dtype=np.int64)
    rank[np.argsort(sizes)] = np.arange(len(sizes))
    cell = radix_groups([group, gpu])[0]
    levels = len(sizes)
    size = (int(cell.max()) + 1) * levels
    if size > 8 * len(values):
        return None
    key = cell * levels + rank[codes]
    if np.bincount(key, minlength=size).max() > 1:
        return None  # two rows at one batch: their order decides, the sort keeps it
    table = np.full(size, np.nan)
    table[key] = values
    running = np.fmax.accumulate(table.reshape(-1, levels), axis=1).reshape(-1)[key]
    return np.where(np.isnan(values), np.nan, running)


# What the correction to the physical base does not see: the overhead the links cause. The
# base rises with it (log base = log t1 + log_overhead_ratio where the links give the
# overhead), so with the correction blind to it a slower network never predicts a faster step,
# for every family; seen, the trees' correction fell faster than the base rose (p100 held out
# of Gavel: slower at 30 GB/s than at 0.1 on 51 of 57 rows).
_LINK_DRIVEN = ["log_overhead_ratio", "log_comm_ratio"]


def _unlinked(X: pd.DataFrame) -> pd.DataFrame:
    return X.drop(columns=_LINK_DRIVEN)


def _cluster_groups(rows: Table | pd.DataFrame) -> np.ndarray:
    """Each row's cluster, its GPU type where it names none (the groups a new cluster's blend
    holds out), as text."""
    gpu = np.asarray(rows["gpu_type"], dtype=object).astype(str)
    if "cluster" not in rows:
        return gpu
    cluster = pd.Series(np.asarray(rows["cluster"], dtype=object)).astype("string")
    return cluster.fillna(pd.Series(gpu)).astype(str).to_numpy()


def _places(rows: Table | pd.DataFrame) -> tuple[np.ndarray, list[tuple[str, str]]]:
    """(a code per row, the distinct (cluster, GPU type) of the codes): each row's cluster,
    its GPU type where it names none, and its GPU type. Looked up once per distinct pair:
    10^5 candidates have a few."""
    gpu_codes, gpus = _type_codes(rows["gpu_type"])
    cluster_codes, clusters = np.full(len(gpu_codes), -1), pd.Index([])
    if "cluster" in rows:
        cluster_codes, clusters = _type_codes(rows["cluster"])  # -1: none named
    pair = (cluster_codes + 1) * len(gpus) + gpu_codes
    present = np.zeros((len(clusters) + 1) * len(gpus), dtype=bool)  # a table: no sort
    present[pair] = True
    distinct, codes = np.flatnonzero(present), (np.cumsum(present) - 1)[pair]
    keys = []
    for cluster, gpu in zip(*np.divmod(distinct, len(gpus)), strict=True):
        keys.append((str(clusters[cluster - 1]) if cluster else str(gpus[gpu]), str(gpus[gpu])))
    return codes, keys


def _column(X: pd.DataFrame | FewRowFeatures, name: str) -> np.ndarray:
    return X.column(name) if isinstance(X, FewRowFeatures) else X[name].to_numpy()


def _ratio_rows(model: ConformalQuantiles, has_base: np.ndarray) -> np.ndarray:
    """The rows the ratio model predicts: those with a base, or every row for a gbm, which
    predicts each row alone (the rows without a base are answered by the direct model after
    it), so that 10^5 candidates' columns are not copied through a mask for one row."""
    if isinstance(model.regressor_, QuantileGBM):
        return np.ones_like(has_base)
    return has_base


def _quantiles(
    model: ConformalQuantiles,
    X: pd.DataFrame | FewRowFeatures,
    mask: np.ndarray,
    linked: bool = True,
) -> tuple[np.ndarray, ...]:
    """`model`'s quantiles of the rows `mask` of X (without the link-driven columns unless
    `linked`; a gbm's matrix has only the columns it was fitted on)."""
    if isinstance(X, FewRowFeatures):
        if isinstance(model.regressor_, QuantileGBM):
            return model.predict_quantiles(X.matrix(model.regressor_, mask))
        X = X.frame()
    X = X[mask]
    return model.predict_quantiles(X if linked else _unlinked(X))


def _numbers(rows: pd.DataFrame, column: str) -> np.ndarray | None:
    """A row-supplied number column, anything not a number NaN (None when absent)."""
    if column not in rows.columns:
        return None
    return pd.to_numeric(rows[column], errors="coerce").to_numpy(dtype=float)


def _ring_link(rows: pd.DataFrame, links: pd.DataFrame | None = None) -> np.ndarray:
    """Each row's ring link in GB/s (`features.scaling.ring_link_gbps`) from its links
    (`interconnect_frame(rows)` unless given)."""
    links = interconnect_frame(rows) if links is None else links
    return ring_link_gbps(
        links["intra_node_bw_gbps"].to_numpy(),
        links["inter_node_bw_gbps"].to_numpy(),
        rows["num_nodes"].to_numpy(),
    )


def _member(rows: pd.DataFrame, columns: list[str], keys: frozenset) -> np.ndarray:
    """Whether each row's tuple of `columns` is in `keys`, looked up once per distinct tuple."""
    codes, first = distinct_groups([rows[c] for c in columns])
    distinct = zip(*(rows[c].iloc[first].to_numpy().tolist() for c in columns), strict=True)
    return np.array([key in keys for key in distinct], dtype=bool)[codes]


def _design(
    features: ScalingFeatures, rows: pd.DataFrame
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Training features, log base and log target. The rows are also seen in the new-GPU view
    (overhead from other GPU types only) where it differs, so a GPU known from its one-GPU
    rows is not a situation the correction model has never seen."""
    X, log_base = features.transform(rows)
    log_y = np.log(rows["step_time_s"].to_numpy(dtype=float))
    X_new, log_base_new = features.transform(rows, new_gpu=True)
    differs = (X_new["overhead_from_other_gpu"] > X["overhead_from_other_gpu"]).to_numpy()
    return (
        pd.concat([X, X_new[differs]], ignore_index=True),
        np.concatenate([log_base, log_base_new[differs]]),
        np.concatenate([log_y, log_y[differs]]),
    )
