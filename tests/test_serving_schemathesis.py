"""Robustness: schemathesis generates requests from the OpenAPI schema, valid and invalid
(bounded examples per operation): no answer is a 500, and a 503 always says why. Runs on a
real scaling champion; interference has no model (503)."""

from __future__ import annotations

import os

# LightGBM's OpenMP threads sleep instead of spinning when they wait: on a small shared CPU
# this makes fitting several times faster. Read when the OpenMP runtime loads, so set it before
# anything imports lightgbm (it has no effect if an earlier test module already did).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.generation import GenerationMode

from perfcast.datasets.fetch import shared_data_available
from perfcast.serving.app import create_app
from perfcast.serving.settings import Settings
from perfcast.training import model_store, trainer

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets are not available"
)
EXAMPLES_PER_OPERATION = 8


@pytest.fixture(scope="module")
def api_schema():
    if model_store.load_champion("scaling") is None:
        trainer.train("scaling", "muri-scaling", model="gbm")
    # generated recommend requests may enumerate up to the limit; keep each call short
    settings = Settings(api_key="k", tasks=("scaling", "interference"), max_candidates=20_000)
    app = create_app(settings)
    return schemathesis.openapi.from_asgi("/openapi.json", app)


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_request_gets_a_server_error(api_schema, mode) -> None:
    operations = [result.ok() for result in api_schema.get_all_operations()]
    paths = api_schema.raw_schema["paths"].values()
    assert len(operations) == sum(len(item) for item in paths) >= 9  # every route of the API
    for operation in operations:
        if mode is GenerationMode.NEGATIVE and not list(operation.body):
            continue  # nothing to make invalid (no request body)

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case) -> None:
            response = case.call()
            # 503 is the answer for a task without a model, and must say why
            if response.status_code == 503:
                assert response.json()["reason"], response.text
            else:
                assert response.status_code < 500, f"{case.as_curl_command()}\n{response.text}"

        check()
