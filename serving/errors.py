"""Errors of the service that its light client raises too (no pandas, no models here)."""

from __future__ import annotations

from perfcast.errors import ContractError, PerfcastError


class ModelUnavailableError(PerfcastError):
    """A task has no model loaded (the service answers 503 with the reason)."""

    def __init__(self, task: str, reason: str) -> None:
        self.task, self.reason = task, reason
        super().__init__(f"no model for task {task}: {reason}")


class ServiceError(PerfcastError):
    """The service refused a request or could not be reached."""


class JobColumnError(ContractError):
    """A column of a recommendation's job that the contract refuses. Every candidate carries
    the job's columns, so the error names the job's column once, not a candidate's row."""

    def __init__(self, err: ContractError) -> None:
        super().__init__(err.message, column=err.column)
