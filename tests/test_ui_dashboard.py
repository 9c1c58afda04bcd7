"""The dashboard driven in a real headless Chromium (Debian's chromium + chromium-driver, through
Selenium) against the app served by uvicorn on 127.0.0.1, with gbm champions trained here on
pollux-scaling and gavel-interference: the pages render, their numbers equal the API's, the ask
form answers what `POST /v1/recommend` answers, and the live page follows the scheduler's store
without a reload. Set PERFCAST_UI_SCREENSHOTS=docs/img to refresh the live page's screenshot
(tests/test_ui_readable.py takes the others)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import httpx
import pytest
import yaml
from browser import headless_chromium, needs_browser, screenshot
from conftest import requires_data
from serving_server import LoopbackServer

from perfcast.units import duration, pct, percent

pytestmark = [
    requires_data,
    pytest.mark.slow,
    needs_browser,
]

WAIT_S = 30  # generous: the machine running the tests may be busy
SCALING_DATA = "pollux-scaling,measured-cpu-zoo-scaling"


@pytest.fixture(scope="module")
def live_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's own perfcast home (its champions are exactly the ones trained here, whatever
    other tests registered) and the folder the live page reads the scheduler's store from."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PERFCAST_HOME", str(tmp_path_factory.mktemp("dashboard-home")))
        folder = tmp_path_factory.mktemp("live-state")
        env.setenv("PERFCAST_LIVE_STATE", str(folder))
        yield folder


@pytest.fixture(scope="module")
def server(live_dir: Path) -> str:
    """The app with freshly trained champions, served by uvicorn in a thread."""
    from perfcast.serving.app import create_app
    from perfcast.serving.settings import Settings
    from perfcast.training.trainer import train

    # the zoo measured here too: the live run's MLPs are zoo models, so it predicts their steps
    train("scaling", SCALING_DATA, model="gbm")
    train("interference", "gavel-interference", model="gbm")
    app = create_app(Settings(tasks=("scaling", "interference")))
    with LoopbackServer(app) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    yield from headless_chromium()


def _wait(browser, condition, what: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, WAIT_S, poll_frequency=0.2).until(condition, message=what)


def _num(text: str | None) -> float | None:
    return None if text in (None, "", "None") else float(text)


# ---- models -----------------------------------------------------------------------------------


def test_models_page_shows_the_apis_champions(server: str, browser) -> None:
    from selenium.webdriver.common.by import By

    api = httpx.get(f"{server}/v1/models").json()["models"]
    browser.get(f"{server}/ui/models")
    assert browser.title == "perfcast · Models"
    for model in api:
        row = browser.find_element(By.CSS_SELECTOR, f'tr[data-task="{model["task"]}"]')
        assert model["loaded"], model
        assert row.find_element(By.CLASS_NAME, "version").text == model["version"]
        assert row.find_element(By.CLASS_NAME, "family").text == model["family"] == "gbm"
        mape = row.find_element(By.CLASS_NAME, "mape")
        assert _num(mape.get_attribute("data-value")) == pytest.approx(model["metrics"]["mape"])
        assert mape.text == pct(model["metrics"]["mape"])
        coverage = row.find_element(By.CLASS_NAME, "coverage")
        assert coverage.text == percent(model["metrics"]["interval_coverage"])
        baseline = _num(row.find_element(By.CLASS_NAME, "baseline").get_attribute("data-value"))
        # the napkin baseline is far worse than a fitted model on these tables
        assert baseline is not None and baseline > model["metrics"]["mape"]
        # the champion's p10-p90 interval on the held-out rows, relative to its prediction
        width = _num(row.find_element(By.CLASS_NAME, "width").get_attribute("data-value"))
        assert width is not None and 0 < width < 10
    data = {m["task"]: m for m in api}
    scaling_row = browser.find_element(By.CSS_SELECTOR, 'tr[data-task="scaling"]')
    assert scaling_row.find_element(By.CLASS_NAME, "data").text == SCALING_DATA
    assert set(data) == {"scaling", "interference"}


# ---- ask --------------------------------------------------------------------------------------

ASK = {
    "job": "resnet18",  # not a Pollux workload: the answers carry a new_job flag
    "gpu_types": "t4",
    "gpus_per_node": "4",
    "nodes": "4",
    "prices": "0.35",
    "batch_sizes": "32,64,128",
    "samples": "5000000",
    "objective": "min_time",
    "top_k": "12",
}
SAME_AS_API = {
    "job": {"job": "resnet18"},
    "pools": [{"gpu_type": "t4", "gpus_per_node": 4, "nodes": 4, "price_per_gpu_hour": 0.35}],
    "local_batch_sizes": [32, 64, 128],
    "work": {"samples": 5000000},
    "objective": "min_time",
    "top_k": 12,
}


def _dominated(point: tuple[float, float], others: list[tuple[float, float]]) -> bool:
    return any(o[0] <= point[0] and o[1] <= point[1] and o != point for o in others)


def test_ask_form_answers_what_post_recommend_answers(server: str, browser) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(f"{server}/ui/ask")
    form = browser.find_element(By.ID, "ask")
    for name, value in ASK.items():
        field = form.find_element(By.NAME, name)
        if field.tag_name == "select":
            Select(field).select_by_value(value)
        else:
            field.clear()
            field.send_keys(value)
    form.find_element(By.ID, "ask-submit").click()
    _wait(browser, lambda d: d.find_elements(By.ID, "recommendations"), "the answer table")

    api = httpx.post(f"{server}/v1/recommend", json=SAME_AS_API).json()
    rows = browser.find_elements(By.CSS_SELECTOR, "#recommendations tbody tr")
    assert len(rows) == len(api["top"]) > 1
    for row, want in zip(rows, api["top"], strict=True):
        assert int(row.get_attribute("data-rank")) == want["rank"]
        assert row.find_element(By.CLASS_NAME, "gpu_type").text == want["gpu_type"]
        assert int(row.find_element(By.CLASS_NAME, "num_gpus").text) == want["num_gpus"]
        assert int(row.find_element(By.CLASS_NAME, "num_nodes").text) == want["num_nodes"]
        batch = int(row.find_element(By.CLASS_NAME, "local_batch_size").text)
        assert batch == want["local_batch_size"]
        step = _num(row.find_element(By.CLASS_NAME, "step").get_attribute("data-value"))
        assert step == pytest.approx(want["step_time_s"]["value"], rel=1e-12)
        cost = _num(row.find_element(By.CLASS_NAME, "cost").get_attribute("data-value"))
        assert cost == pytest.approx(want["cost"]["value"], rel=1e-12)
        flags = [f.text for f in row.find_elements(By.CSS_SELECTOR, ".flags .flag")]
        assert flags == want["flags"]
    assert any(c["flags"] for c in api["top"]), "an unseen job should be flagged"

    # the plot: one point per answer at (total time, cost); filled exactly on the Pareto set
    points = {(c["total_time_s"]["value"], c["cost"]["value"]): c["rank"] for c in api["top"]}
    want_front = {r for p, r in points.items() if not _dominated(p, list(points))}
    circles = browser.find_elements(By.CSS_SELECTOR, "svg.chart circle.point")
    assert len(circles) == len(api["top"])
    front = {
        int(c.get_attribute("data-rank"))
        for c in circles
        if "pareto" in c.get_attribute("class").split()
    }
    assert front == want_front and front
    for c in circles:
        rank = int(c.get_attribute("data-rank"))
        want = api["top"][rank - 1]
        assert float(c.get_attribute("data-x")) == pytest.approx(want["total_time_s"]["value"])
        assert float(c.get_attribute("data-y")) == pytest.approx(want["cost"]["value"])
    shown = json.loads(browser.find_element(By.ID, "request-json").get_attribute("textContent"))
    assert shown == SAME_AS_API


def test_ask_form_names_the_bad_field(server: str, browser) -> None:
    from selenium.webdriver.common.by import By

    query = {**ASK, "batch_sizes": "32,lots"}
    answer = httpx.get(f"{server}/ui/ask", params=query)
    assert answer.status_code == 422
    browser.get(str(httpx.URL(f"{server}/ui/ask", params=query)))
    error = browser.find_element(By.ID, "ask-error").text
    assert "batch_sizes" in error and "'lots'" in error
    # what the API's own request model refuses, the page refuses too, naming the field
    no_nodes = httpx.get(f"{server}/ui/ask", params={**ASK, "nodes": "0"})
    api = httpx.post(f"{server}/v1/recommend", json={**SAME_AS_API, "pools": [
        {**SAME_AS_API["pools"][0], "nodes": 0}]})  # fmt: skip
    assert no_nodes.status_code == api.status_code == 422
    assert "pools.0.nodes" in no_nodes.text and api.json()["detail"][0]["loc"][-1] == "nodes"


# ---- live cluster -----------------------------------------------------------------------------


def test_live_page_says_when_no_scheduler_runs(server: str, browser, live_dir: Path) -> None:
    from selenium.webdriver.common.by import By

    assert not (live_dir / "state.db").exists()
    browser.get(f"{server}/ui/live")
    absent = _wait(browser, lambda d: d.find_element(By.ID, "absent").text, "the absent note")
    assert "no live scheduler state" in absent and str(live_dir) in absent
    assert not browser.find_element(By.ID, "present").is_displayed()


def _gpu_cell(browser, node: int, gpu: int) -> str:
    from selenium.webdriver.common.by import By

    rows = browser.find_elements(By.CSS_SELECTOR, f'#gpus tr[data-gpu="{node}:{gpu}"]')
    return rows[0].find_element(By.CLASS_NAME, "occupants").text if rows else ""


def test_live_page_follows_the_store_without_reload(server: str, browser, live_dir: Path) -> None:
    """The scheduler's store, written through its own API as the live runner writes it; the
    open page picks each change up by itself."""
    from selenium.webdriver.common.by import By

    from perfcast.scheduler.live.spec import JobSpec
    from perfcast.scheduler.live.store import JobStore

    browser.get(f"{server}/ui/live")
    browser.execute_script("window.notReloaded = true;")
    store = JobStore(live_dir / "state.db")
    try:
        spec = JobSpec(name="mlp-a", model="mlp", iterations=400, batch_size=32,
                       min_step_time_s=0.05)  # fmt: skip
        store.add_job("mlp-a", spec.model_dump(), 0.0)
        store.add_job("mlp-b", spec.model_copy(update={"name": "mlp-b"}).model_dump(), 1.0)
        store.update_job("mlp-a", status="running", gpus=[(0, 0), (0, 1)], iteration=120,
                         samples_done=120 * 32, mean_step_time_s=0.0612)  # fmt: skip
        store.log("mlp-a", "launch", "attempt 0 on [[0, 0], [0, 1]] from scratch")
        row = _wait(
            browser,
            lambda d: d.find_elements(By.CSS_SELECTOR, '#jobs tr[data-job="mlp-a"]'),
            "mlp-a in the jobs table",
        )[0]
        assert row.find_element(By.CLASS_NAME, "status").text == "running"
        assert row.find_element(By.CLASS_NAME, "iteration").text == "120 / 400"
        assert row.find_element(By.CLASS_NAME, "progress").text == "30%"
        assert row.find_element(By.CLASS_NAME, "measured").text == "61.2 ms"
        assert row.find_element(By.CLASS_NAME, "predicted").text == "50 ms"
        assert _gpu_cell(browser, 0, 1) == "mlp-a"
        sharing = browser.find_element(By.CSS_SELECTOR, '#gpus tr[data-gpu="0:1"] td.sharing')
        assert sharing.text == "exclusive"
        kinds = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#events td.kind")]
        assert "launch" in kinds

        # the policy moves mlp-a and time-slices mlp-b with it: the page follows, same page
        store.update_job("mlp-a", gpus=[(1, 0), (1, 1)], iteration=250, samples_done=250 * 32,
                         share="timeslice")  # fmt: skip
        store.log("mlp-a", "migrate", "to [(1, 0), (1, 1)] batch 32")
        store.update_job("mlp-b", status="running", gpus=[(1, 0)], share="timeslice")
        _wait(browser, lambda d: _gpu_cell(d, 1, 0) == "mlp-a, mlp-b", "both on GPU 1:0")
        assert _gpu_cell(browser, 1, 1) == "mlp-a"
        assert _gpu_cell(browser, 0, 0) == _gpu_cell(browser, 0, 1) == ""
        sharing = browser.find_element(By.CSS_SELECTOR, '#gpus tr[data-gpu="1:0"] td.sharing')
        assert sharing.text == "timeslice"
        row = browser.find_element(By.CSS_SELECTOR, '#jobs tr[data-job="mlp-a"]')
        assert row.find_element(By.CLASS_NAME, "iteration").text == "250 / 400"
        first = browser.find_element(By.CSS_SELECTOR, "#events tbody tr")
        assert "migrate" in first.text and "batch 32" in first.text
        assert browser.execute_script("return window.notReloaded === true")
        state = httpx.get(f"{server}/ui/live/state.json").json()
        assert state["counts"] == {"running": 2}
    finally:
        store.close()


# ---- a running cluster ------------------------------------------------------------------------

# a small trace: two MLPs of the measured zoo at their own pace (the live error counts them),
# a two-GPU job paced as a trace replay, and one submitted later that waits for two free GPUs
ZOO_MLP = {"input_dim": 784, "batch_size": 64}
RUN_JOBS = [
    {"id": "big", "name": "big", "width": 1024, "depth": 4, **ZOO_MLP, "iterations": 150,
     "checkpoint_every": 75},
    {"id": "small", "name": "small", "width": 256, "depth": 3, **ZOO_MLP, "iterations": 400,
     "checkpoint_every": 200},
    {"id": "paced", "name": "paced", "num_gpus": 2, "batch_size": 64, "iterations": 120,
     "min_step_time_s": 0.1, "checkpoint_every": 60},
    {"id": "late", "name": "late", "num_gpus": 2, "batch_size": 64, "iterations": 40,
     "min_step_time_s": 0.1, "submit_time_s": 2},
]  # fmt: skip
RUN_S = 480  # Ray's start and cold workers take minutes on a loaded machine
RANK = {"pending": 0, "running": 1, "suspended": 1, "done": 2, "failed": 2}

SNAPSHOT_JS = """
const done = arguments[arguments.length - 1];
const rows = (id) => [...document.querySelectorAll("#" + id + " tbody tr")];
const text = (row, cls) => row.querySelector("." + cls).textContent;
refresh().then(() => done({
  state: window.liveState || null,
  reloaded: window.notReloaded !== true,
  gpus: rows("gpus").map((r) => ({gpu: r.dataset.gpu, type: text(r, "type"),
    occupants: text(r, "occupants"), sharing: text(r, "sharing")})),
  jobs: rows("jobs").map((r) => ({job: r.dataset.job, status: text(r, "status"),
    iteration: text(r, "iteration"), measured: text(r, "measured"),
    champion: text(r, "champion")})),
  events: rows("events").map((r) => ({kind: text(r, "kind"), text: r.innerText})),
}));
"""


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory: pytest.TempPathFactory, server: str):
    """`perfcast run-trace` on a local Ray cluster of its own (the one Ray start of this module),
    its state in a folder of its own; yields (process, state folder). The workers of finished
    jobs stay idle for the later launches (a new worker costs a process start)."""
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp("cluster-run")
    (folder / "jobs.yaml").write_text(yaml.safe_dump({"jobs": RUN_JOBS}))
    cmd = [
        str(Path(sys.executable).parent / "perfcast"), "run-trace", str(folder / "jobs.yaml"),
        "--policy", "fifo", "--state", str(folder / "state"), "--num-gpus", "4",
        "--round-s", "0.3", "--idle-workers", "4", "--json",
    ]  # fmt: skip
    log = (folder / "run.log").open("w")
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
    yield process, folder
    if process.poll() is None:  # the test failed mid-run: let Ray shut down with the driver
        process.send_signal(2)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    log.close()


def _store_now(path: Path) -> tuple[dict, list[dict]]:
    from perfcast.scheduler.live.store import JobStore

    store = JobStore(path)
    try:
        return {r.job_id: r for r in store.jobs()}, store.events()
    finally:
        store.close()


def _check_page_against_store(snap: dict, before: tuple, after: tuple) -> None:
    """The tables equal the JSON they were drawn from; that JSON lies between two readings of
    the store taken just before the page asked for it and just after it was drawn."""
    state = snap["state"]
    assert state["present"] and not snap["reloaded"]
    jobs = {j["job_id"]: j for j in state["jobs"]}
    assert [r["job"] for r in snap["jobs"]] == list(jobs)
    for row in snap["jobs"]:
        job = jobs[row["job"]]
        assert row["status"] == job["status"]
        assert row["iteration"] == f"{job['iteration']} / {job['iterations']}"
        champion = job["champion"]
        assert (row["champion"] == "–") == (champion is None)
        if champion:
            assert row["champion"].startswith(duration(champion["step_s"]) + " [")
    gpus = {f"{g['node']}:{g['gpu']}": g for g in state["gpus"]}
    assert [g["gpu"] for g in snap["gpus"]] == list(gpus)
    for row in snap["gpus"]:
        held = [o["job_id"] for o in gpus[row["gpu"]]["occupants"]]
        assert row["occupants"] == (", ".join(held) if held else "idle")
        running = [j for j, v in jobs.items() if v["status"] == "running"
                   and [int(x) for x in row["gpu"].split(":")] in v["gpus"]]  # fmt: skip
        assert held == running
    assert [e["kind"] for e in snap["events"]] == [e["kind"] for e in state["events"]]

    (first, first_events), (last, last_events) = before, after
    assert set(first) <= set(jobs) <= set(last)
    for job_id, job in jobs.items():
        old, new = first.get(job_id), last[job_id]
        low = RANK[old.status] if old else 0
        assert low <= RANK[job["status"]] <= RANK[new.status], job_id
        assert (old.iteration if old else 0) <= job["iteration"] <= new.iteration, job_id
        if old and (old.status, old.gpus) == (new.status, new.gpus):
            assert job["status"] == new.status
            assert [tuple(g) for g in job["gpus"]] == list(new.gpus), job_id
        if old and old.mean_step_time_s == new.mean_step_time_s:
            assert job["measured_step_s"] == new.mean_step_time_s
    # the events shown are the store's latest when it was read: a run of its log, newest first
    shown = [(e["job_id"], e["kind"], e["detail"]) for e in reversed(state["events"])]
    log = [(e["job_id"], e["kind"], e["detail"]) for e in last_events]
    ends = [
        k
        for k in range(len(first_events), len(log) + 1)
        if log[max(k - len(shown), 0) : k] == shown
    ]
    assert ends, "the events shown are not the store's latest"


def test_live_page_follows_a_running_cluster(
    server: str, browser, cluster_run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real `perfcast run-trace` on Ray: while it runs, every refresh of the page shows the
    store's GPUs (idle ones too), jobs, iterations and decisions as they are."""
    process, folder = cluster_run
    store_path = folder / "state" / "state.db"
    monkeypatch.setenv("PERFCAST_LIVE_STATE", str(folder / "state"))
    browser.get(f"{server}/ui/live")
    browser.execute_script("window.notReloaded = true;")
    browser.set_script_timeout(WAIT_S)
    seen: set[str] = set()
    snapshots = 0
    deadline = time.monotonic() + RUN_S
    while process.poll() is None:
        assert time.monotonic() < deadline, "run-trace did not finish"
        if not store_path.exists() or not _store_now(store_path)[0]:
            time.sleep(0.5)
            continue
        before = _store_now(store_path)
        snap = browser.execute_async_script(SNAPSHOT_JS)
        after = _store_now(store_path)
        _check_page_against_store(snap, before, after)
        snapshots += 1
        statuses = {j["status"] for j in snap["state"]["jobs"]}
        seen |= statuses
        if any(r["occupants"] == "idle" for r in snap["gpus"]) and "running" in statuses:
            seen.add("idle GPU beside a running job")
        if any(e["kind"] == "launch" for e in snap["events"]):
            seen.add("launch decision")
        jobs = snap["state"]["jobs"]
        busy = sum(j["status"] == "running" for j in jobs) >= 2
        if busy and any(j["champion"] for j in jobs) and "screenshot" not in seen:
            seen.add("screenshot")  # the documentation's: several jobs, one predicted
            screenshot(browser, "ui-live")
        time.sleep(0.3)
    output = (folder / "run.log").read_text()
    if process.returncode and "cannot reach the Ray cluster" in output:
        pytest.skip(f"Ray could not start here: {output[-500:]}")
    assert process.returncode == 0, output[-3000:]
    summary = json.loads(output.strip().splitlines()[-1])
    assert summary["finished"] == summary["jobs"] == 4
    want = {"pending", "running", "done", "idle GPU beside a running job", "launch decision"}
    assert want <= seen, f"{snapshots} snapshots saw {sorted(seen)}"
    final = browser.execute_async_script(SNAPSHOT_JS)  # the finished run, same page
    assert {j["status"] for j in final["state"]["jobs"]} == {"done"}
    assert len(final["gpus"]) == 4 and {g["occupants"] for g in final["gpus"]} == {"idle"}


def test_models_page_shows_the_live_error_of_the_champion(
    server: str, browser, cluster_run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scaling champion's predictions for the run's jobs against the step times their
    workers measured: the page's figure and the /metrics gauge equal the API's predictions
    compared with the store's measurements by hand."""
    from selenium.webdriver.common.by import By

    process, folder = cluster_run
    import subprocess

    try:  # run alone, or after a worker set the module's fixtures up again: the run still ends
        process.wait(timeout=RUN_S)
    except subprocess.TimeoutExpired:
        pytest.fail("run-trace did not finish")
    if process.returncode:
        pytest.skip("the cluster run did not complete (see the test before)")
    monkeypatch.setenv("PERFCAST_LIVE_STATE", str(folder / "state"))
    records, _ = _store_now(folder / "state" / "state.db")
    counted = {"big": "mlp-w1024-d4-i784", "small": "mlp-w256-d3-i784"}  # unpaced, alone
    rows = [{"job": counted[j], "gpu_type": "cpu", "num_nodes": 1, "num_gpus": 1,
             "local_batch_size": 64} for j in counted]  # fmt: skip
    answer = httpx.post(f"{server}/v1/predict/scaling", json={"rows": rows}).json()
    predicted = [p["step_time_s"] for p in answer["predictions"]]
    measured = [records[j].mean_step_time_s for j in counted]
    errors = [abs(p - m) / m for p, m in zip(predicted, measured, strict=True)]
    want = 100 * sum(errors) / len(errors)

    browser.get(f"{server}/ui/models")
    cell = browser.find_element(By.CSS_SELECTOR, 'tr[data-task="scaling"] td.live')
    assert _num(cell.get_attribute("data-value")) == pytest.approx(want, rel=1e-9)
    assert cell.get_attribute("data-jobs") == "2"
    assert cell.get_attribute("data-version") == answer["model"]["version"]
    assert cell.text.startswith(pct(want))
    assert "2 left out: paced by the trace" in cell.get_attribute("title")
    other = browser.find_element(By.CSS_SELECTOR, 'tr[data-task="interference"] td.live')
    assert other.text == "–"

    metrics = httpx.get(f"{server}/metrics").text
    labels = {"task": "scaling", "family": "gbm", "version": answer["model"]["version"]}
    gauge = _gauge(metrics, "perfcast_live_prediction_error_ratio", labels)
    assert gauge == pytest.approx(want / 100, rel=1e-9)
    assert _gauge(metrics, "perfcast_live_prediction_jobs", labels) == 2


def _gauge(text: str, name: str, labels: dict[str, str]) -> float | None:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


# ---- the simulation report --------------------------------------------------------------------


def test_simulation_report_opens_offline_with_the_runs_figures(tmp_path: Path, browser) -> None:
    from selenium.webdriver.common.by import By

    from perfcast.scheduler.core.cluster import ClusterSpec
    from perfcast.scheduler.sim.report import write_report
    from perfcast.scheduler.sim.run import prepare_workload, run_simulation, write_outputs

    spec = ClusterSpec.parse("4x4:v100")
    workload = prepare_workload("pollux-philly", spec, max_jobs=40)
    for policy in ("fifo", "tiresias"):
        written = write_outputs(run_simulation(workload, spec, policy), tmp_path / policy)
        assert tmp_path / policy / "report.html" in written
    both = write_report(
        [tmp_path / "fifo", tmp_path / "tiresias"], tmp_path / "both.html", total_gpus=16
    )

    browser.get(both.as_uri())
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    for chart in ("jct-cdf", "gpus-held", "queue"):
        labels = [
            s.get_attribute("data-label")
            for s in browser.find_elements(By.CSS_SELECTOR, f"#{chart} polyline.series")
        ]
        assert labels == ["fifo", "tiresias"], chart
    for column, policy in enumerate(("fifo", "tiresias"), start=1):
        metrics = json.loads((tmp_path / policy / "metrics.json").read_text())
        cells = browser.find_elements(By.CSS_SELECTOR, f"#summary td:nth-child({column + 1})")
        shown = {c.get_attribute("data-key"): c.get_attribute("data-value") for c in cells}
        assert int(shown["jobs"]) == metrics["jobs"] == 40
        assert float(shown["avg_jct_s"]) == pytest.approx(metrics["avg_jct_s"], rel=1e-3)
        assert int(shown["preemptions"]) == metrics["preemptions"]
        bars = browser.find_elements(By.CSS_SELECTOR, f'#preemptions rect[data-label="{policy}"]')
        assert sum(int(b.get_attribute("data-jobs")) for b in bars) == metrics["jobs"]
    ceiling = browser.find_element(By.CSS_SELECTOR, "#gpus-held line.ceiling")
    assert "16 GPUs" in browser.find_element(By.ID, "gpus-held").text
    top = float(ceiling.get_attribute("y1"))  # SVG y grows downwards: no curve point above it
    for line in browser.find_elements(By.CSS_SELECTOR, "#gpus-held polyline.series"):
        ys = [float(p.split(",")[1]) for p in line.get_attribute("points").split()]
        assert min(ys) >= top - 1e-6
    fifo = json.loads((tmp_path / "fifo" / "metrics.json").read_text())
    assert fifo["preemptions"] == 0 and math.isfinite(fifo["avg_jct_s"])
