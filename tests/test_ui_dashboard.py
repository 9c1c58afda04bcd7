"""The dashboard driven in a real headless Chromium (Debian's chromium + chromium-driver, through
Selenium) against the app served by uvicorn on 127.0.0.1, with gbm champions trained here on
pollux-scaling and gavel-interference: the pages render, their numbers equal the API's, the ask
form answers what `POST /v1/recommend` answers, and the live page follows the scheduler's store
without a reload. Set PERFCAST_UI_SCREENSHOTS=docs/img to refresh the documentation's
screenshots."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import requires_data

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
try:
    import selenium  # noqa: F401

    HAVE_SELENIUM = True
except ImportError:
    HAVE_SELENIUM = False

pytestmark = [
    requires_data,
    pytest.mark.slow,
    pytest.mark.skipif(
        not (CHROMIUM and DRIVER and HAVE_SELENIUM),
        reason="no headless browser: install Debian's chromium and chromium-driver "
        "(`apt-get install -y chromium chromium-driver`, as .ci/run does) and selenium",
    ),
]

WAIT_S = 30  # generous: the machine running the tests may be busy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    import uvicorn

    from perfcast.serving.app import create_app
    from perfcast.serving.settings import Settings
    from perfcast.training.trainer import train

    train("scaling", "pollux-scaling", model="gbm")
    train("interference", "gavel-interference", model="gbm")
    app = create_app(Settings(tasks=("scaling", "interference")))
    port = _free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + WAIT_S
    while not uv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield url
    uv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--disable-gpu"):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


def _wait(browser, condition, what: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, WAIT_S, poll_frequency=0.2).until(condition, message=what)


def _screenshot(browser, name: str) -> None:
    """Into PERFCAST_UI_SCREENSHOTS when set (docs/img for the README), else nowhere."""
    folder = os.environ.get("PERFCAST_UI_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        height = browser.execute_script("return document.body.scrollHeight")
        browser.set_window_size(1400, min(max(height + 40, 600), 2400))
        browser.save_screenshot(str(Path(folder) / f"{name}.png"))
        browser.set_window_size(1400, 1000)


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
        assert mape.text == f"{model['metrics']['mape']:.2f}"
        coverage = row.find_element(By.CLASS_NAME, "coverage")
        assert coverage.text == f"{model['metrics']['interval_coverage']:.3f}"
        baseline = _num(row.find_element(By.CLASS_NAME, "baseline").get_attribute("data-value"))
        # the napkin baseline is far worse than a fitted model on these tables
        assert baseline is not None and baseline > model["metrics"]["mape"]
        # the champion's p10-p90 interval on the held-out rows, relative to its prediction
        width = _num(row.find_element(By.CLASS_NAME, "width").get_attribute("data-value"))
        assert width is not None and 0 < width < 10
    data = {m["task"]: m for m in api}
    scaling_row = browser.find_element(By.CSS_SELECTOR, 'tr[data-task="scaling"]')
    assert scaling_row.find_element(By.CLASS_NAME, "data").text == "pollux-scaling"
    assert set(data) == {"scaling", "interference"}
    _screenshot(browser, "ui-models")


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
    _screenshot(browser, "ui-ask")


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
        assert row.find_element(By.CLASS_NAME, "measured").text == "0.06120"
        assert row.find_element(By.CLASS_NAME, "predicted").text == "0.05000"
        assert _gpu_cell(browser, 0, 1) == "mlp-a"
        sharing = browser.find_element(By.CSS_SELECTOR, '#gpus tr[data-gpu="0:1"] td.sharing')
        assert sharing.text == "exclusive"
        kinds = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#events td.kind")]
        assert "launch" in kinds
        _screenshot(browser, "ui-live")

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
        shown = {c.get_attribute("data-key"): c.text for c in cells}
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
    _screenshot(browser, "sim-report")
