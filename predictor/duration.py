"""A job's run time from trace features (task `duration`), for shortest-job-first policies.

Traces differ more than the jobs within one (median run times from one minute on Chronus to
three hours on ElasticFlow), so a model trained on some traces is asked about another's jobs.
When the training rows come from several traces (their `source` column), fit measures how far
the model carries over: it predicts each trace from the others, and keeps the share of its
deviation from the training median that helped there (`trace_weight_`: 0 = the median, 1 = the
model), with the conformal margin of the least predictable of those traces. Rows of a trace
not in training (or with no `source`) get that shrunk, widened prediction and the flag
`new_trace`; rows of a trace in training get the model as fitted. Trained on one trace, fit
cannot measure any carry-over: a row of another trace gets the training median, with the
training p10-p90 as its interval, and the flags `new_trace` and `no_signal` (as it does when
the cross-trace check found the model no better than the median, weight 0). A new trace's
interval is never wider than the training durations' own p10-p90.
"""

from __future__ import annotations

from typing import Self

import numpy as np
import pandas as pd
from sklearn.base import clone

from perfcast.features.trace import DurationFeatures
from perfcast.predictor.base import TaskPredictor, flags_column, interval_frame
from perfcast.predictor.regressors import (
    conformal_margin,
    conformity_scores,
    make_regressor,
)

# The cross-trace check fits one model per training trace on a sample of each: enough rows to
# see how a trace differs, few enough that fitting stays cheap on two cores.
CROSS_TRACE_ROWS = 20_000
_WEIGHTS = np.linspace(0.0, 1.0, 11)


class DurationPredictor(TaskPredictor):
    task = "duration"

    def __init__(self, model: str = "gbm", random_state: int = 0) -> None:
        self.model = model
        self.random_state = random_state

    def _fit(self, rows: pd.DataFrame) -> Self:
        self.features_ = DurationFeatures().fit(rows)
        y = np.log(rows["duration_s"].to_numpy(dtype=float))
        regressor = make_regressor(self.model, random_state=self.random_state)
        self.regressor_ = regressor.fit(self.features_.transform(rows, out_of_fold=True), y)
        self.log_median_ = float(np.median(y))
        self.log_p10_, self.log_p90_ = (float(q) for q in np.quantile(y, [0.1, 0.9]))
        self.sources_ = sorted(_sources(rows).dropna().unique())
        self.trace_weight_, self.trace_margin_ = 1.0, 0.0
        if len(self.sources_) >= 2:
            self.trace_weight_, self.trace_margin_ = self._cross_trace(rows)
        self.fitted_ = True
        return self

    def _cross_trace(self, rows: pd.DataFrame) -> tuple[float, float]:
        """(trace_weight_, trace_margin_) from predicting each training trace with a model
        fitted on the others; the weight minimizes the largest ratio, over those traces, of
        the blend's MAPE to the median's, so on every training trace it is no worse than the
        median of the others (weight 0)."""
        sources = _sources(rows).fillna("").to_numpy(dtype=str)
        rng = np.random.default_rng(self.random_state)
        picked = [
            rng.permutation(np.flatnonzero(sources == source))[:CROSS_TRACE_ROWS]
            for source in self.sources_
        ]
        sample = rows.iloc[np.sort(np.concatenate(picked))]
        held_sources = sources[np.sort(np.concatenate(picked))]
        y = np.log(sample["duration_s"].to_numpy(dtype=float))
        quantiles, medians = np.empty((3, len(sample))), np.empty(len(sample))
        base = make_regressor(self.model, random_state=self.random_state).regressor
        for source in self.sources_:
            held = held_sources == source
            train = sample[~held]
            features = DurationFeatures().fit(train)
            model = clone(base).fit(features.transform(train, out_of_fold=True), y[~held])
            quantiles[:, held] = model.predict_quantiles(features.transform(sample[held]))
            medians[held] = np.median(y[~held])
        truth = np.exp(y)

        def trace_mapes(w: float) -> np.ndarray:
            predicted = np.exp(w * quantiles[1] + (1 - w) * medians)
            error = pd.Series(np.abs(predicted - truth) / truth)
            return error.groupby(held_sources).mean().to_numpy()

        # the weight whose worst trace loses least to (or gains most on) that trace's median:
        # a weight that helps on average but loses on one trace would lose on a new one too
        at_median = trace_mapes(0.0)
        weight = float(min(_WEIGHTS, key=lambda w: np.max(trace_mapes(w) / at_median)))
        lo, hi = (weight * q + (1 - weight) * medians for q in (quantiles[0], quantiles[2]))
        scores = conformity_scores(lo, hi, y)
        # a new trace may be as unlike the others as the most unlike training trace was: the
        # margin that covers that trace's jobs, not the pooled one (which the traces closest
        # to each other would set)
        margin = max(conformal_margin(scores[held_sources == s]) for s in self.sources_)
        return weight, margin

    def _predict_interval(self, rows: pd.DataFrame) -> pd.DataFrame:
        lo, mid, hi = self.regressor_.predict_quantiles(self.features_.transform(rows))
        sources = _sources(rows)
        if len(self.sources_) >= 2:  # rows that do not say their trace are of a new one
            new_trace = ~sources.isin(self.sources_).to_numpy()
            w, margin = self.trace_weight_, self.trace_margin_
        else:  # one trace (or none named): a row naming another trace is of a new one
            new_trace = (sources.notna() & ~sources.isin(self.sources_)).to_numpy()
            w, margin = 0.0, 0.0  # nothing measured carries over: the training median
        median = self.log_median_
        shrunk = [w * q + (1 - w) * median for q in (lo, mid, hi)]
        # never wider than the training durations' own p10-p90 (still around the median)
        new_lo = np.maximum(shrunk[0] - margin, np.minimum(self.log_p10_, shrunk[1]))
        new_hi = np.minimum(shrunk[2] + margin, np.maximum(self.log_p90_, shrunk[1]))
        if w == 0.0:
            new_lo, new_hi = np.minimum(self.log_p10_, median), np.maximum(self.log_p90_, median)
        lo = np.where(new_trace, np.minimum(new_lo, shrunk[1]), lo)
        mid = np.where(new_trace, shrunk[1], mid)
        hi = np.where(new_trace, np.maximum(new_hi, shrunk[1]), hi)
        out = interval_frame(self.targets, rows.index, [(np.exp(lo), np.exp(mid), np.exp(hi))])
        no_signal = new_trace & (w == 0.0)
        out["flags"] = flags_column({"new_trace": new_trace, "no_signal": no_signal}, len(rows))
        return out


def _sources(rows: pd.DataFrame) -> pd.Series:
    """Each row's trace (its `source` column; missing when the rows do not say)."""
    if "source" not in rows.columns:
        return pd.Series(pd.NA, index=rows.index, dtype="string")
    return rows["source"].astype("string")
