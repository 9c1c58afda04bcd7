"""Tabular quantile regressors: gradient-boosted trees and a fully connected network.

Both learn p10, p50 and p90 of a (log-scale) target from a feature frame whose columns are
numbers or pandas categoricals, so either one can sit behind any tabular task predictor.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Self

import lightgbm as lgb
import numpy as np
import pandas as pd
import torch
from sklearn.base import BaseEstimator, clone
from sklearn.model_selection import GroupKFold, KFold
from torch import nn

QUANTILES = (0.1, 0.5, 0.9)
# The share of outcomes every p10-p90 interval is calibrated to cover: the one home of the
# conformal level, for every predictor and every calibration it does.
INTERVAL_COVERAGE = QUANTILES[2] - QUANTILES[0]


def conformity_scores(lo: np.ndarray, hi: np.ndarray, y: np.ndarray) -> np.ndarray:
    """How far each outcome falls outside its [lo, hi] (negative inside)."""
    return np.maximum(np.asarray(lo) - y, y - np.asarray(hi))


def conformal_margin(scores: np.ndarray, coverage: float = INTERVAL_COVERAGE) -> float:
    """The finite-sample conformal quantile of held-out `scores`: widening every interval by
    it makes them cover `coverage` of new outcomes exchangeable with those held out."""
    scores = np.asarray(scores, dtype=float)
    if len(scores) == 0:
        return 0.0
    level = min(1.0, np.ceil((len(scores) + 1) * coverage) / len(scores))
    return float(np.quantile(scores, level))


def take_rows(X: pd.DataFrame | list, idx: np.ndarray) -> pd.DataFrame | list:
    return X.iloc[idx] if isinstance(X, pd.DataFrame) else [X[i] for i in idx]


class QuantileGBM(BaseEstimator):
    """LightGBM: one L2 model for the point estimate, two quantile models for p10 and p90.

    Trees are what a large batch prediction spends its time on, so they are few: 200 at a
    learning rate of 0.1 for the point estimate, and 60 at 0.2 for each quantile model, whose
    bounds ConformalQuantiles widens to the coverage seen out of fold anyway. Against 400 trees
    at 0.05 for all three (`python -m benchmarks.accuracy --quick --task ...`, random split):
    scaling MAPE 5.75% (was 5.71%), interference 7.18% (was 7.00%), p10-p90 coverage 83-84%
    (was 84-86%); batch prediction 3.75 times fewer trees."""

    def __init__(
        self,
        n_estimators: int = 200,
        learning_rate: float = 0.1,
        quantile_estimators: int = 60,
        quantile_learning_rate: float = 0.2,
        num_leaves: int = 31,
        min_child_samples: int = 5,
        random_state: int = 0,
    ) -> None:
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.quantile_estimators = quantile_estimators
        self.quantile_learning_rate = quantile_learning_rate
        self.num_leaves = num_leaves
        self.min_child_samples = min_child_samples
        self.random_state = random_state

    def _model(self, quantile: float | None = None) -> lgb.LGBMRegressor:
        trees, rate = self.n_estimators, self.learning_rate
        objective: dict[str, object] = {"objective": "regression"}
        if quantile is not None:
            trees, rate = self.quantile_estimators, self.quantile_learning_rate
            objective = {"objective": "quantile", "alpha": quantile}
        return lgb.LGBMRegressor(
            n_estimators=trees,
            learning_rate=rate,
            num_leaves=self.num_leaves,
            min_child_samples=self.min_child_samples,
            subsample=0.9,
            subsample_freq=1,
            colsample_bytree=0.9,
            random_state=self.random_state,
            # one thread: these tables are small, and OpenMP threads fighting torch's own
            # pool (and other processes) made fits many times slower on two cores
            n_jobs=1,
            verbose=-1,
            **objective,
        )

    def fit(self, X: pd.DataFrame, y: np.ndarray) -> Self:
        self._codes = self._split_cache = None
        self._asked_many = False
        self.models_ = [
            self._model(QUANTILES[0]).fit(X, y),
            self._model().fit(X, y),
            self._model(QUANTILES[2]).fit(X, y),
        ]
        return self

    def predict_quantiles(
        self, X: pd.DataFrame | np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Quantiles of a feature frame, or of the float matrix `columns_matrix` makes."""
        # The boosters straight on one float matrix: the sklearn wrapper would convert the
        # frame once per model, which costs more than the trees for a few rows.
        matrix = X if isinstance(X, np.ndarray) else lgbm_matrix(X, self._categories())
        if len(matrix) < SAME_LEAVES_ROWS:
            return self._predict_matrix(matrix)
        # reading the splits (a JSON dump of every tree: ~0.1-0.4 s per model) costs more than
        # the trees on these rows once: a model asked once, as the calibration folds' and the
        # duration cross-trace models are, never reads them; one asked again does
        unread = getattr(self, "_split_cache", None) is None
        if unread and len(matrix) < READ_SPLITS_ROWS and not getattr(self, "_asked_many", False):
            self._asked_many = True
            return self._predict_matrix(matrix)
        # many rows (a recommendation's 10^5 candidates) fall into few cells of the trees'
        # thresholds: each cell is predicted once, for the same numbers
        codes, first = same_leaves(matrix, self._splits())
        return tuple(q[codes] for q in self._predict_matrix(matrix[first]))

    def _predict_matrix(self, matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        threads = 2 if len(matrix) >= 5_000 else 1  # big batches split across two threads
        lo, mid, hi = (m.booster_.predict(matrix, num_threads=threads) for m in self.models_)
        return lo, mid, hi

    def _splits(self) -> dict[int, np.ndarray | None]:
        """What the three models' splits test, per feature index: the sorted thresholds of a
        numeric feature, None for a categorical one. Read once per model."""
        if getattr(self, "_split_cache", None) is None:
            splits: dict[int, set | None] = {}
            for model in self.models_:
                for tree in model.booster_.dump_model()["tree_info"]:
                    _tree_splits(tree["tree_structure"], splits)
            self._split_cache = {
                f: None if t is None else np.array(sorted(t), dtype=float)
                for f, t in splits.items()
            }
        return self._split_cache

    def _categories(self) -> list[list]:
        return self.models_[0].booster_.pandas_categorical or []

    def columns_matrix(
        self, columns: Mapping[str, np.ndarray], categorical: Mapping[str, Sequence]
    ) -> np.ndarray:
        """What `lgbm_matrix` makes of the frame of these columns, without the frame (a few
        rows' frame costs more than the trees): the float `columns` and the values of each
        categorical column (`categorical`, already missing where outside the frame's
        categories), in the order of the columns at fit time."""
        names = self.models_[0].feature_name_
        codes = iter(self._category_codes())
        matrix = np.empty((len(next(iter(columns.values()))), len(names)))
        for i, name in enumerate(names):
            if name in categorical:
                code = next(codes)
                matrix[:, i] = [code.get(value, np.nan) for value in categorical[name]]
            else:
                matrix[:, i] = columns[name]
        return matrix

    def _category_codes(self) -> list[dict[object, int]]:
        """Each categorical column's {category: code at fit time}, made once per model."""
        if getattr(self, "_codes", None) is None:
            self._codes = [{c: i for i, c in enumerate(cats)} for cats in self._categories()]
        return self._codes


# From this many rows on, QuantileGBM predicts each distinct cell of its splits once (from the
# second such batch on, or from the first of READ_SPLITS_ROWS rows: the splits are read once).
SAME_LEAVES_ROWS = 1_000
READ_SPLITS_ROWS = 50_000
# LightGBM's kZeroThreshold: a value this close to 0 may be read as missing. LightGBM writes it
# `const double kZeroThreshold = 1e-35f`, a float literal: 1.0000000180025095e-35 as a double
_ZERO = float(np.float32(1e-35))


def _tree_splits(node: dict, splits: dict[int, set | None]) -> None:
    """Add a dumped tree's split thresholds to `splits` (feature index -> thresholds, None for
    a categorical feature)."""
    stack = [node]
    while stack:
        node = stack.pop()
        if "split_feature" not in node:
            continue
        feature = node["split_feature"]
        if node["decision_type"] == "==":
            splits[feature] = None
        elif splits.setdefault(feature, set()) is not None:
            splits[feature].add(float(node["threshold"]))
        stack += [node["left_child"], node["right_child"]]


def same_leaves(
    matrix: np.ndarray, splits: dict[int, np.ndarray | None]
) -> tuple[np.ndarray, np.ndarray]:
    """(cell of each row, first row of each cell): rows of one cell take the same branch at
    every split of `splits` (`QuantileGBM._splits`), so they reach the same leaves and get
    the same prediction. A numeric value's cell is its interval between thresholds (a split
    sends x <= threshold left), with NaN and zero apart (LightGBM may read either as missing);
    a categorical feature's is its value."""
    combined, bound = np.zeros(len(matrix), dtype=np.int64), 1
    for feature, thresholds in splits.items():
        values = matrix[:, feature]
        if thresholds is None:
            codes, uniques = pd.factorize(values, use_na_sentinel=False)
            radix = len(uniques)
        else:
            codes = np.searchsorted(thresholds, values, side="left")
            radix = len(thresholds) + 3
            codes = np.where(np.abs(values) <= _ZERO, radix - 2, codes)
            codes = np.where(np.isnan(values), radix - 1, codes)
        if bound * radix >= 2**62:  # renumber the cells so far before the key overflows
            combined, uniques = pd.factorize(combined)
            bound = len(uniques)
        combined, bound = combined * radix + codes, bound * radix
    cells, uniques = pd.factorize(combined)
    first = np.empty(len(uniques), dtype=np.int64)
    first[cells[::-1]] = np.arange(len(cells))[::-1]  # the last write is the first row
    return cells, first


def lgbm_matrix(X: pd.DataFrame, categories: list[list] | None) -> np.ndarray:
    """`X` as LightGBM's sklearn wrapper hands it to the booster: float64, each categorical
    column as codes of the categories it had at fit time (`categories`, in column order; an
    unseen or missing category is NaN)."""
    remaining = iter(categories or [])
    columns = []
    for name, dtype in X.dtypes.items():
        if not isinstance(dtype, pd.CategoricalDtype):
            columns.append(X[name].to_numpy(dtype=np.float64, na_value=np.nan))
            continue
        known = next(remaining)
        codes = X[name].cat.codes.to_numpy()
        if len(dtype.categories) and list(dtype.categories) != list(known):
            recode = pd.Index(known).get_indexer(dtype.categories)
            codes = np.where(codes >= 0, recode[codes], -1)
        columns.append(np.where(codes >= 0, codes, np.nan))
    return np.column_stack(columns) if columns else np.empty((len(X), 0))


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Train small networks on one thread. Their steps (a few hundred rows through 128-wide
    layers) are too small to split: on this project's 2-core machine at a load average of ~2, a
    QuantileMLP fit on 8,000 rows took 1.3-2.3 s of wall time on one thread and 4.8-7.2 s on
    two. Prediction is left alone: a 10^5-row batch is 1.5-2x faster on two threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _MLP(nn.Module):
    def __init__(self, n_in: int, hidden: tuple[int, ...], n_out: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for width in hidden:
            layers += [nn.Linear(n_in, width), nn.SiLU()]
            n_in = width
        layers.append(nn.Linear(n_in, n_out))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def pinball_loss(pred: torch.Tensor, y: torch.Tensor, quantiles: torch.Tensor) -> torch.Tensor:
    """Mean quantile (pinball) loss of `pred` (n, q) against `y` (n,)."""
    diff = y.unsqueeze(1) - pred
    return torch.maximum(quantiles * diff, (quantiles - 1) * diff).mean()


class TabularEncoder:
    """Numbers standardized with a missing-value indicator; categoricals one-hot (an unseen
    category encodes as all zeros, so it never crashes)."""

    def fit(self, X: pd.DataFrame) -> Self:
        self.numeric_ = [c for c in X.columns if not isinstance(X[c].dtype, pd.CategoricalDtype)]
        self.categorical_ = {
            c: list(X[c].cat.categories)
            for c in X.columns
            if isinstance(X[c].dtype, pd.CategoricalDtype)
        }
        values = X[self.numeric_].to_numpy(dtype=np.float64)
        with warnings.catch_warnings():  # an all-missing column is fine: it encodes as 0
            warnings.simplefilter("ignore", RuntimeWarning)
            self.mean_ = np.nan_to_num(np.nanmean(values, axis=0))
            self.std_ = np.nan_to_num(np.nanstd(values, axis=0), nan=1.0)
            self.low_ = np.nan_to_num(np.nanmin(values, axis=0), nan=0.0)
            self.high_ = np.nan_to_num(np.nanmax(values, axis=0), nan=0.0)
        self.std_[self.std_ < 1e-9] = 1.0
        return self

    def transform(self, X: pd.DataFrame) -> np.ndarray:
        values = X[self.numeric_].to_numpy(dtype=np.float64)
        missing = np.isnan(values)
        # beyond the training range a number counts as its nearest seen value, as in a tree:
        # a network extrapolates linearly, without bound (a new GPU's specs)
        values = np.clip(values, self.low_, self.high_)
        scaled = np.where(missing, 0.0, (values - self.mean_) / self.std_)
        parts = [scaled, missing.astype(np.float64)]
        for column, categories in self.categorical_.items():
            codes = pd.Categorical(X[column], categories=categories).codes
            onehot = np.zeros((len(X), len(categories)))
            known = codes >= 0
            onehot[np.flatnonzero(known), codes[known]] = 1.0
            parts.append(onehot)
        return np.hstack(parts).astype(np.float32)


MIN_VALIDATED_ROWS = 20  # fewer: every row trains, for all the epochs


class QuantileMLP(BaseEstimator):
    """A fully connected network with three quantile heads (p10, p50, p90), trained with the
    pinball loss; an ensemble of `n_members` networks averages out initialization noise.

    On a small table each member keeps the epoch with the lowest loss on a fifth of the rows
    it does not train on (`validation`): on a hundred rows (runtime's samples) a network
    trained for all its epochs fits their noise."""

    def __init__(
        self,
        hidden: tuple[int, ...] = (128, 128),
        epochs: int = 300,
        lr: float = 3e-3,
        weight_decay: float = 1e-4,
        batch_size: int = 256,
        n_members: int = 2,
        max_steps: int = 2000,
        validation: float = 0.2,
        random_state: int = 0,
    ) -> None:
        self.max_steps = max_steps
        self.validation = validation
        self.hidden = hidden
        self.epochs = epochs
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.n_members = n_members
        self.random_state = random_state

    def fit(self, X: pd.DataFrame, y: np.ndarray) -> Self:
        self.encoder_ = TabularEncoder().fit(X)
        features = torch.from_numpy(self.encoder_.transform(X))
        target = torch.as_tensor(np.asarray(y, dtype=np.float32))
        self.y_mean_, self.y_std_ = float(target.mean()), float(target.std().clamp(min=1e-6))
        target = (target - self.y_mean_) / self.y_std_
        # big tables need fewer passes: cap the optimizer steps per member
        n = len(features)
        epochs = max(3, min(self.epochs, self.max_steps * self.batch_size // max(n, 1)))
        with one_torch_thread():
            self.members_ = [
                self._fit_member(features, target, epochs, member)
                for member in range(self.n_members)
            ]
        return self

    def _fit_member(
        self, features: torch.Tensor, target: torch.Tensor, epochs: int, member: int
    ) -> nn.Module:
        """One network of the ensemble, at its epoch of lowest validation loss."""
        quantiles = torch.tensor(QUANTILES)
        torch.manual_seed(self.random_state + member)
        held, train = self._validation_split(len(features), member)
        net = _MLP(features.shape[1], tuple(self.hidden), len(QUANTILES))
        # fused: one kernel per step for all parameters; on these small networks the per-tensor
        # update was a third of a fit's CPU (the same AdamW, to float rounding)
        optimizer = torch.optim.AdamW(
            net.parameters(), lr=self.lr, weight_decay=self.weight_decay, fused=True
        )
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs)
        best, best_state = np.inf, None
        for _ in range(epochs):
            net.train()
            shuffled = train[torch.randperm(len(train))]
            for start in range(0, len(train), self.batch_size):
                idx = shuffled[start : start + self.batch_size]
                optimizer.zero_grad()
                pinball_loss(net(features[idx]), target[idx], quantiles).backward()
                optimizer.step()
            scheduler.step()
            if len(held):
                net.eval()
                with torch.inference_mode():
                    loss = float(pinball_loss(net(features[held]), target[held], quantiles))
                if loss < best:  # a copy of each tensor (deepcopy of the dict cost ~7%)
                    best = loss
                    best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        if best_state is not None:
            net.load_state_dict(best_state)
        net.eval()
        return net

    def _validation_split(self, n: int, member: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(validation rows, training rows) of one member. Only a small table is validated:
        a big one is already stopped early by `max_steps` (its rows seen a few times each),
        and on it a held-out fifth costs accuracy (leave-one-cluster-out scaling, sia-rtx:
        14.7% -> 18.4%); none under MIN_VALIDATED_ROWS rows."""
        rng = np.random.default_rng(self.random_state + member)
        small = n >= MIN_VALIDATED_ROWS and n * self.epochs <= self.max_steps * self.batch_size
        held = rng.random(n) < (self.validation if small else 0.0)
        return torch.from_numpy(np.flatnonzero(held)), torch.from_numpy(np.flatnonzero(~held))

    def predict_quantiles(self, X: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        features = torch.from_numpy(self.encoder_.transform(X))
        with torch.inference_mode():
            out = torch.stack([m(features) for m in self.members_]).mean(0).numpy()
        out = out * self.y_std_ + self.y_mean_
        return out[:, 0], out[:, 1], out[:, 2]


class ConformalQuantiles(BaseEstimator):
    """Conformalized quantile regression: quantile heads fitted on little data are too
    confident, so p10 and p90 are moved by the margin that makes them cover `coverage` of the
    out-of-fold errors seen during fit (Romano et al., 2019). Any regressor with
    `fit(X, y)` and `predict_quantiles(X)` over a frame or a list (the graph networks) fits
    here. With `groups` (e.g. each row's device) the folds hold out whole groups, so the
    margin covers the error on a group never seen, which is what such a model is asked for.

    `choices` (parameter sets of the regressor, e.g. epochs) are tried on the same folds: the
    one whose mean absolute p50 error out of fold is lowest is refitted on every row, and its
    out-of-fold errors set the margin (`chosen_`). On held-out groups this picks what
    generalizes to a group never seen, inside the training data."""

    def __init__(
        self,
        regressor: BaseEstimator,
        n_folds: int = 3,
        coverage: float = INTERVAL_COVERAGE,
        random_state: int = 0,
        choices: tuple[dict, ...] = (),
    ) -> None:
        self.regressor = regressor
        self.n_folds = n_folds
        self.coverage = coverage
        self.random_state = random_state
        self.choices = choices

    def _folds(self, X: pd.DataFrame | list, groups: np.ndarray | None):
        if groups is not None and len(np.unique(groups)) >= 2:
            n = min(self.n_folds, len(np.unique(groups)))
            return GroupKFold(n).split(np.zeros(len(groups)), groups=groups)
        folds = KFold(self.n_folds, shuffle=True, random_state=self.random_state)
        return folds.split(np.zeros(len(X)))

    def fit(self, X: pd.DataFrame | list, y: np.ndarray, groups: np.ndarray | None = None) -> Self:
        y = np.asarray(y, dtype=float)
        self.margin_ = 0.0
        candidates = list(self.choices) or [{}]
        self.chosen_ = candidates[0]
        if len(y) >= 5 * self.n_folds:
            scores = np.empty((len(candidates), len(y)))
            errors = np.empty((len(candidates), len(y)))
            for train, test in self._folds(X, groups):
                for i, params in enumerate(candidates):
                    model = clone(self.regressor).set_params(**params)
                    lo, mid, hi = model.fit(take_rows(X, train), y[train]).predict_quantiles(
                        take_rows(X, test)
                    )
                    scores[i, test] = conformity_scores(lo, hi, y[test])
                    errors[i, test] = np.abs(mid - y[test])
            best = int(np.argmin(errors.mean(axis=1)))
            self.chosen_ = candidates[best]
            self.margin_ = conformal_margin(scores[best], self.coverage)
        self.regressor_ = clone(self.regressor).set_params(**self.chosen_).fit(X, y)
        return self

    def predict_quantiles(self, X: pd.DataFrame | list) -> tuple[np.ndarray, ...]:
        """The heads moved out by the margin, and at least the margin on each side of the
        median where the heads cross it (p10 < p50 < p90 on every row: a crossed p10 clipped
        to the median answered p10 == p50 on some of Gavel's training pairs; issue 37)."""
        lo, mid, hi = self.regressor_.predict_quantiles(X)
        return np.minimum(lo, mid) - self.margin_, mid, np.maximum(hi, mid) + self.margin_


# fcn's network sizes, for ConformalQuantiles to choose between on held-out groups (queries,
# devices): on a few groups the default network learns each group's own residual, which a
# group never seen does not share
FCN_SIZE_CHOICES: tuple[dict, ...] = (
    {},
    {"hidden": (32,), "weight_decay": 1e-2},
    {"hidden": (8,), "weight_decay": 1e-1},
)


def make_regressor(family: str, **params: object) -> ConformalQuantiles:
    """A calibrated quantile regressor of the family `gbm` or `fcn`."""
    random_state = int(params.get("random_state", 0))
    if family == "gbm":
        return ConformalQuantiles(QuantileGBM(**params), random_state=random_state)
    if family == "fcn":
        return ConformalQuantiles(QuantileMLP(**params), random_state=random_state)
    raise ValueError(f"unknown tabular model family {family!r}; expected gbm or fcn")
