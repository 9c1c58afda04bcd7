"""Big-data DAGs: DuckDB physical plans of TPC-H queries, with per-operator cardinalities and
timings from `EXPLAIN (ANALYZE, FORMAT JSON)`, under varied engine settings.

The database is generated locally with `tpchgen-cli` (the TPC-H data generator, pinned in
pyproject.toml) as Parquet, cached under the perfcast state directory, and loaded into an
in-memory DuckDB database. Rows are the contract `plan` kind: one per plan operator.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from perfcast.errors import PerfcastError
from perfcast.features.profiling.tpch_queries import QUERIES
from perfcast.paths import state_dir

TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")
# Operators DuckDB wraps every EXPLAIN ANALYZE in; they are not part of the query's plan.
_WRAPPERS = {"RESULT_COLLECTOR", "EXPLAIN_ANALYZE", "QUERY"}


def _tpchgen() -> str:
    beside = Path(sys.executable).with_name("tpchgen-cli")
    found = str(beside) if beside.exists() else shutil.which("tpchgen-cli")
    if not found:
        raise PerfcastError("tpchgen-cli is not installed; `pip install tpchgen-cli`")
    return found


def generate_tpch(scale: float, root: Path | None = None) -> Path:
    """The Parquet TPC-H tables at `scale` (1 = 1 GB), generated once and cached."""
    if scale <= 0:
        raise PerfcastError(f"scale factor must be > 0, got {scale}")
    out = (root or state_dir() / "tpch") / f"sf{scale:g}"
    if all((out / f"{t}.parquet").is_file() for t in TABLES):
        return out
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cmd = [_tpchgen(), "parquet", "-s", f"{scale:g}", f"--output-dir={tmp}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise PerfcastError(f"tpchgen-cli failed ({' '.join(cmd)}): {done.stderr.strip()}")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)  # appears complete or not at all
    return out


def connect(data_dir: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB database holding the TPC-H tables of `data_dir`."""
    con = duckdb.connect()
    for table in TABLES:
        path = str(data_dir / f"{table}.parquet").replace("'", "''")
        con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet('{path}')")
    return con


def _operators(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The plan's real operators, wrappers skipped, each with the list of its children."""
    if node.get("operator_type", node.get("type")) in _WRAPPERS:
        for child in node.get("children", []):
            yield from _operators(child)
        return
    yield node


def plan_rows(profile: dict[str, Any], run: dict[str, Any]) -> list[dict[str, Any]]:
    """Flatten one EXPLAIN ANALYZE JSON profile into plan rows (pre-order node ids; `inputs`
    are the ids of an operator's children, which feed it)."""
    rows: list[dict[str, Any]] = []

    def visit(node: dict[str, Any]) -> int:
        node_id = len(rows)
        row: dict[str, Any] = {}
        rows.append(row)
        children = [visit(c) for c in node.get("children", [])]
        extra = node.get("extra_info", {})
        estimate = extra.get("Estimated Cardinality") if isinstance(extra, dict) else None
        row |= run | {
            "node_id": node_id,
            "op": str(node.get("operator_type", node.get("type", "UNKNOWN"))).lower(),
            "inputs": json.dumps(children),
            "cardinality": float(node.get("operator_cardinality", node["intermediate_rows"])),
            "estimated_cardinality": float(estimate) if estimate else float("nan"),
            "latency_ms": 1000 * float(node.get("operator_timing", node.get("timing", 0.0))),
            "output_bytes": float(node.get("intermediate_size_bytes", float("nan"))),
        }
        return node_id

    for top in profile.get("operator", []):
        for root in _operators(top):
            visit(root)
    return rows


def profile_query(
    con: duckdb.DuckDBPyConnection,
    query: int,
    *,
    scale: float,
    threads: int,
    memory_limit_mb: float | None,
    repeat: int = 0,
) -> pd.DataFrame:
    """Run TPC-H `query` once under the settings (after one warm-up run) and return its plan."""
    if query not in QUERIES:
        raise PerfcastError(f"unknown TPC-H query {query}; available: {sorted(QUERIES)}")
    if threads < 1:
        raise PerfcastError(f"threads must be >= 1, got {threads}")
    con.execute(f"SET threads = {int(threads)}")
    limit = f"{memory_limit_mb:g}MB" if memory_limit_mb else "80%"
    con.execute(f"SET memory_limit = '{limit}'")
    sql = QUERIES[query]
    con.execute(sql).fetchall()  # warm-up: caches and the buffer pool
    start = time.perf_counter()
    _, text = con.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}").fetchone()
    wall_ms = 1000 * (time.perf_counter() - start)
    profile = json.loads(text)
    stats = profile.get("query", {})
    mem = f"{memory_limit_mb:g}mb" if memory_limit_mb else "default"
    run = {
        "sample_id": f"tpch-q{query}-sf{scale:g}-t{threads}-m{mem}-r{repeat}",
        "query": f"tpch-q{query}",
        "engine": f"duckdb-{duckdb.__version__}",
        "scale_factor": float(scale),
        "threads": int(threads),
        "memory_limit_mb": float(memory_limit_mb) if memory_limit_mb else float("nan"),
        # DuckDB's own total; the wall clock around the call if it reports none
        "e2e_latency_ms": 1000 * float(stats.get("total_time", 0.0)) or wall_ms,
        "cpu_time_ms": 1000 * float(stats.get("cpu_time", float("nan"))),
        "rows_scanned": float(stats.get("total_rows_scanned", float("nan"))),
        "peak_buffer_mb": float(profile.get("system", {}).get("peak_buffer_memory", 0)) / 2**20,
    }
    return pd.DataFrame(plan_rows(profile, run))
