"""The live scheduler's durable state in SQLite: jobs, their allocations and checkpoints, and an
event log. Every change is one transaction, so a scheduler process killed at any point leaves
a consistent record; a restarted one reads it back (`LiveRunner.recover`) and loses no job.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfcast.errors import PerfcastError
from perfcast.scheduler.live.checkpoint import CheckpointRef

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    spec TEXT NOT NULL,               -- JobSpec as JSON
    submit_time_s REAL NOT NULL,      -- on the run's clock
    status TEXT NOT NULL,             -- pending | running | suspended | done | failed
    gpus TEXT NOT NULL DEFAULT '[]',  -- [[node, gpu], ...] held now
    batch_size INTEGER,
    share TEXT NOT NULL DEFAULT 'exclusive',
    workers TEXT NOT NULL DEFAULT '[]',  -- Ray actor names, rank order
    attempt INTEGER NOT NULL DEFAULT 0,
    samples_done INTEGER NOT NULL DEFAULT 0,
    iteration INTEGER NOT NULL DEFAULT 0,
    last_step_time_s REAL,
    mean_step_time_s REAL,
    first_start_s REAL,
    finish_s REAL,
    metrics TEXT,                     -- the job's latest `hook.report`, JSON
    error TEXT,                       -- why it failed (status failed) or last failed
    held INTEGER NOT NULL DEFAULT 0   -- 1: suspended by `perfcast job suspend` until `job resume`
);
CREATE TABLE IF NOT EXISTS checkpoints (
    job_id TEXT NOT NULL REFERENCES jobs(job_id),
    iteration INTEGER NOT NULL,
    path TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (job_id, iteration)
);
CREATE TABLE IF NOT EXISTS commands (   -- operator commands (`perfcast job ...`) for the runner
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    kind TEXT NOT NULL,               -- suspend | resume | migrate | resize
    args TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL,
    done_at REAL,
    outcome TEXT
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT,
    at REAL NOT NULL,                 -- unix time
    kind TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT ''
);
"""

_JOB_FIELDS = (
    "status", "gpus", "batch_size", "share", "workers", "attempt", "samples_done", "iteration",
    "last_step_time_s", "mean_step_time_s", "first_start_s", "finish_s", "metrics", "error", "held",
)  # fmt: skip
_ADDED_COLUMNS = {  # absent from databases of earlier versions
    "metrics": "TEXT", "error": "TEXT", "held": "INTEGER NOT NULL DEFAULT 0",
}  # fmt: skip


class StoreError(PerfcastError):
    """The state database cannot be used (wrong file, unknown job)."""


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    spec: dict[str, Any]
    submit_time_s: float
    status: str
    gpus: tuple[tuple[int, int], ...]
    batch_size: int | None
    share: str
    workers: tuple[str, ...]
    attempt: int
    samples_done: int
    iteration: int
    last_step_time_s: float | None
    mean_step_time_s: float | None
    first_start_s: float | None
    finish_s: float | None
    metrics: dict[str, float] | None
    error: str | None
    held: bool  # an operator's hold: the scheduler leaves the job suspended until `job resume`


class JobStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            have = {row[1] for row in self._db.execute("PRAGMA table_info(jobs)")}
            for column, kind in _ADDED_COLUMNS.items():
                if column not in have:
                    self._db.execute(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")
        except sqlite3.DatabaseError as err:
            raise StoreError(f"state database {self.path}: {err}") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _write(self, sql: str, args: tuple[Any, ...] = ()) -> None:
        with self._lock, self._db:  # one transaction
            self._db.execute(sql, args)

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # ---- meta ----
    def get_meta(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        self._write("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # ---- jobs ----
    def add_job(self, job_id: str, spec: dict[str, Any], submit_time_s: float) -> None:
        """Record a submitted job; submitting the same id twice is an error."""
        try:
            with self._lock, self._db:
                self._db.execute(
                    "INSERT INTO jobs (job_id, spec, submit_time_s, status, batch_size) "
                    "VALUES (?, ?, ?, 'pending', ?)",
                    (job_id, json.dumps(spec), submit_time_s, spec.get("batch_size")),
                )
                self._db.execute(
                    "INSERT INTO events (job_id, at, kind) VALUES (?, ?, 'submit')",
                    (job_id, time.time()),
                )
        except sqlite3.IntegrityError:
            raise StoreError(f"job {job_id!r} already exists in {self.path}") from None

    def update_job(
        self, job_id: str, *, event: tuple[str, str] | None = None, **fields: Any
    ) -> None:
        """Change a job's fields and, with `event` (kind, detail), log it in the same
        transaction: a process killed in between cannot leave one without the other."""
        unknown = set(fields) - set(_JOB_FIELDS)
        if unknown:
            raise StoreError(f"unknown job fields {sorted(unknown)}")
        for key in ("gpus", "workers"):
            if key in fields:
                fields[key] = json.dumps([list(g) if key == "gpus" else g for g in fields[key]])
        if fields.get("metrics") is not None:
            fields["metrics"] = json.dumps(fields["metrics"])
        assignments = ", ".join(f"{k} = ?" for k in fields)
        with self._lock, self._db:
            cursor = self._db.execute(
                f"UPDATE jobs SET {assignments} WHERE job_id = ?", (*fields.values(), job_id)
            )
            if event is not None and cursor.rowcount == 1:
                self._db.execute(
                    "INSERT INTO events (job_id, at, kind, detail) VALUES (?, ?, ?, ?)",
                    (job_id, time.time(), *event),
                )
        if cursor.rowcount != 1:
            raise StoreError(f"no job {job_id!r} in {self.path}")

    def job(self, job_id: str) -> JobRecord:
        rows = self._read(f"SELECT job_id, spec, submit_time_s, {', '.join(_JOB_FIELDS)} "
                          "FROM jobs WHERE job_id = ?", (job_id,))  # fmt: skip
        if not rows:
            raise StoreError(f"no job {job_id!r} in {self.path}")
        return _record(rows[0])

    def jobs(self) -> list[JobRecord]:
        rows = self._read(
            f"SELECT job_id, spec, submit_time_s, {', '.join(_JOB_FIELDS)} FROM jobs "
            "ORDER BY submit_time_s, job_id"
        )
        return [_record(r) for r in rows]

    # ---- operator commands ----
    def add_command(self, job_id: str, kind: str, args: dict[str, Any] | None = None) -> int:
        self.job(job_id)  # unknown job: StoreError
        with self._lock, self._db:
            cursor = self._db.execute(
                "INSERT INTO commands (job_id, kind, args, created_at) VALUES (?, ?, ?, ?)",
                (job_id, kind, json.dumps(args or {}), time.time()),
            )
        return int(cursor.lastrowid)

    def pending_commands(self) -> list[tuple[int, str, str, dict[str, Any]]]:
        rows = self._read(
            "SELECT id, job_id, kind, args FROM commands WHERE done_at IS NULL ORDER BY id"
        )
        return [(i, j, k, json.loads(a)) for i, j, k, a in rows]

    def finish_command(self, command_id: int, outcome: str, *, held: bool | None = None) -> None:
        """Record a command's outcome, log it as the job's `operator <kind>` event and, with
        `held`, set or clear the job's operator hold, all in one transaction: a command recorded
        done always has its hold (or its release) recorded with it."""
        with self._lock, self._db:
            row = self._db.execute(
                "SELECT job_id, kind FROM commands WHERE id = ?", (command_id,)
            ).fetchone()
            if row is None:
                raise StoreError(f"no command {command_id} in {self.path}")
            job_id, kind = row
            self._db.execute(
                "UPDATE commands SET done_at = ?, outcome = ? WHERE id = ?",
                (time.time(), outcome, command_id),
            )
            if held is not None:
                self._db.execute("UPDATE jobs SET held = ? WHERE job_id = ?", (int(held), job_id))
            self._db.execute(
                "INSERT INTO events (job_id, at, kind, detail) VALUES (?, ?, ?, ?)",
                (job_id, time.time(), f"operator {kind}", outcome),
            )

    def command_outcome(self, command_id: int) -> str | None:
        rows = self._read("SELECT outcome FROM commands WHERE id = ?", (command_id,))
        return rows[0][0] if rows else None

    # ---- checkpoints and events ----
    def record_checkpoint(self, job_id: str, ref: CheckpointRef) -> None:
        self._write(
            "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?, ?, ?)",
            (job_id, ref.iteration, ref.path, ref.sha256, ref.bytes, time.time()),
        )

    def checkpoints(self, job_id: str) -> list[CheckpointRef]:
        rows = self._read(
            "SELECT path, sha256, iteration, bytes FROM checkpoints WHERE job_id = ? "
            "ORDER BY iteration",
            (job_id,),
        )
        return [CheckpointRef(*r) for r in rows]

    def log(self, job_id: str | None, kind: str, detail: str = "") -> None:
        self._write(
            "INSERT INTO events (job_id, at, kind, detail) VALUES (?, ?, ?, ?)",
            (job_id, time.time(), kind, detail),
        )

    def events(self, job_id: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT job_id, at, kind, detail FROM events WHERE 1=1", []
        if job_id is not None:
            sql, args = sql + " AND job_id = ?", [*args, job_id]
        if kind is not None:
            sql, args = sql + " AND kind = ?", [*args, kind]
        rows = self._read(sql + " ORDER BY id", tuple(args))
        return [dict(zip(("job_id", "at", "kind", "detail"), r, strict=True)) for r in rows]


def _record(row: tuple[Any, ...]) -> JobRecord:
    values = dict(zip(("job_id", "spec", "submit_time_s", *_JOB_FIELDS), row, strict=True))
    values["spec"] = json.loads(values["spec"])
    values["gpus"] = tuple(tuple(g) for g in json.loads(values["gpus"]))
    values["workers"] = tuple(json.loads(values["workers"]))
    values["metrics"] = json.loads(values["metrics"]) if values["metrics"] else None
    values["held"] = bool(values["held"])
    return JobRecord(**values)


# the run's clock, kept in the store (here, not in runner.py: `perfcast submit` reads it
# without loading Ray and the scheduler core)
_CLOCK_KEY = "clock_start_unix"


def clock_start(store: JobStore) -> float:
    """The unix time at which the run's clock started (set on first use)."""
    start = store.get_meta(_CLOCK_KEY)
    if start is None:
        start = repr(time.time())
        store.set_meta(_CLOCK_KEY, start)
    return float(start)


def clock_now(store: JobStore) -> float:
    """Seconds on the run's clock: submit and finish times are on it."""
    start = clock_start(store)  # first: it may set the start to now
    return max(time.time() - start, 0.0)
