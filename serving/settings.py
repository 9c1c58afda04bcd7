"""Service settings, read from the environment once when the app is created."""

from __future__ import annotations

import os
from dataclasses import dataclass

from perfcast.errors import PerfcastError
from perfcast.predictor.backend import TASKS

MAX_ROWS = 10_000  # rows per predict request
MAX_CANDIDATES = 1_000_000  # configurations one recommend/allocate request may enumerate
MAX_ALLOCATION_CELLS = 10_000_000  # jobs × (GPUs + 1) of one allocation (its DP table)


@dataclass(frozen=True)
class Settings:
    """`PERFCAST_API_KEY`: when set, `POST /v1/models/reload` needs it in the `X-API-Key`
    header. `PERFCAST_MAX_BODY_MB`: larger request bodies are refused with 413.
    `PERFCAST_TASKS`: comma-separated tasks to serve (default: all)."""

    api_key: str | None = None
    max_body_bytes: int = 16 * 2**20
    tasks: tuple[str, ...] = TASKS

    @classmethod
    def from_env(cls) -> Settings:
        tasks = tuple(
            t.strip() for t in os.environ.get("PERFCAST_TASKS", ",".join(TASKS)).split(",")
        )
        unknown = [t for t in tasks if t not in TASKS]
        if unknown:
            raise PerfcastError(
                f"PERFCAST_TASKS names unknown task(s) {', '.join(unknown)}; "
                f"expected some of {', '.join(TASKS)}"
            )
        try:
            max_mb = float(os.environ.get("PERFCAST_MAX_BODY_MB", "16"))
        except ValueError:
            raise PerfcastError("PERFCAST_MAX_BODY_MB must be a number of megabytes") from None
        return cls(
            api_key=os.environ.get("PERFCAST_API_KEY") or None,
            max_body_bytes=int(max_mb * 2**20),
            tasks=tasks,
        )
