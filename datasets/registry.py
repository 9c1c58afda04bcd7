"""The registry of datasets: a name maps to a loader that returns one validated contract table.

A loader module under `datasets/sources/` declares its datasets with `@dataset(...)`; the
loader returns a DataFrame in the contract, and `load(name)` validates it and caches the result
as Parquet keyed by the input files' sha256 and the loader's version, so a second load is fast.

Where a dataset's files are not here (no data folder: a wheel on an air-gapped machine) and the
package embeds its table (`datasets/embedded/`, see `perfcast.datasets.starter`), `load` returns
the embedded table, which is the loader's output on the same files. Otherwise the loader fetches
the files, and a file that cannot be had is a DataNotFoundError naming the dataset, where it was
looked for, and `perfcast datasets fetch <name>`.
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
from perfcast.errors import DataNotFoundError, PerfcastError
from perfcast.paths import state_dir
from perfcast.suggest import did_you_mean

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

    def present(self) -> bool:
        """Every file is here (the data folder or the download cache; measured: the package)."""
        table = fetch_module.manifest()
        return all(
            fetch_module.find_local(path) is not None if path in table else Path(path).is_file()
            for path in self.files
        )

    def status(self) -> str:
        """`present`, `embedded` (only the package's starter table is here) or `fetchable`."""
        if self.present():
            return "present"
        return "embedded" if embedded_table(self) is not None else "fetchable"

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
        raise PerfcastError(
            f"unknown dataset {name!r}{did_you_mean(name, table)}; `perfcast datasets list` "
            "shows the names"
        )
    return table[name]


EMBEDDED_DIR = Path(__file__).resolve().parent / "embedded"
EMBEDDED_INDEX = EMBEDDED_DIR / "SOURCES.json"


@functools.cache
def embedded_index() -> dict[str, dict]:
    """The starter tables shipped in the package: name -> licence, sources, cache key, ..."""
    return json.loads(EMBEDDED_INDEX.read_text()) if EMBEDDED_INDEX.is_file() else {}


def embedded_table(spec: Dataset) -> Path | None:
    """The package's starter table of `spec`, if it ships one made from the same files by the
    same loader version (a stale one is never used)."""
    info = embedded_index().get(spec.name)
    path = EMBEDDED_DIR / f"{spec.name}.parquet"
    if info is None or info["cache_key"] != spec.cache_key() or not path.is_file():
        return None
    return path


def load(name: str, *, use_cache: bool = True) -> pd.DataFrame:
    """The validated contract table of dataset `name`."""
    spec = get(name)
    return _named(_load(spec, use_cache), spec)


def _named(table: pd.DataFrame, spec: Dataset) -> pd.DataFrame:
    """A trace's jobs name their trace (`source`): the duration model tells the traces it was
    trained on from one it was not by it."""
    if spec.kind == "trace" and "source" not in table.columns:
        table = table.assign(source=spec.name)
    return table


def _load(spec: Dataset, use_cache: bool) -> pd.DataFrame:
    cache = state_dir() / "cache" / f"{spec.name}-{spec.cache_key()}.parquet"
    if use_cache and cache.exists():
        return pd.read_parquet(cache)
    if not spec.present() and (embedded := embedded_table(spec)) is not None:
        return pd.read_parquet(embedded)
    try:
        table = validate(spec.loader(), spec.kind, source=f"dataset {spec.name}")
    except DataNotFoundError as err:
        raise DataNotFoundError(
            f"dataset {spec.name} is not available here: {err}. Get it with "
            f"`perfcast datasets fetch {spec.name}` (or set PERFCAST_DATA_DIR to a copy of the "
            "public datasets)"
        ) from None
    if use_cache:
        from perfcast.datasets.io import write_table

        write_table(table, cache)
    return table
