"""Property: a job row whose contract columns hold anything JSON can carry (text in a number
column, huge integers, lists, objects, booleans, lone surrogates) is a 4xx, never a 500, from
recommend and from predict, with one row or a batch past the few-row fast path. Before the
fix of 2026-11-26 this found 16 distinct 500s in 1,000 examples (pandera's TypeError on
categorical candidates, e.g. `"sync_time_s": ""`). On a real scaling champion (muri-scaling)."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see tests/test_serving_schemathesis.py

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfcast.datasets.contract import SCALING
from perfcast.datasets.fetch import shared_data_available
from perfcast.serving.app import create_app
from perfcast.serving.batching import INLINE_ROWS
from perfcast.serving.settings import Settings
from perfcast.training import model_store, trainer

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets are not available"
)

INPUT_COLUMNS = [column for column in SCALING.columns if column != "step_time_s"]
# values a client might send by mistake, plus the ones that reach odd parsing paths
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.sampled_from(["v100", "resnet50", "1", "true", "nan", "1e999", "", " ", "2x4", "[1,2]"]),
)
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3),
    st.dictionaries(st.text(max_size=3), SCALARS, max_size=2),
)
JOBS = st.dictionaries(st.sampled_from(INPUT_COLUMNS), VALUES, max_size=2).map(
    lambda columns: {"job": "resnet50", **columns}
)


@pytest.fixture(scope="module")
def client() -> TestClient:
    if model_store.load_champion("scaling") is None:
        trainer.train("scaling", "muri-scaling", model="gbm")
    app = create_app(Settings(api_key="k", tasks=("scaling",), max_candidates=20_000))
    return TestClient(app, raise_server_exceptions=False)


@given(
    job=JOBS,
    batches=st.lists(st.sampled_from([1, 32, 4096]), min_size=1, max_size=2),
    gpu=st.sampled_from(["v100", "k80", "h100", "not-a-gpu"]),
)
@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_any_value_in_any_column_is_never_a_server_error(client, job, batches, gpu) -> None:
    pool = {"gpu_type": gpu, "gpus_per_node": 4, "nodes": 2, "price_per_gpu_hour": 1.0}
    recommend = {"job": job, "pools": [pool], "local_batch_sizes": batches,
                 "work": {"iterations": 100}}  # fmt: skip
    row = {**job, "gpu_type": gpu, "num_gpus": 2, "num_nodes": 1, "local_batch_size": batches[0]}
    requests = [
        ("/v1/recommend", recommend),
        ("/v1/predict/scaling", {"rows": [row]}),
        ("/v1/predict/scaling", {"rows": [row] * (INLINE_ROWS + 1)}),
    ]
    for path, body in requests:
        response = client.post(path, json=body)
        assert response.status_code < 500, (path, body, response.text[:300])
        if response.status_code >= 400:
            assert response.json()["detail"], (path, body)  # says what is wrong
