"""Service settings, read from the environment once when the app is created.

Every limit bounds the work one request can cause, counted the way the work grows (the
allocation's table cells, not jobs; distinct columns, not rows), so no request within the
limits takes more than a few seconds or a few hundred MB on the reference 2-core machine
(docs/BENCHMARKS.md, section serving, measures them).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass, field, fields

from perfcast.errors import PerfcastError
from perfcast.predictor.backend import TASKS

MAX_ROWS = 10_000  # rows per predict request (also the client's chunk size)
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class Settings:
    """`PERFCAST_API_KEY`: `POST /v1/models/reload` needs it in the `X-API-Key` header; with
    no key reload is closed. `PERFCAST_TASKS`: comma-separated tasks to serve (default all).
    `PERFCAST_ALLOWED_HOSTS` (default the loopback names) and `PERFCAST_TRUSTED_PROXIES`
    (default none): comma-separated. The limits below read `PERFCAST_<NAME>` (e.g.
    `PERFCAST_MAX_CANDIDATES`)."""

    api_key: str | None = None
    max_body_bytes: int = 16 * 2**20
    tasks: tuple[str, ...] = TASKS
    # configurations one recommendation enumerates and scores
    max_candidates: int = 250_000
    # cells of an allocation solved by the exact dynamic program: (total_gpus + 1) × the jobs'
    # GPU-count choices; a larger one is answered by the hull allocation with its proven gap
    max_allocation_cells: int = 5_000_000
    # GPU-count choices (0 included) of one allocation's jobs, the hull allocation's work
    max_allocation_choices: int = 1_000_000
    # configurations the scaling model predicts for one allocation
    max_allocation_predictions: int = 250_000
    # distinct column names across the rows (or jobs) of one request
    max_columns: int = 256
    # requests on the /v1/ routes in progress at once; more are answered 503 + Retry-After
    max_in_flight: int = 64
    # seconds a request body may take to arrive (408 after)
    read_timeout_s: float = 30.0
    # seconds a request line and headers may take to arrive (408 and the connection closed)
    header_timeout_s: float = 10.0
    # bytes of a request line and headers (431 and the connection closed)
    max_header_bytes: int = 64 * 2**10
    # connections kept open, in total and per client address; past them the one idle longest
    # is closed to make room (serving/server.py)
    max_connections: int = field(default_factory=lambda: _open_files_allowed(8192))
    max_connections_per_client: int = 2048
    # predictions a placement makes: pairs of one-GPU jobs × GPU types (each pair's slowdown)
    # plus multi-GPU jobs × GPU types × node counts (each spread's step time)
    max_placement_predictions: int = 250_000
    # plan rows a query recommendation predicts: rows × parallelisms × memory limits
    max_query_rows: int = 200_000
    # Host header values answered ("*": any). DNS rebinding makes a browser send another
    # site's requests to a loopback service under that site's name; the name gives it away
    allowed_hosts: tuple[str, ...] = ("*",)
    # addresses whose X-Forwarded-For is believed (none: the peer address is logged)
    trusted_proxies: tuple[str, ...] = ()

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
        limits = {}
        for setting in fields(cls):
            timeout = setting.name.endswith("_timeout_s")
            if not setting.name.startswith("max_") and not timeout:
                continue
            variable = f"PERFCAST_{setting.name.upper()}"
            if setting.name == "max_body_bytes" or variable not in os.environ:
                continue
            kind = float if timeout else int
            try:
                limits[setting.name] = kind(os.environ[variable])
            except ValueError:
                raise PerfcastError(f"{variable} must be a number") from None
            if limits[setting.name] <= 0:
                raise PerfcastError(f"{variable} must be > 0")
        return cls(
            api_key=os.environ.get("PERFCAST_API_KEY") or None,
            allowed_hosts=_names("PERFCAST_ALLOWED_HOSTS", LOOPBACK_HOSTS),
            trusted_proxies=_names("PERFCAST_TRUSTED_PROXIES", ()),
            max_body_bytes=int(max_mb * 2**20),
            tasks=tasks,
            **limits,
        )


def _names(variable: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """A comma-separated list from the environment, or `default` when the variable is unset."""
    if variable not in os.environ:
        return default
    names = tuple(n.strip().lower() for n in os.environ[variable].split(",") if n.strip())
    if not names:
        raise PerfcastError(f"{variable} is empty; give comma-separated names, or unset it")
    return names


def _open_files_allowed(wanted: int) -> int:
    """`wanted`, or fewer where the process may not open that many files (each connection is
    one; 256 are left for the models, logs and the store)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(64, min(wanted, soft - 256))
