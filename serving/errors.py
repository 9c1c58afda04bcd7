"""Errors of the service that its light client raises too (no pandas, no models here)."""

from __future__ import annotations

from perfcast.errors import PerfcastError


class ModelUnavailableError(PerfcastError):
    """A task has no model loaded (the service answers 503 with the reason)."""

    def __init__(self, task: str, reason: str) -> None:
        self.task, self.reason = task, reason
        super().__init__(f"no model for task {task}: {reason}")


class ServiceError(PerfcastError):
    """The service refused a request or could not be reached."""
