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
import pyarrow as pa

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
    distinct_groups,
    most_on_one_node,
    ring_link_gbps,
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
    seconds_per_byte = features.seconds_per_byte(links[:, 0], links[:, 1], num_nodes, num_gpus)

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


# Many rows: a checked frame's columns worked out once per distinct value. A recommendation's
# 10^5 candidates are as many distinct rows, but one job, one GPU type and cluster, a few
# batch sizes: every lookup (one-GPU time, links, specs, gradient bytes, what the training
# rows cover) is made per distinct combination of the columns it reads and broadcast by
# integer codes, instead of one pandas operation on 10^5-row columns per lookup.
# tests/test_recommend_fast_path.py holds it to `ScalingFeatures.transform` and
# `ScalingPredictor._flags` on the same frames.


def text_codes(values: pd.Series) -> tuple[np.ndarray, list]:
    """(code of each row, the distinct values): a column's values as integer codes, a missing
    value one of the distinct values (as `distinct_groups` counts it). A categorical column's
    codes are taken as they are (its categories hold each distinct text once)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        codes = values.cat.codes.to_numpy().astype(np.int64)
        uniques = values.cat.categories.tolist()
        if (codes < 0).any():
            codes = np.where(codes < 0, len(uniques), codes)
            uniques.append(None)
        return codes, uniques
    text = isinstance(values.dtype, pd.StringDtype)
    codes, uniques = pd.factorize(
        values.array if text else values.to_numpy(), use_na_sentinel=False
    )
    return codes.astype(np.int64, copy=False), uniques.tolist()  # (iterating Arrow is slow)


def most_on_one_node_of(texts: list) -> np.ndarray:
    """`most_on_one_node` of each of `texts` (NaN where not a string of digits), over the
    texts' code points at once for the strings of ASCII digits a checked placement holds."""
    out = np.full(len(texts), np.nan)
    if all(type(t) is str for t in texts) and "".join(texts).isascii() and all(texts):
        plain = range(len(texts))  # a checked column's placements: every one at once
    else:
        plain = [i for i, t in enumerate(texts) if isinstance(t, str) and t.isascii() and t]
    if plain:
        chosen = texts if len(plain) == len(texts) else [texts[i] for i in plain]
        lengths = np.fromiter(map(len, chosen), dtype=np.int64, count=len(chosen))
        points = np.frombuffer("".join(chosen).encode("ascii"), dtype=np.uint8)
        starts = np.cumsum(lengths) - lengths
        digit = (points >= ord("0")) & (points <= ord("9"))
        if digit.all():  # (a candidate table's 10^4 placements: no count per text needed)
            all_digits = np.ones(len(chosen), dtype=bool)
        else:
            running = np.concatenate([[0], np.cumsum(~digit)])
            all_digits = running[starts + lengths] == running[starts]
        biggest = np.maximum.reduceat(points, starts).astype(float) - ord("0")
        out[np.asarray(plain)] = np.where(all_digits, biggest, np.nan)
    rest = np.ones(len(texts), dtype=bool)
    rest[np.asarray(plain, dtype=np.int64)] = False
    for i in np.flatnonzero(rest):  # anything else (None, non-ASCII text): one by one
        out[i] = most_on_one_node(texts[i])
    return out


def placement_most(placements: pd.Series) -> np.ndarray:
    """`most_on_one_node` of each row's placement (NaN where none), worked out per distinct
    placement: a categorical's categories read from their Arrow bytes at once where each is
    a non-empty string of ASCII digits (a candidate table's 10^4 placements), else
    `most_on_one_node_of` the distinct texts."""
    if isinstance(placements.dtype, pd.CategoricalDtype):
        per_category = _ascii_digits_max(placements.cat.categories)
        if per_category is not None:  # code -1, a missing placement: the NaN appended
            return np.append(per_category, np.nan)[placements.array.codes]
    codes, texts = text_codes(placements)
    return most_on_one_node_of(texts)[codes]


def _ascii_digits_max(texts: pd.Index) -> np.ndarray | None:
    """The largest digit of each of `texts`, from the bytes of their Arrow array (no Python
    string made); None unless they are Arrow text, each a non-empty string of ASCII digits."""
    dtype = texts.dtype
    if not (isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow") or not len(texts):
        return None
    array = pa.array(texts.array)  # (its own Arrow data, through __arrow_array__)
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.null_count or not (
        pa.types.is_string(array.type) or pa.types.is_large_string(array.type)
    ):
        return None
    width = np.int64 if pa.types.is_large_string(array.type) else np.int32
    _, offset_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offset_buffer, dtype=width)[
        array.offset : array.offset + len(array) + 1
    ]
    if data_buffer is None or (np.diff(offsets) <= 0).any():
        return None  # an empty text: not a placement
    data = np.frombuffer(data_buffer, dtype=np.uint8)[offsets[0] : offsets[-1]]
    if not ((data >= ord("0")) & (data <= ord("9"))).all():
        return None
    return np.maximum.reduceat(data, (offsets[:-1] - offsets[0]).astype(np.intp)) - float(ord("0"))


def _number_column(rows: pd.DataFrame, column: str) -> np.ndarray | None:
    """A row-supplied number column as `pd.to_numeric(..., errors="coerce")` reads it (None
    when absent)."""
    if column not in rows.columns:
        return None
    return pd.to_numeric(rows[column], errors="coerce").to_numpy(dtype=float)


def by_code(values: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """`values[codes]`: each row's value by its code into the distinct values; one distinct
    value (a request's one job, one GPU type) repeated without reading 10^5 codes."""
    if len(values) == 1:
        return np.full(len(codes), values[0], dtype=values.dtype)
    return values[codes]


def per_key(parts: Sequence[tuple[np.ndarray, int]], compute, width: int = 1) -> np.ndarray:
    """`compute(*codes)` once per distinct combination of the parts' codes (each part: the
    rows' codes and how many codes there are), as each row's value (width 1) or row of
    `width` values. The combinations are numbered densely when there are not many more of
    them than rows (one pass, no sort), else by `distinct_groups`."""
    n = len(parts[0][0])
    size = math.prod(radix for _, radix in parts)
    if size == 1:  # one key (a request's one job and GPU type): no codes to combine
        value = np.array(compute(*(0 for _ in parts)), dtype=float).reshape(1, width)
        out = np.repeat(value, n, axis=0)
    elif size <= max(4 * n, 4096):
        combined = np.zeros(n, dtype=np.int64)
        for codes, radix in parts:
            if radix > 1:  # (a part of one code, 0, leaves the combination as it is)
                combined = combined * radix + codes
        present = np.zeros(size, dtype=bool)
        present[combined] = True
        keys = np.flatnonzero(present)
        decoded, rest = [], keys
        for _, radix in reversed(parts):
            rest, code = np.divmod(rest, radix)
            decoded.append(code)
        decoded.reverse()
        values = [compute(*key) for key in zip(*(d.tolist() for d in decoded), strict=True)]
        table = np.full((size, width), np.nan)
        if keys.size:
            table[keys] = np.array(values, dtype=float).reshape(-1, width)
        out = table[combined]
    else:
        group, first = distinct_groups([codes for codes, _ in parts])
        firsts = [codes[first].tolist() for codes, _ in parts]
        values = [compute(*key) for key in zip(*firsts, strict=True)]
        out = np.array(values, dtype=float).reshape(-1, width)[group]
    return out[:, 0] if width == 1 else out


def _int_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(code of each row, the distinct values) of a number column (NaN one value). Whole
    numbers of a small range are coded by their offset from the least, no hashing: the
    values between that no row has are codes no row has (`per_key` looks up only those some
    row has)."""
    if values.dtype.kind in "iu" and len(values):
        least, most = int(values.min()), int(values.max())
        if most - least < max(len(values), 4096):
            return values - least, np.arange(least, most + 1, dtype=values.dtype)
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return codes.astype(np.int64, copy=False), np.asarray(uniques)


def _small_counts(column) -> np.ndarray | None:
    """The column as non-negative integers that are equal exactly where its values are, or
    None when it is not such a column (text, negative or fractional numbers, -0.0)."""
    if isinstance(column, pd.Series) and isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(dtype=np.int64) + 1  # missing (-1): its own value
    if isinstance(column, pd.Series) and not isinstance(column.dtype, np.dtype):
        return None  # text, nullable numbers: their codes
    values = np.asarray(column)
    if values.dtype.kind in "iu":
        if values.size and values.min() < 0:
            return None
        return values.astype(np.int64, copy=False)
    if values.dtype.kind == "f":
        if not (np.isfinite(values).all() and (values >= 0).all()):
            return None
        if np.signbit(values).any() or (values > 2**52).any():
            return None
        whole = values.astype(np.int64)
        return whole if (whole == values).all() else None
    return None


def integer_codes(column) -> np.ndarray:
    """The column as non-negative integers, equal exactly where its values are: whole
    numbers (and a categorical's codes) as `_small_counts` reads them, else the codes of
    their factorization (a missing value one of them)."""
    values = _small_counts(column)
    if values is None:
        text = isinstance(column, pd.Series) and isinstance(column.dtype, pd.StringDtype)
        raw = column.array if text else np.asarray(column)
        values = pd.factorize(raw, use_na_sentinel=False)[0].astype(np.int64, copy=False)
    return values


def radix_groups(columns: list) -> tuple[np.ndarray, np.ndarray]:
    """What `distinct_groups(columns)` answers (the same codes, in order of the groups' first
    rows, and the same first rows), factorizing once: the columns of non-negative whole
    numbers (and categoricals' codes) combined as digits of one integer, the others by their
    codes. Falls back to `distinct_groups` when the combination would not fit an int64."""
    n = len(columns[0])
    digits = []
    for column in columns:
        values = integer_codes(column)
        if n and values.min() > 0:  # counted from the least: a smaller, maybe dense, key
            values = values - values.min()
        digits.append(values)
    radices = [int(d.max()) + 1 if n else 1 for d in digits]
    if not n or math.prod(radices) >= 2**62:
        return distinct_groups(columns)
    combined = np.zeros(n, dtype=np.int64)
    for values, radix in zip(digits, radices, strict=True):
        if radix > 1:  # (a column of one value leaves the key as it is)
            combined = combined * radix + values
    size = math.prod(radices)
    if size <= max(4 * n, 4096):  # dense: each combination's first row, no hashing
        firsts = np.full(size, n, dtype=np.int64)
        firsts[combined[::-1]] = np.arange(n - 1, -1, -1)  # the last write: the first
        keys = np.flatnonzero(firsts < n)
        first = np.sort(firsts[keys])  # the groups in order of their first rows
        number = np.empty(size, dtype=np.int64)
        number[combined[first]] = np.arange(len(first))
        return number[combined], first
    codes, uniques = pd.factorize(combined)
    first = np.empty(len(uniques), dtype=np.int64)
    first[codes[::-1]] = np.arange(n - 1, -1, -1)  # the last write: the first
    return codes.astype(np.int64, copy=False), first


@dataclass(frozen=True)
class ManyRows:
    """A checked frame's columns for `many_row_design` and `many_row_flags`: the text columns
    as codes into their distinct values, the numbers as arrays, each row's GPUs per node and
    its links (`interconnect_frame`'s)."""

    rows: pd.DataFrame
    job: np.ndarray
    jobs: list
    gpu: np.ndarray
    gpu_types: list
    cluster: np.ndarray
    clusters: list
    num_gpus: np.ndarray
    num_nodes: np.ndarray
    local_batch_size: np.ndarray
    per_node: np.ndarray
    link_facts: np.ndarray  # INTERCONNECTS' links per (gpu code, cluster code), flattened

    @classmethod
    def of(cls, rows: pd.DataFrame) -> ManyRows:
        job, jobs = text_codes(rows["job"])
        gpu, gpu_types = text_codes(rows["gpu_type"])
        if "cluster" in rows.columns:
            cluster, clusters = text_codes(rows["cluster"])
        else:
            cluster, clusters = np.zeros(len(rows), dtype=np.int64), [""]
        num_gpus = rows["num_gpus"].to_numpy()
        num_nodes = rows["num_nodes"].to_numpy()
        even = np.ceil(num_gpus / num_nodes)
        if "placement" in rows.columns:  # `gpus_per_node_of`, per distinct placement
            most = placement_most(rows["placement"])
            even = np.where(np.isnan(most), even, most)
        facts = np.array(
            [interconnect_of(str(g), _text(c)) for g in gpu_types for c in clusters], dtype=float
        ).reshape(-1, len(INTERCONNECT_COLUMNS))
        return cls(
            rows=rows,
            job=job,
            jobs=jobs,
            gpu=gpu,
            gpu_types=gpu_types,
            cluster=cluster,
            clusters=clusters,
            num_gpus=num_gpus,
            num_nodes=num_nodes,
            local_batch_size=rows["local_batch_size"].to_numpy(),
            per_node=even.astype("int64"),
            link_facts=facts,
        )

    def links(self, stated: Sequence[np.ndarray | None]) -> tuple[np.ndarray, np.ndarray]:
        """(intra_node_bw_gbps, inter_node_bw_gbps) of the rows as `interconnect_frame` finds
        them, two arrays; `stated`: the rows' own values of the two columns (None: absent)."""
        # (one GPU type and cluster: its links repeated, no codes to look up)
        one = len(self.link_facts) == 1
        codes = self.gpu if one else self.gpu * len(self.clusters) + self.cluster
        out = []
        for facts, own in zip(self.link_facts.T, stated, strict=True):
            values = by_code(np.ascontiguousarray(facts), codes)
            out.append(values if own is None else np.where(own > 0, own, values))
        return out[0], out[1]

    def stated_links(self) -> list[np.ndarray | None]:
        return [_number_column(self.rows, column) for column in INTERCONNECT_COLUMNS]

    def _pair(self) -> tuple[tuple[np.ndarray, int], tuple[np.ndarray, int]]:
        return (self.job, len(self.jobs)), (self.gpu, len(self.gpu_types))

    def measured_among(self, keys: frozenset, columns: Sequence[np.ndarray]) -> np.ndarray:
        """Whether each row's (job, *columns, gpu_type, local_batch_size) is in `keys` (the
        measured configurations), looked up only for rows whose GPU count and batch size some
        key has."""
        gpus = np.array(sorted({key[1] for key in keys}), dtype=np.int64)
        bszs = np.array(sorted({key[-1] for key in keys}), dtype=np.int64)
        found = np.zeros(len(self.job), dtype=bool)
        maybe = np.flatnonzero(np.isin(self.num_gpus, gpus) & np.isin(self.local_batch_size, bszs))
        if maybe.size:
            jobs, gpu_types = self.jobs, self.gpu_types
            parts = [self.job, *(np.asarray(c) for c in columns), self.gpu, self.local_batch_size]
            group, first = radix_groups([part[maybe] for part in parts])
            distinct = zip(*(part[maybe][first].tolist() for part in parts), strict=True)
            hit = [(jobs[j], *middle, gpu_types[g], b) in keys for j, *middle, g, b in distinct]
            found[maybe] = np.array(hit, dtype=bool)[group]
        return found


def many_row_flags(predictor: ScalingPredictor, many: ManyRows) -> dict[str, np.ndarray]:
    """`ScalingPredictor._flags` of `many.rows`, each lookup once per distinct key."""
    features = predictor.features_
    jobs, gpu_types = many.jobs, many.gpu_types
    job_pair, gpu_pair = many._pair()
    columns = (many.num_gpus, many.num_nodes, many.per_node)
    measured = many.measured_among(predictor.measured_, columns)
    multi = many.num_gpus > 1
    max_gpus = by_code(
        np.array(
            [predictor.max_gpus_.get(str(job), predictor.max_gpus_any_) for job in jobs],
            dtype=float,
        ),
        many.job,
    )
    ranges = per_key(
        [job_pair, gpu_pair],
        lambda j, g: predictor.batch_range_.get((jobs[j], gpu_types[g]), (np.nan, np.nan)),
        width=2,
    )
    bsz = many.local_batch_size.astype(float)
    charted = per_key(
        [job_pair, gpu_pair], lambda j, g: (jobs[j], gpu_types[g]) in features.scaled_
    )
    uncharted = multi & ~(charted > 0)
    known_jobs = set(features.jobs_)
    stated = many.stated_links()
    intra, inter = many.links(stated)
    no_links = np.isnan(intra) & np.isnan(inter)
    link = ring_link_gbps(intra, inter, many.num_nodes)
    return {
        "measured": measured,
        "uncharted": uncharted,
        "new_job": by_code(np.array([job not in known_jobs for job in jobs], dtype=bool), many.job),
        "new_gpu_type": by_code(
            np.array([g not in predictor.gpu_types_ for g in gpu_types], dtype=bool), many.gpu
        ),
        "unmeasured_config": multi & ~measured & uncharted,
        "extrapolated_gpus": many.num_gpus > max_gpus,
        "extrapolated_batch": (bsz < ranges[:, 0]) | (bsz > ranges[:, 1]),
        "no_interconnect_facts": multi & no_links & uncharted,
        "slower_links": multi
        & uncharted
        & predictor.slower_links(link, many.num_nodes > 1, stated),
    }


@dataclass(frozen=True)
class ManyRowFeatures(FewRowFeatures):
    """`FewRowFeatures` of many rows: `jobs` holds the distinct jobs (None for one outside
    `categories`), `job_codes` each row's position in it and `category_codes` each row's
    code in `categories` (-1 outside). The gbm models get their float matrix straight from
    the columns (no frame made, masked and stacked again), the other families the frame."""

    job_codes: np.ndarray | None = None
    category_codes: np.ndarray | None = None

    def frame(self) -> pd.DataFrame:
        index = pd.RangeIndex(len(self.job_codes)) if self.index is None else self.index
        X = pd.DataFrame(self.columns, index=index)
        X["job"] = pd.Categorical.from_codes(self.category_codes, categories=self.categories)
        return X

    def matrix(self, gbm: QuantileGBM, mask: np.ndarray) -> np.ndarray:
        """The rows `mask` as `gbm` takes them: `QuantileGBM.columns_matrix` of the distinct
        jobs gives each one's code in the job column, broadcast to the rows."""
        names = list(gbm.models_[0].feature_name_)
        every = bool(mask.all())
        rows = self.job_codes if every else self.job_codes[mask]
        if not names:
            return np.empty((len(rows), 0))
        if "job" in names:
            dummy = {name: np.zeros(len(self.jobs)) for name in self.columns}
            per_job = gbm.columns_matrix(dummy, {"job": self.jobs})[:, names.index("job")]
        chosen = None if every else np.flatnonzero(mask)
        arrays = [per_job if name == "job" else self.columns[name] for name in names]
        # column-major: each column copied once, straight into its row of the matrix, as
        # LightGBM reads either layout (the same numbers, the same leaves); no interleaving
        # of 10^5 rows into a row-major matrix, no masked copy stacked again
        out = np.empty((len(names), len(rows)), dtype=np.result_type(*arrays))
        for k, (name, values) in enumerate(zip(names, arrays, strict=True)):
            at = rows if name == "job" else None if every else chosen
            if at is None:
                out[k] = values
            elif values.dtype == out.dtype:  # (in range: "clip" only spares a buffer)
                np.take(values, at, out=out[k], mode="clip")
            else:
                out[k] = values[at]
        return out.T


def many_row_design(
    features: ScalingFeatures, many: ManyRows
) -> tuple[ManyRowFeatures, np.ndarray]:
    """(X, log_base) as `features.transform(many.rows)` gives them (X as columns: its
    `frame()` is that frame)."""
    rows, n = many.rows, len(many.job)
    jobs, gpu_types = many.jobs, many.gpu_types
    job_pair, gpu_pair = many._pair()
    gpus, nodes, per_node = many.num_gpus, many.num_nodes, many.per_node
    bsz = many.local_batch_size
    single = gpus == 1
    bsz_code, bsz_values = _int_codes(bsz)
    t1 = per_key(
        [job_pair, gpu_pair, (bsz_code, len(bsz_values)), (single.astype(np.int64), 2)],
        lambda j, g, b, s: features.one_gpu_time(jobs[j], gpu_types[g], bsz_values[b], bool(s)),
    )

    # overheads: the rows whose configuration (job, GPUs, nodes, GPUs per node) was measured
    found = np.full((3, n), np.nan)  # (same, cross, log_t1_ref), each row contiguous
    sync_gpus = np.array(sorted({config[1] for config in features.sync_}), dtype=np.int64)
    maybe = np.flatnonzero((gpus > 1) & np.isin(gpus, sync_gpus))
    if maybe.size:  # each distinct (configuration, GPU type, batch) of them once
        parts = [many.job, gpus, nodes, per_node, many.gpu, bsz]
        group, first = radix_groups([part[maybe] for part in parts])
        values = []
        distinct = zip(*(part[maybe][first].tolist() for part in parts), strict=True)
        for j, g, k, p, gpu, b in distinct:
            config = (jobs[j], g, k, p)
            if config in features.sync_:
                values.append(features._overheads(config, gpu_types[gpu], float(b)))
            else:
                values.append((np.nan, np.nan, np.nan))
        found[:, maybe] = np.array(values, dtype=float).reshape(-1, 3)[group].T

    # communication: gradient bytes per (job, multi-node, GPU type, nominal bytes)
    intra, inter = many.links(many.stated_links())
    gpus_float = gpus.astype(float)  # (read twice)
    seconds_per_byte = features.seconds_per_byte(intra, inter, nodes, gpus_float)
    params = np.array([MODEL_PARAMS_M.get(job, np.nan) for job in jobs], dtype=float)
    own_params = _number_column(rows, "params_m")
    if own_params is None:  # each job's nominal bytes: the job's code is theirs
        nominal_code, nominal_values = many.job, params * 1e6 * BYTES_PER_PARAM
    else:
        params = np.where(own_params > 0, own_params, params[many.job])
        nominal_code, nominal_values = _int_codes(params * 1e6 * BYTES_PER_PARAM)
    multi = nodes > 1
    moved = per_key(
        [job_pair, (multi.astype(np.int64), 2), gpu_pair, (nominal_code, len(nominal_values))],
        lambda j, m, g, b: features.gradient_bytes(
            jobs[j], bool(m), gpu_types[g], float(nominal_values[b])
        ),
    )

    # device specs: the datasheet's per GPU type, the rows' own values where given
    specs = {}
    devices = [DEVICES.get(canonical_device(str(g))) for g in gpu_types]
    for column in SPEC_COLUMNS:
        values = np.array([getattr(s, column) if s else np.nan for s in devices], dtype=float)
        own = _number_column(rows, column)
        if own is not None:
            values = np.where(np.isnan(own), values[many.gpu], own)
        elif len(values) > 1:
            values = values[many.gpu]
        specs[column] = values  # (rows of one GPU type, none their own: its one value)

    amp = None
    if "amp" in rows.columns:
        amp = rows["amp"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    optional = {
        c: rows[c].to_numpy(dtype=float) if c in rows.columns else None for c in OPTIONAL_NUMBERS
    }
    inputs = DesignInputs(
        num_gpus=gpus_float,
        num_nodes=nodes.astype(float),
        gpus_per_node=per_node.astype(float),
        local_batch_size=bsz.astype(float),
        t1=t1,
        same=found[0],
        cross=found[1],
        log_t1_ref=found[2],
        comm=sync_seconds(moved, seconds_per_byte),
        specs=specs,
        amp=amp,
        **optional,
    )
    columns, log_base = design_columns(inputs)
    categories = features.jobs_
    known = categories.get_indexer(pd.Index(jobs, dtype=object))
    X = ManyRowFeatures(
        columns,
        [job if code >= 0 else None for job, code in zip(jobs, known.tolist(), strict=True)],
        categories,
        rows.index,
        job_codes=many.job,
        category_codes=by_code(known, many.job),
    )
    return X, log_base
