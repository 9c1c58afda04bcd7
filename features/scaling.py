"""Features for the `scaling` task: a job's step time for a placement, batch size and GPU.

The structure follows Pollux's throughput model, step = compute(local batch) + overhead
(gradient synchronization, partly overlapped), so the models learn corrections to a physical
estimate instead of raw times, and can be trusted on a GPU type they only saw on one GPU:
- `t1`: the job's one-GPU step time on this GPU type at this local batch size, looked up in the
  reference rows seen at fit time, or interpolated linearly in batch size from that job's other
  one-GPU rows on this GPU (compute time is close to affine in batch size).
- `overhead`: the job's measured (step - t1) for the same GPU count and node spread. Two
  sources, kept apart because they are not equally good: the same GPU type at other batch sizes
  (`same`), and other GPU types (`cross`, preferring the same batch size), the only one there is
  on a new GPU. Synchronization depends on model size and network more than on compute speed,
  so the cross-GPU overhead transfers, with an error the models correct from the ratio of this
  GPU's one-GPU time to the reference GPUs' (`log_t1_vs_ref`).
The base estimate is `t1 + overhead` (or `t1` alone); models predict log(step / base). A row
without a `t1` falls back to a second, direct model of log(step).

Every lookup excludes the row's own (gpu_type, local_batch_size), so training rows see exactly
what an unseen row would see. `transform(..., new_gpu=True)` also hides the same-GPU overhead,
the view of a GPU known only from its one-GPU rows; predictors train on both views.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

import numpy as np
import pandas as pd

from perfcast.features.devices import SPEC_COLUMNS, fill_specs, interconnect_frame

_KEY = ["job", "gpu_type"]
_CONFIG = ["job", "num_gpus", "num_nodes", "gpus_per_node"]
_ROW_KEY = [*_CONFIG, "gpu_type", "local_batch_size"]
BYTES_PER_PARAM = 4  # fp32 gradients, as data-parallel frameworks all-reduce them

# Parameters (millions) of the models the shipped datasets name, for the gradient bytes of a
# job whose synchronization was never measured (a row's own `params_m` wins). Counts of the
# reference implementations: torchvision (resnet18/50, vgg16/19, shufflenet_v2_x1_0), the
# CIFAR ResNet-18 (kuangliu/pytorch-cifar), BERT-base, GPT-2 small, YOLOv3 (Darknet-53),
# CycleGAN (two ResNet-9 generators, two PatchGAN discriminators), the Nature-DQN CNN (dqn,
# a2c). Models whose size the datasets leave open (deepspeech2, ncf, lstm, ...) are absent.
MODEL_PARAMS_M: dict[str, float] = {
    "resnet18": 11.69,
    "resnet18-cifar10": 11.17,
    "resnet50-imagenet": 25.56,
    "vgg16": 138.36,
    "vgg19": 143.67,
    "shufflenet_v2_x1_0": 2.28,
    "bert": 110.0,
    "bert-squad": 110.0,
    "gpt2": 124.4,
    "yolov3-voc": 61.9,
    "cyclegan-monet2photo": 28.3,
    "dqn": 1.7,
    "a2c": 1.7,
}


def most_on_one_node(placement: object) -> float:
    """GPUs on the fullest node of a placement string of per-node digits ("422" -> 4); NaN
    when it is not one. The largest digit of a string of digits is its largest character."""
    if isinstance(placement, str) and placement.isdigit():
        return int(max(placement))
    return np.nan


def gpus_per_node_of(rows: pd.DataFrame) -> pd.Series:
    """Largest number of GPUs on one node (from `placement` when given, else even spread)."""
    even = np.ceil(rows["num_gpus"] / rows["num_nodes"])
    if "placement" not in rows.columns:
        return even.astype("int64")
    placements = rows["placement"]
    codes, distinct = pd.factorize(placements)  # candidates: one placement per (GPUs, nodes)
    each = [*map(most_on_one_node, distinct.tolist()), np.nan]
    biggest = np.array(each, dtype=float)[codes]  # code -1 (missing): NaN
    most = np.where(np.isnan(biggest), even.to_numpy(dtype=float), biggest)
    return pd.Series(most, index=rows.index, name=placements.name).astype("int64")


class ScalingFeatures:
    """fit(reference rows) then transform(rows) -> (features, log_base)."""

    def fit(self, rows: pd.DataFrame) -> Self:
        ref = rows.assign(gpus_per_node=gpus_per_node_of(rows))
        single = ref.loc[ref["num_gpus"] == 1, [*_KEY, "local_batch_size", "step_time_s"]]
        single = single.groupby([*_KEY, "local_batch_size"], as_index=False).median()
        self.single_ = {
            key: (
                part["local_batch_size"].to_numpy(dtype=float),
                part["step_time_s"].to_numpy(dtype=float),
            )
            for key, part in single.groupby(_KEY, sort=False)
        }
        t1 = self._t1_column(ref)
        multi = (ref["num_gpus"] > 1).to_numpy() & np.isfinite(t1)
        sync = pd.DataFrame(
            {
                "config": list(zip(*(ref.loc[multi, c].tolist() for c in _CONFIG), strict=True)),
                "gpu_type": ref.loc[multi, "gpu_type"].to_numpy(),
                "bsz": ref.loc[multi, "local_batch_size"].to_numpy(dtype=float),
                "overhead": ref.loc[multi, "step_time_s"].to_numpy(dtype=float) - t1[multi],
                "log_t1": np.log(t1[multi]),
            }
        )
        self.sync_ = {
            config: (
                part["gpu_type"].to_numpy(),
                part["bsz"].to_numpy(),
                part["overhead"].to_numpy(),
                part["log_t1"].to_numpy(),
            )
            for config, part in sync.groupby("config", sort=False)
        }
        self.growth_ = _fit_growth(ref, t1)
        self._fit_gradient_bytes(ref, t1)
        self.jobs_ = pd.Index(sorted(ref["job"].unique()))
        many = ref.loc[ref["num_gpus"] > 1, _KEY].drop_duplicates()
        self.scaled_ = set(zip(many["job"].tolist(), many["gpu_type"].tolist(), strict=True))
        return self

    def _fit_gradient_bytes(self, ref: pd.DataFrame, t1: np.ndarray) -> None:
        """What each job's synchronization moves, as the bytes a ring all-reduce over the
        rows' links would move in its measured overhead (`effective bytes`: overlap with
        backward and link efficiency folded in), per (job, multi-node, GPU type); and, per
        multi-node, the median ratio of effective to nominal bytes (parameters x 4) over the
        jobs of known size, for jobs never measured on several GPUs."""
        seconds_per_byte = self.seconds_per_byte_of(ref)
        overhead = ref["step_time_s"].to_numpy(dtype=float) - t1
        ok = (seconds_per_byte > 0) & np.isfinite(overhead)
        table = pd.DataFrame(
            {
                "job": ref["job"].to_numpy()[ok],
                "multi_node": (ref["num_nodes"].to_numpy() > 1)[ok],
                "gpu_type": ref["gpu_type"].to_numpy()[ok],
                "bytes": np.clip(overhead[ok], 0, None) / seconds_per_byte[ok],
                "nominal": nominal_gradient_bytes(ref)[ok],
            }
        )
        per_gpu = table.groupby(["job", "multi_node", "gpu_type"], as_index=False).median()
        self.bytes_ = {
            key: dict(zip(part["gpu_type"], part["bytes"], strict=True))
            for key, part in per_gpu.groupby(["job", "multi_node"], sort=False)
        }
        known = per_gpu[per_gpu["nominal"] > 0]
        self.efficiency_ = {
            multi_node: float(np.median(part["bytes"] / part["nominal"]))
            for multi_node, part in known.groupby("multi_node")
        }

    def _gradient_bytes(self, job: str, multi_node: bool, gpu: str, nominal: float) -> float:
        """Effective bytes of `job` from its measured overheads on other GPU types (the same
        node spread first, then the other one rescaled by the two spreads' efficiencies),
        else its nominal bytes times the fitted efficiency; NaN when neither is known."""
        ratio = self.efficiency_.get(multi_node, np.nan) / self.efficiency_.get(
            not multi_node, np.nan
        )
        for spread, scale in ((multi_node, 1.0), (not multi_node, ratio)):
            others = [b for g, b in self.bytes_.get((job, spread), {}).items() if g != gpu]
            if others and np.isfinite(scale):
                return float(np.median(others) * scale)
        return float(nominal * self.efficiency_.get(multi_node, np.nan))

    def comm_seconds(self, rows: pd.DataFrame) -> np.ndarray:
        """Synchronization time per step predicted from what moves (effective gradient bytes)
        over what it moves through (the rows' links); NaN without links or bytes, 0 on one
        GPU."""
        seconds_per_byte = self.seconds_per_byte_of(rows)
        multi = (rows["num_nodes"] > 1).to_numpy()
        nominal = nominal_gradient_bytes(rows)
        codes, first = distinct_groups([rows["job"], multi, rows["gpu_type"], nominal])
        keys = zip(
            rows["job"].iloc[first].to_numpy().tolist(),
            multi[first].tolist(),
            rows["gpu_type"].iloc[first].to_numpy().tolist(),
            nominal[first].tolist(),
            strict=True,
        )
        moved = np.array([self._gradient_bytes(*key) for key in keys], dtype=float)[codes]
        return sync_seconds(moved, seconds_per_byte)

    def seconds_per_byte(
        self, intra: np.ndarray, inter: np.ndarray, nodes: np.ndarray, gpus: np.ndarray
    ) -> np.ndarray:
        """Seconds a step's synchronization spends per effective gradient byte: the ring
        all-reduce's (`ring_time_per_byte`) grown with the GPU count (`_grown`); 0 on one
        GPU, NaN where the links are unknown."""
        return self._grown(ring_time_per_byte(intra, inter, nodes, gpus), nodes, gpus)

    def seconds_per_byte_of(self, rows: pd.DataFrame) -> np.ndarray:
        """`seconds_per_byte` over the rows' links (`ring_seconds_per_byte`)."""
        return self._grown(ring_seconds_per_byte(rows), rows["num_nodes"], rows["num_gpus"])

    def _grown(self, ring: np.ndarray, nodes, gpus) -> np.ndarray:
        """`ring` times (gpus / 2) ** growth_ of each row's spread (`_fit_growth`)."""
        growth = np.where(np.asarray(nodes) > 1, self.growth_[True], self.growth_[False])
        return ring * (np.fmax(np.asarray(gpus, dtype=float), 2.0) / 2.0) ** growth

    def gradient_bytes(self, job: str, multi_node: bool, gpu: str, nominal: float) -> float:
        """One row's effective gradient bytes (what `comm_seconds` moves over its links)."""
        return self._gradient_bytes(job, multi_node, gpu, nominal)

    def uncharted(self, rows: pd.DataFrame) -> np.ndarray:
        """Multi-GPU rows whose job was never measured on more than one GPU of their type in
        the fitted rows: how it scales there is a new GPU's (or a new job's) guess."""
        codes, first = distinct_groups([rows[c] for c in _KEY])
        keys = zip(*(rows[c].iloc[first].to_numpy().tolist() for c in _KEY), strict=True)
        charted = np.array([key in self.scaled_ for key in keys], dtype=bool)[codes]
        return (rows["num_gpus"] > 1).to_numpy() & ~charted

    def _t1(self, job: str, gpu: str, bsz: float, single: bool) -> float:
        """One-GPU step time, leave-own-(gpu, batch)-out for one-GPU rows, interpolated."""
        ref = self.single_.get((job, gpu))
        if ref is None:
            return float("nan")
        bsz_ref, t_ref = ref
        exact = bsz_ref == bsz
        if exact.any() and not single:
            return float(t_ref[exact][0])
        return _affine_at(bsz_ref[~exact], t_ref[~exact], float(bsz))

    def _t1_column(self, rows: pd.DataFrame) -> np.ndarray:
        single = (rows["num_gpus"] == 1).to_numpy()
        columns = [rows["job"], rows["gpu_type"], rows["local_batch_size"]]
        codes, first = distinct_groups([*columns, single])
        keys = zip(*(c.iloc[first].to_numpy() for c in columns), single[first], strict=True)
        return np.array([self._t1(*key) for key in keys], dtype=float)[codes]

    def one_gpu_time(self, job: str, gpu: str, bsz: float, single: bool) -> float:
        """One row's `t1` (as `lookups` finds it)."""
        return self._t1(job, gpu, bsz, single)

    def overheads(self, config: tuple, gpu: str, bsz: float) -> tuple[float, float, float]:
        """One row's (same, cross, log_t1_ref) as `lookups` finds them: NaN unless the row
        uses several GPUs in a configuration (job, GPUs, nodes, GPUs per node) measured."""
        if config[1] > 1 and config in self.sync_:
            return self._overheads(config, gpu, float(bsz))
        return (np.nan, np.nan, np.nan)

    def _overheads(self, config: tuple, gpu: str, bsz: float) -> tuple[float, float, float]:
        """(same, cross, log_t1_ref) for one measured configuration: the overhead on the same
        GPU type interpolated from its other batch sizes, the median overhead on other GPU
        types (the same batch size where measured), and the median log one-GPU time of the
        rows behind `cross`."""
        gpus, bszs, overheads, log_t1s = self.sync_[config]
        same = (gpus == gpu) & (bszs != bsz)
        cross = gpus != gpu
        if (cross & (bszs == bsz)).any():
            cross &= bszs == bsz
        return (
            _overhead_at(bszs[same], overheads[same], bsz) if same.any() else np.nan,
            float(np.median(overheads[cross])) if cross.any() else np.nan,
            float(np.median(log_t1s[cross])) if cross.any() else np.nan,
        )

    def lookups(self, rows: pd.DataFrame) -> pd.DataFrame:
        """Columns t1, same, cross, log_t1_ref for each row (`rows` needs `gpus_per_node`).
        Each distinct (job, GPU, batch) and each distinct measured configuration is looked up
        once: a recommendation's 10^5 candidates are as many distinct rows, but few distinct
        one-GPU lookups, and most of their configurations were never measured."""
        t1 = self._t1_column(rows)
        found = np.full((len(rows), 3), np.nan)
        codes, first = distinct_groups([rows[c] for c in _CONFIG])
        configs = list(
            zip(*(rows[c].iloc[first].to_numpy().tolist() for c in _CONFIG), strict=True)
        )
        known = np.array([config in self.sync_ for config in configs])
        measured = known[codes] & (rows["num_gpus"] > 1).to_numpy()
        if measured.any():
            part = rows[measured]
            codes, first = distinct_groups([part[c] for c in _ROW_KEY])
            keys = zip(*(part[c].iloc[first].to_numpy().tolist() for c in _ROW_KEY), strict=True)
            values = [self._overheads(key[:4], key[4], float(key[5])) for key in keys]
            found[measured] = np.array(values, dtype=float).reshape(-1, 3)[codes]
        return pd.DataFrame(
            {"t1": t1, "same": found[:, 0], "cross": found[:, 1], "log_t1_ref": found[:, 2]},
            index=rows.index,
        )

    def transform(
        self, rows: pd.DataFrame, new_gpu: bool = False
    ) -> tuple[pd.DataFrame, np.ndarray]:
        rows = fill_specs(rows.assign(gpus_per_node=gpus_per_node_of(rows)), "gpu_type")
        found = self.lookups(rows)
        optional = {
            "amp": rows["amp"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
            if "amp" in rows
            else None,
            **{c: rows[c].to_numpy(dtype=float) if c in rows else None for c in OPTIONAL_NUMBERS},
        }
        inputs = DesignInputs(
            num_gpus=rows["num_gpus"].to_numpy(dtype=float),
            num_nodes=rows["num_nodes"].to_numpy(dtype=float),
            gpus_per_node=rows["gpus_per_node"].to_numpy(dtype=float),
            local_batch_size=rows["local_batch_size"].to_numpy(dtype=float),
            t1=found["t1"].to_numpy(),
            same=np.full(len(rows), np.nan) if new_gpu else found["same"].to_numpy(),
            cross=found["cross"].to_numpy(),
            log_t1_ref=found["log_t1_ref"].to_numpy(),
            comm=self.comm_seconds(rows),
            specs={c: rows[c].to_numpy(dtype=float) for c in SPEC_COLUMNS},
            **optional,
        )
        return design(inputs, rows["job"], self.jobs_, rows.index)


OPTIONAL_NUMBERS = ("params_m", "gflops_per_sample")


@dataclass(frozen=True)
class DesignInputs:
    """What the features of n rows are computed from, one float array each: the rows' own
    numbers, the fitted lookups (one-GPU time, overheads, communication time) and the device
    specs (each spec a value per row, or one value of every row: rows of one GPU type);
    `amp`, `params_m`, `gflops_per_sample` None where the rows do not carry them."""

    num_gpus: np.ndarray
    num_nodes: np.ndarray
    gpus_per_node: np.ndarray
    local_batch_size: np.ndarray
    t1: np.ndarray
    same: np.ndarray
    cross: np.ndarray
    log_t1_ref: np.ndarray
    comm: np.ndarray
    specs: dict[str, np.ndarray]
    amp: np.ndarray | None = None
    params_m: np.ndarray | None = None
    gflops_per_sample: np.ndarray | None = None


def design(
    inputs: DesignInputs, jobs, categories: pd.Index, index: pd.Index
) -> tuple[pd.DataFrame, np.ndarray]:
    """The feature frame and log base of `ScalingFeatures.transform`, from its inputs: the one
    home of the arithmetic, whichever way the inputs were looked up."""
    columns, log_base = design_columns(inputs)
    return design_frame(columns, jobs, categories, index), log_base


def design_columns(inputs: DesignInputs) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The number columns of `design`'s frame (all but `job`), in its order, and the log base."""
    t1, same, cross, comm = inputs.t1, inputs.same, inputs.cross, inputs.comm
    # the same GPU's measured overhead, else the communication model, else the overhead
    # of the same configuration on other GPU types as is, else none (perfect scaling)
    own, log_t1 = np.isfinite(same), np.log(t1)  # (each read more than once)
    overhead = np.where(np.isfinite(comm), comm, cross)
    np.copyto(overhead, same, where=own)
    np.clip(overhead, 0, None, out=overhead)
    base = np.nan_to_num(overhead)
    base += t1
    gpus, nodes, bsz = inputs.num_gpus, inputs.num_nodes, inputs.local_batch_size
    missing = np.full(len(t1), np.nan)
    columns = {
        "log_num_gpus": np.log2(gpus),
        "num_nodes": nodes,
        "gpus_per_node": inputs.gpus_per_node,
        "multi_node": (nodes > 1).astype(float),
        "log_local_bsz": np.log2(bsz),
        "log_global_bsz": _over(np.log2, bsz * gpus),
        "log_t1": log_t1,
        "log_overhead_ratio": _over(np.log1p, overhead / t1),
        "has_overhead": np.isfinite(overhead).astype(float),
        "overhead_from_other_gpu": (~own & np.isfinite(cross)).astype(float),
        "overhead_from_comm_model": (~own & np.isfinite(comm)).astype(float),
        "log_comm_ratio": _over(np.log1p, comm / t1),
        "log_t1_vs_ref": log_t1 - inputs.log_t1_ref,
    }
    for column in SPEC_COLUMNS:
        columns[column] = _every_row(np.log(inputs.specs[column]), len(t1))
    columns["amp"] = missing if inputs.amp is None else inputs.amp
    for column in OPTIONAL_NUMBERS:
        values = getattr(inputs, column)
        columns[f"log_{column}"] = missing if values is None else np.log1p(values)
    return columns, _over(np.log, base)


def _over(function: np.ufunc, values: np.ndarray) -> np.ndarray:
    """`function(values)` written over `values`, an array of this function's own: the same
    numbers without allocating a second array of 10^5 rows."""
    return function(values, out=values)


def _every_row(values: np.ndarray, n: int) -> np.ndarray:
    """A column of n rows: `values` as they are, or its one value as every row's (the log of
    one GPU type's spec taken once, not 10^5 times), a read-only view of it: no 10^5 copies
    allocated here, and the gbm's matrix fills its column from one number."""
    return values if len(values) == n else np.broadcast_to(values, (n,))


def design_frame(
    columns: dict[str, np.ndarray], jobs, categories: pd.Index, index: pd.Index
) -> pd.DataFrame:
    """`design`'s feature frame: `columns`, then `job` as a categorical of `categories`."""
    X = pd.DataFrame(columns, index=index)
    X["job"] = pd.Categorical(jobs, categories=categories)
    return X


def nominal_gradient_bytes(rows: pd.DataFrame) -> np.ndarray:
    """Parameters x 4 bytes per row: the row's `params_m`, else MODEL_PARAMS_M; NaN unknown."""
    params = rows["job"].map(MODEL_PARAMS_M).astype(float)
    if "params_m" in rows.columns:
        own = pd.to_numeric(rows["params_m"], errors="coerce")
        params = own.where(own > 0).fillna(params)
    return params.to_numpy(dtype=float) * 1e6 * BYTES_PER_PARAM


def _fit_growth(ref: pd.DataFrame, t1: np.ndarray) -> dict[bool, float]:
    """How a step's synchronization grows with its GPU count beyond what a ring moves, per
    spread (False: one node, True: across nodes): seconds per byte ~ ring * (gpus / 2) **
    growth. A ring's bytes per GPU barely grow past 4 GPUs (2 (n - 1) / n), but measured
    overheads keep growing: latency terms and stragglers grow with the GPUs a step waits for,
    and the GPUs of one node share its PCIe root (Pollux models synchronization as linear in
    the GPU count). Fitted on the rows' own measurements: for each (cluster, GPU type, job,
    batch, spread) measured at GPU counts at least 2x apart, the slope of log(overhead / ring
    seconds per byte) over log(gpus); the median slope per spread, within [0, 1]; where a
    spread has none, the other's, else 0 (the ring alone)."""
    ring = ring_seconds_per_byte(ref)
    overhead = ref["step_time_s"].to_numpy(dtype=float) - t1
    ok = (ring > 0) & (overhead > 0)
    cluster = ref["cluster"] if "cluster" in ref.columns else pd.Series("", index=ref.index)
    table = pd.DataFrame(
        {
            "cluster": cluster.fillna("").astype(str).to_numpy()[ok],
            "gpu_type": ref["gpu_type"].astype(str).to_numpy()[ok],
            "job": ref["job"].astype(str).to_numpy()[ok],
            "bsz": ref["local_batch_size"].to_numpy(dtype=float)[ok],
            "spread": (ref["num_nodes"].to_numpy() > 1)[ok],
            "gpus": ref["num_gpus"].to_numpy(dtype=float)[ok],
            "log_bytes": np.log(overhead[ok] / ring[ok]),
        }
    )
    keys = ["cluster", "gpu_type", "job", "bsz", "spread"]
    by_gpus = table.groupby([*keys, "gpus"])["log_bytes"].median().reset_index()
    slopes: dict[bool, list[float]] = {False: [], True: []}
    for key, part in by_gpus.groupby(keys, sort=False):
        log_gpus = np.log(part["gpus"].to_numpy())
        if len(log_gpus) >= 2 and log_gpus.max() - log_gpus.min() >= np.log(2.0):
            slope = np.polyfit(log_gpus, part["log_bytes"].to_numpy(), 1)[0]
            slopes[bool(key[-1])].append(float(slope))
    growth = {s: float(np.clip(np.median(v), 0.0, 1.0)) if v else np.nan for s, v in slopes.items()}
    for spread in (False, True):
        if np.isnan(growth[spread]):
            other = growth[not spread]
            growth[spread] = 0.0 if np.isnan(other) else other
    return growth


def ring_seconds_per_byte(rows: pd.DataFrame) -> np.ndarray:
    """`ring_time_per_byte` over the rows' links (`interconnect_frame`)."""
    links = interconnect_frame(rows)
    return ring_time_per_byte(
        links["intra_node_bw_gbps"].to_numpy(),
        links["inter_node_bw_gbps"].to_numpy(),
        rows["num_nodes"].to_numpy(),
        rows["num_gpus"].to_numpy(dtype=float),
    )


def ring_time_per_byte(
    intra: np.ndarray, inter: np.ndarray, nodes: np.ndarray, gpus: np.ndarray
) -> np.ndarray:
    """Seconds a ring all-reduce spends per gradient byte: 2 (n - 1) / n bytes cross the
    slowest link of the ring (`ring_link_gbps`, from the links' GB/s); 0 on one GPU, NaN where
    the links are unknown."""
    link = ring_link_gbps(intra, inter, nodes) * 1e9
    return np.where(gpus > 1, 2 * (gpus - 1) / gpus / link, 0.0)


def ring_link_gbps(intra: np.ndarray, inter: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """GB/s of the slowest link a ring all-reduce crosses: the intra-node link on one node,
    the network (or the intra-node link, if slower) across nodes; NaN where unknown."""
    return np.where(nodes > 1, np.fmin(intra, inter), intra)


def sync_seconds(moved: np.ndarray, seconds_per_byte: np.ndarray) -> np.ndarray:
    """Synchronization time of `moved` effective bytes (0 on one GPU, NaN where unknown)."""
    return np.where(seconds_per_byte == 0, 0.0, moved * seconds_per_byte)


def distinct_groups(columns: list) -> tuple[np.ndarray, np.ndarray]:
    """(group code of each row, first row of each group) for the distinct combinations of
    `columns` (equal-length arrays or Series; missing values form their own group), factorized
    column by column, as pandas' MultiIndex would build one Python tuple per row."""
    combined = np.zeros(len(columns[0]), dtype=np.int64)
    for column in columns:
        text = isinstance(column, pd.Series) and isinstance(column.dtype, pd.StringDtype)
        # text hashed as stored (Arrow): no object array of every string, the same codes
        values = column.array if text else np.asarray(column)
        codes, uniques = pd.factorize(values, use_na_sentinel=False)
        combined = pd.factorize(combined * (len(uniques) + 1) + codes)[0]  # stays below n
    # the codes number the groups in order of their first rows already: what np.unique's
    # inverse would number them, without its sort
    groups = int(combined.max()) + 1 if len(combined) else 0
    first = np.empty(groups, dtype=np.int64)
    first[combined[::-1]] = np.arange(len(combined) - 1, -1, -1)  # the last write: the first
    return combined.astype(np.int64, copy=False), first


def _overhead_at(x: np.ndarray, y: np.ndarray, at: float) -> float:
    """Overhead at batch `at` from the same configuration's other batch sizes: linear between
    the nearest measured batch sizes on each side (log batch), the nearest one outside them."""
    order = np.argsort(x)
    x, y = np.log2(x[order]), y[order]
    return float(np.interp(np.log2(at), x, y))


def _affine_at(x: np.ndarray, y: np.ndarray, at: float) -> float:
    """Step time at batch `at` from one-GPU rows (x=batch, y=time): a least-squares line
    through two or more points (never below half the smallest time), a proportional scaling
    from a single point, NaN with none."""
    if len(x) == 0:
        return float("nan")
    if len(np.unique(x)) == 1:
        return float(np.median(y) * at / x[0]) if x[0] > 0 else float("nan")
    dx = x - x.mean()
    slope = float(dx @ (y - y.mean()) / (dx @ dx))  # least squares, as np.polyfit(x, y, 1)
    intercept = float(y.mean() - slope * x.mean())
    value = intercept + slope * at
    return float(max(value, 0.5 * y.min() * min(1.0, at / x.min())))
