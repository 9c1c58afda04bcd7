"""Reading and writing contract tables: CSV or Parquet in, atomic writes out."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd

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
            # text columns stay text: a placement "11" or an id "6214e9" is not a number
            df = pd.read_csv(path, low_memory=False, dtype=_text_columns(kind))
        else:
            df = pd.read_parquet(path)
    except (ValueError, OSError, pd.errors.ParserError) as err:
        raise ContractError(f"cannot parse: {err}", file=str(path)) from None
    return validate(df, kind, source=str(path)) if kind else df


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
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as fh:
            if path.suffix == ".csv":
                df.to_csv(fh, index=False)
            else:
                df.to_parquet(fh, index=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
