"""The light client: importing `perfcast.serving.client` loads httpx but none of pandas, numpy,
torch, Ray, MLflow, LightGBM or the server's web framework (checked in a fresh interpreter, where
nothing else has loaded them). Its retries on Retry-After are tested in
test_serving_hardening.py."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pandas", "numpy", "torch", "ray", "mlflow", "lightgbm", "sklearn", "pandera",
         "fastapi", "starlette", "uvicorn")  # fmt: skip


def test_the_client_imports_no_heavy_module() -> None:
    code = f"""
import json, sys
from perfcast.serving.client import ModelUnavailableError, PerfcastClient, ServiceError
print(json.dumps({{"heavy": [m for m in {HEAVY!r} if m in sys.modules],
                  "httpx": "httpx" in sys.modules}}))
"""
    probe = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    loaded = json.loads(probe.stdout)
    assert loaded["httpx"]
    assert loaded["heavy"] == [], f"the client imports {loaded['heavy']}"


def test_predict_takes_rows_as_dicts_or_a_frame() -> None:
    """A list of dicts failed with AttributeError: 'list' object has no attribute 'empty'
    (issue 35); it is sent as the same rows a frame is, and answered the same way."""
    import httpx
    import pandas as pd
    import pytest

    from perfcast.errors import ContractError
    from perfcast.serving.client import PerfcastClient

    sent = []

    def service(request: httpx.Request) -> httpx.Response:
        rows = json.loads(request.content)["rows"]
        sent.append(rows)
        answer = [{"step_time_s": 0.1 * (i + 1), "step_time_s_p10": 0.05,
                   "step_time_s_p90": 0.2, "flags": []} for i in range(len(rows))]  # fmt: skip
        return httpx.Response(200, json={"predictions": answer})

    http = httpx.Client(base_url="http://t", transport=httpx.MockTransport(service))
    client = PerfcastClient("http://t", http=http)
    rows = [{"job": "resnet18", "gpu_type": "v100", "num_nodes": 1, "num_gpus": n,
             "local_batch_size": 128} for n in (1, 4)]  # fmt: skip
    from_dicts = client.predict("scaling", rows)
    from_frame = client.predict("scaling", pd.DataFrame(rows))
    assert sent[0] == sent[1] == rows
    pd.testing.assert_frame_equal(from_dicts, from_frame)
    assert from_dicts["step_time_s"].tolist() == pytest.approx([0.1, 0.2])
    with pytest.raises(ContractError, match="no rows"):
        client.predict("scaling", [])
    with pytest.raises(ContractError, match="a list of dicts"):
        client.predict("scaling", [("resnet18", "v100")])  # type: ignore[list-item]
