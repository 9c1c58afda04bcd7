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
