"""The elastic allocation: the DP optimal (brute force agrees), the hull allocation within the
bound it proves, both within the cluster and the jobs' limits."""

from __future__ import annotations

import math

import pytest
from conftest import needs_data, pollux_placements
from hypothesis import given, settings
from hypothesis import strategies as st

from perfcast.errors import PerfcastError
from perfcast.optimizer.elastic import (
    ElasticJob,
    InfeasibleAllocationError,
    _check_minimums,
    _chosen_at,
    _exact,
    _options,
    _own_bests,
    _result,
    allocate,
    allocate_exhaustive,
    allocate_greedy,
    allocate_hull,
    own_best,
    own_best_margin,
    solve,
    total_throughput,
)


@st.composite
def tiny_cases(draw: st.DrawFn) -> tuple[list[ElasticJob], int]:
    total = draw(st.integers(0, 6))
    jobs = []
    for i in range(draw(st.integers(1, 4))):
        keys = draw(
            st.lists(st.tuples(st.integers(1, 5), st.sampled_from([16, 32, 64])), max_size=6)
        )
        rates = st.floats(0, 100, allow_nan=False, allow_infinity=False)
        throughput = {key: draw(rates) for key in keys}
        min_gpus = draw(st.integers(0, 2))
        max_gpus = draw(st.none() | st.integers(max(min_gpus, 1), 5))
        weight = draw(st.floats(0.1, 3))
        jobs.append(ElasticJob(f"j{i}", throughput, min_gpus, max_gpus, weight))
    return jobs, total


def _check_limits(jobs: list[ElasticJob], allocation: dict, total: int) -> None:
    assert set(allocation) == {j.job_id for j in jobs}
    assert sum(g for g, _ in allocation.values()) <= total
    for job in jobs:
        gpus, batch = allocation[job.job_id]
        if gpus == 0:
            assert job.min_gpus == 0 and batch == 0
            continue
        assert (gpus, batch) in job.throughput
        assert gpus >= job.min_gpus
        assert job.max_gpus is None or gpus <= job.max_gpus
        # the batch size is the job's best at that GPU count
        best = max(v for (g, _), v in job.throughput.items() if g == gpus)
        assert job.throughput[(gpus, batch)] == best


@settings(max_examples=300, deadline=None)
@given(tiny_cases())
def test_dp_matches_brute_force_and_beats_greedy(case: tuple[list[ElasticJob], int]) -> None:
    jobs, total = case
    try:
        exact = allocate_exhaustive(jobs, total)
    except InfeasibleAllocationError:
        with pytest.raises(InfeasibleAllocationError):
            allocate(jobs, total)
        return
    dp, greedy = allocate(jobs, total), allocate_greedy(jobs, total)
    for allocation in (dp, greedy):
        _check_limits(jobs, allocation, total)
    best = total_throughput(jobs, exact)
    assert math.isclose(total_throughput(jobs, dp), best, rel_tol=1e-9, abs_tol=1e-9)
    assert total_throughput(jobs, dp) >= total_throughput(jobs, greedy) - 1e-9


def _with_room(case: tuple[list[ElasticJob], int], room: int):
    """A tiny case on `room` GPUs more, with its jobs' options: (jobs, GPUs, options), or None
    where some job's minimum cannot be met."""
    jobs, total = case
    total += room
    options = _options(jobs, total)
    try:
        _check_minimums(jobs, options, total)
    except InfeasibleAllocationError:
        return None
    return jobs, total, options


@settings(max_examples=400, deadline=None)
@given(tiny_cases(), st.integers(0, 30))
def test_each_jobs_own_best_when_they_all_fit_is_the_dps_own_answer(case, room: int) -> None:
    """`solve` skips the DP when every job's best option fits beside the others' (a lightly
    loaded cluster): its allocation is then the DP's, ties included, on every tiny case (with
    `room` GPUs more, so that the bests often fit)."""
    feasible = _with_room(case, room)
    if feasible is None:
        return
    jobs, total, options = feasible
    dp = _result(jobs, options, _chosen_at(options, _exact(options, total)))
    assert solve(jobs, total).allocation == dp
    assert solve(jobs, total, exact_cells=0).allocation == dp or _own_bests(options, total) is None


@settings(max_examples=300, deadline=None)
@given(tiny_cases(), st.integers(0, 30))
def test_own_best_of_each_job_tells_when_the_shortcut_answers(case, room: int) -> None:
    """A scheduler keeping each job's `own_best` knows, without the option tables, when `solve`
    answers with them (their GPUs fit and every margin clears `own_best_margin`) and what."""
    feasible = _with_room(case, room)
    if feasible is None:
        return
    jobs, total, options = feasible
    bests = [own_best(job, total) for job in jobs]
    scale = math.fsum(abs(b.value) for b in bests)
    fits = sum(b.gpus for b in bests) <= total and all(
        b.margin > own_best_margin(scale) for b in bests
    )
    assert fits == (_own_bests(options, total) is not None)
    if fits:
        assert solve(jobs, total).allocation == {
            job.job_id: (b.gpus, b.batch) for job, b in zip(jobs, bests, strict=True)
        }


def test_own_bests_answer_only_clear_winners_that_fit() -> None:
    """The shortcut takes each job's best when they fit and its best is clear; a job whose
    best ties (or nearly ties, within rounding of the DP's sums) with another option, or bests
    that do not fit together, go to the DP."""
    clear = [ElasticJob("a", {(1, 32): 1.0, (2, 64): 1.5}), ElasticJob("b", {(1, 32): 2.0})]
    options = _options(clear, 3)
    chosen = _own_bests(options, 3)
    assert chosen is not None and _result(clear, options, chosen) == {
        "a": (2, 64),
        "b": (1, 32),
    }
    assert _own_bests(_options(clear, 2), 2) is None  # 2 + 1 GPUs do not fit on 2
    for second in (1.5, 1.5 - 1e-15):  # a tie, and a near tie
        tied = [ElasticJob("a", {(1, 32): second, (2, 64): 1.5})]
        assert _own_bests(_options(tied, 4), 4) is None
        assert solve(tied, 4).allocation == allocate_exhaustive(tied, 4)


def test_minimums_that_do_not_fit_name_the_jobs() -> None:
    jobs = [ElasticJob(f"big{i}", {(4, 32): 10.0}, min_gpus=4) for i in range(3)]
    with pytest.raises(InfeasibleAllocationError, match=r"at least 12 GPUs.*has 8.*big"):
        allocate(jobs, 8)


def test_a_required_job_without_any_usable_gpu_count_is_refused() -> None:
    jobs = [ElasticJob("a", {(2, 32): 10.0}, min_gpus=1, max_gpus=1)]
    with pytest.raises(InfeasibleAllocationError, match=r"job\(s\) a have"):
        allocate(jobs, 8)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"throughput": {(0, 32): 1.0}},
        {"throughput": {(1, 32): -1.0}},
        {"throughput": {(1, 32): math.nan}},
        {"throughput": {}, "min_gpus": -1},
        {"throughput": {}, "min_gpus": 3, "max_gpus": 2},
        {"throughput": {}, "weight": 0.0},
    ],
)
def test_bad_jobs_are_refused_with_their_id(kwargs: dict) -> None:
    with pytest.raises(PerfcastError, match="'bad'"):
        ElasticJob("bad", **kwargs)


def test_duplicate_job_ids_are_refused() -> None:
    jobs = [ElasticJob("x", {(1, 8): 1.0}), ElasticJob("x", {(1, 8): 2.0})]
    with pytest.raises(PerfcastError, match="'x' appears more than once"):
        allocate(jobs, 4)


def pollux_curves() -> dict[str, dict[tuple[int, int], float]]:
    """Per Pollux model: (GPUs, global batch) -> samples/s (global batch / measured step
    time), the best placement of each."""
    table = pollux_placements()
    table = table.assign(
        global_batch=table["num_gpus"] * table["local_batch_size"],
        rate=table["num_gpus"] * table["local_batch_size"] / table["step_time_s"],
    )
    curves = {}
    for model, rows in table.groupby("job"):
        best = rows.groupby(["num_gpus", "global_batch"])["rate"].max()
        curves[model] = {(int(g), int(b)): float(r) for (g, b), r in best.items()}
    return curves


@needs_data
def test_dp_on_measured_pollux_curves_is_optimal_and_no_worse_than_greedy() -> None:
    jobs = []
    for model, curve in pollux_curves().items():
        throughput = {(g, b): r for (g, b), r in curve.items() if g <= 4}
        # weights turn samples/s into progress per second, so models are comparable
        jobs.append(ElasticJob(str(model), throughput, weight=1 / max(throughput.values())))
    for total in (3, 6, 10):
        dp = allocate(jobs, total)
        _check_limits(jobs, dp, total)
        exact = total_throughput(jobs, allocate_exhaustive(jobs, total))
        assert math.isclose(total_throughput(jobs, dp), exact, rel_tol=1e-9)
        assert total_throughput(jobs, dp) >= total_throughput(jobs, allocate_greedy(jobs, total))


@settings(max_examples=300, deadline=None)
@given(tiny_cases())
def test_the_hull_allocation_stays_under_the_bound_it_proves(case) -> None:
    """On every tiny case: within limits, its value is what it says, at most the optimum, and
    its upper bound at least the optimum (the fractional solution along the hulls)."""
    jobs, total = case
    try:
        best = total_throughput(jobs, allocate_exhaustive(jobs, total))
    except InfeasibleAllocationError:
        with pytest.raises(InfeasibleAllocationError):
            allocate_hull(jobs, total)
        return
    hull = allocate_hull(jobs, total)
    _check_limits(jobs, hull.allocation, total)
    assert not hull.exact
    assert math.isclose(hull.value, total_throughput(jobs, hull.allocation), abs_tol=1e-9)
    assert hull.value <= best + 1e-9
    assert hull.upper_bound >= best - 1e-9 * max(1.0, best)
    assert 0.0 <= hull.gap <= 1.0
    # past its cell budget `solve` answers with the hull; within it, exactly
    assert solve(jobs, total, exact_cells=0).allocation == hull.allocation
    assert solve(jobs, total).exact


@needs_data
def test_the_hull_allocation_of_a_thousand_measured_jobs_is_within_a_percent() -> None:
    """1,000 jobs on Pollux's measured T4 curves (1-16 GPUs), 512 GPUs: the hull allocation
    reaches 99% of the exact DP's weighted throughput and proves it on its own (gap <= 1%)."""
    curves = list(pollux_curves().values())
    jobs = [
        ElasticJob(
            f"j{i}", curves[i % len(curves)], weight=1 / max(curves[i % len(curves)].values())
        )
        for i in range(1000)
    ]
    exact = solve(jobs, 512)
    hull = allocate_hull(jobs, 512)
    assert exact.exact and sum(g for g, _ in hull.allocation.values()) <= 512
    assert hull.value >= 0.99 * exact.value
    assert hull.gap <= 0.01 and hull.upper_bound >= exact.value * (1 - 1e-12)
