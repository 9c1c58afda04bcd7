"""Errors a user can act on. The CLI turns any of them into a message and exit code 2."""

from __future__ import annotations


class PerfcastError(Exception):
    """Base class for errors caused by input or configuration, not by a bug."""


class ContractError(PerfcastError):
    """A table breaks the data contract. Names the file, the row and the column."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        row: int | None = None,
        column: str | None = None,
        details: list[str] | None = None,
    ) -> None:
        self.message, self.file, self.row, self.column = message, file, row, column
        self.details = details or []
        where = []
        if file:
            where.append(f"file {file}")
        if row is not None:
            where.append(f"row {row}")
        if column:
            where.append(f"column {column!r}")
        text = f"{', '.join(where)}: {message}" if where else message
        if len(self.details) > 1:
            text += "\n" + "\n".join(f"  - {d}" for d in self.details)
        super().__init__(text)


class DataNotFoundError(PerfcastError):
    """A dataset file could not be found locally nor downloaded."""


class ChecksumError(PerfcastError):
    """A dataset file does not match the sha256 pinned in the manifest."""
