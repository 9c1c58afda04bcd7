"""Structured logs of `perfcast serve`: one JSON object per line on stderr (access log, 4xx
with their first problem, 500s with their error id and traceback)."""

from __future__ import annotations

import json
import logging
import time

# LogRecord attributes that are not a caller's `extra`
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(level: str = "info") -> None:
    """JSON lines on stderr for perfcast's service loggers (not the root logger's others)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    for name in ("perfcast.access", "perfcast.serving"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False
