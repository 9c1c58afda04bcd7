"""Shared test set-up: every test session gets its own perfcast home (MLflow store, caches),
so tests never touch a user's `var/` and never see each other's models."""

from __future__ import annotations

import os

import pytest

from perfcast.datasets.fetch import shared_data_available

requires_data = pytest.mark.skipif(
    not shared_data_available(),
    reason="the public datasets are not available (no ../shared/datasets, no PERFCAST_DATA_DIR)",
)


@pytest.fixture(autouse=True, scope="session")
def _perfcast_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ["PERFCAST_HOME"] = str(tmp_path_factory.mktemp("perfcast-home"))
    os.environ.pop("MLFLOW_TRACKING_URI", None)
