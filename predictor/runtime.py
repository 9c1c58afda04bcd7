"""End-to-end iteration latency of a model on a device from its operator graph (`runtime`).

Rows are the `graph` contract's long table (one row per node); predictions are one row per
`sample_id`. Two stages, in the spirit of NeuSight:
1. where the training rows carry measured node latencies, `OpLatencyModel` learns each op's
   latency as a fraction of its roofline from the op's intensity against the device (trees on
   ratios to physical quantities, so a new device needs no extrapolation); its sum over the
   graph, layers repeated, is the sample's base. Without node latencies the base is the roofline.
2. every family predicts log(latency / base): `gbm` and `fcn` from per-sample aggregates, `rnn`
   and `gnn` from the node graph itself. Stage 2 learns from out-of-device stage-1 bases (each
   training device's base from an op model that never saw it), so its corrections reflect the
   error on a device not in training; every family's p10-p90 is conformalized on folds that
   hold out whole devices (`ConformalQuantiles` with groups).
Stage 2 learned the op model's error for the models it was trained on, and corrects only
those. A model it never saw gets the op model's sum, with the margin of the sum's own errors
on held-out models (and devices): there stage 2's correction made things worse (leave one
model out, gbm 11.6% MAPE against the op model's 8.2%; a new model on a new device, 16.4%
against 12.6%). Rows say what was new (`flags`: new_gpu_type, new_model), and among a
request's samples of one model a device at least as fast is not predicted slower, nor a
larger batch faster (`monotonic_guard`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Self

import lightgbm as lgb
import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, clone

from perfcast.features.devices import at_least_as_fast, fill_specs
from perfcast.features.graphs import (
    GraphArrays,
    node_arrays,
    op_table,
    require_device_specs,
    sample_table,
    samples,
)
from perfcast.predictor.base import TaskPredictor, flags_column, interval_frame
from perfcast.predictor.graph_models import GraphQuantileNet
from perfcast.predictor.regressors import (
    FCN_SIZE_CHOICES,
    ConformalQuantiles,
    QuantileGBM,
    conformal_margin,
    make_regressor,
)

GRAPH_FAMILIES = ("rnn", "gnn")
# family -> the graph network whose log-quantiles it averages with gbm's
BLENDS = {"gbm-gnn": "gnn"}
EPOCH_CHOICES = (20, 80)  # the graph networks' epochs, chosen per fit on held-out devices
_NOT_FEATURES = ["sample_id", "repeat", "roofline_ms"]


class OpLatencyModel:
    """log(node latency / node roofline) from `features.graphs.op_table`; sums per sample.

    The mean of `n_members` boosters that differ only in their seed (row and column sampling):
    on a GPU none of them saw, one booster's answer moved with its seed as much as with a
    change of method (leave one GPU out, gbm, seeds 0-3: 8.2-10.2% MAPE)."""

    def __init__(self, random_state: int = 0, n_members: int = 4) -> None:
        self.random_state = random_state
        self.n_members = n_members

    def _features(self, table: pd.DataFrame) -> pd.DataFrame:
        X = table.drop(columns=[*_NOT_FEATURES, "latency_ms"], errors="ignore")
        return X.assign(op=pd.Categorical(X["op"], categories=self.ops_))

    # LightGBM's names: subsample=0.8 every round, colsample_bytree=0.8, min_child_samples=10.
    # 150 rounds at 0.1: stage 1 is sixteen of these fits, and 300 at 0.05 cost twice the CPU
    # for the same error on a GPU left out (docs/BENCHMARKS.md, runtime)
    _PARAMS: ClassVar[dict[str, object]] = {
        "objective": "regression",
        "learning_rate": 0.1,
        "num_leaves": 31,
        "min_child_samples": 10,
        "subsample": 0.8,
        "subsample_freq": 1,
        "colsample_bytree": 0.8,
        "num_threads": 1,  # small tables; OpenMP threads fight torch's pool on two cores
        "verbose": -1,
    }
    _ROUNDS = 150

    def fit(self, table: pd.DataFrame) -> Self:
        table = table[table["latency_ms"] > 0]
        self.ops_ = sorted(table["op"].unique())
        X, y = self._features(table), np.log(table["latency_ms"] / table["roofline_ms"])
        # one binned table for every member: the bins use every row (far fewer than LightGBM's
        # 200,000-row sample), so they do not depend on the seed and the trees are the ones
        # separate fits grow; kept by the boosters, not written out and parsed back by each
        data = lgb.Dataset(X, y, params={"verbose": -1})
        seeds = range(self.random_state, self.random_state + self.n_members)
        self.models_ = [
            lgb.train({**self._PARAMS, "seed": s}, data, self._ROUNDS, keep_training_booster=True)
            for s in seeds
        ]
        return self

    def log_ratio(self, table: pd.DataFrame) -> np.ndarray:
        """Predicted log(latency / roofline) of each node of `table`."""
        X = self._features(table)
        return np.mean([model.predict(X) for model in self.models_], axis=0)

    def predict_log_sum(self, table: pd.DataFrame, index: pd.Index) -> np.ndarray:
        """log of the predicted per-iteration latency (ms) of each sample in `index` (NaN for a
        sample without a node that moves data or computes, as when none of `table`'s do)."""
        if table.empty:  # LightGBM refuses an empty matrix
            return np.full(len(index), np.nan)
        ms = table["roofline_ms"] * np.exp(self.log_ratio(table)) * table["repeat"]
        return np.log(ms.groupby(table["sample_id"]).sum().reindex(index).to_numpy(dtype=float))


class SeedAveraged(BaseEstimator):
    """The mean quantiles of `n_members` clones of `regressor` that differ only in their
    `random_state`: stage 2 learns from ~100 samples of ~10 devices, where one booster's row
    and column sampling moved a held-out GPU's error by several points."""

    def __init__(self, regressor: BaseEstimator, n_members: int = 4) -> None:
        self.regressor = regressor
        self.n_members = n_members

    def fit(self, X: pd.DataFrame, y: np.ndarray) -> Self:
        seed = self.regressor.get_params()["random_state"]
        self.members_ = [
            clone(self.regressor).set_params(random_state=seed + k).fit(X, y)
            for k in range(self.n_members)
        ]
        return self

    def predict_quantiles(self, X: pd.DataFrame) -> tuple[np.ndarray, ...]:
        quantiles = [member.predict_quantiles(X) for member in self.members_]
        return tuple(np.mean(q, axis=0) for q in zip(*quantiles, strict=True))


class GbmGraphBlend(BaseEstimator):
    """gbm and a graph network averaged quantile by quantile in log space (a geometric mean of
    the two latencies). Their errors on a GPU neither saw differ in sign on several GPUs
    (leave one GPU out: H100 +7% / -2%, MI210 +1% / -5%), so the mean errs less than
    either. Fitted on the graphs alone: gbm reads each graph's global features, the sample
    table the tabular families see (`columns`, missing values as 0, as the networks get them)."""

    def __init__(
        self,
        architecture: str = "gnn",
        columns: tuple[str, ...] = (),
        epochs: int = 80,
        random_state: int = 0,
    ) -> None:
        self.architecture = architecture
        self.columns = columns
        self.epochs = epochs
        self.random_state = random_state

    def _table(self, graphs: list[GraphArrays]) -> pd.DataFrame:
        return pd.DataFrame(np.stack([g.globals for g in graphs]), columns=list(self.columns))

    def fit(self, graphs: list[GraphArrays], y: np.ndarray) -> Self:
        seed = self.random_state
        self.tabular_ = SeedAveraged(QuantileGBM(random_state=seed)).fit(self._table(graphs), y)
        self.network_ = GraphQuantileNet(self.architecture, epochs=self.epochs, random_state=seed)
        self.network_.fit(graphs, y)
        return self

    def predict_quantiles(self, graphs: list[GraphArrays]) -> tuple[np.ndarray, ...]:
        tabular = self.tabular_.predict_quantiles(self._table(graphs))
        network = self.network_.predict_quantiles(graphs)
        return tuple((a + b) / 2 for a, b in zip(tabular, network, strict=True))


# Stage 1 costs sixteen op-model fits, the same for every family: the trainer and the accuracy
# benchmark fit the four families on the same rows, so the last few results are kept, keyed by
# the content of the op table (the models are only read after fitting).
@dataclass(frozen=True)
class _Stage1:
    model: OpLatencyModel  # fitted on every training node
    out_of_device: np.ndarray  # each sample's log base from an op model without its device
    out_of_model: np.ndarray  # ... without its model (NaN: a single model)


_STAGE1: dict[tuple[int, int], _Stage1] = {}
_STAGE1_KEPT = 4
MODEL_FOLDS = 5  # folds of held-out models behind the op model's margin


def _has_node_latency(rows: pd.DataFrame) -> bool:
    return "latency_ms" in rows.columns and bool(rows["latency_ms"].notna().any())


class RuntimePredictor(TaskPredictor):
    task = "runtime"

    def __init__(
        self, model: str = "gbm", epochs: int | None = None, random_state: int = 0
    ) -> None:
        self.model = model
        self.epochs = epochs
        self.random_state = random_state

    def _out_of_fold_base(self, ops: pd.DataFrame, groups: pd.Series, n_folds: int) -> np.ndarray:
        """Each training sample's log stage-1 base from an op model fitted without its group
        (`groups`: one value per sample, indexed by sample_id; NaN for all with one group)."""
        keys = pd.unique(groups)
        base = pd.Series(np.nan, index=groups.index)
        if len(keys) < 2:
            return base.to_numpy()
        shuffled = np.random.default_rng(self.random_state).permutation(keys)
        for chunk in np.array_split(shuffled, min(len(keys), n_folds)):
            held = groups.index[groups.isin(chunk)]
            is_held = ops["sample_id"].isin(held)
            model = OpLatencyModel(self.random_state).fit(ops[~is_held])
            base[held] = model.predict_log_sum(ops[is_held], held)
        return base.to_numpy()

    def _stage1(self, rows: pd.DataFrame) -> _Stage1 | None:
        """The op model and its out-of-group bases (None: no node latencies, or one device)."""
        info = samples(rows)
        if not _has_node_latency(rows) or info["device"].nunique() < 2:
            return None
        ops = op_table(rows)
        key = (int(pd.util.hash_pandas_object(ops).sum()), self.random_state)
        if key not in _STAGE1:
            while len(_STAGE1) >= _STAGE1_KEPT:
                _STAGE1.pop(next(iter(_STAGE1)))
            _STAGE1[key] = _Stage1(
                OpLatencyModel(self.random_state).fit(ops),
                self._out_of_fold_base(ops, info["device"], n_folds=10),
                self._out_of_fold_base(ops, info["model"].astype(str), n_folds=MODEL_FOLDS),
            )
        return _STAGE1[key]

    def _stage2_view(
        self, rows: pd.DataFrame, stage1: _Stage1 | None
    ) -> tuple[pd.DataFrame, np.ndarray]:
        """(extra features, log base) of stage 2's training samples. With an op model, the
        bases come from op models that never saw the sample's device: stage 2 learns the
        error it makes on a new device (random-split accuracy pays a little for this)."""
        _, log_base = sample_table(rows)
        extra = pd.DataFrame(index=samples(rows).index)
        if stage1 is not None:
            extra["log_op_vs_roofline"] = stage1.out_of_device - log_base
            log_base = stage1.out_of_device
        return extra, log_base

    @staticmethod
    def _op_margins(y: np.ndarray, stage1: _Stage1 | None) -> dict[str, float] | None:
        """How far p10 and p90 lie from the op model's sum, in log, where it answers: the
        conformal margin of its errors on models it never saw (`new_model`), and for a model
        and a device both new the root sum of squares of that and its margin on devices it
        never saw (`both`). None: no op model, or one model only. The sum itself is the p50
        (the median of those errors was 0.002 on NeuSight)."""
        if stage1 is None:
            return None
        margins = {}
        for name, base in (
            ("new_model", stage1.out_of_model),
            ("new_device", stage1.out_of_device),
        ):
            errors = np.abs(y - base)
            errors = errors[np.isfinite(errors)]
            if len(errors) < 10:
                return None
            margins[name] = conformal_margin(errors)
        margins["both"] = float(np.hypot(margins["new_model"], margins["new_device"]))
        return margins

    def _tabular_regressor(self) -> ConformalQuantiles:
        """gbm: the mean of a few seeds' boosters (cheap on ~100 samples), calibrated like
        every family; fcn as every task builds it, for `epochs` where set, its network size
        chosen on held-out devices (leave one GPU out: 11.6% MAPE with the default alone)."""
        if self.model != "gbm":
            epochs = {} if self.epochs is None else {"epochs": self.epochs}
            regressor = make_regressor(self.model, random_state=self.random_state, **epochs)
            return regressor.set_params(choices=FCN_SIZE_CHOICES)
        members = SeedAveraged(QuantileGBM(random_state=self.random_state))
        return ConformalQuantiles(members, random_state=self.random_state)

    def _graph_regressor(self, rows: pd.DataFrame, extra: pd.DataFrame) -> ConformalQuantiles:
        """rnn or gnn alone, or a blend of gbm (on the sample table the tabular families see,
        plus `extra`) with its graph network, calibrated like every family. Epochs unset: each
        of EPOCH_CHOICES is tried on the calibration folds' held-out devices (more epochs fit
        the seen GPUs closer and a new one worse: gbm-gnn leave one GPU out, 7.7% at 20, 9.6%
        at 80)."""
        epochs = self.epochs or EPOCH_CHOICES[-1]
        if self.model not in BLENDS:
            network = GraphQuantileNet(self.model, epochs=epochs, random_state=self.random_state)
        else:
            columns = (*sample_table(rows)[0].columns, *extra.columns)
            network = GbmGraphBlend(
                BLENDS[self.model], columns, epochs, random_state=self.random_state
            )
        choices = () if self.epochs else tuple({"epochs": e} for e in EPOCH_CHOICES)
        return ConformalQuantiles(network, random_state=self.random_state, choices=choices)

    def _fit(self, rows: pd.DataFrame) -> Self:
        require_device_specs(rows, "runtime training rows")
        info = samples(rows)
        y = np.log(info["e2e_latency_ms"].to_numpy(dtype=float))
        stage1 = self._stage1(rows)
        self.ops_ = None if stage1 is None else stage1.model
        extra, log_base = self._stage2_view(rows, stage1)
        target = y - log_base
        # every family's interval is calibrated on held-out devices: a new GPU is what a
        # runtime prediction is asked for (one device only: on held-out samples)
        devices = info["device"].astype(str).to_numpy()
        if self.model in (*GRAPH_FAMILIES, *BLENDS):
            self.regressor_ = self._graph_regressor(rows, extra)
            self.regressor_.fit(node_arrays(rows, extra), target, groups=devices)
        else:
            X, _ = sample_table(rows)
            self.regressor_ = self._tabular_regressor()
            self.regressor_.fit(X.join(extra), target, groups=devices)
        self.op_margins_ = self._op_margins(y, stage1)
        self.devices_ = sorted(set(devices))
        self.models_ = sorted(set(info["model"].astype(str)))
        self.slower_pairs_ = _measured_slower_pairs(info)
        self.fitted_ = True
        return self

    def _predict_interval(self, rows: pd.DataFrame) -> pd.DataFrame:
        require_device_specs(rows, "runtime prediction rows")
        X, log_base = sample_table(rows)
        extra = pd.DataFrame(index=X.index)  # columns in the order _stage2_view makes them
        log_op = None
        if self.ops_ is not None:
            log_op = self.ops_.predict_log_sum(op_table(rows), X.index)
            extra["log_op_vs_roofline"] = log_op - log_base
            log_base = log_op
        if self.model in (*GRAPH_FAMILIES, *BLENDS):
            graphs = node_arrays(rows, extra)
            index = pd.Index([g.sample_id for g in graphs], name="sample_id")
            quantiles = self.regressor_.predict_quantiles(graphs)
        else:
            index = X.index
            quantiles = self.regressor_.predict_quantiles(X.join(extra))
        log_base = pd.Series(log_base, X.index).reindex(index).to_numpy()
        out = np.vstack([q + log_base for q in quantiles])
        info = fill_specs(samples(rows).reindex(index).reset_index(), "device")
        devices = info["device"].astype(str)
        new_device = ~devices.isin(self.devices_).to_numpy()
        new_model = ~info["model"].astype(str).isin(self.models_).to_numpy()
        if self.op_margins_ is not None:  # stage 2 corrects the models it was trained on
            log_op = pd.Series(log_op, X.index).reindex(index).to_numpy()
            margins = self.op_margins_
            margin = np.where(new_device, margins["both"], margins["new_model"])
            op = new_model & np.isfinite(log_op)
            out[:, op] = log_op[op] + np.outer([-1.0, 0.0, 1.0], margin[op])
        lo, mid, hi = np.exp(out)
        raw = mid
        mid = _monotonic(info, mid, self.slower_pairs_)
        guarded = (mid != raw) & np.isfinite(raw)
        # a moved p50 carries its p90 with it: the interval keeps its relative width
        hi[guarded] *= mid[guarded] / raw[guarded]
        lo, hi = np.fmin(lo, mid), np.fmax(hi, mid)
        frame = interval_frame(self.targets, index, [(lo, mid, hi)])
        frame["flags"] = flags_column(
            {
                "new_gpu_type": new_device,
                "new_model": new_model,
                "monotonic_guard": guarded,
            },
            len(frame),
        )
        return frame


_SAME_GRAPH = ["model", "mode", "seq_len"]  # with batch_size: one configuration of a model


def _configuration(info: pd.DataFrame, with_batch: bool) -> pd.Series:
    """A code per sample for (model, mode, seq_len[, batch_size]), missing values alike."""
    columns = [c for c in _SAME_GRAPH if c in info.columns]
    if with_batch:
        columns.append("batch_size")
    keys = info[columns].astype(str)
    return pd.Series(pd.factorize(pd.MultiIndex.from_frame(keys))[0], index=info.index)


def _device_order(info: pd.DataFrame) -> tuple[pd.Index, np.ndarray]:
    """(the frame's distinct devices, [i, j]: device i at least as fast as j by the rows'
    own specs)."""
    specs = info.groupby("device")[["peak_tflops_fp32", "mem_bw_gbps"]].first()
    return specs.index, at_least_as_fast(specs["peak_tflops_fp32"], specs["mem_bw_gbps"])


def _measured_slower_pairs(info: pd.DataFrame) -> list[tuple[str, str]]:
    """Pairs of training devices (a, b) where a's datasheet is at least b's but a was
    measured slower: the median of a's latency over b's, over the configurations measured on
    both, above 1 (NeuSight: the MI210 against the MI250, whose specs per die are equal)."""
    info = fill_specs(info.reset_index(), "device")
    info = info.assign(device=info["device"].astype(str), config=_configuration(info, True))
    latency = info.pivot_table(
        index="config", columns="device", values="e2e_latency_ms", aggfunc="median"
    )
    devices, order = _device_order(info)
    pairs = []
    for i, j in zip(*np.nonzero(order), strict=True):
        a, b = devices[i], devices[j]
        if a != b:
            ratio = (latency[a] / latency[b]).dropna()
            if len(ratio) and ratio.median() > 1.0:
                pairs.append((a, b))
    return pairs


def _monotonic(info: pd.DataFrame, mid: np.ndarray, slower: list[tuple[str, str]]) -> np.ndarray:
    """Among the samples of one request with the same model, mode and sequence length, a
    larger batch is not predicted faster than a smaller one on the same device, and a device
    at least as fast (datasheet FP32 peak and memory bandwidth both no lower, and not measured
    slower in training: `slower`) is not predicted slower at the same batch."""
    info = info.assign(device=info["device"].astype(str), mid=mid)
    graph = _configuration(info, with_batch=False)
    if not (graph.duplicated().any()):
        return mid
    # batch: the running maximum over increasing batch within (model, mode, seq, device)
    ranked = info.assign(graph=graph).sort_values(["graph", "device", "batch_size"], kind="stable")
    floored = ranked.groupby(["graph", "device"], sort=False)["mid"].cummax()
    guarded = floored.reindex(info.index).to_numpy()
    # device: the minimum over the devices this one is at least as fast as, same batch;
    # repeated to a fixed point, as pairs measured otherwise leave the relation intransitive
    devices, order = _device_order(info)
    np.fill_diagonal(order, False)
    where = {name: i for i, name in enumerate(devices)}
    for a, b in slower:
        if a in where and b in where:
            order[where[a], where[b]] = False
    faster = np.flatnonzero(order.any(axis=1))
    if not faster.size:
        return guarded
    cell = _configuration(info, with_batch=True).to_numpy()
    device = devices.get_indexer(info["device"])
    for _ in range(len(devices)):
        table = np.full((cell.max() + 1, len(devices)), np.inf)
        np.minimum.at(table, (cell, device), guarded)
        lowered = guarded.copy()
        for code in faster:
            these = np.flatnonzero(device == code)
            ceiling = table[cell[these]][:, order[code]].min(axis=1)
            lowered[these] = np.fmin(guarded[these], ceiling)
        if np.array_equal(lowered, guarded):
            break
        guarded = lowered
    return guarded
