"""The dashboard's pages without a browser or a trained model: what they answer when no
champion is loaded, no live store exists, or the input is hostile (never a 500, never markup
echoed back unescaped)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from perfcast.serving.app import create_app
from perfcast.serving.models import ServedModels
from perfcast.serving.settings import Settings


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    monkeypatch.setenv("PERFCAST_LIVE_STATE", str(tmp_path / "no-scheduler"))
    # models never loaded: every task answers "no model", whatever the session's registry holds
    models = ServedModels(("scaling", "interference"))
    return TestClient(create_app(Settings(tasks=("scaling", "interference")), models=models))


def test_models_page_says_why_a_task_has_no_model(client: TestClient) -> None:
    page = client.get("/ui/models")
    assert page.status_code == 200
    assert page.text.count('class="missing"') == 2
    assert "perfcast train --task scaling" in page.text


def test_ask_without_a_scaling_model_is_503_on_the_page(client: TestClient) -> None:
    page = client.get("/ui/ask", params={"job": "resnet18", "gpu_types": "v100"})
    assert page.status_code == 503
    assert "no model for task scaling" in page.text


def test_ask_page_escapes_what_it_echoes(client: TestClient) -> None:
    hostile = '"><script>alert(1)</script>'
    page = client.get("/ui/ask", params={"job": hostile, "batch_sizes": hostile})
    assert page.status_code == 422
    assert "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text


def test_live_state_without_a_store_says_so(client: TestClient, tmp_path: Path) -> None:
    state = client.get("/ui/live/state.json").json()
    assert state["present"] is False
    assert str(tmp_path / "no-scheduler" / "state.db") in state["reason"]
    assert not (tmp_path / "no-scheduler").exists()  # looking never creates a store


def test_live_state_names_a_file_that_is_no_store(client: TestClient, tmp_path: Path) -> None:
    (tmp_path / "no-scheduler").mkdir()
    (tmp_path / "no-scheduler" / "state.db").write_text("not a database " * 100)
    state = client.get("/ui/live/state.json").json()
    assert state["present"] is False and "state.db" in state["reason"]


@pytest.mark.parametrize("name", ["../app.py", "..%2Fapp.py", "style.css.bak", "live.js%00"])
def test_static_serves_only_its_own_files(client: TestClient, name: str) -> None:
    assert client.get(f"/ui/static/{name}").status_code == 404
    assert client.get("/ui/static/style.css").status_code == 200


def test_ui_root_goes_to_the_models_page(client: TestClient) -> None:
    answer = client.get("/ui", follow_redirects=False)
    assert answer.status_code in (302, 307) and answer.headers["location"] == "/ui/models"
