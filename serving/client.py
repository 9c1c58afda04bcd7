"""`PerfcastClient`: the prediction service over HTTP, as a `PredictionBackend`.

`PerfcastClient(url).predict(task, rows)` answers exactly like the in-process backend (same
columns, same index: one row per input row, or per `sample_id` for runtime), so a scheduler
switches between in-process and HTTP predictions with one setting. Large frames are sent in
requests of at most 10,000 rows (runtime: whole samples per request).
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Any

import httpx

from perfcast.errors import ContractError, PerfcastError
from perfcast.predictor.backend import PER_SAMPLE_TASKS, TASK_TABLES, Task
from perfcast.serving.errors import ModelUnavailableError, ServiceError
from perfcast.serving.settings import MAX_ROWS

if TYPE_CHECKING:  # pandas loads on the first prediction: the client itself imports in ms
    import pandas as pd

__all__ = ["ModelUnavailableError", "PerfcastClient", "ServiceError"]


class PerfcastClient:
    """The service's routes as methods: `predict` (a `PredictionBackend`), `recommend`,
    `allocate`, `place`, `observe`, `models`, `reload`, `ready`. Rows are a DataFrame or a list
    of dicts; errors are `ContractError` (row and column named), `ModelUnavailableError` and
    `ServiceError`. Needs httpx, and pandas for frames: the `client` extra
    (docs/serving.md, "A client-only install")."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        http: httpx.Client | None = None,
        max_rows: int = MAX_ROWS,
        retries: int = 3,
        max_retry_wait_s: float = 30.0,
    ) -> None:
        """`http` replaces the underlying httpx client (tests pass a TestClient). A 503 or 429
        answer with a Retry-After of at most `max_retry_wait_s` is retried up to `retries`
        times after waiting that long (a full service says when to come back)."""
        headers = {"X-API-Key": api_key} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self.max_rows = max_rows
        self.retries, self.max_retry_wait_s = retries, max_retry_wait_s
        self._http = http or httpx.Client(base_url=self.base_url, timeout=timeout)
        self._http.headers.update(headers)

    def __enter__(self) -> PerfcastClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool (`with PerfcastClient(...) as client:` does it on exit)."""
        self._http.close()

    # -- PredictionBackend ---------------------------------------------------------------

    def predict(self, task: Task, rows: pd.DataFrame | list[dict[str, Any]]) -> pd.DataFrame:
        """Predictions for `rows`: a DataFrame or a list of dicts (one per row), in the task's
        contract columns."""
        import pandas as pd

        if task not in TASK_TABLES:
            raise PerfcastError(f"unknown task {task!r}; expected one of {', '.join(TASK_TABLES)}")
        if isinstance(rows, list | tuple):
            if not all(isinstance(row, dict) for row in rows):
                raise ContractError(f"rows for task {task}: give a DataFrame or a list of dicts")
            rows = pd.DataFrame.from_records(list(rows))
        if rows.empty:
            raise ContractError(f"no rows to predict for task {task}")
        rows = rows.reset_index(drop=True)
        parts = [
            self._predict_chunk(task, rows.iloc[start:stop], start)
            for start, stop in self._chunks(task, rows)
        ]
        out = pd.concat(parts, ignore_index=True)
        if task in PER_SAMPLE_TASKS:
            return out.set_index("sample_id")
        return out

    def _chunks(self, task: str, rows: pd.DataFrame) -> list[tuple[int, int]]:
        if task not in PER_SAMPLE_TASKS:
            return [
                (s, min(s + self.max_rows, len(rows))) for s in range(0, len(rows), self.max_rows)
            ]
        # whole samples per request: cut only where the sample_id changes
        starts = rows.index[rows["sample_id"].ne(rows["sample_id"].shift())].tolist()
        bounds = [*starts, len(rows)]
        chunks, begin = [], 0
        for previous, end in itertools.pairwise(bounds):
            if end - begin > self.max_rows and previous > begin:
                chunks.append((begin, previous))
                begin = previous
        chunks.append((begin, len(rows)))
        return chunks

    def _predict_chunk(self, task: str, rows: pd.DataFrame, offset: int) -> pd.DataFrame:
        import pandas as pd

        body = '{"rows":' + rows.to_json(orient="records") + "}"
        answer = self._request(
            "POST", f"/v1/predict/{task}", content=body, row_offset=offset, task=task
        )
        out = pd.DataFrame.from_records(answer["predictions"])
        columns = [c for c in out.columns if c not in ("sample_id", "flags")]
        out[columns] = out[columns].astype(float)  # null (no prediction) -> NaN
        if "flags" in out.columns:  # the in-process shape: one comma-separated string
            out["flags"] = [",".join(f) for f in out["flags"]]
        return out

    # -- the rest of the API -------------------------------------------------------------

    def recommend(self, request: dict[str, Any]) -> dict[str, Any]:
        """`POST /v1/recommend`: one job's best configurations. `request` as examples/job.yaml
        (`job`, `pools`, `local_batch_sizes`, `objective`, `work`, ...); the answer's `top`
        holds each configuration with its predicted step time, total time, cost and reason."""
        return self._request("POST", "/v1/recommend", json=request)

    def allocate(self, request: dict[str, Any]) -> dict[str, Any]:
        """`POST /v1/allocate`: GPUs and batch size for many elastic jobs. `request` as
        examples/jobs.yaml (`total_gpus`, `jobs`); the answer's `allocations` per job."""
        return self._request("POST", "/v1/allocate", json=request)

    def place(self, request: dict[str, Any]) -> dict[str, Any]:
        """`POST /v1/place`: nodes and GPUs for jobs in priority order, sharing a GPU only
        when predicted to pay. `request` as examples/cluster.yaml (`nodes`, `jobs`); the
        answer's `assignments` (with a reason each) and `waiting`."""
        return self._request("POST", "/v1/place", json=request)

    def observe(self, rows: pd.DataFrame | list[dict[str, Any]]) -> dict[str, Any]:
        """`POST /v1/observe`: measured scaling rows (with `step_time_s`) added to the served
        scaling champion until its next reload (needs the API key). ContractError naming row
        and column on a bad row, ModelUnavailableError without a scaling model."""
        if not isinstance(rows, list):
            rows = rows.reset_index(drop=True)
            body = '{"rows":' + rows.to_json(orient="records") + "}"
            return self._request("POST", "/v1/observe", content=body, task="scaling")
        return self._request("POST", "/v1/observe", json={"rows": rows}, task="scaling")

    def models(self) -> dict[str, Any]:
        """`GET /v1/models`: each task's champion (family, version, held-out metrics)."""
        return self._request("GET", "/v1/models")

    def reload(self) -> dict[str, Any]:
        """`POST /v1/models/reload`: load the registry's current champions (needs the key)."""
        return self._request("POST", "/v1/models/reload")

    def ready(self) -> bool:
        """Whether `/readyz` answers 200 (every served task has its model)."""
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def _request(
        self, method: str, path: str, *, row_offset: int = 0, task: str = "", **kwargs: Any
    ) -> Any:
        if "content" in kwargs:
            kwargs["headers"] = {"Content-Type": "application/json"}
        for attempt in range(self.retries + 1):
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.HTTPError as err:
                raise ServiceError(
                    f"cannot reach the perfcast service at {self.base_url} ({err}); "
                    "start it with `perfcast serve`"
                ) from None
            wait = _retry_after(response)
            if wait is None or wait > self.max_retry_wait_s or attempt == self.retries:
                break
            time.sleep(wait)
        if response.status_code < 400:
            return response.json()
        try:
            detail = response.json().get("detail")
        except ValueError:
            detail = response.text
        if response.status_code == 503 and task:
            reason = response.json().get("reason", str(detail))
            raise ModelUnavailableError(task, reason)
        if (
            response.status_code == 422
            and isinstance(detail, list)
            and (path.startswith("/v1/predict") or path == "/v1/observe")
        ):
            raise _contract_error(detail, row_offset)
        raise ServiceError(f"{method} {path} answered {response.status_code}: {_text(detail)}")


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds to wait before trying again, for a 503/429 that says so; else None."""
    if response.status_code not in (429, 503):
        return None
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None


def _text(detail: object) -> str:
    if isinstance(detail, list):
        return "; ".join(
            f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}"
            if isinstance(d, dict)
            else str(d)
            for d in detail
        )
    return str(detail)


def _contract_error(detail: list, row_offset: int) -> ContractError:
    """The service's 422 as a ContractError like the in-process backend's; `row` counts from 1
    in the caller's whole frame (the message counts within the request that failed)."""
    first = detail[0] if detail and isinstance(detail[0], dict) else {}
    loc = first.get("loc", [])
    row = next((p for p in loc[2:] if isinstance(p, int)), None)
    message = str(first.get("msg", _text(detail)))
    if row_offset:
        message += f" (in the request starting at row {row_offset + 1})"
    err = ContractError(message, details=[_text([d]) for d in detail[1:]])
    err.row = None if row is None else row + row_offset + 1
    err.column = next((p for p in loc[2:] if isinstance(p, str)), None)
    return err
