"""The few rows of one request (a service call, a scheduler's question) through plain Python
and numpy: the same features, flags and answer as `ScalingFeatures.transform` and
`ScalingPredictor._flags` on their frame, without per-column pandas work (factorize, map,
isin, frame assembly), which on a handful of rows costs several times what the trees do. The
rows come as a `Table`: column name -> the rows' values, from the contract's checked records
(`datasets.contract.few_row_columns`) or from a checked frame (`frame_table`). Each row's
lookups call the same fitted tables and the arithmetic is `features.scaling.design_columns`;
the gbm models read the columns as the float matrix they would make of the frame. So the
answers are identical (tests/test_scaling_fast_path.py compares the paths)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perfcast.features.devices import (
    DEVICES,
    INTERCONNECT_COLUMNS,
    SPEC_COLUMNS,
    canonical_device,
    interconnect_of,
)
from perfcast.features.scaling import (
    BYTES_PER_PARAM,
    MODEL_PARAMS_M,
    OPTIONAL_NUMBERS,
    DesignInputs,
    ScalingFeatures,
    design_columns,
    design_frame,
    most_on_one_node,
    ring_link_gbps,
    ring_time_per_byte,
    sync_seconds,
)
from perfcast.predictor.regressors import QuantileGBM

if TYPE_CHECKING:
    from perfcast.predictor.scaling import ScalingPredictor

# Up to this many rows a prediction takes this path; a larger batch has few distinct keys
# for many rows, which the general path looks up once each.
FEW_ROWS = 32

Table = Mapping[str, Sequence]  # column name -> the values of a few rows


def frame_table(rows: pd.DataFrame) -> dict[str, list]:
    """A checked frame's columns as a Table."""
    return {str(name): rows[name].tolist() for name in rows.columns}


def _text(value: object) -> str:
    """A cluster name as `interconnect_frame` reads it: missing is ''."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value)


def own_numbers(table: Table, column: str) -> np.ndarray | None:
    """A row-supplied number column as the general path coerces it (`pd.to_numeric`, anything
    else NaN), None when absent."""
    values = table.get(column)
    if values is None:
        return None
    if all(v is None or type(v) is float or type(v) is int for v in values):
        return np.array([np.nan if v is None else v for v in values], dtype=float)
    return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=float)


def _amp(values: Sequence) -> np.ndarray:
    """`amp` as the general path reads it: 1.0, 0.0, NaN where missing."""
    return np.array([np.nan if _missing(v) else float(bool(v)) for v in values], dtype=float)


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def gpus_per_node(gpus: list[int], nodes: list[int], placements: list | None) -> list[int]:
    """`features.scaling.gpus_per_node_of` row by row."""
    out = []
    for i, (g, n) in enumerate(zip(gpus, nodes, strict=True)):
        most = most_on_one_node(placements[i]) if placements is not None else np.nan
        out.append(math.ceil(g / n) if math.isnan(most) else int(most))
    return out


def row_links(table: Table) -> np.ndarray:
    """(intra_node_bw_gbps, inter_node_bw_gbps) per row, as `interconnect_frame` finds them."""
    gpu_types = table["gpu_type"]
    clusters = table.get("cluster") or [""] * len(gpu_types)
    links = np.array(
        [interconnect_of(str(g), _text(c)) for g, c in zip(gpu_types, clusters, strict=True)],
        dtype=float,
    ).reshape(-1, 2)
    for k, column in enumerate(INTERCONNECT_COLUMNS):
        own = own_numbers(table, column)
        if own is not None:
            links[:, k] = np.where(own > 0, own, links[:, k])
    return links


@dataclass(frozen=True)
class FewRowFeatures:
    """The feature frame of `features.transform` as columns: the number columns, and each
    row's job (None for a job outside `categories`, as the frame's categorical has it)."""

    columns: dict[str, np.ndarray]
    jobs: list
    categories: pd.Index
    index: pd.Index | None = None  # the frame's (a RangeIndex when None)

    def column(self, name: str) -> np.ndarray:
        return self.columns[name]

    def frame(self) -> pd.DataFrame:
        index = pd.RangeIndex(len(self.jobs)) if self.index is None else self.index
        return design_frame(self.columns, self.jobs, self.categories, index)

    def matrix(self, gbm: QuantileGBM, mask: np.ndarray) -> np.ndarray:
        """The rows `mask` as `gbm` takes them (`QuantileGBM.columns_matrix`)."""
        return gbm.columns_matrix(
            {name: values[mask] for name, values in self.columns.items()},
            {"job": [job for job, keep in zip(self.jobs, mask, strict=True) if keep]},
        )


def few_row_design(
    features: ScalingFeatures, table: Table
) -> tuple[FewRowFeatures, np.ndarray, np.ndarray]:
    """(X, log_base) as `features.transform` gives them for the rows' frame (X as columns),
    and whether each row has no link facts at all (as `interconnect_frame` finds them)."""
    jobs, gpu_types = list(table["job"]), list(table["gpu_type"])
    gpus, nodes = list(table["num_gpus"]), list(table["num_nodes"])
    bszs = np.asarray(table["local_batch_size"])
    per_node = gpus_per_node(gpus, nodes, table.get("placement"))
    links = row_links(table)
    num_nodes = np.asarray(nodes)
    num_gpus = np.asarray(gpus, dtype=float)
    seconds_per_byte = ring_time_per_byte(links[:, 0], links[:, 1], num_nodes, num_gpus)

    params = np.array([MODEL_PARAMS_M.get(job, np.nan) for job in jobs], dtype=float)
    own_params = own_numbers(table, "params_m")
    if own_params is not None:
        params = np.where(own_params > 0, own_params, params)
    nominal = params * 1e6 * BYTES_PER_PARAM
    moved = np.array(
        [
            features.gradient_bytes(job, n > 1, gpu, b)
            for job, n, gpu, b in zip(jobs, nodes, gpu_types, nominal.tolist(), strict=True)
        ],
        dtype=float,
    )

    t1, found = [], []
    for job, gpu, g, n, gpn, bsz in zip(jobs, gpu_types, gpus, nodes, per_node, bszs, strict=True):
        t1.append(features.one_gpu_time(job, gpu, bsz, g == 1))
        found.append(features.overheads((job, g, n, gpn), gpu, bsz))
    found_arr = np.array(found, dtype=float).reshape(-1, 3)

    specs = {}
    devices = [DEVICES.get(canonical_device(str(g))) for g in gpu_types]
    for column in SPEC_COLUMNS:
        values = np.array([getattr(s, column) if s else np.nan for s in devices], dtype=float)
        own = own_numbers(table, column)
        specs[column] = values if own is None else np.where(np.isnan(own), values, own)

    amp = _amp(table["amp"]) if "amp" in table else None
    optional = {c: own_numbers(table, c) for c in OPTIONAL_NUMBERS}
    inputs = DesignInputs(
        num_gpus=num_gpus,
        num_nodes=np.asarray(nodes, dtype=float),
        gpus_per_node=np.asarray(per_node, dtype=float),
        local_batch_size=bszs.astype(float),
        t1=np.asarray(t1, dtype=float),
        same=found_arr[:, 0],
        cross=found_arr[:, 1],
        log_t1_ref=found_arr[:, 2],
        comm=sync_seconds(moved, seconds_per_byte),
        specs=specs,
        amp=amp,
        **optional,
    )
    columns, log_base = design_columns(inputs)
    known = set(features.jobs_)
    X = FewRowFeatures(columns, [job if job in known else None for job in jobs], features.jobs_)
    return X, log_base, np.isnan(links).all(axis=1)


def few_row_flags(
    predictor: ScalingPredictor, table: Table, per_node: list[int], links: np.ndarray
) -> dict[str, np.ndarray]:
    """`ScalingPredictor._flags` row by row (`per_node`: `gpus_per_node`, `links`:
    `row_links` of the rows)."""
    features = predictor.features_
    jobs, gpu_types = list(table["job"]), list(table["gpu_type"])
    gpus, nodes = list(table["num_gpus"]), list(table["num_nodes"])
    bszs = list(table["local_batch_size"])
    keys = list(zip(jobs, gpus, nodes, per_node, gpu_types, bszs, strict=True))
    measured = np.array([key in predictor.measured_ for key in keys], dtype=bool)
    multi = np.array(gpus) > 1
    max_gpus = [predictor.max_gpus_.get(str(job), predictor.max_gpus_any_) for job in jobs]
    ranges = np.array(
        [
            predictor.batch_range_.get((job, gpu), (np.nan, np.nan))
            for job, gpu in zip(jobs, gpu_types, strict=True)
        ],
        dtype=float,
    ).reshape(-1, 2)
    bsz = np.asarray(bszs, dtype=float)
    charted = [(job, gpu) in features.scaled_ for job, gpu in zip(jobs, gpu_types, strict=True)]
    uncharted = multi & ~np.array(charted, dtype=bool)
    known_jobs = set(features.jobs_)
    no_links = np.isnan(links).all(axis=1)
    num_nodes = np.asarray(nodes)
    link = ring_link_gbps(links[:, 0], links[:, 1], num_nodes)
    stated = [own_numbers(table, column) for column in INTERCONNECT_COLUMNS]
    return {
        "measured": measured,
        "uncharted": uncharted,
        "new_job": np.array([job not in known_jobs for job in jobs], dtype=bool),
        "new_gpu_type": np.array([g not in predictor.gpu_types_ for g in gpu_types], dtype=bool),
        "unmeasured_config": multi & ~measured & uncharted,
        "extrapolated_gpus": np.array(gpus) > np.asarray(max_gpus, dtype=float),
        "extrapolated_batch": (bsz < ranges[:, 0]) | (bsz > ranges[:, 1]),
        "no_interconnect_facts": multi & no_links & uncharted,
        "slower_links": multi & uncharted & predictor.slower_links(link, num_nodes > 1, stated),
    }
