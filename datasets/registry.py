"""The registry of datasets: a name maps to a loader that returns one validated contract table.

A loader module under `datasets/sources/` declares its datasets with `@dataset(...)`; the
loader returns a DataFrame in the contract, and `load(name)` validates it and caches the result
as Parquet keyed by the input files' sha256 and the loader's version, so a second load is fast.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from perfcast.datasets import fetch as fetch_module
from perfcast.datasets.contract import Kind, validate
from perfcast.errors import PerfcastError
from perfcast.paths import state_dir

Loader = Callable[[], pd.DataFrame]


@dataclass(frozen=True)
class Dataset:
    name: str
    kind: Kind
    description: str
    source: str  # paper / repository it comes from
    license: str
    files: tuple[str, ...]  # manifest paths (public data) or package paths (measured here)
    loader: Loader = field(repr=False)
    version: int = 1  # bump when the loader's output changes, to refresh the cache
    measured: bool = False  # True for data measured by perfcast's own profilers

    def cache_key(self) -> str:
        digest = hashlib.sha256(f"{self.name}:{self.version}".encode())
        table = fetch_module.manifest()
        for path in self.files:
            entry = table.get(path)
            digest.update((entry.sha256 if entry else _file_digest(Path(path))).encode())
        return digest.hexdigest()[:16]


def _file_digest(path: Path) -> str:
    return fetch_module.sha256_of(path) if path.is_file() else "missing"


_REGISTRY: dict[str, Dataset] = {}


def dataset(
    name: str,
    kind: Kind,
    *,
    description: str,
    source: str,
    files: tuple[str, ...] | list[str],
    license: str | None = None,
    version: int = 1,
    measured: bool = False,
) -> Callable[[Loader], Loader]:
    """Decorator registering `loader` as dataset `name`. The licence defaults to the
    manifest's licence of the first file."""

    def register(loader: Loader) -> Loader:
        if name in _REGISTRY:
            raise ValueError(f"dataset {name!r} registered twice")
        lic = license or _manifest_license(files)
        _REGISTRY[name] = Dataset(
            name, kind, description, source, lic, tuple(files), loader, version, measured
        )
        return loader

    return register


def _manifest_license(files: tuple[str, ...] | list[str]) -> str:
    table = fetch_module.manifest()
    licenses = sorted({table[f].license for f in files if f in table})
    return "/".join(licenses) or "unknown"


@functools.cache
def _discover() -> None:
    """Import every loader module once, so each registers its datasets."""
    import perfcast.datasets.sources as sources

    for info in pkgutil.iter_modules(sources.__path__):
        importlib.import_module(f"perfcast.datasets.sources.{info.name}")


ROW_COUNTS = Path(__file__).resolve().parent / "row_counts.json"


def recorded_rows() -> dict[str, int]:
    """Each dataset's row count as recorded in row_counts.json (tests check them against the
    loaders), so listing the datasets loads none of them."""
    return json.loads(ROW_COUNTS.read_text()) if ROW_COUNTS.exists() else {}


def registry() -> dict[str, Dataset]:
    _discover()
    return dict(sorted(_REGISTRY.items()))


def get(name: str) -> Dataset:
    table = registry()
    if name not in table:
        raise PerfcastError(f"unknown dataset {name!r}; `perfcast datasets list` shows the names")
    return table[name]


def load(name: str, *, use_cache: bool = True) -> pd.DataFrame:
    """The validated contract table of dataset `name`."""
    spec = get(name)
    cache = state_dir() / "cache" / f"{spec.name}-{spec.cache_key()}.parquet"
    if use_cache and cache.exists():
        return pd.read_parquet(cache)
    table = validate(spec.loader(), spec.kind, source=f"dataset {spec.name}")
    if use_cache:
        from perfcast.datasets.io import write_table

        write_table(table, cache)
    return table
