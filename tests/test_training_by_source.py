"""The champion is chosen by how it does on clusters it never saw: training scores a scaling
model leave one cluster out next to perfect scaling on the same rows, logs and prints it, and
promotion follows that score (random held-out rows only as a tie-break). Real models on real
public data (Gavel's and Muri's clusters)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from mlflow.tracking import MlflowClient

from perfcast.datasets.fetch import shared_data_available
from perfcast.serving.app import create_app
from perfcast.serving.models import ServedModels
from perfcast.serving.settings import Settings
from perfcast.training import by_source, model_store, trainer

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets are not available"
)
DATA = "gavel-scaling,muri-scaling"  # two clusters: each is held out once


@pytest.fixture(scope="module", autouse=True)
def _own_home(tmp_path_factory: pytest.TempPathFactory):
    """The champions promoted here stay here: later tests find the session home's own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PERFCAST_HOME", str(tmp_path_factory.mktemp("by-source-home")))
        yield
    model_store.configure()  # back to the session home's store


@pytest.fixture(scope="module")
def first() -> trainer.TrainResult:
    return trainer.train("scaling", DATA, model="gbm")


def test_training_scores_each_cluster_held_out_beside_perfect_scaling(first) -> None:
    m = first.metrics
    for name in ("mape", "coverage", "width", "napkin_mape"):
        assert f"by_source_{name}" in m, name
    assert 0 < m["by_source_mape"] < 100 and 0 <= m["by_source_coverage"] <= 1
    # on clusters it never saw the model beats the napkin (measured: gbm below perfect scaling)
    assert m["by_source_mape"] < m["by_source_napkin_mape"]
    logged = MlflowClient().get_run(first.run_id).data.metrics
    assert logged["by_source_mape"] == pytest.approx(m["by_source_mape"])
    assert "on clusters it never saw" in trainer.describe(first)


def test_the_models_page_and_api_lead_with_the_score_by_source(first) -> None:
    served = ServedModels(("scaling",))
    assert served.reload() == []
    http = TestClient(create_app(Settings(tasks=("scaling",)), served))
    metrics = http.get("/v1/models").json()["models"][0]["metrics"]
    assert metrics["by_source_mape"] > metrics["mape"]  # a new cluster is harder
    page = http.get("/ui/models").text
    cell = page.split('class="num by-source"')[1].split("</td>")[0]
    assert f"{metrics['by_source_mape']:.1f}%" in cell and "perfect scaling" in cell
    header = page.split("<thead>")[1]
    assert header.index("on a new cluster") < header.index("on data like its training")
    assert "/tmp/" not in page and str(Path.home()) not in page  # no server path shown


def test_the_champion_moves_only_when_the_challenger_is_no_worse_by_source(
    first, monkeypatch
) -> None:
    real = by_source.scores

    def shifted(by: float):
        def scores(task, family, rows):
            found = real(task, family, rows)
            return {**found, "by_source_mape": found["by_source_mape"] + by}

        return scores

    monkeypatch.setattr(by_source, "scores", shifted(+5.0))  # worse on unseen clusters
    worse = trainer.train("scaling", DATA, model="gbm")
    assert not worse.promoted and "worse on clusters it never saw" in worse.promotion
    monkeypatch.setattr(by_source, "scores", shifted(-5.0))  # better on unseen clusters
    better = trainer.train("scaling", DATA, model="gbm")
    # the same random rows and the same model: only the score by source differs
    assert better.promoted and "on clusters it never saw" in better.promotion


def test_a_challenger_much_worse_on_random_rows_does_not_win_by_source() -> None:
    champion = {"by_source_mape": 30.0, "mape": 10.0}
    assert by_source.promotion({"by_source_mape": 29.0, "mape": 10.5}, champion)[0]
    kept, why = by_source.promotion({"by_source_mape": 29.0, "mape": 12.0}, champion)
    assert not kept and "10%" in why
    assert by_source.promotion({"mape": 5.0}, champion) is None  # no score by source: random


def test_auto_chooses_the_family_by_source_and_says_so(monkeypatch) -> None:
    """`--model auto` weighs the families on clusters they never saw (the champion's own test),
    not on a random fold; the by-source figures of the one it chose are logged as worked out."""
    calls = []

    def scores(task, family, rows):
        calls.append(family)
        return {"by_source_mape": {"gbm": 20.0, "fcn": 40.0}[family], "by_source_coverage": 0.8}

    def no_random_fold(*args, **kwargs):
        raise AssertionError("auto validated on a random fold where a split by source exists")

    monkeypatch.setattr(by_source, "scores", scores)
    monkeypatch.setattr(trainer, "validate_families", no_random_fold)
    result = trainer.train("scaling", DATA, model="auto")
    said = "auto chose gbm (leave-one-cluster-out MAPE: gbm 20.0%, fcn 40.0%)"
    assert result.family == "gbm" and said in result.notes
    assert sorted(calls) == ["fcn", "gbm"]  # each family once: the choice's figures are reused
    run = MlflowClient().get_run(result.run_id)
    assert run.data.tags[trainer.AUTO_CHOICE_TAG] == said
    assert run.data.metrics["by_source_mape"] == 20.0
