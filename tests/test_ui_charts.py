"""The dashboard's pieces without a browser: the Pareto set, the ask form's reading into the
API's request, the simulation report's time series (properties over random job tables)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scheduler_synthetic import synthetic_workload

from perfcast.scheduler.core.cluster import ClusterSpec
from perfcast.scheduler.policies import make_policy
from perfcast.scheduler.sim.engine import simulate
from perfcast.scheduler.sim.metrics import job_table, summarize
from perfcast.scheduler.sim.report import (
    ReportError,
    gpus_held,
    load_run,
    queue_length,
    sample_steps,
    write_report,
)
from perfcast.scheduler.sim.run import SimRun, write_outputs
from perfcast.serving import schemas
from perfcast.serving.ui.ask import AskForm, FormError
from perfcast.serving.ui.charts import Point, pareto_front, pareto_ranks, scatter_svg

coordinates = st.lists(
    st.tuples(st.integers(0, 50).map(float), st.integers(0, 50).map(float)), max_size=30
)


def _dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[0] and a[1] <= b[1] and a != b


@given(coordinates)
def test_pareto_front_is_exactly_the_undominated_points(points) -> None:
    front = set(pareto_front(points))
    for i, p in enumerate(points):
        dominated = any(_dominates(q, p) for q in points)
        assert (i in front) == (not dominated)
    if points:
        assert front  # a finite non-empty set always has an undominated point


def test_pareto_ranks_leave_out_points_missing_a_figure() -> None:
    points = [Point(1, 5, "a", 1), Point(2, 1, "b", 2), Point(float("nan"), 0, "c", 3),
              Point(3, 6, "d", 4)]  # fmt: skip
    assert pareto_ranks(points) == {1, 2}
    svg = scatter_svg(points, "time", "cost")
    assert svg.count('class="point pareto"') == 2 and svg.count('class="point dominated"') == 1


def test_ask_form_reads_into_the_apis_request() -> None:
    form = AskForm.from_query(
        {"job": "bert", "gpu_types": "v100, t4", "prices": "2.48,0.35", "gpus_per_node": "4",
         "nodes": "2", "batch_sizes": "8,16", "samples": "", "top_k": "3", "other": "x"}
    )  # fmt: skip
    request = form.request()
    assert isinstance(request, schemas.RecommendRequest)
    assert [p.gpu_type for p in request.pools] == ["v100", "t4"]
    assert [p.price_per_gpu_hour for p in request.pools] == [2.48, 0.35]
    assert request.local_batch_sizes == [8, 16] and request.work is None and request.top_k == 3


@pytest.mark.parametrize(
    "field,value,says",
    [
        ("batch_sizes", "8,many", "batch_sizes: 'many' is not a whole number"),
        ("prices", "1,2", "one price per GPU type (1)"),
        ("gpu_types", " , ", "gpu_types: give at least one value"),
        ("top_k", "0", "top_k"),
        ("gpus_per_node", "4.5", "gpus_per_node"),
    ],
)
def test_ask_form_names_the_field_it_cannot_read(field: str, value: str, says: str) -> None:
    with pytest.raises(FormError, match=says.replace("(", r"\(").replace(")", r"\)")):
        AskForm.from_query({field: value}).request()


@st.composite
def job_tables(draw) -> pd.DataFrame:
    n = draw(st.integers(1, 25))
    rows = []
    for _ in range(n):
        submit = draw(st.integers(0, 1000))
        start = submit + draw(st.integers(0, 500))
        finish = start + draw(st.integers(0, 500))
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        held = draw(st.floats(0.1, 1.0)) * gpus * (finish - start)  # preempted part of the time
        rows.append((submit, start, finish, gpus, held))
    return pd.DataFrame(rows, columns=["submit_s", "start_s", "finish_s", "num_gpus", "gpu_s"])


@settings(max_examples=60, deadline=None)
@given(job_tables())
def test_queue_length_counts_jobs_waiting_for_their_first_start(jobs: pd.DataFrame) -> None:
    times, values = queue_length(jobs)
    assert (values >= 0).all() and values[-1] == 0
    probe = np.unique(np.concatenate([jobs["submit_s"], jobs["start_s"]]).astype(float))
    want = [((jobs["submit_s"] <= t) & (jobs["start_s"] > t)).sum() for t in probe]
    assert sample_steps(times, values, probe).tolist() == want


@settings(max_examples=60, deadline=None)
@given(job_tables())
def test_gpus_held_integrates_to_the_jobs_gpu_seconds(jobs: pd.DataFrame) -> None:
    times, values = gpus_held(jobs)
    assert (values >= -1e-9).all() and abs(values[-1]) < 1e-9
    integral = float(np.sum(values[:-1] * np.diff(times))) if len(times) > 1 else 0.0
    spans = jobs["finish_s"] > jobs["start_s"]
    assert integral == pytest.approx(jobs.loc[spans, "gpu_s"].sum(), rel=1e-9, abs=1e-6)
    assert values.max() <= jobs["num_gpus"].sum() + 1e-9


def test_report_names_the_missing_file(tmp_path) -> None:
    (tmp_path / "metrics.json").write_text("{}")
    with pytest.raises(ReportError, match=r"jobs.csv: missing"):
        load_run(tmp_path)
    (tmp_path / "jobs.csv").write_text("job_id\n")
    (tmp_path / "metrics.json").write_text("{not json")
    with pytest.raises(ReportError, match=r"metrics.json: not JSON"):
        load_run(tmp_path)


def test_report_draws_the_simulators_timeline_and_says_when_it_estimates(tmp_path) -> None:
    # tiresias preempts A for B: a job waiting after its first start, which only the timeline sees
    workload = synthetic_workload([("A", 0.0, "slow", 1, 1000.0), ("B", 200.0, "slow", 1, 300.0)])
    result = simulate(
        workload, ClusterSpec.parse("1x1:v100"), make_policy("tiresias", thresholds=(100.0,))
    )
    write_outputs(SimRun(result, summarize(result), job_table(result)), tmp_path)
    run = load_run(tmp_path)
    assert run.timeline is not None
    times, waiting = (run.timeline[c].to_numpy(float) for c in ("time_s", "jobs_waiting"))
    waiting = sample_steps(times, waiting, np.array([250.0]))
    assert waiting.tolist() == [1.0]  # A, preempted at 200, waits while B runs
    page = (tmp_path / "report.html").read_text()
    assert "from the simulator's timeline" in page and "An estimate" not in page

    (tmp_path / "timeline.csv").unlink()  # a folder written before timelines existed
    assert "An estimate" in write_report([tmp_path], tmp_path / "old.html").read_text()
    (tmp_path / "timeline.csv").write_text("t,gpus\n0,1\n")
    with pytest.raises(ReportError, match=r"timeline.csv: columns"):
        load_run(tmp_path)
