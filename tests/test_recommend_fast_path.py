"""The recommendation's array work answers exactly what the pandas code it replaces answered:
a candidate table's categorical text checked on its categories against the same table as
text; and the optimizer's scoring, per-group best and reasons against the frame operations
they replace (kept here as the reference)."""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from conftest import gavel_muri_scaling_rows, requires_data, scaling_model_without_k80_multi
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pandas.api.types import union_categoricals

from perfcast.datasets.contract import validate
from perfcast.errors import ContractError
from perfcast.optimizer import candidates as cands
from perfcast.optimizer import configs, scoring
from perfcast.optimizer import front as shortlist
from perfcast.optimizer import reasons as why
from perfcast.predictor.base import (
    FLAGS,
    CheckedRows,
    flags_categorical,
    flags_column,
    interval_columns,
)

pytestmark = requires_data


@pytest.fixture(scope="module")
def training_rows() -> pd.DataFrame:
    return gavel_muri_scaling_rows()


@pytest.fixture(scope="module")
def model():
    return scaling_model_without_k80_multi()  # k80: a new GPU's rows


CATEGORICAL_CASES = {
    "placement not digits": ("placement", ["4", "4a"], "placement"),
    "placement that does not add up": ("placement", ["4", "3"], "placement"),
    "upper-case GPU": ("gpu_type", ["v100", "V100"], "gpu_type"),
    "missing job": ("job", ["resnet18", None], "job"),
    "empty job": ("job", ["resnet18", ""], "job"),
    "placement missing": ("placement", ["4", None], None),
    "number categories": ("placement", [4, 4], None),
}


@pytest.mark.parametrize("case", CATEGORICAL_CASES.values(), ids=CATEGORICAL_CASES.keys())
def test_categorical_text_is_checked_as_its_text(case) -> None:
    """A categorical column passes, fails and is coerced as the same values as text do."""
    column, values, bad = case
    good = {"job": "resnet18", "gpu_type": "v100", "num_nodes": 1, "num_gpus": 4,
            "placement": "4", "local_batch_size": 128, "step_time_s": 0.1}  # fmt: skip
    frame = pd.DataFrame([good, {**good, column: values[1]}])
    frame[column] = values
    categorical = frame.assign(**{column: frame[column].astype("category")})
    outcomes = []
    for table in (frame, categorical):
        try:
            outcomes.append(validate(table, "scaling"))
        except ContractError as err:
            outcomes.append((str(err), err.row, err.column))
    if bad is None:
        pd.testing.assert_frame_equal(outcomes[1], outcomes[0], check_exact=True)
    else:
        assert outcomes[1] == outcomes[0] and outcomes[0][2] == bad


# The optimizer's code before its array work, the reference the new code is held to.


def old_single_gpu_throughput(scored: pd.DataFrame) -> np.ndarray:
    key = ["gpu_type", "local_batch_size"]
    single = scored.loc[scored["num_gpus"] == 1, [*key, "throughput"]]
    single = single.groupby(key, as_index=False)["throughput"].first()
    return scored[key].merge(single, on=key, how="left")["throughput"].to_numpy()


def old_best_per_group(group: np.ndarray, time: np.ndarray, cost: np.ndarray) -> np.ndarray:
    order = np.lexsort((np.arange(len(group)), cost, time, group))
    firsts = np.ones(len(order), dtype=bool)
    firsts[1:] = group[order][1:] != group[order][:-1]
    return order[firsts]


def old_spread_penalty(scored: pd.DataFrame, row: object) -> str:
    same = scored[
        (scored["gpu_type"] == row.gpu_type)
        & (scored["num_gpus"] == row.num_gpus)
        & (scored["local_batch_size"] == row.local_batch_size)
    ]
    fewest = same.loc[same["num_nodes"].idxmin()]
    if fewest["num_nodes"] == row.num_nodes or not np.isfinite(fewest["throughput"]):
        return ""
    loss = 1 - row.throughput / fewest["throughput"]
    return (
        f"; {row.num_nodes} nodes {'cost' if loss >= 0 else 'gain'} {abs(loss):.0%} throughput "
        f"vs {fewest['num_nodes']}"
    )


@given(
    st.lists(
        st.tuples(
            st.integers(0, 5),
            st.sampled_from([1.0, 2.0, 2.0, 3.0, math.nan, math.inf]),
            st.sampled_from([1.0, 1.0, 5.0, math.nan, -0.0, 0.0]),
        ),
        min_size=1,
        max_size=50,
    )
)
def test_best_per_group_is_the_first_of_each_group_in_sorted_order(rows: list) -> None:
    group = np.array([r[0] for r in rows], dtype=np.int64)
    time = np.array([r[1] for r in rows])
    cost = np.array([r[2] for r in rows])
    np.testing.assert_array_equal(
        shortlist._best_per_group(group, time, cost), old_best_per_group(group, time, cost)
    )


TABLE_FLAGS = [
    "",
    "new_job",
    "extrapolated_gpus",
    "extrapolated_batch",
    "extrapolated_gpus,extrapolated_batch",
    "new_gpu_type,extrapolated_batch",
]


def old_provenance(flags: pd.Series) -> pd.Series:
    """What a reason says a step time rests on, by frame operations on the `flags` text:
    measured (no token), near a measurement (one token, `extrapolated_batch` or
    `extrapolated_gpus`), extrapolated (any other)."""
    tokens = flags.str.get_dummies(sep=",").drop(columns="", errors="ignore")  # ("": none)
    count = tokens.sum(axis=1).to_numpy()
    near = tokens.loc[:, tokens.columns.isin(["extrapolated_batch", "extrapolated_gpus"])]
    words = np.select(
        [count == 0, (count == 1) & (near.sum(axis=1).to_numpy() == 1)],
        ["measured", "near a measurement"],
        "extrapolated",
    )
    return pd.Series(words, index=flags.index).radd("; step time ")


class TableBackend:
    """Step times drawn once per candidate (NaN and repeats included), with flags."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
        n = len(rows)
        mid = self.rng.choice([0.1, 0.2, 0.25, 0.5, np.nan], size=n)
        flags = self.rng.choice(TABLE_FLAGS, size=n)
        columns = {"step_time_s": mid, "step_time_s_p10": mid / 2, "step_time_s_p90": mid * 2}
        return pd.DataFrame({**columns, "flags": pd.array(flags, dtype="str")})


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    per_node=st.integers(1, 4),
    nodes=st.integers(1, 6),
    priced=st.booleans(),
    samples=st.booleans(),
)
def test_scoring_and_reasons_equal_the_frame_operations(seed, per_node, nodes, priced, samples):
    price = 2.5 if priced else None
    pools = [
        cands.GpuPool("v100", per_node, nodes, price),
        cands.GpuPool("k80", per_node + 1, nodes, price),
    ]
    candidates = cands.enumerate_candidates({"job": "resnet18"}, pools, [16, 64])
    work = scoring.Work(samples=1e6) if samples else scoring.Work(iterations=1e4)
    scored = scoring.score_candidates(candidates, TableBackend(seed), work)
    np.testing.assert_array_equal(
        scoring._single_gpu_throughput(scored, scored["throughput"].to_numpy()),
        old_single_gpu_throughput(scored),
    )
    np.testing.assert_array_equal(
        scored["scaling_efficiency"].to_numpy(),
        scored["throughput"].to_numpy()
        / scored["num_gpus"].to_numpy()
        / old_single_gpu_throughput(scored),
    )
    top = scored[np.isfinite(scored["step_time_s"])].head(8)
    related = why._Related(scored, top)
    for row in top.itertuples(index=False):
        assert related.spread_penalty(row) == old_spread_penalty(scored, row)
    # each reason ends with what its step time rests on; no efficiency shown above 100%
    # (one-GPU step times drawn apart from the others: efficiencies of 5 are scored)
    top = top.reset_index(drop=True)
    reasons = why.reason_lines(top, scored, "min_time", None, None)
    for reason, said in zip(reasons, old_provenance(top["flags"]), strict=True):
        assert reason.endswith(said) and reason.count("; step time ") == 1
        shown = float(reason.split("% scaling efficiency")[0].rsplit(" ", 1)[1])
        assert not shown > 100  # (nan without a one-GPU reference)
    # min_time's best is the first row sorted by p90 time, then GPUs, then nodes
    if top.empty:
        return
    rec = configs.recommend(
        {"job": "resnet18"}, pools, TableBackend(seed), local_batch_sizes=[16, 64], work=work
    )
    ranked = scored[np.isfinite(scored["step_time_s"])].sort_values(
        ["total_time_s_p90", "num_gpus", "num_nodes"], kind="stable"
    )
    key = ["gpu_type", "num_gpus", "num_nodes", "local_batch_size"]
    assert rec.top[key].astype(object).iloc[0].tolist() == (
        ranked[key].astype(object).iloc[0].tolist()
    )


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    priced=st.booleans(),
    work=st.sampled_from(["samples", "iterations", None]),
    categorical=st.booleans(),
    picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=8),
    asked=st.sampled_from(
        [None, "total_time_s_p90", "throughput_p10", "scaling_efficiency", "cost_p10"]
    ),
)
def test_scored_rows_are_the_frames_rows(seed, priced, work, categorical, picks, asked):
    """The answer's rows, their intervals and efficiencies worked out at them alone (each
    one-GPU reference found among every candidate), are the scored frame's rows; a column
    asked for of every candidate is the frame's column."""
    pools = [cands.GpuPool("v100", 2, 3, 2.5 if priced else None), cands.GpuPool("k80", 4, 2)]
    candidates = cands.enumerate_candidates({"job": "resnet18"}, pools, [16, 64])
    pred = TableBackend(seed).predict("scaling", candidates)
    if categorical:  # as the predictor answers `CheckedRows`: flags a categorical
        pred["flags"] = pred["flags"].astype("category")
    done = {"samples": scoring.Work(samples=1e6), "iterations": scoring.Work(iterations=1e4)}
    scored = scoring.Scored(candidates, pred, done.get(work))
    frame = scoring.Scored(candidates, pred, done.get(work)).frame()
    if asked is not None:
        np.testing.assert_array_equal(np.asarray(scored[asked]), frame[asked].to_numpy())
    positions = np.array([p % len(candidates) for p in picks])
    want = frame.iloc[positions].reset_index(drop=True)
    pd.testing.assert_frame_equal(scored.rows(positions), want)


def old_enumerate_candidates(job, pools, local_batch_sizes, gpu_counts=None) -> pd.DataFrame:
    """`candidates.enumerate_candidates` as it was: a frame per pool, concatenated, columns
    inserted and set one by one."""
    sizes = np.unique(np.asarray(local_batch_sizes, dtype=np.int64))
    wanted = None if gpu_counts is None else np.unique(np.asarray(gpu_counts, dtype=np.int64))
    frames = []
    for pool in pools:
        key = None if wanted is None else tuple(wanted.tolist())
        gpus, spread, codes, placements = cands._layout(pool.gpus_per_node, pool.nodes, key)
        rows = len(gpus)
        in_search = np.ones(rows, bool) if wanted is None else np.isin(gpus, wanted)
        price = pool.price_per_gpu_hour
        frames.append(
            pd.DataFrame(
                {
                    "gpu_type": cands._constant(pool.gpu_type, rows * sizes.size),
                    "num_nodes": np.repeat(spread, sizes.size),
                    "num_gpus": np.repeat(gpus, sizes.size),
                    "placement": pd.Categorical.from_codes(
                        np.repeat(codes, sizes.size), dtype=placements
                    ),
                    "local_batch_size": np.tile(sizes, rows),
                    "in_search": np.repeat(in_search, sizes.size),
                    "price_per_gpu_hour": np.nan if price is None else price,
                }
            )
        )
    placement = union_categoricals([f["placement"] for f in frames])
    gpu_type = union_categoricals([f["gpu_type"] for f in frames])
    candidates = pd.concat(
        [f.drop(columns=["gpu_type", "placement"]) for f in frames], ignore_index=True
    )
    candidates.insert(0, "gpu_type", gpu_type)
    candidates.insert(3, "placement", placement)
    for name, value in job.items():
        candidates[name] = (
            cands._constant(value, len(candidates)) if isinstance(value, str) else value
        )
    return candidates


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 5), st.sampled_from([None, 2, 2.5, 0.0])),
        min_size=1,
        max_size=3,
    ),
    st.lists(st.integers(1, 512), min_size=1, max_size=4),
    st.none() | st.lists(st.integers(1, 20), min_size=1, max_size=4),
    st.dictionaries(
        st.sampled_from(["params_m", "amp", "cluster", "gflops_per_sample"]),
        st.none() | st.booleans() | st.integers(1, 9) | st.floats(0.5, 9) | st.just("x"),
        max_size=3,
    ),
)
def test_candidates_made_as_one_frame_are_the_concatenated_pools(
    shapes: list, sizes: list, counts, extra: dict
) -> None:
    """The candidate table made in one frame from the pools' columns is the frame made by
    concatenating one frame per pool (values, dtypes, categories, column order, index)."""
    pools = [
        cands.GpuPool(name, per_node, nodes, price)
        for name, (per_node, nodes, price) in zip(["v100", "k80", "a100"], shapes, strict=False)
    ]
    job = {"job": "resnet18", **extra}
    got = cands.enumerate_candidates(job, pools, sizes, counts)
    pd.testing.assert_frame_equal(got, old_enumerate_candidates(job, pools, sizes, counts))


def old_versus_first(first: pd.Series, row: object, objective: str, deadline_s) -> str:
    """`reasons._versus_first` as it was: the first row as a Series (`min_time` compares
    the p90 time it ranks by)."""
    column = {"min_time": "total_time_s_p90", "min_cost": "cost"}.get(
        objective, "throughput_per_gpu"
    )
    if deadline_s is not None:
        column = "cost" if np.isfinite(first["cost"]) else "num_gpus"
    ref, value = float(first[column]), float(getattr(row, column))
    if not (np.isfinite(ref) and ref > 0):
        return ""
    label = {"total_time_s_p90": "p90 time", "throughput_per_gpu": "samples/s per GPU"}.get(
        column, column
    )
    return f" ({value / ref - 1:+.0%} {label} vs #1)"


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 5),
    priced=st.booleans(),
    objective=st.sampled_from(configs.OBJECTIVES),
    deadline=st.sampled_from([None, 1e3]),
    text=st.booleans(),
    flagged=st.booleans(),
)
def test_reason_records_are_the_rows_itertuples_gives(
    seed, priced, objective, deadline, text, flagged
):
    """Reasons read the top rows as records of plain columns: the values (and types) of
    `itertuples`, so the same text, the comparison with #1 included; `flags` None where the
    backend gave none."""
    pools = [cands.GpuPool("v100", 2, 3, 2.5 if priced else None), cands.GpuPool("k80", 4, 2)]
    candidates = cands.enumerate_candidates({"job": "resnet18"}, pools, [16, 64])
    scored = scoring.score_candidates(candidates, TableBackend(seed), scoring.Work(samples=1e6))
    top = scored[np.isfinite(scored["step_time_s"])].head(6).reset_index(drop=True)
    if text:  # as `recommend` hands them over: text columns as text
        top = top.astype({"gpu_type": str, "placement": "string"})
    if not flagged:
        top = top.drop(columns="flags")
    records = why._reason_records(top)
    assert "total_time_s_p90" in why._REASON_COLUMNS and "flags" in why._REASON_COLUMNS
    for record, row in zip(records, top.itertuples(index=False), strict=True):
        assert flagged or record.flags is None
        for name in (n for n in why._REASON_COLUMNS if n in top):
            mine, theirs = getattr(record, name), getattr(row, name)
            assert type(mine) is type(theirs)
            assert mine == theirs or (mine != mine and theirs != theirs)
        got = why._versus_first(records[0], record, objective, deadline)
        assert got == old_versus_first(top.iloc[0], row, objective, deadline)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["v100", "k80"]),
            st.integers(1, 3),
            st.sampled_from([16, 32, 64, 4096]),
            st.sampled_from([1.0, 2.0, np.nan]),
        ),
        min_size=1,
        max_size=40,
    ),
    st.booleans(),
    st.booleans(),
)
def test_single_gpu_throughput_is_the_merge_of_the_first(rows: list, categorical, floats) -> None:
    """The one-GPU reference read by codes (a categorical's, whole batch sizes as they are)
    is the frame merge's, text and float batch sizes included."""
    scored = pd.DataFrame(rows, columns=["gpu_type", "num_gpus", "local_batch_size", "throughput"])
    if categorical:
        scored["gpu_type"] = scored["gpu_type"].astype("category")
    if floats:
        scored["local_batch_size"] = scored["local_batch_size"].astype(float)
    np.testing.assert_array_equal(
        scoring._single_gpu_throughput(scored, scored["throughput"].to_numpy()),
        old_single_gpu_throughput(scored),
    )


def old_pareto_front(candidates: np.ndarray, cost: np.ndarray, gpus: np.ndarray) -> list[int]:
    front: list[int] = []
    for i in candidates:
        kept = np.asarray(front, dtype=np.int64)
        if front and ((cost[kept] <= cost[i]) & (gpus[kept] <= gpus[i])).any():
            continue
        front.append(int(i))
    return front


@given(
    st.lists(
        st.tuples(st.sampled_from([1.0, 2.0, 3.0, 2.5, np.nan, np.inf]), st.integers(1, 6)),
        max_size=40,
    ),
    st.randoms(use_true_random=False),
    st.booleans(),
)
def test_pareto_front_keeps_what_the_loop_kept(points: list, random, blocked: bool) -> None:
    """Dominance against every earlier candidate at once (or, past FRONT_BLOCK, the loop)
    keeps the candidates the loop over the kept ones kept, ties and NaN included."""
    cost = np.array([p[0] for p in points], dtype=float)
    gpus = np.array([p[1] for p in points], dtype=float)
    candidates = np.arange(len(points), dtype=np.int64)
    random.shuffle(candidates)
    block = shortlist.FRONT_BLOCK
    try:
        shortlist.FRONT_BLOCK = 3 if blocked else block
        got = shortlist._pareto_front(candidates, cost, gpus)
    finally:
        shortlist.FRONT_BLOCK = block
    assert got == old_pareto_front(candidates, cost, gpus)
    assert all(type(i) is int for i in got)


# The recommendation's candidates are checked once per request (`checked_candidates`) and
# predicted as `CheckedRows`, their 10^5 rows not checked again, flags spelled once per
# distinct set: held to the checked path on the same requests, errors included.


class ModelBackend:
    """The model behind the PredictionBackend protocol."""

    def __init__(self, model) -> None:
        self.model = model

    def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
        return self.model.predict_interval(rows)


JOB_VALUES = {
    "job": ["resnet18", "bert", "my-llama-7b", "vgg16"],
    "amp": [True, False, "yes", "0", None, "maybe"],
    "cluster": ["gavel", "muri", "elsewhere", None, 3],
    "intra_node_bw_gbps": [300, 0.5, "300", None, -1.0, math.inf],
    "inter_node_bw_gbps": [12.5, None, 0],
    "params_m": [25, None, "x"],
    "peak_tflops_fp32": [15.7, None],
    "step_time_s": [None, 2.0, -1.0],
    "source": ["mine", None],
    "note": ["anything", 1.5],
}


@st.composite
def requests(draw) -> tuple[dict, list]:
    """A job (its name and some further columns, valid or not) and one or two GPU pools."""
    job = {"job": draw(st.sampled_from(JOB_VALUES["job"]))}
    for name in draw(st.lists(st.sampled_from(list(JOB_VALUES)[1:]), max_size=3, unique=True)):
        job[name] = draw(st.sampled_from(JOB_VALUES[name]))
    types = draw(st.lists(st.sampled_from(["v100", "k80", "a100", "p100", "tpu-x"]),
                          min_size=1, max_size=2, unique=True))  # fmt: skip
    pools = [
        cands.GpuPool(
            gpu,
            gpus_per_node=draw(st.integers(1, 8)),
            nodes=draw(st.integers(1, 6)),
            price_per_gpu_hour=draw(st.sampled_from([None, 2.5])),
        )
        for gpu in types
    ]
    return job, pools


def _outcome(call):
    try:
        return call()
    except ContractError as err:
        return ContractError, str(err), err.row, err.column, err.details
    except (TypeError, ValueError) as err:  # as before: `params_m` "x"
        return type(err), str(err)


def _as_text(frame: pd.DataFrame, like: pd.DataFrame) -> pd.DataFrame:
    """`frame`'s categoricals as the dtype of `like`'s column of that name."""
    text = [
        c
        for c, t in frame.dtypes.items()
        if isinstance(t, pd.CategoricalDtype) and not isinstance(like[c].dtype, pd.CategoricalDtype)
    ]
    return frame.astype({c: like[c].dtype for c in text})


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(request=requests(), sizes=st.lists(st.sampled_from([8, 32, 128]), min_size=1))
def test_candidates_checked_once_are_the_rows_checked_one_by_one(model, request, sizes) -> None:
    job, pools = request
    candidates = cands.enumerate_candidates(job, pools, sizes)
    want = _outcome(lambda: model._check_rows(candidates))
    got = _outcome(lambda: cands.checked_candidates(candidates))
    if isinstance(want, tuple):
        assert got == want  # the same error, worded as before
        return
    assert isinstance(got, CheckedRows)
    pd.testing.assert_frame_equal(_as_text(got, want), want, check_exact=True)
    answer = _outcome(lambda: model.predict_interval(got))
    before = _outcome(lambda: model.predict_interval(candidates))
    if isinstance(before, tuple):
        assert answer == before
        return
    assert isinstance(answer["flags"].dtype, pd.CategoricalDtype)
    pd.testing.assert_frame_equal(_as_text(answer, before), before, check_exact=True)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    request=requests(),
    sizes=st.lists(st.sampled_from([8, 32, 128]), min_size=1, max_size=3),
    objective=st.sampled_from(configs.OBJECTIVES),
    deadline=st.sampled_from([None, 1e3, 1e5]),
    max_cost=st.sampled_from([None, 50.0]),
    top_k=st.integers(1, 6),
)
def test_recommendations_from_checked_candidates_are_the_checked_paths(
    model, request, sizes, objective, deadline, max_cost, top_k
) -> None:
    """Same ranking, same numbers, same flags and reasons on the returned rows, same notes
    and counts, the same error where there is one."""
    job, pools = request

    def recommend(backend):
        return configs.recommend(
            job, pools, backend, local_batch_sizes=sizes, objective=objective,
            work=scoring.Work(samples=1e7), deadline_s=deadline, max_cost=max_cost,
            top_k=top_k,
        )  # fmt: skip

    def outcome(backend):
        try:
            answer = recommend(backend)
        except Exception as err:  # a number column of text: a ValueError, as before
            return type(err), str(err), getattr(err, "details", None)
        return answer

    # the reference: the candidates handed on as enumerated (a plain frame), every row checked
    with mock.patch.object(scoring, "checked_candidates", lambda candidates: candidates):
        want = outcome(ModelBackend(model))
    got = outcome(ModelBackend(model))  # as `CheckedRows`
    if isinstance(want, tuple):
        assert got == want
        return
    pd.testing.assert_frame_equal(got.top, want.top, check_exact=True)
    # the top rows, made alone, are the rows of the whole scored frame
    candidates = cands.enumerate_candidates(job, pools, sizes)
    every = scoring.score_candidates(candidates, ModelBackend(model), scoring.Work(samples=1e7))
    key = ["gpu_type", "num_nodes", "num_gpus", "local_batch_size"]
    position = {row: i for i, row in enumerate(every[key].astype(object).itertuples(index=False))}
    at = [position[row] for row in want.top[key].astype(object).itertuples(index=False)]
    rows = every.iloc[at].drop(columns=["in_search"]).reset_index(drop=True)
    rows["placement"] = rows["placement"].astype("string")
    text = [c for c, t in rows.dtypes.items() if isinstance(t, pd.CategoricalDtype)]
    rows = rows.astype(dict.fromkeys(text, str)).assign(reason=want.top["reason"])
    pd.testing.assert_frame_equal(want.top, rows, check_exact=True)
    assert got.top["flags"].dtype == want.top["flags"].dtype
    assert (got.objective, got.candidates, got.unpredicted, got.infeasible, got.notes) == (
        want.objective, want.candidates, want.unpredicted, want.infeasible, want.notes,
    )  # fmt: skip


def old_flags_column(flags: dict, n: int) -> np.ndarray:
    """`predictor.base.flags_column` as it was (np.unique of the bits)."""
    tokens = [t for t in FLAGS if t in flags]
    bits = np.zeros(n, dtype=np.int64)
    for i, token in enumerate(tokens):
        bits |= np.asarray(flags[token], dtype=bool).astype(np.int64) << i
    sets, codes = np.unique(bits, return_inverse=True)
    words = [",".join(t for i, t in enumerate(tokens) if s >> i & 1) for s in sets.tolist()]
    return np.array(words, dtype=object)[codes.reshape(-1)]


@given(
    st.lists(st.sampled_from(list(FLAGS)), unique=True, max_size=len(FLAGS)),
    st.integers(1, 40),
    st.randoms(use_true_random=False),
)
def test_flags_spelled_once_per_set_are_the_flags_column(tokens, n, random) -> None:
    flags = {t: np.array([random.random() < 0.3 for _ in range(n)]) for t in tokens}
    want = old_flags_column(flags, n)
    assert flags_column(flags, n).tolist() == want.tolist()
    spelled = flags_categorical(flags, n)
    assert np.asarray(spelled, dtype=object).tolist() == want.tolist()
    assert len(spelled.categories) == len(set(want))


@given(
    st.lists(
        st.tuples(*[st.sampled_from([0.0, -0.0, 1.0, 2.0, 2.0, np.nan, np.inf])] * 3),
        min_size=1,
        max_size=20,
    )
)
def test_intervals_in_order_are_as_sorted(rows: list) -> None:
    quantiles = [tuple(np.array([r[k] for r in rows]) for k in range(3))]
    got = interval_columns(("y",), quantiles)
    stacked = np.sort(np.vstack(quantiles[0]), axis=0)
    for name, k in (("y_p10", 0), ("y", 1), ("y_p90", 2)):
        np.testing.assert_array_equal(got[name], stacked[k])
        np.testing.assert_array_equal(np.signbit(got[name]), np.signbit(stacked[k]))


# The recommendation ranks only the rows its diverse front reads (`_ranked_for_front`), not
# every feasible row: held to the lexsort of every row it replaced.

VALUES = [1.0, 2.0, 2.0, 3.0, -0.0, 0.0, math.nan, math.inf]


@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.sampled_from(VALUES), st.sampled_from(VALUES)),
        min_size=1,
        max_size=60,
    ),
    st.booleans(),
)
def test_first_per_group_is_the_first_of_each_group_sorted(rows: list, grouped: bool) -> None:
    if grouped:  # the candidates' rows come in runs of one group
        rows = sorted(rows, key=lambda r: r[0])
    group = np.array([r[0] for r in rows], dtype=np.int64)
    keys = [np.array([r[1] for r in rows]), np.array([r[2] for r in rows])]
    order = np.lexsort((np.arange(len(group)), keys[1], keys[0], group))
    firsts = np.ones(len(order), dtype=bool)
    firsts[1:] = group[order][1:] != group[order][:-1]
    got = shortlist._first_per_group(group, keys)
    np.testing.assert_array_equal(np.sort(got), np.sort(order[firsts]))


@given(
    st.lists(st.tuples(st.sampled_from(VALUES), st.sampled_from(VALUES)), max_size=60),
    st.integers(1, 8),
)
def test_leading_rows_hold_the_first_ones_sorted(rows: list, count: int) -> None:
    keys = [np.array([r[0] for r in rows]), np.array([r[1] for r in rows])]
    got = shortlist._leading(keys, count)
    assert (np.diff(got) > 0).all()
    assert set(np.lexsort(keys[::-1])[:count].tolist()) <= set(got.tolist())


def old_diverse_front(scored: pd.DataFrame, ranked: np.ndarray, top_k: int) -> np.ndarray:
    """`front.diverse_front` before `ranked_for_front`: every feasible row ranked."""
    if len(ranked) <= 1:
        return np.arange(len(ranked))
    gpus = np.asarray(scored["num_gpus"], dtype=float)[ranked]
    time = np.asarray(scored["total_time_s"], dtype=float)[ranked]
    time = np.where(np.isfinite(time), time, 1 / np.asarray(scored["throughput"], float)[ranked])
    cost = np.asarray(scored["cost"], dtype=float)[ranked]
    cost = np.where(np.isfinite(cost), cost, time * gpus)
    # GPU types numbered in rank order (codes of the whole column first: no strings hashed)
    kind = pd.factorize(pd.factorize(scored["gpu_type"], use_na_sentinel=False)[0][ranked])[0]
    group = kind * (int(gpus.max()) + 1) + gpus.astype(np.int64)
    candidates = shortlist._best_per_group(group, time, cost)
    candidates = candidates[np.lexsort((gpus[candidates], cost[candidates], time[candidates]))]
    front = shortlist._pareto_front(candidates, cost, gpus)
    points = np.log(np.column_stack([time, cost, gpus])[front])
    span = np.ptp(points, axis=0)
    points = points / np.where(span > 0, span, 1.0)
    chosen = [0]  # the objective's best, on the front or not
    distance = np.linalg.norm(points - np.log(np.array([time[0], cost[0], gpus[0]])) /
                              np.where(span > 0, span, 1.0), axis=1)  # fmt: skip
    while len(chosen) < top_k and distance.max() > 0:
        far = int(distance.argmax())
        chosen.append(front[far])
        distance = np.minimum(distance, np.linalg.norm(points - points[far], axis=1))
    rest = (i for i in range(len(ranked)) if i not in set(chosen))
    while len(chosen) < min(top_k, len(ranked)):
        chosen.append(next(rest))
    return np.array(sorted(chosen), dtype=np.int64)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["v100", "k80", "a100"]),
            st.integers(1, 3),  # few values each: ties within and across groups
            st.sampled_from([1.0, 2.0, math.nan]),  # total time
            st.sampled_from([1.0, 3.0]),  # throughput
            st.sampled_from([1.0, 2.0, math.nan]),  # cost
            st.sampled_from(VALUES),  # a further rank key
            st.booleans(),  # feasible
        ),
        min_size=1,
        max_size=80,
    ),
    st.integers(1, 6),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.sampled_from([None, *configs.OBJECTIVES, "deadline"]),
)
@example(  # a group's best by time and cost: the first of its ties in rank order
    [
        ("v100", 1, 2.0, 1.0, 2.0, 5.0, True),
        ("v100", 1, 2.0, 1.0, 2.0, 4.0, True),
        ("v100", 2, 1.0, 1.0, 1.0, 0.0, True),
        ("v100", 3, 1.0, 1.0, 1.0, 0.0, True),
    ],
    2,
    False,
    True,
    False,
    None,
)
@example(  # min_time: the p90 time ranks, the median time is the front's
    [
        ("v100", 1, 1.0, 1.0, 1.0, 3.0, True),
        ("v100", 2, 2.0, 1.0, 2.0, 2.0, True),
        ("k80", 2, 2.0, 1.0, 2.0, 2.0, True),
        ("k80", 3, 1.0, 3.0, 1.0, math.nan, True),
    ],
    2,
    False,
    True,
    False,
    "min_time",
)
@example(  # GPU types numbered by their first rows, which decide between tied candidates
    [
        ("a100", 3, 1.0, 1.0, 1.0, 0.0, True),
        ("a100", 3, 1.0, 1.0, 1.5, 0.0, True),
        ("k80", 2, 9.0, 1.0, 2.0, 0.0, True),
        ("v100", 2, 4.0, 1.0, 3.0, 0.0, True),
        ("k80", 2, 4.0, 1.0, 3.0, 1.0, True),
    ],
    2,
    False,
    True,
    False,
    None,
)
def test_ranking_the_fronts_rows_chooses_what_ranking_all_chose(
    rows: list, top_k: int, grouped: bool, categorical: bool, rank_all: bool, rank
) -> None:
    """`rank`: the keys `recommend` ranks by for an objective (`_rank_columns`; the further
    key drawn is the p90 time), or None: cost, most GPUs, the further key."""
    if grouped:  # as the candidates come: by pool, then GPUs
        rows = sorted(rows, key=lambda r: (r[0], r[1]))
    kinds = [r[0] for r in rows]
    scored = pd.DataFrame(
        {
            "gpu_type": pd.Categorical(kinds) if categorical else kinds,
            "num_gpus": [r[1] for r in rows],
            "total_time_s": [r[2] for r in rows],
            "throughput": [r[3] for r in rows],
            "cost": [r[4] for r in rows],
            "total_time_s_p90": [r[5] for r in rows],  # not ordered as the median time
            "num_nodes": [1 + i % 2 for i in range(len(rows))],
        }
    )
    scored["throughput_per_gpu"] = scored["throughput"] / scored["num_gpus"]
    feasible = np.flatnonzero([r[6] for r in rows])
    if rank is None:
        extra = np.array([r[5] for r in rows])[feasible]
        keys = [scored["cost"].to_numpy()[feasible], -scored["num_gpus"].to_numpy(float)[feasible]]
        keys.append(extra)
    else:  # as `recommend` makes them
        columns, ascending = configs._rank_columns(rank, rank == "deadline")
        keys = [
            scored[c].to_numpy(float)[feasible] * (1 if up else -1)
            for c, up in zip(columns, ascending, strict=True)
        ]
    ranked = feasible[np.lexsort(keys[::-1])]
    expected = ranked[old_diverse_front(scored, ranked, top_k)]
    every = shortlist.RANK_ALL_ROWS
    try:
        shortlist.RANK_ALL_ROWS = len(rows) if rank_all else 0
        few = feasible[shortlist.ranked_for_front(scored, feasible, keys, top_k)]
    finally:
        shortlist.RANK_ALL_ROWS = every
    np.testing.assert_array_equal(few[shortlist.diverse_front(scored, few, top_k)], expected)
