"""The fast paths of prediction give the same answers as the slow, general code they skip:
LightGBM boosters on a float matrix vs the sklearn wrapper on a frame (and that matrix made
from columns vs from their frame), the contract's pandera-free check of passing tables vs
pandera itself (which still words every error), its checks of a few rows on Python values vs
the vectorized checks, and each kind of rows `predict_interval` takes (checked rows, records,
records in groups, an answer as columns) vs a frame of the same rows."""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from unittest import mock

import numpy as np
import pandas as pd
import pandera.pandas as pa
import pytest
from conftest import (
    gavel_muri_scaling_rows,
    gavel_pairs,
    interference_model_on_gavel_pairs,
    requires_data,
    scaling_model_without_k80_multi,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from perfcast import datasets
from perfcast.datasets import contract, placements
from perfcast.datasets.contract import SCHEMAS, _normalize_booleans, _passing_table, validate
from perfcast.errors import ContractError
from perfcast.predictor import make_predictor
from perfcast.predictor.base import CheckedRows, TaskPredictor, interval_frame
from perfcast.predictor.regressors import SAME_LEAVES_ROWS, QuantileGBM, lgbm_matrix
from perfcast.predictor.throughput import SyncLaw

pytestmark = requires_data


@pytest.fixture(scope="module")
def gavel_scaling() -> pd.DataFrame:
    return datasets.load("gavel-scaling")


def test_boosters_on_a_matrix_predict_exactly_what_the_sklearn_wrapper_does(
    gavel_scaling: pd.DataFrame,
) -> None:
    numbers = ["num_nodes", "num_gpus", "local_batch_size"]
    X = np.log(gavel_scaling[numbers].astype(float)).assign(
        job=pd.Categorical(gavel_scaling["job"]), gpu=pd.Categorical(gavel_scaling["gpu_type"])
    )
    gbm = QuantileGBM(n_estimators=30).fit(X, np.log(gavel_scaling["step_time_s"]))
    jobs = X["job"].astype(str)
    # an unseen job, a missing one, and the categories in another order than at fit time
    shuffled = X.assign(
        job=pd.Categorical(
            ["unseen-job", None, *jobs.iloc[2:]],
            categories=["unseen-job", *sorted(set(jobs), reverse=True)],
        )
    )
    for frame in (X, shuffled, X.head(1)):
        fast = gbm.predict_quantiles(frame)
        wrapper = [model.predict(frame) for model in gbm.models_]
        for a, b in zip(fast, wrapper, strict=True):
            np.testing.assert_array_equal(a, b)


def _raw(table: pd.DataFrame) -> pd.DataFrame:
    """The table as a JSON request would give it: Python objects, None for missing."""
    return table.astype(object).where(table.notna(), None)


@pytest.mark.parametrize(
    "name", ["gavel-scaling", "muri-scaling", "gavel-interference", "measured-cpu-tpch-plans"]
)
def test_passing_tables_come_out_as_pandera_makes_them(name: str) -> None:
    table = datasets.load(name)
    schema = SCHEMAS[datasets.get(name).kind]
    for frame in (table, _raw(table)):
        frame = _normalize_booleans(frame.reset_index(drop=True).copy(), schema)
        fast = _passing_table(frame.copy(), schema)
        assert fast is not None
        slow = schema.validate(frame.copy(), lazy=True)
        pd.testing.assert_frame_equal(fast, slow)


BAD_ROWS = {
    "gpus below one": ({"num_gpus": 0}, "num_gpus"),
    "gpus not a number": ({"num_gpus": "four"}, "num_gpus"),
    "negative sync time": ({"sync_time_s": -1.0}, "sync_time_s"),
    "upper-case GPU": ({"gpu_type": "V100"}, "gpu_type"),
    "empty job": ({"job": ""}, "job"),
    "missing job": ({"job": None}, "job"),
    "infinite step": ({"step_time_s": float("inf")}, "step_time_s"),
    "fewer GPUs than nodes": ({"num_gpus": 1, "num_nodes": 2}, "num_gpus"),
    "placement not digits": ({"placement": "4a"}, "placement"),
    "amp not a boolean": ({"amp": "maybe"}, "amp"),
}


@pytest.mark.parametrize("change", BAD_ROWS.values(), ids=BAD_ROWS.keys())
def test_bad_rows_are_left_to_pandera_and_refused(change: tuple[dict, str]) -> None:
    good = {"job": "resnet18", "gpu_type": "v100", "num_nodes": 1, "num_gpus": 4,
            "placement": "4", "local_batch_size": 128, "amp": True, "step_time_s": 0.1}  # fmt: skip
    values, column = change
    frame = pd.DataFrame([good, {**good, **values}])
    schema = SCHEMAS["scaling"]
    assert _passing_table(_normalize_booleans(frame.copy(), schema), schema) is None
    with pytest.raises(ContractError) as err:
        validate(frame, "scaling", source="test rows")
    assert err.value.row == 2 and err.value.column == column


def test_placement_error_names_the_first_bad_row() -> None:
    frame = pd.DataFrame(
        {"job": "j", "gpu_type": "v100", "num_nodes": [1, 2, 2, 1], "num_gpus": [4, 8, 8, 2],
         "placement": ["4", "44", "404", "3"], "local_batch_size": 32, "step_time_s": 1.0}
    )  # fmt: skip
    with pytest.raises(ContractError, match=r"placement '3' does not match num_gpus=2") as err:
        validate(frame, "scaling")
    assert err.value.row == 4 and err.value.column == "placement"


# Values a JSON request or a CSV may carry, the awkward ones included: text outside ASCII
# (Arrow and Python case and match rules differ there), line breaks, numbers as text, floats
# in integer columns, booleans, missing values and infinities.
TEXT = ["resnet18", "v100", "V100", "", "İ", "ǅ", "x\n", "4", "22", "4a", "04", "٣", "4\n",
        "[]", "[[4, 512]]", "{}", "train", "inference", None]  # fmt: skip
NUMBERS = [1, 2, 4, 0, -1, 4.0, 4.5, 1e-9, 100, 100.5, math.inf, -math.inf, math.nan, None,
           True, "4", "1.5"]  # fmt: skip
BOOLEANS = [True, False, None, "yes", "0", "maybe"]


JSON_COLUMNS = ("input_shapes", "output_shape", "inputs")


def _pools(name: str, spec: pa.Column) -> tuple[list, list]:
    """(values that pass the column's checks, every value to try) for one contract column."""
    dtype = str(spec.dtype).lower()
    if "bool" in dtype:
        return [True, False], BOOLEANS
    if "int" in dtype or "float" in dtype:
        return [1, 2, 4.0], [*NUMBERS, "a"]
    good = {"placement": ["1", "2"], "mode": ["train", "inference"]}.get(name, ["v100", "a1"])
    return (["[]", "[[4, 512]]"] if name in JSON_COLUMNS else good), [*TEXT, 3]


@st.composite
def small_tables(draw, kind: str) -> pd.DataFrame:
    """1-4 rows of the contract table `kind`: each column present or not (a required one
    almost always), most values passing and a few from the awkward pools above."""
    schema = SCHEMAS[kind]
    n = draw(st.integers(1, 4))
    columns = {}
    for name, spec in schema.columns.items():
        if not draw(st.integers(0, 9) if spec.required else st.booleans()):
            continue
        good, pool = _pools(name, spec)
        columns[name] = [
            draw(st.sampled_from(good) if draw(st.integers(0, 9)) < 8 else st.sampled_from(pool))
            for _ in range(n)
        ]
    return pd.DataFrame(columns if columns else {"x": [1] * n})


def _outcome(frame: pd.DataFrame, kind: str) -> pd.DataFrame | tuple:
    try:
        return validate(frame.copy(), kind)
    except ContractError as err:
        return (str(err), err.row, err.column)


def _pandera_once() -> Callable[..., pd.DataFrame]:
    """`DataFrameSchema.validate` that answers a call on a frame equal (pickled bytes) to one
    it was given before with that call's answer: when both runs of an example refuse a table,
    each hands pandera the same frame, and pandera (~0.1 s a failing table, most of this
    test's time) is deterministic. A frame that differs in anything is validated anew."""
    real = pa.DataFrameSchema.validate
    answers: dict[bytes, tuple[pd.DataFrame | None, Exception | None]] = {}

    def validate_once(schema: pa.DataFrameSchema, df: pd.DataFrame, *args, **kwargs):
        key = pickle.dumps((schema.name, df, args, kwargs))
        if key not in answers:
            try:
                answers[key] = (real(schema, df, *args, **kwargs), None)
            except pa.errors.SchemaErrors as err:
                answers[key] = (None, err)
        clean, err = answers[key]
        if err is not None:
            raise err
        return clean.copy(deep=True)

    return validate_once


@pytest.mark.parametrize("kind", list(SCHEMAS))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_few_row_checks_decide_as_the_vectorized_checks(kind: str, data) -> None:
    """Up to contract.FEW_ROWS rows the column checks run on Python values: the same clean
    table, or the same error, as the vectorized checks (FEW_ROWS 0) give."""
    frame = data.draw(small_tables(kind))
    few_rows = contract.FEW_ROWS
    with mock.patch.object(pa.DataFrameSchema, "validate", _pandera_once()):
        fast = _outcome(frame, kind)
        try:
            contract.FEW_ROWS = 0
            slow = _outcome(frame, kind)
        finally:
            contract.FEW_ROWS = few_rows
    if isinstance(slow, pd.DataFrame):
        assert isinstance(fast, pd.DataFrame), fast
        pd.testing.assert_frame_equal(fast, slow)
    else:
        assert fast == slow


COLUMN_CHECKS = [
    (kind, name, i)
    for kind, schema in SCHEMAS.items()
    for name, spec in schema.columns.items()
    for i in range(len(spec.checks))
]


@pytest.mark.parametrize(("kind", "name", "i"), COLUMN_CHECKS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_each_few_row_check_answers_as_its_vectorized_check(kind, name, i, data) -> None:
    """Each column check's Python form (contract._FEW_ROW_CHECKS) answers what its vectorized
    function answers on the same coerced values, or None (it cannot tell)."""
    spec = SCHEMAS[kind].columns[name]
    _, pool = _pools(name, spec)
    values = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4))
    try:
        series = spec.dtype.try_coerce(pd.Series(values))
    except Exception:
        return  # refused before any check runs
    present = series.dropna()  # checks ignore missing values; none left: nothing to check
    verdict = contract._few_row_check(spec.checks[i], present.tolist())
    if verdict is not None and len(present):
        assert verdict == contract._passes(spec.checks[i], present)


@settings(max_examples=60, deadline=None)
@given(
    jobs=st.lists(st.sampled_from(["a", "b", "c", "unseen", None]), min_size=1, max_size=6),
    numbers=st.lists(st.sampled_from([0.0, -1.5, 2.0, 1e9, math.nan]), min_size=12, max_size=12),
)
def test_a_gbm_reads_columns_as_it_reads_their_frame(jobs: list, numbers: list) -> None:
    """`QuantileGBM.columns_matrix` (the few-row path: no frame) is the matrix `lgbm_matrix`
    makes of the frame of the same columns, so the trees answer the same."""
    rng = np.random.default_rng(0)
    n = 60
    train = pd.DataFrame({"x": rng.normal(size=n), "y": rng.normal(size=n)})
    train["job"] = pd.Categorical(rng.choice(["a", "b", "c"], n), categories=["c", "a", "b"])
    gbm = QuantileGBM(n_estimators=10, quantile_estimators=5).fit(train, rng.normal(size=n))
    rows = len(jobs)
    columns = {"x": np.resize(numbers, rows), "y": np.resize(numbers[::-1], rows)}
    frame = pd.DataFrame(columns)
    frame["job"] = pd.Categorical(jobs, categories=["c", "a", "b"])
    known = [job if job in ("a", "b", "c") else None for job in jobs]
    matrix = gbm.columns_matrix(columns, {"job": known})
    np.testing.assert_array_equal(matrix, lgbm_matrix(frame, gbm._categories()))
    for a, b in zip(gbm.predict_quantiles(matrix), gbm.predict_quantiles(frame), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.fixture(scope="module")
def small_gbm() -> QuantileGBM:
    """A gbm with numeric and categorical splits, fitted on values with zeros and NaN."""
    rng = np.random.default_rng(1)
    n = 300
    X = pd.DataFrame({"x": rng.normal(size=n).round(1), "y": rng.integers(0, 5, n) * 1.0})
    X.loc[::7, "x"] = np.nan
    X["job"] = pd.Categorical(rng.choice(["a", "b", "c", "d"], n))
    y = X["x"].fillna(0) * 2 + X["y"] + X["job"].cat.codes * 3 + rng.normal(size=n) * 0.1
    return QuantileGBM(n_estimators=40, quantile_estimators=20, min_child_samples=3).fit(X, y)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_rows_of_one_cell_of_the_splits_are_predicted_once_for_the_same_numbers(
    small_gbm: QuantileGBM, data
) -> None:
    """From SAME_LEAVES_ROWS rows on, QuantileGBM predicts each cell of its splits once: the
    answers are exactly the boosters' on every row, thresholds themselves, the floats next to
    them, zeros, NaN, infinities and unseen categories included."""
    splits = small_gbm._splits()

    def numbers(feature: int) -> st.SearchStrategy:
        edges = list(splits.get(feature, []))
        near = [np.nextafter(t, d) for t in edges for d in (-np.inf, np.inf)]
        extreme = [0.0, -0.0, 1e-36, np.nan, np.inf, -np.inf, 7.5]
        return st.lists(st.sampled_from([*edges, *near, *extreme]), min_size=1, max_size=6)

    codes = st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0, 4.0, np.nan]), min_size=1, max_size=3)
    # every combination: rows that differ in one value only, on either side of a threshold
    grid = np.array(np.meshgrid(data.draw(numbers(0)), data.draw(numbers(1)), data.draw(codes)))
    matrix = np.resize(grid.reshape(3, -1).T, (SAME_LEAVES_ROWS + 7, 3))
    fast = small_gbm.predict_quantiles(matrix)
    slow = [model.booster_.predict(matrix) for model in small_gbm.models_]
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a, b)


@given(st.lists(st.text(alphabet=st.sampled_from("0123456789\n٣²a"), max_size=70), max_size=20))
def test_placement_digits_are_totalled_as_text_counts_them(texts: list[str]) -> None:
    """The placement check's vectorized totals (all placements' code points at once) are the
    per-text counts it replaced."""
    total, used = placements.digit_totals(texts)
    assert total.tolist() == [sum(d * t.count(str(d)) for d in range(1, 10)) for t in texts]
    assert used.tolist() == [len(t) - t.count("0") for t in texts]


# Values a JSON client may send for each scaling column: good ones (`_GOOD` of each) and every
# kind of bad one (wrong type, out of range, a bool for a number, a float for an integer, not
# lower case, non-ASCII, missing).
_SCALING_VALUES = {
    "job": ["resnet50", "bert", "", 7, None, "İ"],
    "gpu_type": ["v100", "t4", "V100", "", None, 1.5, "ı"],
    "num_nodes": [2, 1, 0, 1.5, True, None, "1", 2**70],
    "num_gpus": [4, 2, 8, 4.0, -1, False, None],
    "placement": ["22", None, "4", "13", "40", "x", "", 4],
    "local_batch_size": [64, 1, 0, 2.5, None, "64"],
    "amp": [True, None, False, "true", 1],
    "cluster": ["muri", None, 3],
    "intra_node_bw_gbps": [150.0, 150, 0, -1.0, math.inf, math.nan, None, True, "x"],
}
_GOOD = {name: values[:2] for name, values in _SCALING_VALUES.items()}
_REQUIRED = ("job", "gpu_type", "num_nodes", "num_gpus", "local_batch_size")


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_records_pass_the_few_row_check_only_as_their_frame_passes_validate(data) -> None:
    """`few_row_columns` takes records only where `validate` takes their frame, with the same
    values; wherever it cannot tell or a rule breaks it answers None (then validate words the
    error)."""
    records = []
    good = data.draw(st.booleans())  # often records of good values only: some are taken
    for _ in range(data.draw(st.integers(1, 4))):
        record = {}
        for name, values in (_GOOD if good else _SCALING_VALUES).items():
            if not (good and name in _REQUIRED) and data.draw(st.integers(0, 4)) == 0:
                continue  # a column left out of this record
            record[name] = data.draw(st.sampled_from(values))
        records.append(record)
    columns = contract.few_row_columns(records, "scaling", exclude=("step_time_s",))
    probe = pd.DataFrame.from_records(records).assign(step_time_s=1.0)
    try:
        clean = validate(probe, "scaling")
    except ContractError:
        assert columns is None
        return
    if columns is None:
        return  # the frame path decides: allowed, only slower
    for name in SCHEMAS["scaling"].columns:
        if name in columns:
            want = [None if pd.isna(v) else v for v in clean[name].tolist()]
            got = [None if v is None or v != v else v for v in columns[name]]
            assert got == want, name


# Every way to ask a predictor (`TaskPredictor.predict_interval`) answers as a frame of the
# same rows does: rows checked already (`CheckedRows`: not checked again), records as parsed
# JSON (scaling reads a few without a frame), records in groups (a micro-batch's requests,
# each answered as a call of its own), and the answer as columns (the service's).


def _scaling_case() -> tuple[object, pd.DataFrame]:
    rows = gavel_muri_scaling_rows().drop(columns="step_time_s").sample(40, random_state=3)
    unseen = rows.iloc[[0, 1]].assign(job="never-seen-net")  # flagged rows among them
    return scaling_model_without_k80_multi(), pd.concat([rows, unseen])


def _interference_case() -> tuple[object, pd.DataFrame]:
    rows = gavel_pairs().drop(columns=["a_speed", "b_speed"]).sample(40, random_state=3)
    return interference_model_on_gavel_pairs(), rows


def _duration_case() -> tuple[object, pd.DataFrame]:
    trace = datasets.load("pollux-philly")
    model = make_predictor("duration", "gbm").fit(trace.head(3000))
    return model, trace.iloc[3000:3040].drop(columns="duration_s")


CASES = {"scaling": _scaling_case, "interference": _interference_case, "duration": _duration_case}


def _same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """Equal frames, the flags compared as their strings (checked rows' may be categorical)."""
    got = got.assign(flags=got["flags"].astype(want["flags"].dtype))
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@pytest.mark.parametrize("task", CASES)
def test_every_way_to_ask_answers_as_the_frame_does(task: str) -> None:
    model, rows = CASES[task]()
    rows = rows.reset_index(drop=True)
    want = model.predict_interval(rows)
    checked = CheckedRows(
        contract.validate_prediction_rows(rows, model.kind, model.targets, source="rows")
    )
    _same(model.predict_interval(checked), want)
    records = _raw(rows).to_dict("records")
    if task == "scaling":  # a few records are read without a frame, more with one
        assert contract.few_row_columns(records[:5], "scaling", exclude=model.targets)
        _same(model.predict_interval(records[:5]), want.head(5))
    _same(model.predict_interval(records), want)
    groups = [0] * 5 + [1] + [2] * (len(rows) - 6)
    alone = [model.predict_interval(records[a:b]) for a, b in ((0, 5), (5, 6), (6, len(rows)))]
    in_groups = model.predict_interval(records, groups)
    _same(in_groups, pd.concat(alone, ignore_index=True))
    _same(in_groups, want)  # rows answered alone in any request, in these tasks
    columns = model.predict_interval(records, groups, columns=True)
    _same(pd.DataFrame(columns), want)
    points = want[list(model.targets)].to_numpy()
    np.testing.assert_array_equal(
        model.predict(checked), points[:, 0] if len(points[0]) == 1 else points
    )


def test_each_scaling_row_alone_answers_as_the_batch_does() -> None:
    """A lone request's row (one record per call: the service's single-row path, which
    skips what one row does not need) gets the numbers and flags its row gets in one batch
    of every row, as a frame and as records: real rows of Gavel's and Muri's clusters, on
    one GPU, on one node and across nodes, with and without a cluster, a job never seen and
    a GPU type known from one GPU only among them."""
    model, rows = _scaling_case()
    rows = pd.concat([rows, rows.iloc[[2, 3]].assign(cluster=None)], ignore_index=True)
    assert (rows["num_gpus"] == 1).any() and (rows["num_nodes"] > 1).any()
    assert ((rows["num_gpus"] > 1) & (rows["num_nodes"] == 1)).any()
    want = model.predict_interval(rows)
    records = _raw(rows).to_dict("records")
    assert all(contract.few_row_columns([r], "scaling", exclude=model.targets) for r in records)
    answers = [model.predict_interval([record], columns=True) for record in records]
    alone = pd.DataFrame({name: np.concatenate([a[name] for a in answers]) for name in answers[0]})
    _same(alone, want)
    _same(pd.DataFrame(model.predict_interval(records, columns=True)), want)
    assert (want["flags"] != "").any() and (want["flags"] == "").any()


def test_synchronization_without_across_terms_is_the_one_node_answer() -> None:
    """Rows on one node need no across-nodes terms (scaling skips working them out): the
    law answers them as with any; a row across nodes without them is refused."""
    law = SyncLaw(gamma=1.25, growth=(0.25, 0.5))
    gpus, nodes = np.array([1, 2, 4, 8]), np.ones(4)
    links = (np.full(4, 15.75), np.full(4, 1.25))
    one, across = (np.full(4, 4e7), np.full(4, 1e-3)), (np.full(4, 9e7), np.full(4, 3e-3))
    want = law.sync_seconds(gpus, nodes, *links, one, across)
    np.testing.assert_array_equal(law.sync_seconds(gpus, nodes, *links, one, None), want)
    with pytest.raises(ValueError, match="across-nodes terms"):
        law.sync_seconds(gpus, np.array([1, 1, 2, 1]), *links, one, None)


class _RequestSize(TaskPredictor):
    """A trace predictor whose answer is the number of rows in its call: as request-dependent
    as a prediction can be (runtime's monotonic guard, say, reads the request's samples)."""

    task = "duration"

    def __init__(self, model: str = "count") -> None:
        self.model = model

    def _fit(self, rows: pd.DataFrame) -> _RequestSize:
        self.fitted_ = True
        return self

    def _predict_interval(self, rows: pd.DataFrame) -> pd.DataFrame:
        size = np.full(len(rows), float(len(rows)))
        frame = interval_frame(self.targets, rows.index, [(size, size, size)])
        frame["flags"] = ""
        return frame


def test_groups_are_answered_as_separate_calls() -> None:
    trace = datasets.load("pollux-philly").head(9)
    model = _RequestSize().fit(trace)
    rows = trace.drop(columns="duration_s")
    groups = [4, 4, 1, 7, 7, 7, 7, 2, 2]  # requests of 2, 1, 4 and 2 rows
    sizes = [2.0, 2.0, 1.0, 4.0, 4.0, 4.0, 4.0, 2.0, 2.0]
    checked = CheckedRows(
        contract.validate_prediction_rows(rows, "trace", model.targets, source="rows")
    )
    for asked in (rows, checked, _raw(rows).to_dict("records")):
        assert model.predict_interval(asked)["duration_s"].tolist() == [9.0] * 9
        answer = model.predict_interval(asked, groups)
        assert answer["duration_s"].tolist() == sizes
        assert answer.index.tolist() == list(range(9))
        columns = model.predict_interval(asked, groups, columns=True)
        assert columns["duration_s"].tolist() == sizes
