"""Reading and writing contract tables: CSV or Parquet in, atomic writes out."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd

from perfcast.atomic import atomic_open
from perfcast.datasets.contract import SCHEMAS, validate
from perfcast.errors import ContractError

SUFFIXES = (".csv", ".parquet")


def read_table(path: str | Path, kind: str | None = None) -> pd.DataFrame:
    """Read a CSV or Parquet file; with `kind`, validate it against the contract."""
    path = Path(path)
    if not path.exists():
        raise ContractError("no such file", file=str(path))
    if path.suffix not in SUFFIXES:
        raise ContractError(
            f"unsupported file type {path.suffix!r}; use .csv or .parquet", file=str(path)
        )
    try:
        if path.suffix == ".csv":
            _check_unique_header(path)
            # text columns stay text: a placement "11" or an id "6214e9" is not a number
            df = pd.read_csv(path, low_memory=False, dtype=_text_columns(kind))
        else:
            df = pd.read_parquet(path)
    except (ValueError, OSError, pd.errors.ParserError) as err:
        raise ContractError(f"cannot parse: {err}", file=str(path)) from None
    return validate(df, kind, source=str(path)) if kind else df


def _check_unique_header(path: Path) -> None:
    """pandas renames a repeated header `x` to `x.1`; a file that names a column twice is
    ambiguous, so it is refused."""
    with path.open(newline="", encoding="utf-8", errors="replace") as fh:
        header = next(csv.reader(fh), [])
    seen: set[str] = set()
    for name in header:
        if name in seen:
            raise ContractError(f"the header names column {name!r} twice", file=str(path))
        seen.add(name)


def _text_columns(kind: str | None) -> dict[str, type]:
    if kind not in SCHEMAS:
        return {}
    return {name: str for name, col in SCHEMAS[kind].columns.items() if "str" in str(col.dtype)}


def write_table(df: pd.DataFrame, path: str | Path, kind: str | None = None) -> Path:
    """Write `df` to CSV or Parquet atomically (temporary file, fsync, rename).

    With `kind`, the table is validated first, and nothing is written when it fails.
    """
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise ContractError(
            f"unsupported file type {path.suffix!r}; use .csv or .parquet", file=str(path)
        )
    if kind:
        df = validate(df, kind, source=str(path))
    with atomic_open(path) as fh:
        if path.suffix == ".csv":
            df.to_csv(fh, index=False)
        else:
            df.to_parquet(fh, index=False)
    return path
