"""The dashboard's figures as a person reads them (issue 35), from a real champion: durations in
human units on the Ask page and its chart (never e-notation), efficiency as a percent, a
comparison coloured only by what it shows (a 413% error is never green), and `GET /` opening
the dashboard."""

from __future__ import annotations

import os
import re
from html.parser import HTMLParser

import pytest
from conftest import requires_data
from fastapi.testclient import TestClient

from perfcast.serving.app import create_app
from perfcast.serving.settings import Settings
from perfcast.serving.ui.champions import compare_to_baseline
from perfcast.training import model_store, trainer

HUMAN_DURATION = re.compile(r"^-?[\d.,]+ (µs|ms|s|min|h|d)$")
E_NOTATION = re.compile(r"\d[eE][+-]?\d")


class _Cells(HTMLParser):
    """Text of elements by class: td cells of the recommendations and svg tick labels."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, list[str]] = {}
        self._open: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        wanted = next((c for c in classes if c in self.WANTED), None)
        self._open.append(wanted)
        if wanted:
            self.found.setdefault(wanted, []).append("")

    def handle_endtag(self, tag: str) -> None:
        if self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        open_ = [c for c in self._open if c]
        if open_:
            self.found[open_[-1]][-1] += data

    WANTED = ("step", "total", "cost", "efficiency", "tick", "mape", "baseline", "coverage")


def _cells(html: str) -> dict[str, list[str]]:
    parser = _Cells()
    parser.feed(html)
    return {k: [" ".join(v.split()) for v in values] for k, values in parser.found.items()}


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory):
    before = os.environ["PERFCAST_HOME"]
    os.environ["PERFCAST_HOME"] = str(tmp_path_factory.mktemp("ui-units-home"))
    trainer.train("scaling", "muri-scaling", model="gbm")
    assert model_store.load_champion("scaling") is not None
    yield TestClient(create_app(Settings(tasks=("scaling",))))
    os.environ["PERFCAST_HOME"] = before


@requires_data
def test_ask_page_reads_in_human_units(http: TestClient) -> None:
    page = http.get(
        "/ui/ask",
        params={"job": "resnet18", "gpu_types": "v100", "nodes": "2", "prices": "2.48",
                "samples": "1280000000", "batch_sizes": "64,128"},
    )  # fmt: skip
    assert page.status_code == 200, page.text
    cells = _cells(page.text)
    assert cells["step"] and len(cells["step"]) == len(cells["total"])
    for step in cells["step"]:  # "0.12 s (0.1 s–0.15 s)"
        value, _, interval = step.partition(" (")
        assert HUMAN_DURATION.match(value), step
        assert all(HUMAN_DURATION.match(t) for t in interval.rstrip(")").split("–")), step
    assert all(HUMAN_DURATION.match(t) for t in cells["total"]), cells["total"]
    # 10^9 samples take hours to days: the unit follows the size, not seconds in e-notation
    assert any(t.endswith((" h", " d")) for t in cells["total"]), cells["total"]
    assert all(re.fullmatch(r"\$[\d,]+(\.\d\d)?", c) for c in cells["cost"]), cells["cost"]
    assert all(re.fullmatch(r"\d+(\.\d)?%", e) for e in cells["efficiency"]), cells["efficiency"]
    ticks = cells["tick"]
    assert not any(E_NOTATION.search(t) for t in ticks), ticks
    # round values (`20 d`, `40 d`; `$5,500`): x first, the total time, then y, the cost
    x_ticks = [t for t in ticks if not t.startswith("$")]
    assert len(x_ticks) >= 3 and all(HUMAN_DURATION.match(t) for t in x_ticks), ticks
    assert len(ticks) - len(x_ticks) >= 3 and ticks[len(x_ticks) :][0].startswith("$"), ticks
    assert len(set(x_ticks)) == len(x_ticks), ticks  # distinct labels on the time axis
    assert not E_NOTATION.search(page.text.split('id="request-json"')[0])
    # the reasons too: "..., 7.81 d (p90 15.6 d), $7,434; step time measured"
    reasons = re.findall(r'<td class="reason">([^<]*)</td>', page.text)
    assert reasons and all(
        re.search(r", [\d.,]+ (min|h|d) \(p90 [\d.,]+ (min|h|d)\)", r) for r in reasons
    )


@requires_data
def test_models_page_shows_percents_and_an_honest_comparison(http: TestClient) -> None:
    page = http.get("/ui/models")
    assert page.status_code == 200
    cells = _cells(page.text)
    assert re.fullmatch(r"\d+(\.\d+)?%", cells["mape"][0]), cells["mape"]
    assert re.fullmatch(r"\d+(\.\d)?%", cells["coverage"][0]), cells["coverage"]
    baseline = cells["baseline"][0]
    assert re.match(r"\d+(\.\d+)?% [\d.]+× (lower|higher) than the baseline", baseline), baseline
    assert not E_NOTATION.search(page.text)


def test_a_comparison_is_green_only_when_the_error_is_good_too() -> None:
    good = compare_to_baseline(5.1, 80.0)
    assert good is not None and good.tone == "better" and good.text.startswith("15.7×")
    # the case: 413% beside a 700% baseline is "lower", never green
    high = compare_to_baseline(413.0, 700.0)
    assert high is not None and high.tone == "poor" and "predicting 0" in high.why
    worse = compare_to_baseline(60.0, 30.0)
    assert worse is not None and worse.tone == "worse" and worse.text.startswith("2.0× higher")
    assert compare_to_baseline(None, 30.0) is None


def test_the_services_root_opens_the_dashboard() -> None:
    client = TestClient(create_app(Settings(tasks=("scaling",))))
    answer = client.get("/", follow_redirects=False)
    assert answer.status_code in (302, 307) and answer.headers["location"] == "/ui"
    assert client.get("/", follow_redirects=True).url.path == "/ui/models"
