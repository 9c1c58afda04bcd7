"""The data contract: the four tables every loader, profiler and predictor speaks.

`docs/data-contract.md` is the prose version of this module; keep them in step. Each table is a
pandera schema; `validate(df, kind, source=...)` coerces types, checks every rule and either
returns the clean table or raises one `ContractError` naming the file, the row and the column
of the first problem (and listing a few more). Rows are numbered from 1 in the order of the
data, not counting the header.

The `graph` kind is stored in one "long" table: one row per operator node, the sample's
columns (model, device, specs, target) repeated on every node of that sample. That keeps each
graph dataset a single CSV or Parquet file that validates like any other table.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Literal, NamedTuple

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.backends.pandas import builtin_checks  # noqa: F401 (registers Check.gt etc.)
from pandera.engines import pandas_engine as pa_engine

from perfcast.datasets.placements import digit_totals
from perfcast.errors import ContractError

Kind = Literal["scaling", "interference", "trace", "graph", "plan"]
KINDS: tuple[Kind, ...] = ("scaling", "interference", "trace", "graph", "plan")


def _req(dtype: object, *checks: pa.Check) -> pa.Column:
    return pa.Column(dtype, list(checks), nullable=False, required=True)


def _opt(dtype: object, *checks: pa.Check) -> pa.Column:
    return pa.Column(dtype, list(checks), nullable=True, required=False)


_POS = pa.Check.gt(0)
_NONNEG = pa.Check.ge(0)
_GE1 = pa.Check.ge(1)
_PCT = pa.Check.in_range(0, 100)
_NONEMPTY = pa.Check.str_length(min_value=1)
_FINITE = pa.Check(lambda s: ~s.isin([math.inf, -math.inf]), name="finite")
_DIGITS = pa.Check.str_matches(r"^[0-9]+$", name="digits")

# Physical bounds of a scaling row: no cluster has more. The contract, the service's request
# models (serving/rows.py, serving/schemas.py) and so the CLI refuse the same rows with them.
MAX_GPUS = 65_536  # num_gpus
MAX_NODES = 8_192  # num_nodes
MAX_GPUS_PER_NODE = 64  # num_gpus <= MAX_GPUS_PER_NODE * num_nodes
MAX_LOCAL_BATCH_SIZE = 65_536  # local_batch_size
MAX_LINK_BW_GBPS = 10_000.0  # intra_node_bw_gbps, inter_node_bw_gbps (GB/s)


def at_most_text(column: str, bound: float) -> str:
    """How a value over a bound is refused, here and by the service: "num_gpus must be <= 65536"."""
    return f"{column} must be <= {bound:g}"


def at_most(column: str, bound: float) -> pa.Check:
    """`column <= bound`, its failure worded by `at_most_text`."""
    return pa.Check.le(bound, error=at_most_text(column, bound))


def upper_bounds(kind: str) -> dict[str, float]:
    """The columns of the table `kind` with an upper bound (`at_most`), and the bound."""
    return {
        name: check.statistics["max_value"]
        for name, column in SCHEMAS[kind].columns.items()
        for check in column.checks
        if check.name == "less_than_or_equal_to"
    }


def _gpus_per_node(df: pd.DataFrame) -> pd.Series:
    return df["num_gpus"] <= MAX_GPUS_PER_NODE * df["num_nodes"]


GPUS_PER_NODE_RULE = (
    f"num_gpus must be <= {MAX_GPUS_PER_NODE} * num_nodes ({MAX_GPUS_PER_NODE} GPUs per node)"
)

SCALING = pa.DataFrameSchema(
    {
        "job": _req(str, _NONEMPTY),
        "gpu_type": _req(str, _NONEMPTY, pa.Check(lambda s: s == s.str.lower(), name="lower_case")),
        "num_nodes": _req("int64", _GE1, at_most("num_nodes", MAX_NODES)),
        "num_gpus": _req("int64", _GE1, at_most("num_gpus", MAX_GPUS)),
        "placement": _opt(str, _DIGITS),
        "local_batch_size": _req("int64", _GE1, at_most("local_batch_size", MAX_LOCAL_BATCH_SIZE)),
        "amp": _opt("boolean"),
        "step_time_s": _req(float, _POS, _FINITE),
        "sync_time_s": _opt(float, _NONNEG, _FINITE),
        "source": _opt(str),
        "cluster": _opt(str),  # names the links in features.devices.INTERCONNECTS
        # GB/s, overrides that table
        "intra_node_bw_gbps": _opt(
            float, _POS, _FINITE, at_most("intra_node_bw_gbps", MAX_LINK_BW_GBPS)
        ),
        "inter_node_bw_gbps": _opt(
            float, _POS, _FINITE, at_most("inter_node_bw_gbps", MAX_LINK_BW_GBPS)
        ),
    },
    checks=[
        pa.Check(lambda df: df["num_gpus"] >= df["num_nodes"], name="num_gpus >= num_nodes"),
        pa.Check(_gpus_per_node, name="num_gpus per node", error=GPUS_PER_NODE_RULE),
    ],
    coerce=True,
    strict=False,
    name="scaling",
)

_PAIR_COLUMNS: dict[str, pa.Column] = {"gpu_type": _req(str, _NONEMPTY)}
for _side in ("a", "b"):
    _PAIR_COLUMNS |= {
        f"{_side}_job": _req(str, _NONEMPTY),
        f"{_side}_batch_size": _req("int64", _GE1),
        f"{_side}_amp": _opt("boolean"),
        f"{_side}_solo_throughput": _opt(float, _POS, _FINITE),
        f"{_side}_gpu_util": _opt(float, _PCT),
        f"{_side}_mem_util": _opt(float, _PCT),
        f"{_side}_mem_mb": _opt(float, _NONNEG, _FINITE),
        f"{_side}_speed": _req(float, _POS, _FINITE),
    }
# how the two jobs shared the device: taking turns (two processes, no MPS), kernels at once
# through an MPS server, or separate MIG slices (predictor/interference.py uses time-slice)
_PAIR_COLUMNS["sharing"] = _opt(str, pa.Check.isin(["time-slice", "mps", "mig"]))
INTERFERENCE = pa.DataFrameSchema(_PAIR_COLUMNS, coerce=True, strict=False, name="interference")

TRACE = pa.DataFrameSchema(
    {
        "job_id": _req(str, _NONEMPTY, pa.Check(lambda s: ~s.duplicated(), name="unique")),
        "submit_time_s": _req(float, _NONNEG, _FINITE),
        "num_gpus": _req("int64", _NONNEG),
        "duration_s": _req(float, _POS, _FINITE),
        "user": _opt(str),
        "vc": _opt(str),
        "job": _opt(str),
        "status": _opt(str),
        "batch_size": _opt("Int64", _GE1),
        "iterations": _opt("Int64", _NONNEG),
        "source": _opt(str),  # the trace the job comes from (datasets.load names it)
    },
    coerce=True,
    strict=False,
    name="trace",
)


def _is_json_list(value: object) -> bool:
    try:
        return isinstance(json.loads(str(value)), list)
    except ValueError:
        return False


def _json_list(s: pd.Series) -> pd.Series:
    return s.map(_is_json_list)


_JSON_LIST = pa.Check(_json_list, name="json_list")

GRAPH_SAMPLE_COLUMNS = (
    "sample_id", "model", "device", "mem_gb", "mem_bw_gbps", "num_sm", "peak_tflops_fp32",
    "l2_mb", "mode", "batch_size", "seq_len", "e2e_latency_ms",
)  # fmt: skip

GRAPH = pa.DataFrameSchema(
    {
        # sample columns, constant within a sample_id
        "sample_id": _req(str, _NONEMPTY),
        "model": _req(str, _NONEMPTY),
        "device": _req(str, _NONEMPTY),
        "mem_gb": _opt(float, _POS),
        "mem_bw_gbps": _opt(float, _POS),
        "num_sm": _opt(float, _POS),
        "peak_tflops_fp32": _opt(float, _POS),
        "l2_mb": _opt(float, _POS),
        "mode": _req(str, pa.Check.isin(["train", "inference"])),
        "batch_size": _req("int64", _GE1),
        "seq_len": _opt("Int64", _GE1),
        "e2e_latency_ms": _req(float, _POS, _FINITE),
        # node columns
        "node_id": _req("int64", _NONNEG),
        "op": _req(str, _NONEMPTY),
        "input_shapes": _req(str, _JSON_LIST),
        "output_shape": _req(str, _JSON_LIST),
        "flops": _req(float, _NONNEG, _FINITE),
        "bytes": _req(float, _NONNEG, _FINITE),
        "inputs": _req(str, _JSON_LIST),
        "params": _opt(float, _NONNEG),
        "latency_ms": _opt(float, _NONNEG, _FINITE),
    },
    coerce=True,
    strict=False,
    name="graph",
)

# plan: a SQL engine's physical plan (the big-data DAG) run under some engine settings. Long form
# like `graph`: one row per plan operator, the run's columns repeated on each of its operators.
PLAN_RUN_COLUMNS = (
    "sample_id", "query", "engine", "scale_factor", "threads", "memory_limit_mb",
    "e2e_latency_ms",
)  # fmt: skip

PLAN = pa.DataFrameSchema(
    {
        "sample_id": _req(str, _NONEMPTY),
        "query": _req(str, _NONEMPTY),
        "engine": _req(str, _NONEMPTY),
        "scale_factor": _req(float, _POS),
        "threads": _req("int64", _GE1),
        "memory_limit_mb": _opt(float, _POS),
        "e2e_latency_ms": _req(float, _POS, _FINITE),
        "node_id": _req("int64", _NONNEG),
        "op": _req(str, _NONEMPTY),
        "inputs": _req(str, _JSON_LIST),
        "cardinality": _opt(float, _NONNEG),
        "latency_ms": _opt(float, _NONNEG, _FINITE),
        # stage DAGs (Spark): a node is a stage of `num_tasks` tasks of `task_ms` each
        "num_tasks": _opt("Int64", _GE1),
        "task_ms": _opt(float, _NONNEG, _FINITE),
    },
    coerce=True,
    strict=False,
    name="plan",
)

SCHEMAS: dict[str, pa.DataFrameSchema] = {
    "scaling": SCALING,
    "interference": INTERFERENCE,
    "trace": TRACE,
    "graph": GRAPH,
    "plan": PLAN,
}

_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f"}


def _normalize_booleans(df: pd.DataFrame, schema: pa.DataFrameSchema) -> pd.DataFrame:
    """Accept the spellings of true/false that CSV writers produce; leave anything else alone
    so the schema reports it."""
    for name, column in schema.columns.items():
        is_text = name in df.columns and not pd.api.types.is_bool_dtype(df[name])
        if is_text and str(column.dtype) == "boolean":

            def parse(v: object) -> object:
                if v is None or (isinstance(v, float) and math.isnan(v)):
                    return pd.NA
                text = str(v).strip().lower()
                if text in _TRUE:
                    return True
                if text in _FALSE:
                    return False
                return v

            df[name] = df[name].astype(object).map(parse)  # a categorical stays one otherwise
    return df


def validate(df: pd.DataFrame, kind: str, *, source: str | None = None) -> pd.DataFrame:
    """Return `df` coerced to the contract table `kind`, or raise `ContractError`.

    `source` names the file (or dataset) in the error message.
    """
    if kind not in SCHEMAS:
        raise ContractError(f"unknown table kind {kind!r}; expected one of {', '.join(KINDS)}")
    schema = SCHEMAS[kind]
    if df.empty:
        raise ContractError(f"the {kind} table is empty", file=source)
    missing = [n for n, c in schema.columns.items() if c.required and n not in df.columns]
    if missing:
        raise ContractError(
            f"missing required column(s) {', '.join(missing)} for a {kind} table",
            file=source,
            column=missing[0],
        )
    # copy-on-write (always, from pandas 3): a new frame the caller's never sees written to,
    # without copying 10^5 rows eagerly
    df = _normalize_booleans(df.reset_index(drop=True), schema)
    _check_whole_numbers(df, schema, source)
    placements = None  # a categorical placement column's codes and categories, before coercion
    if kind == "scaling" and "placement" in df.columns:
        placement = df["placement"]
        text = isinstance(placement.dtype, pd.CategoricalDtype) and _all_text(
            placement.cat.categories
        )
        if text:  # the coerced column holds these very strings
            placements = placement.cat.codes.to_numpy(), placement.cat.categories
    clean = _passing_table(df, schema)
    if clean is None:  # something fails: pandera finds and words every problem
        try:
            clean = schema.validate(_uncategorized(df, schema), lazy=True)
        except pa.errors.SchemaErrors as err:
            raise _contract_error(err.failure_cases, kind, source) from None
    if kind == "scaling":
        _check_placement(clean, source, placements)
    if kind == "graph":
        _check_constant_within_sample(clean, GRAPH_SAMPLE_COLUMNS, source)
    if kind == "plan":
        _check_constant_within_sample(clean, PLAN_RUN_COLUMNS, source)
    return clean


def _uncategorized(df: pd.DataFrame, schema: pa.DataFrameSchema) -> pd.DataFrame:
    """`df` with its categorical columns (the optimizer's candidates) as objects where the
    schema wants another type: pandera's coercion of a categorical holding a value it cannot
    coerce raises TypeError instead of reporting the value."""
    for name in df.columns:
        column = schema.columns.get(name)
        categorical = isinstance(df[name].dtype, pd.CategoricalDtype)
        if categorical and column is not None and str(column.dtype) != "category":
            df[name] = df[name].astype(object)
    return df


def validate_prediction_rows(
    rows: pd.DataFrame, kind: str, targets: Sequence[str], *, source: str | None = None
) -> pd.DataFrame:
    """`validate` of prediction rows (the table `kind` without its `targets`): each target the
    rows lack (or leave missing) gets a placeholder, so a row is refused for the same reasons a
    training row would be; the clean rows keep the caller's index and only the targets they
    brought."""
    probe = rows.copy()
    for target in targets:
        if target not in probe.columns or probe[target].isna().any():
            probe[target] = 1.0
    clean = validate(probe, kind, source=source)
    clean.index = rows.index  # predictions stay aligned with the caller's rows
    for target in targets:
        if target not in rows.columns:
            del clean[target]  # in place: `validate` made `clean` (drop costs a copy)
    return clean


def _check_whole_numbers(df: pd.DataFrame, schema: pa.DataFrameSchema, source: str | None) -> None:
    """An integer column must hold whole numbers: coercion would cut 128.7 to 128 unasked."""
    dtypes = df.dtypes
    for name, column in schema.columns.items():
        if name not in dtypes or "int" not in str(column.dtype).lower():
            continue
        if not pd.api.types.is_float_dtype(dtypes[name]):
            continue
        values = df[name]
        whole = values.isna() | (values == np.floor(values))
        if not whole.all():
            i = int(np.argmin(whole.to_numpy()))
            raise ContractError(
                f"value {values.iloc[i]!r} is not a whole number (an integer column)",
                file=source,
                row=i + 1,
                column=name,
            )


def _plain(check: pa.Check) -> bool:
    """A vectorized check on the whole column (or table) whose result says pass or fail."""
    return (
        check.groupby is None
        and not check.element_wise
        and check.ignore_na
        and not check.raise_warning
        and check._check_fn is not None
    )


def _fast_path_applies(schema: pa.DataFrameSchema) -> bool:
    """Whether `_passing_table` can decide `schema`: column dtypes, nullability and plain
    checks only (no uniqueness, index, parsers, regex columns or defaults)."""
    columns = schema.columns.values()
    return (
        all(not c.unique and not c.regex and c.default is None and not c.parsers for c in columns)
        and all(_plain(check) for c in columns for check in c.checks)
        and all(_plain(check) for check in schema.checks)
        and schema.index is None
        and not schema.unique
        and not schema.parsers
        and not schema.add_missing_columns
    )


def _passes(check: pa.Check, data: pd.Series | pd.DataFrame) -> bool:
    """True only when every element passes (a NaN or non-boolean result counts as a fail)."""
    result = check._check_fn(data, **check._check_kwargs)
    if isinstance(result, pd.Series | pd.DataFrame):
        values = result.to_numpy()
        return values.dtype == bool and bool(values.all())
    return result is True or result is np.True_


def _ascii_text(values: list) -> bool:
    # pandas runs string checks in Arrow (RE2, utf8proc), whose case mapping and character
    # classes differ from Python's outside ASCII ("İ".lower() is "i" there, "i̇" here)
    return all(isinstance(v, str) and v.isascii() for v in values)


def _in_range(values: list, stats: dict) -> bool:
    lo, hi = stats["min_value"], stats["max_value"]
    low_ok = (lambda v: v >= lo) if stats["include_min"] else (lambda v: v > lo)
    high_ok = (lambda v: v <= hi) if stats["include_max"] else (lambda v: v < hi)
    return all(low_ok(v) and high_ok(v) for v in values)


def _str_length(values: list, stats: dict) -> bool:
    lo, hi, exact = stats["min_value"], stats["max_value"], stats["exact_value"]
    return all(
        (exact is None or len(v) == exact)
        and (lo is None or len(v) >= lo)
        and (hi is None or len(v) <= hi)
        for v in values
    )


# The column checks of the schemas above on a list of present Python values (a few rows'
# column), keyed by the builtin check's function or the custom check's name; each answers
# what the check's vectorized function answers, or None where it cannot tell (then the
# vectorized function decides). tests/test_prediction_fast_paths.py compares them.
_FEW_ROW_CHECKS: dict[str, Callable[[list, dict], bool | None]] = {
    "greater_than": lambda vs, st: all(v > st["min_value"] for v in vs),
    "greater_than_or_equal_to": lambda vs, st: all(v >= st["min_value"] for v in vs),
    "less_than_or_equal_to": lambda vs, st: all(v <= st["max_value"] for v in vs),
    "in_range": _in_range,
    "str_length": _str_length,
    "isin": lambda vs, st: all(v in st["allowed_values"] for v in vs),
    "str_matches": lambda vs, st: (
        all(re.match(st["pattern"], v) for v in vs) if _ascii_text(vs) else None
    ),
    "finite": lambda vs, st: all(v not in (math.inf, -math.inf) for v in vs),
    "lower_case": lambda vs, st: all(v == v.lower() for v in vs) if _ascii_text(vs) else None,
    "unique": lambda vs, st: len(set(vs)) == len(vs),
    "json_list": lambda vs, st: all(_is_json_list(v) for v in vs),
}
FEW_ROWS = 64  # up to this many rows, column checks run on Python values (no Series per check)


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _few_row_check(check: pa.Check, present: list) -> bool | None:
    scalar = _few_row_scalar(check)
    return None if scalar is None else scalar(present, check.statistics)


def _few_row_scalar(check: pa.Check) -> Callable[[list, dict], bool | None] | None:
    """`check`'s form on Python values in _FEW_ROW_CHECKS, None where it has none."""
    name = getattr(check._check_fn, "__name__", "")
    return _FEW_ROW_CHECKS.get(name) or _FEW_ROW_CHECKS.get(check.name)


def _column_passes(column: pa.Column, series: pd.Series) -> bool:
    """Whether a coerced column is complete where required and passes its checks."""
    values = series.tolist() if len(series) <= FEW_ROWS else None
    if values is not None:
        present = [v for v in values if not _missing(v)]
        if len(present) < len(values) and not column.nullable:
            return False
    elif series.hasnans and not column.nullable:
        return False
    for check in column.checks:
        verdict = None if values is None else _few_row_check(check, present)
        if verdict is None:
            verdict = _passes(check, series.dropna() if series.hasnans else series)  # ignore NA
        if not verdict:
            return False
    return True


def _passing_table(df: pd.DataFrame, schema: pa.DataFrameSchema) -> pd.DataFrame | None:
    """`df` coerced to `schema` when every rule holds, else None.

    The same coercions and check functions pandera runs, without its per-check bookkeeping,
    which costs ~20 ms a call however few the rows (a single-row prediction pays it). Anything
    unusual answers None, and `schema.validate` then decides and words the errors; a test
    checks that both agree on real tables.
    """
    if not _fast_path_applies(schema):
        return None
    clean = df.copy(deep=False)  # the caller's frame stays as it was for pandera
    try:
        for name, column in schema.columns.items():
            if name not in clean.columns:
                continue  # optional (missing required columns are refused before)
            series = clean[name]
            coerce = series.dtype != column.dtype.type  # astype copies even when nothing changes
            categorical = coerce and isinstance(series.dtype, pd.CategoricalDtype)
            if categorical:  # checked on its categories
                series = _categorical_text(column, series)
                if series is None:
                    return None
            elif coerce:
                series = column.dtype.try_coerce(series)
            # a bool, or one per element (str columns)
            if not np.all(column.dtype.check(pa_engine.Engine.dtype(series.dtype), series)):
                return None
            if not categorical and not _column_passes(column, series):
                return None
            if coerce:
                clean[name] = series
        if not all(_passes(check, clean) for check in schema.checks):
            return None
    except Exception:  # a failed coercion or check: pandera reports it
        return None
    return clean


# Checks that decide each value on its own (not `unique`): a categorical column's categories
# stand for all its values.
_ELEMENTWISE = frozenset(_FEW_ROW_CHECKS) - {"unique"}


def _categorical_text(column: pa.Column, series: pd.Series) -> pd.Series | None:
    """A categorical column of text coerced to the contract's text column, its checks run on
    its categories (each distinct text once: a candidate table's 10^5 placements are 10^4
    categories) and the values taken from them by code, as `try_coerce` would write them;
    None where that cannot be told so (then the column is coerced and checked as any other,
    or pandera decides)."""
    categories = series.cat.categories
    elementwise = all(_few_row_name(check) in _ELEMENTWISE for check in column.checks)
    if not elementwise or not _all_text(categories):
        return None
    codes = series.cat.codes.to_numpy()
    if not column.nullable and (codes < 0).any():
        return None
    distinct = column.dtype.try_coerce(pd.Series(categories.to_numpy(dtype=object)))
    if not isinstance(distinct.dtype, pd.StringDtype):
        return None
    if len(distinct) and not _column_passes(column, distinct):
        return None
    values = distinct.array.take(codes, allow_fill=True)
    return pd.Series(values, index=series.index, name=series.name)


def _all_text(categories: pd.Index) -> bool:
    """Whether every category is a Python string (a text Index holds only strings: categories
    are never missing)."""
    return isinstance(categories.dtype, pd.StringDtype) or all(
        isinstance(value, str) for value in categories.tolist()
    )


def _few_row_name(check: pa.Check) -> str:
    """The key of `check` in _FEW_ROW_CHECKS (its function's name, else its own)."""
    name = getattr(check._check_fn, "__name__", "")
    return name if name in _FEW_ROW_CHECKS else str(check.name)


_INT64 = (-(2**63), 2**63)


def _plain_value(value: object, dtype: str, nullable: bool) -> tuple[bool, object]:
    """(whether `value` already has the Python type of a column of `dtype`, the value as the
    column holds it): an integer column takes ints (not bools) within int64, a float column
    ints and floats, a text column strings, a boolean column bools; a missing value (None, NaN)
    only where the column is nullable, as None (NaN in a float column)."""
    if _missing(value):
        return nullable, (np.nan if dtype.startswith("float") else None)
    kind = type(value)
    if "int" in dtype.lower():
        return kind is int and _INT64[0] <= value < _INT64[1], value
    if dtype.startswith("float"):
        return kind is int or kind is float, float(value)  # type: ignore[arg-type]
    if dtype == "boolean":
        return kind is bool, value
    return kind is str, value


# Whole-table checks of the schemas on a few rows' columns, by name (as _FEW_ROW_CHECKS).
_FEW_ROW_TABLE_CHECKS: dict[str, Callable[[dict[str, list]], bool]] = {
    "num_gpus >= num_nodes": lambda cols: all(
        g >= n for g, n in zip(cols["num_gpus"], cols["num_nodes"], strict=True)
    ),
    "num_gpus per node": lambda cols: all(
        g <= MAX_GPUS_PER_NODE * n for g, n in zip(cols["num_gpus"], cols["num_nodes"], strict=True)
    ),
}


def few_row_columns(
    records: Sequence[Mapping[str, object]], kind: str, exclude: Sequence[str] = ()
) -> dict[str, list] | None:
    """`records` (a few rows as parsed JSON objects) as the columns of the table `validate`
    would return for their frame, when every value already has its column's Python type and
    every rule holds; None otherwise (a value to coerce, a rule broken, a column in `exclude`,
    anything unusual), and `validate` on their frame then decides and words the errors.

    The contract's columns hold ints, floats (NaN where missing), strings and bools (None where
    missing); further columns keep their values, None where a record lacks them. Up to FEW_ROWS
    records of a scaling, interference or trace table (a single request's rows need no
    DataFrame: on a few rows pandas' per-call cost is most of a prediction's). `exclude`:
    columns the records must not carry (a predictor's targets), required or not."""
    if not 0 < len(records) <= FEW_ROWS or kind in ("graph", "plan"):
        return None
    plan = _few_row_plan(kind)
    if plan is None:
        return None
    names: dict[str, None] = {}
    for record in records:
        names.update(dict.fromkeys(record))
    if any(name in names for name in exclude):
        return None
    columns = {name: [record.get(name) for record in records] for name in names}
    for name, dtype, nullable, required, checks in plan.columns:
        if name not in columns:
            if required and name not in exclude:
                return None
            continue
        values = []
        for value in columns[name]:
            ok, value = _plain_value(value, dtype, nullable)
            if not ok:
                return None
            values.append(value)
        present = [v for v in values if not _missing(v)]
        # a check without a scalar form cannot tell on Python values: the frame decides
        if not all(scalar is not None and scalar(present, stats) for scalar, stats in checks):
            return None
        columns[name] = values
    for decide in plan.table_checks:
        if decide is None or not decide(columns):
            return None
    if kind == "scaling" and "placement" in columns:
        placed = [
            (p, g, n)
            for p, g, n in zip(
                columns["placement"], columns["num_gpus"], columns["num_nodes"], strict=True
            )
            if p is not None
        ]
        total, used = digit_totals([p for p, _, _ in placed])
        if any(t != g or u != n for (_, g, n), t, u in zip(placed, total, used, strict=True)):
            return None
    return columns


class _FewRowPlan(NamedTuple):
    """What `few_row_columns` reads of a schema, worked out once per schema (asking pandera
    for a column's dtype name and a check's function on every call cost more than checking
    a row): per column (name, dtype name, nullable, required, its checks' scalar forms with
    their statistics, None where a check has none), then the table checks' scalar forms."""

    columns: list[tuple[str, str, bool, bool, list[tuple[Callable | None, dict]]]]
    table_checks: list[Callable[[dict[str, list]], bool] | None]


_FEW_ROW_PLANS: dict[str, tuple[pa.DataFrameSchema, _FewRowPlan | None]] = {}


def _few_row_plan(kind: str) -> _FewRowPlan | None:
    """The `_FewRowPlan` of SCHEMAS[kind], made again if the schema was replaced; None where
    the fast path does not apply to it (`_fast_path_applies`) or there is no such table."""
    schema = SCHEMAS.get(kind)
    cached = _FEW_ROW_PLANS.get(kind)
    if cached is not None and cached[0] is schema:
        return cached[1]
    plan = None
    if schema is not None and _fast_path_applies(schema):
        plan = _FewRowPlan(
            columns=[
                (name, str(column.dtype), column.nullable, column.required,
                 [(_few_row_scalar(check), check.statistics) for check in column.checks])
                for name, column in schema.columns.items()
            ],
            table_checks=[_FEW_ROW_TABLE_CHECKS.get(check.name) for check in schema.checks],
        )  # fmt: skip
    _FEW_ROW_PLANS[kind] = (schema, plan)
    return plan


def validates_as_is(
    rows: pd.DataFrame, sample: pd.DataFrame, kind: str, exclude: Sequence[str] = ()
) -> bool:
    """Whether `validate` returns `rows` as they are, told from a few of them (`sample`)
    where the caller knows every other row passes when those do (rows it built valid around
    the sample's values, as the optimizer builds its candidates): each contract column of
    `rows` already of the contract's dtype (a categorical of text counting as text: it is
    checked on its categories and read by its codes), and the sample's records already of
    the contract's Python types and passing every rule (`few_row_columns`). False where
    that cannot be told so; `validate` then decides."""
    schema = SCHEMAS.get(kind)
    if schema is None:
        return False
    for name, column in schema.columns.items():
        if name not in rows.columns:
            continue
        dtype = rows[name].dtype
        text = isinstance(column.dtype.type, pd.StringDtype)
        if not (text and isinstance(dtype, pd.CategoricalDtype)) and dtype != column.dtype.type:
            return False
    return few_row_columns(sample.to_dict("records"), kind, exclude) is not None


def _contract_error(cases: pd.DataFrame, kind: str, source: str | None) -> ContractError:
    details, first = [], None
    cases = cases.copy()
    # A whole-table check (e.g. "num_gpus >= num_nodes") reports the schema as its column:
    # name the column the check is about instead. Column failures come first.
    table_level = cases["schema_context"] != "Column"
    named = cases["check"].map(lambda check: str(check).split(" ")[0])
    # ... and it reports every column of a failing row: keep the named column's value
    keep = ~table_level | (cases["column"] == named) | ~named.isin(cases["column"])
    cases, named, table_level = cases[keep].copy(), named[keep], table_level[keep]
    cases.loc[table_level, "column"] = named[table_level]
    cases = cases.assign(_order=table_level.astype(int)).sort_values("_order", kind="stable")
    # Coercion failures repeat as dtype failures; keep the first of each (row, column).
    cases = cases.drop_duplicates(subset=["column", "index"])
    for case in cases.head(10).itertuples():
        index = case.index
        row = None if index is None or pd.isna(index) else int(index) + 1
        value = case.failure_case
        what = "missing value" if pd.isna(value) else f"value {value!r} fails {case.check}"
        if " must be " in str(case.check) and not pd.isna(value):  # a bound (`at_most`)
            what = f"{case.check}, got {value!r}"
        if case.check == "not_nullable":
            what = "missing value in a required column"
        text = f"row {row}, column {case.column!r}: {what}" if row else f"{case.column}: {what}"
        details.append(text)
        if first is None:
            first = (row, case.column, what)
    row, column, what = first if first else (None, None, "invalid table")
    column_name = column if isinstance(column, str) else None
    return ContractError(
        f"{what} ({kind} table)", file=source, row=row, column=column_name, details=details
    )


def _check_placement(
    df: pd.DataFrame, source: str | None, categories: tuple[np.ndarray, pd.Index] | None = None
) -> None:
    """Each placement's digits (GPUs per node, zeros for unused nodes) must add up to num_gpus
    over num_nodes nonzero digits. Worked out once per distinct placement (`categories`: the
    codes and categories of the column before it was coerced to text, when it was a
    categorical: its distinct values without hashing 10^5 strings)."""
    if "placement" not in df.columns:
        return
    placement = df["placement"]
    present = placement.notna().to_numpy()
    if not present.any():
        return
    if categories is not None:
        codes, unique = categories[0][present], categories[1]
        gpus = df["num_gpus"].to_numpy()[present]
        nodes = df["num_nodes"].to_numpy()[present]
    elif present.all():  # a checked text column: its distinct strings as they are
        codes, unique = pd.factorize(placement.array)
        gpus, nodes = df["num_gpus"].to_numpy(), df["num_nodes"].to_numpy()
    else:
        codes, unique = pd.factorize(placement[present].astype(str))
        gpus = df["num_gpus"].to_numpy()[present]
        nodes = df["num_nodes"].to_numpy()[present]
    texts = unique.tolist()
    total, used = digit_totals(texts if _all_text(unique) else [str(t) for t in texts])
    bad = (total[codes] != gpus) | (used[codes] != nodes)
    if bad.any():
        i = int(np.flatnonzero(present)[np.argmax(bad)])
        value, gpus_i, nodes_i = placement.iloc[i], df["num_gpus"].iloc[i], df["num_nodes"].iloc[i]
        raise ContractError(
            f"placement {value!r} does not match num_gpus={gpus_i}, num_nodes={nodes_i}",
            file=source,
            row=i + 1,
            column="placement",
        )


def _check_constant_within_sample(
    df: pd.DataFrame, sample_columns: tuple[str, ...], source: str | None
) -> None:
    present = [c for c in sample_columns if c in df.columns and c != "sample_id"]
    varying = df.groupby("sample_id", sort=False)[present].nunique(dropna=False).max()
    bad = varying[varying > 1]
    if not bad.empty:
        raise ContractError(
            "sample columns must be constant within a sample_id",
            file=source,
            column=str(bad.index[0]),
        )
    if df.duplicated(["sample_id", "node_id"]).any():
        row = int(df.index[df.duplicated(["sample_id", "node_id"])][0]) + 1
        raise ContractError(
            "node_id repeats within a sample", file=source, row=row, column="node_id"
        )
